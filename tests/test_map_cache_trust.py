"""The map's result cache cannot be fooled (issue 37, items 9-11): an answer is stored under what the row was
told (interjections too), a reply that may be cut off is never stored, and the cache's writes never block the
event loop (another process holding the store's write lock is waited out in a thread, said once, and nothing
raised), with the table bounded. Over real loopback HTTP (FakeOpenAIServer) and a real second process."""

import asyncio
import sqlite3
import subprocess
import sys
import textwrap

import pytest
from fake_openai import FakeOpenAIServer, Reply

import unity_nb as u
from unity_nb.store import Store

T = 20.0


def users(body):
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


def cached_rows(path) -> int:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT COUNT(*) FROM map_cache").fetchone()[0]


# -- item 9: what the row was told ---------------------------------------------------------------------------


async def test_an_interjected_answer_is_cached_under_what_the_row_was_told(tmp_path):
    store = Store(str(tmp_path / "state.db"))
    release = asyncio.Event()

    async def handler(body):
        said = users(body)
        word = said[0].split()[-1]
        if word == "a":
            await release.wait()  # row a is in flight when the interjection comes
        return Reply(content=("bonjour " if any("French" in s for s in said) else "hello ") + word)

    async with FakeOpenAIServer(handler) as server:
        model = u.OpenAIModel("gpt-4.1-mini", base_url=server.base_url, api_key="sk-test")
        items = ["a", "b", "c"]

        first = u.map(items, "Greet {value}", model=model, cache=store, concurrency=1, bus=u.EventBus())
        await server.wait_for_requests(1)
        await first.interject("answer in French")
        release.set()
        assert (await asyncio.wait_for(first.result(), T)).tolist() == ["bonjour a", "bonjour b", "bonjour c"]
        asked = len(server.requests)

        # the same map without the interjection: nothing it was told is in its key, so nothing French comes back
        plain = u.map(items, "Greet {value}", model=model, cache=store, concurrency=1, bus=u.EventBus())
        assert (await asyncio.wait_for(plain.result(), T)).tolist() == ["hello a", "hello b", "hello c"]
        assert plain.rows.cached == 0 and len(server.requests) == asked + 3

        # told the same before its rows start: rows b and c are answered from the cache; row a, interjected
        # while it ran (its answer depends on when the message landed), was never cached and is asked again
        again = u.map(items, "Greet {value}", model=model, cache=store, concurrency=1, bus=u.EventBus())
        await again.interject("answer in French")
        assert (await asyncio.wait_for(again.result(), T)).tolist() == ["bonjour a", "bonjour b", "bonjour c"]
        assert again.rows.cached == 2 and len(server.requests) == asked + 4
    store.close()


# -- item 10: a stream that may be cut off --------------------------------------------------------------------


async def test_a_stream_that_ends_without_finish_reason_or_done_is_used_marked_and_never_cached(tmp_path):
    store = Store(str(tmp_path / "state.db"))

    def handler(body):
        word = users(body)[0].split()[-1]
        if word == "cut":  # the body ends cleanly after the text: no finish_reason, no [DONE]
            return Reply(content="the answer is 4", omit_finish=True, omit_done=True)
        return Reply(content="the answer is 42", omit_finish=True)  # [DONE] says it ended: complete

    async with FakeOpenAIServer(handler) as server:
        model = u.OpenAIModel("gpt-4.1-mini", base_url=server.base_url, api_key="sk-test")
        buses = [u.EventBus(), u.EventBus()]
        for bus in buses:
            h = u.map(["cut", "whole"], "Answer {value}", model=model, cache=store, concurrency=1, bus=bus)
            assert (await asyncio.wait_for(h.result(), T)).tolist() == ["the answer is 4", "the answer is 42"]
            await asyncio.to_thread(getattr(h.rows.cache, "flush", lambda t: True), T)
        # the second run asked the cut-off row again, and took the complete one from the cache
        assert [users(b)[0] for b in server.requests] == ["Answer cut", "Answer whole", "Answer cut"]
        assert h.rows.cached == 1
    responses = {e.content: e for e in buses[0].history() if e.kind == "model_response"}
    cut = responses["the answer is 4"]  # used as it is, and marked where it is recorded
    assert cut.truncated and "neither a finish_reason nor [DONE]" in cut.warnings[0]
    assert not responses["the answer is 42"].truncated
    store.close()


