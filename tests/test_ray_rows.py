"""``backend="ray"`` against the local backend on rows that end without an answer: each such row ends once, with
the reason it ends with locally, and the batch's counts and money say what the local backend's say (a local Ray
cluster of two worker processes, a loopback OpenAI-compatible server)."""

import asyncio
import json

import pandas as pd
import pytest
from _ray_cluster import ray_cluster, serve, task_of  # noqa: F401 - fixtures
from fake_openai import Reply

import unity_nb as u

pytestmark = pytest.mark.timeout(300)


async def test_a_row_whose_filled_task_is_blank_fails_alone_on_ray_as_locally(ray_cluster, serve):  # noqa: F811
    """Its worker could not start a loop for it: the row was never reported, and the batch waited for it for good."""
    s = serve(lambda body: Reply(content="ok " + task_of(body)))
    model = u.OpenAIModel("ray-m", base_url=s.url)
    items = pd.Series(["a", "", "b", "  "], index=["x", "y", "x", "z"])  # a repeated label too
    local = await asyncio.wait_for(u.map(items, "{value}", model=model).result(), 60)
    on_ray = await asyncio.wait_for(u.map(items, "{value}", model=model, backend="ray").result(), 120)
    pd.testing.assert_series_equal(on_ray, local)
    assert on_ray.attrs == local.attrs and on_ray.tolist() == ["ok a", None, "ok b", None]
    frame = pd.DataFrame({"title": ["", "t1", "t2"]})  # read on the cluster: a block whose first row is blank
    h = u.map(ray_cluster.data.from_pandas(frame), "{title}", model=model, backend="ray")
    got = await asyncio.wait_for(h.result(), 120)
    assert got.tolist() == [None, "ok t1", "ok t2"] and h.rows.counts["failed"] == 1
    assert got.attrs["reasons"][0].startswith("row 0 cannot fill the task: its values make it blank")
    await model.close()


async def test_a_model_without_a_price_leaves_the_cost_unknown_on_ray_not_zero(ray_cluster, serve):  # noqa: F811
    s = serve(lambda body: Reply(content="ok", usage=(1000, 1000)))
    model = u.OpenAIModel("ray-unpriced", base_url=s.url)
    local = u.map(["a", "b", "c"], "Say {value}", model=model)
    on_ray = u.map(["a", "b", "c"], "Say {value}", model=model, backend="ray")
    for h in (local, on_ray):
        assert (await asyncio.wait_for(h.result(), 120)).tolist() == ["ok"] * 3
    assert local.cost is None and on_ray.cost is None  # Ray said $0.00 spent
    assert on_ray.spending.unpriced_models() == local.spending.unpriced_models() == ["ray-unpriced"]
    assert "$ unknown (no price for this model)" in on_ray.progress["text"]
    assert on_ray.tree.usage == local.tree.usage
    await model.close()


def held_first_row(fail):
    """A server whose first row ("Say row 0") is answered with ``fail`` (a :class:`Reply`) once two other rows' requests
    came (so one row finished first, whichever process ran it); the others are answered "ok"."""
    import threading

    asked = []
    cond = threading.Condition()

    async def answer(body):
        task = task_of(body)
        if task != "Say row 0":
            with cond:
                asked.append(task)
                cond.notify_all()
            return Reply(content="ok")

        def wait():
            with cond:
                return cond.wait_for(lambda: len(asked) >= 2, 90)

        assert await asyncio.to_thread(wait)
        return fail

    return answer


async def test_a_400_after_a_row_finished_fails_that_row_alone_on_ray_as_locally(ray_cluster, serve):  # noqa: F811
    """Whether a 400 fails every row was each worker's own say (had *it* finished a row?): a worker whose first
    row was answered 400 failed the whole batch while rows of the other worker had finished."""
    items = [f"row {i}" for i in range(6)]
    got = {}
    for backend in ("local", "ray"):
        s = serve(held_first_row(Reply(status=400)))
        model = u.OpenAIModel("ray-m", base_url=s.url)
        # on Ray, two workers running one row each: the worker given row 0 holds it alone until the 400
        h = u.map(items, "Say {value}", model=model, concurrency=2, backend=backend,
                  **({"ray_workers": 2} if backend == "ray" else {}))
        got[backend] = await asyncio.wait_for(h.result(), 120)
        assert h.rows.counts["finished"] == 5 and h.rows.counts["failed"] == 1, backend
        await model.close()
    pd.testing.assert_series_equal(got["ray"], got["local"])
    assert got["ray"].attrs == got["local"].attrs and got["ray"].attrs["reasons"][0].startswith("ModelError")


