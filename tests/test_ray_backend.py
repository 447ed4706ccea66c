"""``backend="ray"``: the map and every operator on a local Ray cluster of two worker processes, against a loopback
OpenAI-compatible server: the local backend's results, rows run in two processes, pause, interjection, stop, a
429's cool-down and a budget across workers, a worker killed mid-batch, and the errors a person gets."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap

import pandas as pd
import pytest
from _ray_cluster import ray_cluster, serve, task_of  # noqa: F401 - fixtures
from fake_openai import Reply
from test_operators import GRANTS, PAPERS, filter_oracle, join_oracle, rank_oracle, served

import unity_nb as u

pytestmark = pytest.mark.timeout(300)


def model_of(served_, name="ray-m"):
    return u.OpenAIModel(name, base_url=served_.url, max_retries=6)


def pid_rows(n):
    """A map whose rows each ask the tool ``whoami`` (the pid of the process running the row), then answer with
    their task, the pid, and whether they were told the interjection ``NOTE-42``."""

    seen: set[str] = set()

    def answer(body):
        messages = body["messages"]
        results = [m["content"] for m in messages if m["role"] == "tool"]
        if not results:
            return Reply(tool_calls=[{"name": "whoami", "arguments": "{}"}], first_byte_delay=0.1)
        told = any("NOTE-42" in str(m.get("content")) for m in messages)
        seen.add(results[-1])
        # while one process alone has asked, its rows answer slowly (input pacing): a worker that starts late on a
        # busy machine still finds rows to lease, where the first one would otherwise have drained the queue
        return Reply(content=f"{task_of(body)}|{results[-1]}|{told}", first_byte_delay=0.1 if len(seen) > 1 else 1.0)

    def whoami() -> int:
        """The process running this row."""
        import os as os_

        return os_.getpid()

    return answer, whoami, pd.Series([f"row {i}" for i in range(n)], index=[f"r{i}" for i in range(n)])


async def test_a_map_on_ray_gives_the_local_result_with_rows_run_in_two_processes(ray_cluster, serve):  # noqa: F811
    answer, whoami, items = pid_rows(24)
    s = serve(answer)
    model = model_of(s)
    h = u.map(items, "Echo {value}", model=model, tools=[whoami], backend="ray", concurrency=6)
    assert not h.done()  # the handle comes back at once: the cluster is joined in the background
    assert "Ray" in h.progress["text"]
    got = await asyncio.wait_for(h.result(), 120)
    local = await asyncio.wait_for(u.map(items, "Echo {value}", model=model, tools=[whoami]).result(), 60)
    assert list(got.index) == list(items.index) and got.notna().all()
    assert [a.split("|")[0] for a in got] == [a.split("|")[0] for a in local]
    pids = {int(a.split("|")[1]) for a in got}
    assert len(pids) >= 2 and os.getpid() not in pids  # the rows ran in two or more other processes
    assert {int(a.split("|")[1]) for a in local} == {os.getpid()}
    ray = h.progress["ray"]
    assert set(ray["pids"]) == pids and ray["processes"] >= 2
    assert h.progress["done"] == 24 and h.rows.counts["finished"] == 24
    await model.close()


async def test_each_operator_on_ray_gives_the_local_result(ray_cluster, serve):  # noqa: F811
    async def both(oracle, start, processes=1):
        answer = served(oracle)

        def paced(body):  # a reply takes 0.2 s: a worker busy with one row leaves the next to the other
            reply = answer(body)
            reply.first_byte_delay = 0.2
            return reply

        s = serve(paced)
        model = model_of(s)
        local = await asyncio.wait_for(start(model, {}).result(), 60)
        h = start(model, {"backend": "ray", "concurrency": 2})
        on_ray = await asyncio.wait_for(h.result(), 180)
        maps = getattr(h, "phases", None) or [h]
        assert all("ray" in m.progress for m in maps)  # every map of it ran on the cluster
        pids = {p for m in maps for p in m.progress["ray"]["pids"]}
        assert len(pids) >= processes and os.getpid() not in pids, pids
        await model.close()
        return local, on_ray

    q = "Does {abstract} report an experiment on humans?"
    local, on_ray = await both(filter_oracle, lambda m, o: u.filter(PAPERS, q, model=m, **o))
    pd.testing.assert_frame_equal(local, on_ray)
    assert list(on_ray.index) == ["p1"] and on_ray.attrs["reasons"].keys() == local.attrs["reasons"].keys()
    local, on_ray = await both(lambda t: {"method": t[-12:], "venue": "v"},
                               lambda m, o: u.extract(PAPERS, "From {abstract}", columns=["method", "venue"],
                                                      model=m, **o))
    pd.testing.assert_frame_equal(local, on_ray)
    local, on_ray = await both(rank_oracle, lambda m, o: u.topk([f"item {i}" for i in range(30)], 3, "Biggest?",
                                                                model=m, candidates=10, **o), processes=2)
    assert on_ray.tolist() == local.tolist() == ["item 29", "item 28", "item 27"]
    local, on_ray = await both(join_oracle, lambda m, o: u.join(PAPERS, GRANTS, "On {left.abstract} and "
                                                                "{right.aims}: funded?", model=m, **o),
                               processes=2)
    assert sorted(zip(on_ray["left"], on_ray["right"])) == sorted(zip(local["left"], local["right"])) == [
        ("p1", "g1"), ("p4", "g4"), ("p5", "g2")]
    local, on_ray = await both(lambda t: f"{t.count('abstract:')} rows",
                               lambda m, o: u.agg(PAPERS, "Summarise", by="field", model=m, **o))
    assert on_ray.to_dict() == local.to_dict() == {"neuro": "3 rows", "physics": "1 rows", "psych": "1 rows"}


def slow(delay):
    return lambda body: Reply(content="ok " + task_of(body)[-6:], first_byte_delay=delay)


async def test_pause_holds_every_worker_and_resume_restarts_them(ray_cluster, serve):  # noqa: F811
    s = serve(slow(0.2))
    model = model_of(s)
    h = u.map([f"row {i}" for i in range(400)], "Say {value}", model=model, backend="ray", concurrency=8)
    await s.reach(12)
    await h.pause()
    await asyncio.sleep(1.0)  # the grace: requests already sent, and workers' next poll
    held = s.count
    await asyncio.sleep(2.0)  # no request reaches the server for 2 s
    assert s.count == held, f"{s.count - held} request(s) reached the server while the batch was paused"
    assert not h.done()
    await h.resume()
    await s.reach(held + 8, timeout=60)  # every worker goes on
    await asyncio.wait_for(h.stop(), 10)
    await model.close()


async def test_an_interjection_reaches_the_later_requests_of_every_worker(ray_cluster, serve):  # noqa: F811
    answer, whoami, items = pid_rows(40)
    s = serve(answer)
    model = model_of(s)
    h = u.map(items, "Echo {value}", model=model, tools=[whoami], backend="ray", concurrency=4)
    await s.reach(8)
    await h.interject("NOTE-42: answer in French")
    got = await asyncio.wait_for(h.result(), 180)
    told = {p: [] for p in {a.split("|")[1] for a in got}}
    for a in got:
        _task, pid, heard = a.split("|")
        told[pid].append(heard == "True")
    assert len(told) >= 2
    assert all(any(v) for v in told.values()), told  # every worker's later requests carried it
    assert all(a.endswith("|True") for a in got.iloc[-8:])  # the rows started after it were all told
    await model.close()


async def test_stop_ends_a_batch_on_ray_at_once(ray_cluster, serve):  # noqa: F811
    s = serve(slow(30.0))  # every reply would take 30 s
    model = model_of(s)
    h = u.map([f"row {i}" for i in range(50)], "Say {value}", model=model, backend="ray", concurrency=6)
    await s.reach(4)
    await asyncio.wait_for(h.stop("enough"), 2.0)
    assert h.done() and h.status.value == "stopped"
    c = h.rows.counts
    assert c["finished"] == 0 and c["stopped"] >= 1 and c["running"] == 0
    assert c["stopped"] + c["not_started"] == 50
    with pytest.raises(u.Stopped):
        await h.result()
    await model.close()


async def test_one_429_pauses_every_worker_until_its_retry_after_passes(ray_cluster, serve):  # noqa: F811
    seen = []

    def answer(body):
        seen.append(1)
        if len(seen) == 16:
            return Reply(status=429, headers={"retry-after": "4"})
        return Reply(content="ok", first_byte_delay=0.05)

    s = serve(answer)
    model = model_of(s)
    h = u.map([f"row {i}" for i in range(120)], "Say {value}", model=model, backend="ray", concurrency=8)
    got = await asyncio.wait_for(h.result(), 180)
    assert got.notna().all()  # the row answered 429 was sent again, after its wait
    t429 = s.times[15]
    during = [t - t429 for t in s.times[16:] if t429 + 1.0 < t < t429 + 3.8]
    assert not during, f"requests {during} s after the 429, before its Retry-After (4 s) passed"
    assert any(t > t429 + 3.8 for t in s.times)
    await model.close()


async def test_a_budget_across_workers_overshoots_by_no_more_than_the_rows_in_flight(ray_cluster, serve):  # noqa: F811
    u.set_price("ray-priced", input=1.0, output=1.0)  # $ per million tokens: a row of 1,000 + 1,000 is $0.002
    s = serve(lambda body: Reply(content="ok", usage=(1000, 1000), first_byte_delay=0.1))
    model = model_of(s, "ray-priced")
    h = u.map([f"row {i}" for i in range(200)], "Say {value}", model=model, backend="ray", concurrency=8,
              budget=0.02)
    event = await h.wait_for("budget_reached", timeout=120)
    assert event.budget == 0.02
    # the rows in flight end (each a row_finished event, counted out of the running ones as it is emitted)
    await h.wait_for("row_finished", lambda e: h.rows.counts["running"] == 0, timeout=60)
    done = h.rows.counts["finished"]
    assert 10 <= done <= 10 + 8, done  # at most the rows in flight (concurrency 8) past the 10 the budget pays
    assert h.cost <= 0.02 + 8 * 0.002 + 1e-9
    assert h.spending.reached and not h.done()
    with pytest.raises(u.UserError, match="budget"):
        await h.resume()  # refused while held at its budget
    h.set_budget(1.0)  # a cap the rest fits under: every worker leases again
    await h.resume()
    assert (await asyncio.wait_for(h.result(), 180)).notna().all() and h.rows.counts["finished"] == 200
    await model.close()


async def test_a_worker_killed_mid_batch_loses_nothing(ray_cluster, serve, bus):  # noqa: F811
    answer, whoami, items = pid_rows(60)
    s = serve(answer)
    model = model_of(s)
    h = u.map(items, "Echo {value}", model=model, tools=[whoami], backend="ray", concurrency=8, bus=bus)
    await h.wait_for("row_finished", timeout=120)  # its workers have leased rows: their pids are known
    victim = h.progress["ray"]["pids"][0]
    os.kill(victim, signal.SIGKILL)
    got = await asyncio.wait_for(h.result(), 180)
    assert got.notna().all() and len(got) == 60
    assert [a.split("|")[0] for a in got] == [f"Echo row {i}" for i in range(60)]
    ends = [e.position for e in h.events if e.kind == "row_finished"]
    assert sorted(ends) == list(range(60))  # each row ended once
    assert h.progress["ray"]["processes"] >= 2 and victim in h.progress["ray"]["pids"]
    await model.close()


def test_errors_say_what_to_do(monkeypatch, serve):  # noqa: F811
    s = serve(slow(0.0))
    model = model_of(s)

    async def main():
        items = ["a", "b"]
        with pytest.raises(u.UserError, match="ray_address takes"):
            u.map(items, "Say {value}", model=model, backend="ray", ray_address="not an address")
        with pytest.raises(u.UserError, match="backend takes 'local'"):
            u.map(items, "Say {value}", model=model, backend="spark")
        with pytest.raises(u.UserError, match="ray_address go with backend='ray' only"):
            u.map(items, "Say {value}", model=model, ray_address="ray://127.0.0.1:10001")

        def frame_tool(frame: pd.DataFrame) -> int:
            """Count the rows."""
            return len(frame)

        with pytest.raises(u.UserError, match=r"need this kernel.*by reference"):
            u.map(items, "Say {value}", model=model, backend="ray", tools=[frame_tool])
        def send() -> str:
            """Send it."""
            return "sent"

        approve = u.as_tool(send, needs_approval=True)
        with pytest.raises(u.UserError, match=r"need this kernel.*approval"):
            u.map(items, "Say {value}", model=model, backend="ray", tools=[approve])
        monkeypatch.setitem(sys.modules, "ray", None)  # Ray not installed
        with pytest.raises(u.UserError, match=r"pip install 'unity_nb\[ray\]'"):
            u.map(items, "Say {value}", model=model, backend="ray")

    asyncio.run(main())


async def test_a_model_with_a_key_in_code_or_a_second_cluster_is_refused_clearly(ray_cluster, serve):  # noqa: F811
    s = serve(slow(0.0))
    keyed = u.OpenAIModel("ray-m", base_url=s.url, api_key="sk-in-code-123456")
    h = u.map(["a", "b"], "Say {value}", model=keyed, backend="ray")
    with pytest.raises(u.UserError, match="OPENAI_API_KEY") as err:
        await asyncio.wait_for(h.result(), 120)
    assert "sk-in-code" not in str(err.value)
    h = u.map(["a", "b"], "Say {value}", model=model_of(s), backend="ray", ray_address="127.0.0.1:1")
    with pytest.raises(u.UserError, match="already joined to the Ray cluster"):
        await asyncio.wait_for(h.result(), 60)
    assert h.rows.counts["finished"] == 0


async def test_rows_on_ray_reach_the_store_and_the_result_cache_as_local_rows(ray_cluster, serve, bus, tmp_path):  # noqa: F811
    s = serve(lambda body: Reply(content="hello " + task_of(body).split()[-1]))
    model = u.OpenAIModel("gpt-4.1-mini", base_url=s.url)  # a provider's model: its answers are cached
    store = u.Store(str(tmp_path / "s.db"))
    store.attach(bus)
    items = [f"w{i}" for i in range(12)]
    first = u.map(items, "Greet {value}", model=model, backend="ray", cache=store, name="greet", bus=bus)
    assert (await asyncio.wait_for(first.result(), 180)).tolist() == [f"hello w{i}" for i in range(12)]
    assert len(u.finished_rows(store, "greet")) == 12 and s.count == 12
    assert first.rows.cache.flush()
    again = u.map(items, "Greet {value}", model=model, backend="ray", cache=store, bus=u.EventBus())
    assert (await asyncio.wait_for(again.result(), 180)).tolist() == [f"hello w{i}" for i in range(12)]
    assert again.rows.cached == 12 and s.count == 12  # every row from the cache: none sent to the cluster
    await model.close()
    store.close()


async def test_a_row_on_ray_leaves_in_the_store_the_transcript_it_leaves_when_run_locally(ray_cluster, serve, bus,  # noqa: F811
                                                                                           tmp_path):
    """Each row calls the tool ``shout`` on its word, then answers with the tool's result: its loop's events come
    back from its worker, so the store holds its transcript, its loop a child of the batch, as for a local row."""

    def shout(text: str) -> str:
        """The text in capitals."""
        return text.upper()

    def answer(body):
        results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if not results:
            word = task_of(body).split()[-1]
            return Reply(tool_calls=[{"name": "shout", "arguments": json.dumps({"text": word})}])
        return Reply(content=f"it is {results[-1]}")

    s = serve(answer)
    model = model_of(s)
    store = u.Store(str(tmp_path / "s.db"))
    store.attach(bus)
    items = [f"w{i}" for i in range(6)]
    on_ray = u.map(items, "Shout {value}", model=model, tools=[shout], backend="ray", name="far", bus=bus,
                   concurrency=3)
    local = u.map(items, "Shout {value}", model=model, tools=[shout], name="near", bus=bus, concurrency=3)
    assert (await asyncio.wait_for(on_ray.result(), 180)).tolist() == [f"it is W{i}" for i in range(6)]
    assert (await asyncio.wait_for(local.result(), 60)).tolist() == [f"it is W{i}" for i in range(6)]

    def seen(entry):
        return (entry.role, entry.kind, entry.content, entry.name, entry.error,
                [(c.name, c.arguments, c.result) for c in entry.tool_calls])

    for i in range(6):
        far, near = store.transcript(f"far[{i}]"), store.transcript(f"near[{i}]")
        assert [seen(m) for m in far] == [seen(m) for m in near]
        assert [seen(m) for m in far] == [
            ("user", "task", f"Shout w{i}", None, False, []),
            ("assistant", "text", None, None, False, [("shout", json.dumps({"text": f"w{i}"}), f"W{i}")]),
            ("tool", "tool_result", f"W{i}", "shout", False, []),
            ("assistant", "answer", f"it is W{i}", None, False, []),
        ]
        kinds = [[e.kind for e in store.events(f"{name}[{i}]")] for name in ("far", "near")]
        assert kinds[0] == kinds[1] and kinds[0][-1] == "loop_finished"
        row, batch = store.find(f"far[{i}]"), store.find("far")
        assert row["parent_uid"] == batch["uid"] and row["status"] == "finished" and row["steps"] == 2
    ended = store.events("far", kind="row_finished")
    assert sorted(e.child_id for e in ended) == sorted(store.find(f"far[{i}]")["loop_id"] for i in range(6))
    started = [e for e in on_ray.events if e.kind == "child_started"]
    assert sorted(e.child_id for e in started) == sorted(e.child_id for e in ended)
    assert all(e.loop_id == on_ray.id for e in on_ray.events)  # the rows' own events are theirs, not the batch's
    await model.close()
    store.close()


def test_an_address_nothing_answers_at_fails_the_batch_at_once_saying_so(tmp_path):
    """In a process not joined to any cluster (this one is, by the other tests)."""
    code = textwrap.dedent("""
        import asyncio, unity_nb as u

        async def main():
            h = u.map(["a"], "Say {value}", model=u.OpenAIModel("m", base_url="http://127.0.0.1:9/v1"),
                      backend="ray", ray_address="127.0.0.1:9")
            assert "joining 127.0.0.1:9" in h.progress["text"]
            try:
                await asyncio.wait_for(h.result(), 60)
            except u.UserError as err:
                print("REFUSED", err)

        asyncio.run(main())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "REFUSED nothing answers at the Ray cluster's address '127.0.0.1:9'" in out.stdout, out.stderr[-2000:]


