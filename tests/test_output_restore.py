"""``_output.install()`` replaces ``sys.stdout``, ``sys.stderr`` and ``threading.Thread.start`` for the
whole process; ``uninstall()`` puts back what it replaced (issue 25)."""

import sys
import threading

import pytest

from unity_nb import _output


@pytest.fixture(autouse=True)
def not_installed():
    """Each test starts from a process where it is not installed (an earlier test, the actor's or a shell's,
    may have installed it), and leaves the process as it found it."""
    was_installed = threading.Thread.start is _output._start
    if was_installed:
        _output.uninstall()
    yield
    if was_installed:
        _output.install()


def test_uninstall_restores_thread_start_and_the_streams():
    start, out, err = threading.Thread.start, sys.stdout, sys.stderr
    _output.install()
    try:
        assert threading.Thread.start is not start
        _output.install()  # twice: still one layer
    finally:
        _output.uninstall()
    assert threading.Thread.start is start
    assert sys.stdout is out and sys.stderr is err


def test_a_thread_start_replaced_before_install_is_kept_and_restored():
    start = threading.Thread.start
    started: list[str] = []

    def theirs(self):
        started.append(self.name)
        start(self)

    threading.Thread.start = theirs
    try:
        _output.install()
        try:
            t = threading.Thread(target=lambda: None, name="probe")
            t.start()
            t.join(10)
            assert started == ["probe"]  # ours calls what it replaced, not the import-time original
        finally:
            _output.uninstall()
        assert threading.Thread.start is theirs
    finally:
        threading.Thread.start = start