async def test_an_error_that_fails_every_row_is_raised_as_the_model_s_error_on_ray_as_locally(ray_cluster, serve):  # noqa: F811
    errors = {}
    for backend in ("local", "ray"):
        s = serve(lambda body: Reply(status=401))
        model = u.OpenAIModel("ray-m", base_url=s.url)
        h = u.map([f"row {i}" for i in range(4)], "Say {value}", model=model, backend=backend)
        with pytest.raises(u.ModelError) as err:  # Ray raised a UnityError holding its text
            await asyncio.wait_for(h.result(), 120)
        errors[backend] = err.value
        assert h.rows.counts["finished"] == 0 and h.rows.counts["running"] == 0
        await model.close()
    assert errors["ray"].status == errors["local"].status == 401
    assert str(errors["ray"]) == str(errors["local"])


async def test_a_done_answer_that_no_longer_parses_is_asked_again_on_ray_as_locally(ray_cluster, serve, bus, tmp_path):  # noqa: F811
    """A row ``done=`` holds is asked the same while its fields keep their names; an answer given for a field whose
    type changed since no longer parses, and locally the row is asked again. On Ray, such a row of a Dataset (kept by
    the control actor, no call) failed the whole batch as the kernel read it."""
    frame = pd.DataFrame({"title": ["a", "b", "c"]})

    def submit(score):
        return Reply(tool_calls=[{"name": "submit_answer", "arguments": json.dumps({"score": score})}])

    before = serve(lambda body: submit("high" if task_of(body) == "Rate b" else "7"))
    store = u.Store(str(tmp_path / "s.db"))
    store.attach(bus)
    model = u.OpenAIModel("ray-m", base_url=before.url)
    first = u.map(frame, "Rate {title}", columns="score", model=model, name="rated", bus=bus)
    assert (await asyncio.wait_for(first.result(), 60))["score"].tolist() == ["7", "high", "7"]
    done = u.finished_rows(store, "rated")
    await model.close()
    now = serve(lambda body: submit(3))  # the field is an int now: "7" still reads as one, "high" does not
    model = u.OpenAIModel("ray-m", base_url=now.url)
    local = u.map(frame, "Rate {title}", columns="score:int", model=model, done=done)
    expected = await asyncio.wait_for(local.result(), 60)
    assert expected["score"].tolist() == [7, 3, 7] and local.rows.kept == 2 and now.count == 1
    on_ray = u.map(ray_cluster.data.from_pandas(frame), "Rate {title}", columns="score:int", model=model, done=done,
                   backend="ray")
    pd.testing.assert_frame_equal(await asyncio.wait_for(on_ray.result(), 120), expected)
    assert on_ray.rows.kept == 2 and now.count == 2  # the row whose answer no longer parses, asked again
    store.close()
    await model.close()


async def test_a_batch_cancelled_without_a_stop_reason_ends_every_row_on_ray_as_locally(ray_cluster, serve, bus,  # noqa: F811
                                                                                        tmp_path):
    """Its task cancelled from outside (the event loop shutting down: no stop was asked, so no stop reason), a batch
    ends each running row stopped, with the batch's reason, in the handle and in the store. On Ray, the rows
    out on the cluster stayed "running" for good."""
    s = serve(lambda body: Reply(content="ok", first_byte_delay=30.0))  # every reply would take 30 s
    model = u.OpenAIModel("ray-m", base_url=s.url)
    store = u.Store(str(tmp_path / "s.db"))
    store.attach(bus)
    for backend in ("local", "ray"):
        asked = s.count
        h = u.map([f"row {i}" for i in range(20)], "Say {value}", model=model, backend=backend, concurrency=4,
                  name=f"cut-{backend}", bus=bus)
        await s.reach(asked + 4)
        h._task.cancel()  # not a stop: h.stop() always gives one
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(h.result(), 30)
        c = h.rows.counts
        assert c["running"] == 0 and c["finished"] == 0 and c["stopped"] >= 1, (backend, c)
        assert c["stopped"] + c["not_started"] == 20, (backend, c)
        assert set(h.failures["reason"]) == {"the batch was stopped"}, backend
        ended = store.events(h.name, kind="row_finished")
        assert len(ended) == c["stopped"] and {(e.status, e.reason) for e in ended} == {
            ("stopped", "the batch was stopped")}, backend
        assert "running" not in store.history().set_index("name").loc[h.name, "rows"], backend
    store.close()
    await model.close()


async def test_an_answer_the_provider_cut_is_said_cut_on_ray_as_locally(ray_cluster, serve):  # noqa: F811
    s = serve(lambda body: Reply(content="the method is an exp", finish_reason="length") if task_of(body) == "long"
              else Reply(content="ok " + task_of(body)))
    model = u.OpenAIModel("ray-cut", base_url=s.url)
    local = await asyncio.wait_for(u.map(["long", "whole"], "{value}", model=model).result(), 60)
    on_ray = await asyncio.wait_for(u.map(["long", "whole"], "{value}", model=model, backend="ray").result(), 120)
    assert on_ray.tolist() == local.tolist() == ["the method is an exp", "ok whole"]
    assert on_ray.attrs == local.attrs and list(on_ray.attrs["cut"]) == [0]
    assert "finish_reason 'length'" in on_ray.attrs["cut"][0]
    await model.close()