def test_the_magics_take_backend_ray_for_the_map_and_every_operator():
    from unity_nb.batch import OPERATORS
    from unity_nb.jupyter._args import HELP

    for sub in ("map", *OPERATORS):
        assert "--backend local|ray" in HELP[sub] and "--ray-address" in HELP[sub], sub


async def test_a_lost_cluster_ends_the_batch_clearly_with_the_finished_rows_kept(ray_cluster, serve):  # noqa: F811
    s = serve(slow(0.3))
    model = model_of(s)
    h = u.map([f"row {i}" for i in range(100)], "Say {value}", model=model, backend="ray", concurrency=4)
    await h.wait_for("row_finished", lambda e: h.rows.counts["finished"] >= 3, timeout=120)
    ray_cluster.kill(ray_cluster.get_actor(f"unity_nb-{h.id}"))  # the batch's control actor: gone
    with pytest.raises(u.UnityError, match="the Ray cluster was lost") as err:
        await asyncio.wait_for(h.result(), 90)
    finished = h.rows.counts["finished"]
    assert finished >= 3 and f"{finished} row(s) finished and are kept" in str(err.value)
    assert h.results().notna().sum() == finished
    c = h.rows.counts
    assert c["running"] == 0 and c["finished"] + c["stopped"] + c["not_started"] == 100  # none left "running"
    assert all("the Ray cluster was lost" in r for _k, s_, r in h.failures.itertuples(index=False) if s_ == "stopped")
    await model.close()