async def test_an_answer_cut_off_at_max_tokens_or_by_a_content_filter_is_used_and_never_cached(tmp_path):
    store = Store(str(tmp_path / "state.db"))

    def handler(body):
        word = users(body)[0].split()[-1]
        if word == "long":  # the reply reached the request's max_tokens: its text stops mid-word
            return Reply(content="the method is an exp", finish_reason="length")
        if word == "filtered":  # the provider's content filter cut it
            return Reply(content="the method", finish_reason="content_filter")
        return Reply(content="the method is a survey")

    async with FakeOpenAIServer(handler) as server:
        model = u.OpenAIModel("gpt-4.1-mini", base_url=server.base_url, api_key="sk-test",
                              options={"max_tokens": 8})
        for _ in range(2):
            h = u.map(["long", "filtered", "whole"], "Label {value}", model=model, cache=store, concurrency=1,
                      bus=u.EventBus())
            result = await asyncio.wait_for(h.result(), T)
            assert result.tolist() == ["the method is an exp", "the method", "the method is a survey"]
            await asyncio.to_thread(h.rows.cache.flush, T)
        # the second run asked both cut-off rows again, and took the whole answer from the cache
        assert [users(b)[0] for b in server.requests] == ["Label long", "Label filtered", "Label whole",
                                                          "Label long", "Label filtered"]
        assert h.rows.cached == 1
    store.close()


# -- item 11: writes off the event loop, a lock held elsewhere, a bounded table -----------------------------------

HOLD_LOCK = textwrap.dedent(
    """
    import sqlite3, sys
    db = sqlite3.connect(sys.argv[1], isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    print("locked", flush=True)
    sys.stdin.read()
    db.execute("ROLLBACK")
    """
)


@pytest.mark.parametrize("cached_before", [False, True])
async def test_a_store_locked_by_another_process_neither_blocks_the_batch_nor_raises(tmp_path, cached_before):
    path = str(tmp_path / "state.db")
    store = Store(path)  # opened first: its own start writes to the file
    if cached_before:  # the cache's table exists already (another answer in it)
        async with FakeOpenAIServer(lambda body: Reply(content="z")) as server:
            model = u.OpenAIModel("gpt-4.1-mini", base_url=server.base_url, api_key="sk-test")
            first = u.map(["z"], "Label {value}", model=model, cache=store, bus=u.EventBus())
            await asyncio.wait_for(first.result(), T)
            await asyncio.to_thread(getattr(first.rows.cache, "flush", lambda t: True), T)
    holder = await asyncio.create_subprocess_exec(sys.executable, "-c", HOLD_LOCK, path, stdin=subprocess.PIPE,
                                                  stdout=subprocess.PIPE)
    ticks = 0
    stop, told = asyncio.Event(), asyncio.Event()
    cache = None

    async def ticker():  # the event loop's turns, counted; and the moment the cache says it waits for the lock
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            if cache is not None and cache.problem is not None:
                told.set()
            await asyncio.sleep(0.005)

    try:
        assert (await asyncio.wait_for(holder.stdout.readline(), T)).strip() == b"locked"
        async with FakeOpenAIServer(lambda body: Reply(content="label " + users(body)[0].split()[-1])) as server:
            model = u.OpenAIModel("gpt-4.1-mini", base_url=server.base_url, api_key="sk-test")
            tick_task = asyncio.create_task(ticker())
            bus = u.EventBus()
            first_put: list[int] = []  # the ticks when the first answer went to the writer (just before its event)
            bus.subscribe(lambda e: first_put.append(ticks) if e.kind == "row_finished" and not first_put else None)
            h = u.map(["a", "b", "c"], "Label {value}", model=model, cache=store, concurrency=1, bus=bus)
            assert (await asyncio.wait_for(h.result(), T)).tolist() == ["label a", "label b", "label c"]
            # the writer thread waits for the lock (in its thread) and says so; the event loop keeps turning
            cache = h.rows.cache
            await asyncio.wait_for(told.wait(), T)
            said = h.rows.cache.problem
            assert "locked by another process" in said and "3 answer(s) wait" in said and "cache=False" in said
            assert ticks - first_put[0] >= 20  # the loop ran all the while the writer waited (1 s) for the lock
            # the cache answers from what waits: a rerun in this process makes no call
            again = u.map(["a", "b", "c"], "Label {value}", model=model, cache=store, bus=u.EventBus())
            assert (await asyncio.wait_for(again.result(), T)).tolist() == ["label a", "label b", "label c"]
            assert again.rows.cached == 3 and len(server.requests) == 3
            stop.set()
            await tick_task
    finally:
        holder.stdin.close()
        await asyncio.wait_for(holder.wait(), T)
    assert await asyncio.to_thread(h.rows.cache.flush, T)  # the lock released: the waiting answers are written
    assert cached_rows(path) == 3 + cached_before and h.rows.cache.problem is None
    store.close()


