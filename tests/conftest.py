import asyncio
import gc
import inspect
import os
import signal
import tempfile

import pytest

# every store a test (or a kernel or notebook a test starts) opens by default lives here, not in the repository
os.environ.setdefault("UNITY_NB_STORE", os.path.join(tempfile.mkdtemp(prefix="unity_nb_tests_"), "state.db"))


def pytest_collection_modifyitems(items):
    """The markers registered in pyproject.toml, set from what a test does, so a new test is marked without anyone
    remembering to: ``kernel`` (it starts a real kernel: ``Kernel(``), ``browser`` (JupyterLab in Chromium),
    ``real_model`` (SmolLM2 on llama-cpp-python's server). ``pytest -m "not kernel and not browser and not
    real_model"`` runs the engine's tests."""
    for item in items:
        module = item.module.__name__ if getattr(item, "module", None) else ""
        if "browser" in module:
            item.add_marker(pytest.mark.browser)
        if "real_model" in module:
            item.add_marker(pytest.mark.real_model)
        fn = getattr(item, "function", None)
        try:
            source = inspect.getsource(fn) if fn is not None else ""
        except (OSError, TypeError):
            source = ""
        if "Kernel(" in source or "kernel_app" in source:
            item.add_marker(pytest.mark.kernel)


async def settle(ticks: int = 50) -> None:
    """Let every ready task run until the loop is quiet (no timing: only yields)."""
    for _ in range(ticks):
        await asyncio.sleep(0)


class Gate:
    """A ScriptedModel script that answers with ``script`` once ``event`` is set (an operation held running)."""

    def __init__(self, script):
        self.event = asyncio.Event()
        self.script = script

    async def __call__(self, messages, tools):
        await self.event.wait()
        return self.script(messages, tools)


class HeldRows:
    """A ScriptedModel script for a map whose rows each wait for ``release``; ``started`` is set once ``n`` rows wait
    (the batch's rows held running, as many as its concurrency)."""

    def __init__(self, n: int = 3):
        self.release, self.started, self.asked, self.n = asyncio.Event(), asyncio.Event(), 0, n

    async def __call__(self, messages, tools):
        self.asked += 1
        if self.asked == self.n:
            self.started.set()
        await self.release.wait()
        return "ok"


def on_own_event_loop(main, *, timeout: float = 10):
    """``main()`` run on an event loop of its own on this thread (the main one: where signals land, and where a
    notebook's event loop runs): ``(its value, None)``, or ``(None, the KeyboardInterrupt or SystemExit)`` that
    escaped the event loop (on the test's own loop it would end the test run: pytest stops at a
    KeyboardInterrupt). ``main`` itself is bounded by ``timeout`` seconds; what it left running is cancelled.

    The task an escaped exception ended keeps it unretrieved: asyncio logs it, with its traceback, when the task is
    collected, and Python 3.11 formats a traceback with ``ast.parse``, which, run by a collection in the middle of
    another ``ast.parse`` (pytest rewriting a test module), fails that one ("AST constructor recursion depth
    mismatch"). Its event loop's handler keeps such reports instead, and the task is collected here."""
    loop = asyncio.new_event_loop()
    loop.set_exception_handler(lambda _loop, context: None)  # an escaped exception is the test's to assert on
    try:
        try:
            return loop.run_until_complete(asyncio.wait_for(main(), timeout)), None
        except (KeyboardInterrupt, SystemExit) as err:
            return None, err
    finally:
        left = asyncio.all_tasks(loop)
        for task in left:
            task.cancel()
        if left:
            loop.run_until_complete(asyncio.wait(left))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
        gc.collect()


@pytest.fixture
def python_sigint():
    """Python's own SIGINT handler (a Ctrl-C raises KeyboardInterrupt wherever the main thread is), as in a script
    run by ``loop.run_until_complete``."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def tool_messages(messages):
    return [m for m in messages if m.get("role") == "tool"]


def assert_every_call_answered_once(handle):
    """Every tool call in the transcript has exactly one result, in this loop and every descendant."""
    for h in handle.tree:
        calls = [c for m in h.transcript for c in m.tool_calls]
        results = [m.tool_call_id for m in h.transcript if m.kind == "tool_result"]
        assert sorted(c.id for c in calls) == sorted(results), h.name
        assert all(c.result is not None for c in calls), h.name


@pytest.fixture
def bus():
    import unity_nb as u

    return u.EventBus()


@pytest.fixture
def stored_shell(monkeypatch, tmp_path):
    """A real IPython shell with the extension loaded, no key in the environment, a store of its own."""
    from IPython.core.interactiveshell import InteractiveShell

    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "UNITY_NB_MODEL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("UNITY_NB_STORE", str(tmp_path / "state.db"))
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "unity_nb")
    yield shell
    shell.run_line_magic("unload_ext", "unity_nb")


def dead_kernel(ip):
    """``(store, bus, silent)``: another "kernel" on the shell's store file (its own Store, recording its bus), and a
    ScriptedModel script that never answers until ``silent.event`` is set (that kernel dies while its model thinks).
    ``kill(store)`` then says its process is gone."""
    import unity_nb as u

    other = u.Store(magics(ip).store.path)
    bus = u.EventBus()
    other.attach(bus)
    return other, bus, Gate(lambda messages, tools: "never")


def kill(store) -> None:
    """The kernel that wrote ``store``'s session is gone: what it recorded is flushed, and its process is no more."""
    store.flush()
    store.execute("UPDATE sessions SET pid = 0 WHERE id = ?", (store.session,))


def magics(ip):
    """The shell's UnityMagics instance."""
    return ip.magics_manager.registry["UnityMagics"]