async def test_a_dataset_or_parquet_input_is_read_on_the_cluster_and_resumes_from_done(
        ray_cluster, serve, bus, tmp_path):  # noqa: F811
    s = serve(lambda body: Reply(content="label " + task_of(body).split()[-1]))
    model = model_of(s)
    frame = pd.DataFrame({"title": [f"paper{i}" for i in range(30)], "year": list(range(1990, 2020))})
    local = await asyncio.wait_for(u.map(frame, "Label {title} of {year}", model=model).result(), 60)
    local.index = pd.RangeIndex(30)  # a Dataset's rows are 0..n-1, in its order
    dataset = ray_cluster.data.from_pandas(frame).repartition(3)
    h = u.map(dataset, "Label {title} of {year}", model=model, backend="ray", concurrency=4)
    pd.testing.assert_series_equal(await asyncio.wait_for(h.result(), 180), local)
    assert h.rows.total == 30 and h.progress["ray"]["processes"] >= 1
    path = tmp_path / "papers.parquet"
    frame.to_parquet(path)
    store = u.Store(str(tmp_path / "s.db"))
    store.attach(bus)
    first = u.map(str(path), "Label {title} of {year}", model=model, backend="ray", name="papers", bus=bus)
    pd.testing.assert_series_equal(await asyncio.wait_for(first.result(), 180), local)
    done = u.finished_rows(store, "papers")
    assert len(done) == 30
    half = dict(list(done.items())[:12])  # as if the run before had finished 12 rows
    asked = s.count
    second = u.map(str(path), "Label {title} of {year}", model=model, backend="ray", done=half, bus=bus)
    pd.testing.assert_series_equal(await asyncio.wait_for(second.result(), 180), local)
    assert second.rows.kept == 12 and s.count - asked == 18  # only the rows it did not have were asked
    with pytest.raises(u.UserError, match=r"names \{author\}"):
        await asyncio.wait_for(u.map(dataset, "Label {author}", model=model, backend="ray").result(), 120)
    await model.close()