async def test_the_cache_table_is_bounded_and_drops_its_oldest_answers(tmp_path):
    path = str(tmp_path / "state.db")
    store = Store(path)
    async with FakeOpenAIServer(lambda body: Reply(content="label " + users(body)[0].split()[-1])) as server:
        model = u.OpenAIModel("gpt-4.1-mini", base_url=server.base_url, api_key="sk-test")
        h = u.map([f"r{i}" for i in range(30)], "Label {value}", model=model, cache=store, concurrency=1,
                  bus=u.EventBus())
        cache = h.rows.cache
        assert cache.max_rows == 100_000 and cache.max_chars == 64 * 1024 * 1024  # the defaults README states
        h.rows.cache.max_rows = 10
        await asyncio.wait_for(h.result(), T)
        assert await asyncio.to_thread(h.rows.cache.flush, T)
    assert cached_rows(path) <= 10
    with sqlite3.connect(path) as db:
        kept = {r[0] for r in db.execute("SELECT answer FROM map_cache")}
    assert '"label r29"' in kept and '"label r0"' not in kept  # the newest stay, the oldest went
    try:
        h.rows.cache.max_rows = 0
    except u.UserError as err:
        assert "at least 1" in str(err)
    else:
        raise AssertionError("a bound of 0 was taken")
    store.close()


# -- a damaged table ---------------------------------------------------------------------------------------------


async def test_a_stored_answer_damaged_by_hand_is_a_miss_never_an_answer(tmp_path):
    path = str(tmp_path / "state.db")
    store = Store(path)
    async with FakeOpenAIServer(lambda body: Reply(content="hello " + users(body)[0].split()[-1])) as server:
        model = u.OpenAIModel("gpt-4.1-mini", base_url=server.base_url, api_key="sk-test")
        items = ["a", "b", "c", "d", "e"]
        first = u.map(items, "Greet {value}", model=model, cache=store, bus=u.EventBus())
        assert (await asyncio.wait_for(first.result(), T)).tolist() == [f"hello {x}" for x in items]
        assert await asyncio.to_thread(first.rows.cache.flush, 10)
        with sqlite3.connect(path) as db:  # each answer but e's edited into one that is not a text answer
            keys = [k for k, _ in db.execute("SELECT key, answer FROM map_cache ORDER BY answer")]
            for key, damaged in zip(keys, ["null", "123", '"  "', '["x"]'], strict=False):
                db.execute("UPDATE map_cache SET answer = ? WHERE key = ?", (damaged, key))
        asked = len(server.requests)
        again = u.map(items, "Greet {value}", model=model, cache=store, bus=u.EventBus())
        assert (await asyncio.wait_for(again.result(), T)).tolist() == [f"hello {x}" for x in items]
        assert again.rows.cached == 1 and len(server.requests) == asked + 4
    store.close()
