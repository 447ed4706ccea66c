"""CachedModel's file is JSON lines appended off the event loop; older files load; a cut line is skipped."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import warnings

import pytest

import unity_nb as u


def _upper(messages, tools):
    return messages[-1]["content"].upper()


def _lines(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


async def _ask(model, *tasks):
    return [await asyncio.wait_for(u.start_loop(t, model=model, bus=u.EventBus()), 10) for t in tasks]


async def test_recording_appends_one_line_a_reply_and_never_writes_on_the_event_loop(tmp_path, monkeypatch):
    loop_thread = threading.get_ident()
    writers = []
    write, replace = os.write, os.replace

    written = threading.Event()  # set once the last reply is in the file

    def counting_write(fd, data):
        writers.append(threading.get_ident())
        n = write(fd, data)
        written.set() if b"THREE" in bytes(data) else None
        return n

    def counting_replace(src, dst):
        writers.append(threading.get_ident())
        replace(src, dst)
        written.set() if b"THREE" in path.read_bytes() else None

    monkeypatch.setattr(os, "write", counting_write)
    monkeypatch.setattr(os, "replace", counting_replace)
    path = tmp_path / "r.json"
    model = u.CachedModel(u.ScriptedModel(_upper), path, mode="auto")
    assert await _ask(model, "one", "two", "three") == ["ONE", "TWO", "THREE"]
    assert await asyncio.to_thread(written.wait, 10)  # written by the writer thread, without save()
    assert writers and loop_thread not in writers
    monkeypatch.undo()
    records = _lines(path)
    assert records[0] == {"unity_nb_cache": 2} and len(records) == 4
    assert [r["entry"]["content"] for r in records[1:]] == ["ONE", "TWO", "THREE"]
    replay = u.CachedModel(u.ScriptedModel(lambda m, t: "never"), path, mode="replay")
    assert await _ask(replay, "three", "one") == ["THREE", "ONE"]


async def test_an_older_single_object_file_replays_and_is_converted_when_recorded_to(tmp_path):
    path = tmp_path / "old.json"
    first = u.CachedModel(u.ScriptedModel(_upper), path, mode="auto")
    await _ask(first, "old")
    first.save()
    entries = {r["key"]: r["entry"] for r in _lines(path)[1:]}
    path.write_text(json.dumps(entries, indent=1, sort_keys=True), encoding="utf-8")  # the format before
    replay = u.CachedModel(u.ScriptedModel(lambda m, t: "never"), path, mode="replay")
    assert await _ask(replay, "old") == ["OLD"]
    assert path.read_text(encoding="utf-8").startswith("{\n")  # replaying never rewrites a file
    more = u.CachedModel(u.ScriptedModel(_upper), path, mode="auto")
    assert await _ask(more, "old", "new") == ["OLD", "NEW"]
    more.save()
    records = _lines(path)
    assert records[0] == {"unity_nb_cache": 2}
    assert sorted(r["entry"]["content"] for r in records[1:]) == ["NEW", "OLD"]


async def test_a_line_cut_short_by_a_killed_kernel_is_skipped_with_a_warning_and_cut_before_the_next(tmp_path):
    path = tmp_path / "r.json"
    model = u.CachedModel(u.ScriptedModel(_upper), path, mode="auto")
    await _ask(model, "kept", "lost")
    model.save()
    data = path.read_bytes()
    path.write_bytes(data[:-25])  # the last line's write cut short
    with pytest.warns(RuntimeWarning, match="skipped 1 unreadable line"):
        again = u.CachedModel(u.ScriptedModel(_upper), path, mode="auto")
    assert await _ask(again, "kept", "lost") == ["KEPT", "LOST"]
    assert (again.hits, again.misses) == (1, 1)
    again.save()
    records = _lines(path)  # every line parses: the partial one was cut off before the append
    assert sorted(r["entry"]["content"] for r in records[1:]) == ["KEPT", "LOST"]


async def test_a_file_of_mostly_superseded_recordings_is_rewritten_compact_at_the_next_write(tmp_path):
    path = tmp_path / "r.json"
    for _ in range(3):  # "record" asks again and appends: the same 60 requests, three times
        model = u.CachedModel(u.ScriptedModel(_upper), path, mode="record")
        await _ask(model, *[f"w{i}" for i in range(60)])
        model.save()
    assert len(_lines(path)) == 1 + 180
    again = u.CachedModel(u.ScriptedModel(_upper), path, mode="auto")
    assert await _ask(again, "w1", "new") == ["W1", "NEW"] and (again.hits, again.misses) == (1, 1)
    again.save()
    assert len(_lines(path)) == 1 + 61  # one line a request


def test_a_process_killed_while_recording_leaves_a_file_that_loads_with_every_complete_line(tmp_path):
    import signal
    import subprocess
    import sys
    import time
    import warnings

    path = tmp_path / "killed.json"
    code = (
        "import asyncio, sys, unity_nb as u\n"
        "async def main():\n"
        "    m = u.CachedModel(u.ScriptedModel(lambda ms, t: 'x' * 5000 + ms[-1]['content']), sys.argv[1])\n"
        "    i = 0\n"
        "    while True:\n"
        "        await u.start_loop(f'request {i}', model=m, bus=u.EventBus())\n"
        "        i += 1\n"
        "asyncio.run(main())\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)])
    try:
        deadline = time.monotonic() + 60
        while not (path.exists() and path.stat().st_size > 2_000_000):  # recording, appended as it goes
            assert proc.poll() is None and time.monotonic() < deadline, "the recorder never got going"
            time.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    data = path.read_bytes()
    complete = data.count(b"\n") - 1  # lines after the header that were written whole
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = u.CachedModel(u.ScriptedModel(lambda ms, t: "new"), path, mode="replay")
    partial = not data.endswith(b"\n")
    assert bool([w for w in caught if "unreadable line" in str(w.message)]) == partial

    async def replay(i):
        return await asyncio.wait_for(u.start_loop(f"request {i}", model=model, bus=u.EventBus()), 10)

    # every line written whole replays (the requests ran one after another); the next was lost or never made
    assert asyncio.run(replay(0)).endswith("request 0")
    assert asyncio.run(replay(complete - 1)).endswith(f"request {complete - 1}")
    with pytest.raises(u.CacheMiss):
        asyncio.run(replay(complete))


async def test_a_recording_queued_just_after_a_whole_rewrite_took_it_is_not_written_twice(tmp_path, monkeypatch):
    """The writer thread may rewrite the file whole between the moment a recording is kept and the moment it is
    queued (the loop thread sets one, then the other): the rewrite holds it, so it must not be appended again.
    (Seen in CI under load: a duplicate line made the next file count as mostly superseded.)"""
    original = u.CachedModel._recorded

    def recorded_after_a_rewrite(self, key, entry):
        t = threading.Thread(target=self.save)  # the writer's turn comes between the two steps
        t.start()
        t.join(10)
        original(self, key, entry)

    monkeypatch.setattr(u.CachedModel, "_recorded", recorded_after_a_rewrite)
    fresh = tmp_path / "s.json"
    other = u.CachedModel(u.ScriptedModel(_upper), fresh, mode="auto")
    await _ask(other, "a", "b")  # the first recording makes the file: a whole rewrite
    other.save()
    keys = [line.get("key") for line in _lines(fresh)[1:]]
    assert len(keys) == len(set(keys)) == 2


async def test_recordings_that_cannot_be_written_are_said_once_and_written_once_they_can(tmp_path):
    """A write that fails (a full disk, a directory that cannot be made) was kept in ``write_error`` and said to no
    one: the recordings were lost at exit without a word. It is said once as it happens, and on the next reply."""
    blocker = tmp_path / "recordings"
    blocker.write_text("a file where the recordings' directory should be", encoding="utf-8")
    path = blocker / "r.jsonl"
    said: list[tuple[type, str]] = []
    heard = threading.Event()

    def show(message, category, *args, **kwargs):  # the writer thread's warning, as the person would see it
        said.append((category, str(message)))
        heard.set()

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = show
        model = u.CachedModel(u.ScriptedModel(_upper), path, mode="auto")
        assert await _ask(model, "one") == ["ONE"]  # the call itself does not fail
        assert await asyncio.to_thread(heard.wait, 10)
        [(category, message)] = said
        assert category is RuntimeWarning and str(path) in message and "could not write" in message
        assert model.write_error is not None
        two = u.start_loop("two", model=model, bus=u.EventBus())
        assert await asyncio.wait_for(two.result(), 10) == "TWO"
        [response] = [e for e in two.events if e.kind == "model_response"]
        assert any("could not write its recordings" in w and str(path) in w for w in response.warnings)
        three = u.start_loop("three", model=model, bus=u.EventBus())
        assert await asyncio.wait_for(three.result(), 10) == "THREE"
        [response] = [e for e in three.events if e.kind == "model_response"]
        assert response.warnings == ()  # said once, not on every reply
        blocker.unlink()  # the person makes room: every recording is written
        model.save()
        assert model.write_error is None
        assert len(said) == 1
    assert sorted(r["entry"]["content"] for r in _lines(path)[1:]) == ["ONE", "THREE", "TWO"]


async def test_a_usage_the_provider_did_not_report_replays_still_marked_estimated(tmp_path):
    # the recording kept the two counts alone: an estimate (no usage reported) replayed as the provider's own count
    from unity_nb.models import ModelRequest, Reply, Usage

    class Unreported:
        name = "m"

        async def complete(self, request, on_delta=None):
            return Reply(content="hi", usage=Usage(12, 3, estimated=True))

    path = tmp_path / "r.json"
    request = ModelRequest(messages=[{"role": "user", "content": "say hi"}])
    recorder = u.CachedModel(Unreported(), path, mode="auto")
    assert (await recorder.complete(request)).usage.estimated
    recorder.save()
    replayed = await u.CachedModel(Unreported(), path, mode="replay").complete(request)
    assert replayed.content == "hi" and replayed.usage == Usage(12, 3, estimated=True)