async def test_the_magics_start_a_map_and_an_operator_on_ray(ray_cluster, serve, stored_shell):  # noqa: F811
    ip = stored_shell
    verdicts = served(filter_oracle)
    s = serve(lambda body: verdicts(body) if body.get("tools") else Reply(content="said " + task_of(body)))
    ip.user_ns.update(papers=PAPERS, items=["a", "b", "c"])
    ip.run_line_magic("unity", f"model ray-m --base-url {s.url}")
    keep = ip.run_line_magic("unity", "filter papers --backend ray --ray-workers 1 --name keep Does {abstract} "
                                      "report an experiment on humans?")
    assert isinstance(keep, u.FilterHandle) and keep.name == "keep" and "Ray" in keep.progress["text"]
    assert list((await asyncio.wait_for(keep.result(), 180)).index) == ["p1"]
    assert keep.progress["ray"]["processes"] == 1  # --ray-workers 1: one worker process ran its rows
    labels = ip.run_line_magic("unity", "map items --backend ray --concurrency 2 Say {value}")
    assert (await asyncio.wait_for(labels.result(), 180)).notna().all()
    assert labels.progress["ray"]["processes"] >= 1 and os.getpid() not in labels.progress["ray"]["pids"]


async def test_each_worker_takes_its_share_of_the_rate_limit(ray_cluster, serve):  # noqa: F811
    s = serve(lambda body: Reply(content="ok"))
    model = model_of(s, "ray-rated")
    # 60 requests a minute for the batch: 30 for each of its two workers, one every 2 s (each at its full rate,
    # one a second; unlimited, all at once)
    h = u.map([f"row {i}" for i in range(6)], "Say {value}", model=model, backend="ray", concurrency=6,
              rate="60/min")
    await asyncio.wait_for(h.result(), 180)
    assert h.progress["ray"]["processes"] == 2  # both workers ran rows: three each
    assert s.times[-1] - s.times[0] >= 3.5, [round(t - s.times[0], 2) for t in s.times]


async def test_a_tool_from_the_person_s_own_module_file_runs_on_the_workers(ray_cluster, serve, tmp_path, monkeypatch):  # noqa: F811
    """A tool imported from a .py file beside the notebook (not installed on the cluster) travels by value: the
    workers cannot import its module, and the rows still run it."""
    import importlib

    (tmp_path / "nb_own_tools_36.py").write_text(textwrap.dedent('''
        SUFFIX = "-seen"

        def shout(word: str) -> str:
            """The word in capitals."""
            return word.upper() + SUFFIX
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    shout = importlib.import_module("nb_own_tools_36").shout

    def answer(body):
        results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if not results:
            return Reply(tool_calls=[{"name": "shout", "arguments": json.dumps({"word": task_of(body)})}])
        return Reply(content=results[-1])

    s = serve(answer)
    model = model_of(s)
    items = pd.Series(["a", "b", "c"])
    h = u.map(items, "{value}", model=model, tools=[shout], backend="ray", concurrency=2)
    got = await asyncio.wait_for(h.result(), 120)
    assert list(got) == ["A-seen", "B-seen", "C-seen"], list(got)
    await model.close()


async def test_workers_killed_after_the_others_ended_are_replaced_up_to_the_bound_of_the_workers_started(
        ray_cluster, serve):  # noqa: F811
    """Four workers: three end once the queue is empty; the fourth holds the slow row and is killed, and so is each
    worker that takes the row after it, four times. The batch started four workers: it may replace twelve (three
    each), whatever number of them is still live, and the row is answered by the fifth process to ask it."""
    import threading

    release, asked = threading.Event(), threading.Condition()
    pids: list[int] = []

    def whoami() -> int:
        """The process running this row."""
        import os as os_

        return os_.getpid()

    async def answer(body):
        task = task_of(body)
        results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if "slow" not in task:
            return Reply(content=f"ok {task}")
        if not results:
            return Reply(tool_calls=[{"name": "whoami", "arguments": "{}"}])
        with asked:
            pids.append(int(results[-1]))
            asked.notify_all()
        await asyncio.to_thread(release.wait, 120)  # held until its worker is killed
        return Reply(content=f"ok {task}")

    def asked_by(n: int) -> bool:
        with asked:
            return asked.wait_for(lambda: len(pids) >= n or release.is_set(), 120) and len(pids) >= n

    s = serve(answer)
    model = model_of(s)
    h = u.map(["a", "b", "c", "slow"], "Say {value}", model=model, tools=[whoami], backend="ray", concurrency=4,
              ray_workers=4)
    try:
        assert await asyncio.to_thread(asked_by, 1), "the slow row was never asked"
        await h.wait_for("row_finished", lambda e: h.rows.counts["finished"] >= 3, timeout=120)
        for _ in range(1200):  # the three idle workers end (the kernel sees them go within a poll or two)
            if h.progress["ray"]["workers"] == 1:
                break
            await asyncio.sleep(0.05)
        assert h.progress["ray"]["workers"] == 1, h.progress["ray"]
        result = asyncio.ensure_future(h.result())
        for n in range(1, 5):  # the worker holding the row, and each one that takes it after it
            ask = asyncio.ensure_future(asyncio.to_thread(asked_by, n))
            await asyncio.wait({ask, result}, timeout=130, return_when=asyncio.FIRST_COMPLETED)
            assert ask.done() and ask.result(), (f"the slow row was asked {len(pids)} time(s), not {n}",
                                                 result.exception() if result.done() else None)
            os.kill(pids[n - 1], signal.SIGKILL)
    finally:
        release.set()
        with asked:
            asked.notify_all()
    got = await asyncio.wait_for(result, 180)
    assert got.tolist() == ["ok Say a", "ok Say b", "ok Say c", "ok Say slow"] and len(set(pids)) == 5
    await model.close()
