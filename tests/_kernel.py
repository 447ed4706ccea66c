"""A real IPython kernel started with jupyter_client, for tests that run cells and click widgets."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from typing import Any, cast

import ipykernel
import pytest
from jupyter_client.manager import start_new_kernel

SUBSHELLS = int(ipykernel.__version__.split(".")[0]) >= 7
"""The kernels these tests start (this Python's ipykernel) take clicks while a cell runs (kernel subshells)."""
needs_subshells = pytest.mark.skipif(
    not SUBSHELLS, reason="a click during a busy cell needs kernel subshells (ipykernel 7+): tests/test_clicks_idle.py"
)


class Kernel:
    def __init__(self, env=None):
        extra: dict[str, Any] = {"env": {**os.environ, **env}} if env else {}
        self.km, self.kc = start_new_kernel(kernel_name="python3", **extra)

    def run(self, code, timeout=60):
        """Execute a cell; return its stdout; fail on an error."""
        out, errors = [], []

        def hook(msg):
            t, c = msg["msg_type"], msg["content"]
            if t == "stream" and c["name"] == "stdout":
                out.append(c["text"])
            elif t == "error":
                errors.append("\n".join(c["traceback"]))

        reply = self.kc.execute_interactive(code, timeout=timeout, output_hook=hook)
        assert reply["content"]["status"] == "ok" and not errors, "\n".join(errors)
        return "".join(out)

    def run_cell(self, code, cell, deleted=(), timeout=60):
        """Execute ``code`` as the cell ``cell`` of a notebook, as JupyterLab sends it (``cellId``, and the ids of
        the cells deleted since the last execution in ``deletedCells``); return its stdout; fail on an error."""
        content = {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                   "allow_stdin": False, "stop_on_error": True}
        msg = self.kc.session.msg(
            "execute_request", content, metadata={"cellId": cell, "deletedCells": list(deleted), "recordTiming": False}
        )
        self.kc.shell_channel.send(msg)
        msg_id = msg["header"]["msg_id"]
        out, errors = [], []
        while True:
            m = self.kc.get_iopub_msg(timeout=timeout)
            if m["parent_header"].get("msg_id") != msg_id:
                continue
            t, c = m["msg_type"], m["content"]
            if t == "stream" and c["name"] == "stdout":
                out.append(c["text"])
            elif t == "error":
                errors.append("\n".join(c["traceback"]))
            elif t == "status" and c["execution_state"] == "idle":
                break
        reply = self.kc.get_shell_msg(timeout=timeout)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = self.kc.get_shell_msg(timeout=timeout)
        assert reply["content"]["status"] == "ok" and not errors, "\n".join(errors)
        return "".join(out)

    def value(self, expr, timeout=60):
        """The JSON value of ``expr`` evaluated in the kernel (top-level await allowed)."""
        out = self.run(f"import json as _j; print(_j.dumps({expr}))", timeout=timeout)
        return json.loads(out.strip().splitlines()[-1])

    def click(self, comm_id, subshell=None, **content):
        """What a browser sends when a button of the widget is clicked. JupyterLab (4.4 and later)
        sends it over a kernel subshell by default: pass one from :meth:`subshell` to do the same."""
        msg = self.kc.session.msg("comm_msg", {"comm_id": comm_id, "data": {"method": "custom", "content": content}})
        if subshell is not None:
            msg["header"]["subshell_id"] = subshell
        self.kc.shell_channel.send(msg)

    def subshell(self, timeout=30):
        """A new kernel subshell (a thread with its own event loop), as JupyterLab creates for comms."""
        self.kc.control_channel.send(self.kc.session.msg("create_subshell_request", {}))
        reply = self.kc.get_control_msg(timeout=timeout)
        assert reply["content"]["status"] == "ok", reply["content"]
        return reply["content"]["subshell_id"]

    def run_in_subshell(self, subshell, code, timeout=60):
        """Execute ``code`` on a subshell's thread; wait for its reply (its output is not collected)."""
        content = {"code": code, "silent": True, "store_history": False, "user_expressions": {}, "allow_stdin": False}
        msg = self.kc.session.msg("execute_request", content)
        msg["header"]["subshell_id"] = subshell
        self.kc.shell_channel.send(msg)
        reply = self.kc.get_shell_msg(timeout=timeout)
        while reply["parent_header"].get("msg_id") != msg["header"]["msg_id"]:
            reply = self.kc.get_shell_msg(timeout=timeout)
        assert reply["content"]["status"] == "ok", reply["content"]

    def kill(self):
        """SIGKILL the kernel process: no cleanup of any kind runs in it."""
        pid = self.value("__import__('os').getpid()")
        os.kill(pid, signal.SIGKILL)
        cast(Any, self.km.provisioner).process.wait(timeout=30)  # a LocalProvisioner
        self.kc.stop_channels()
        self.km.cleanup_resources()

    def close(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


@contextlib.contextmanager
def running(setup, **kwargs):
    """A kernel that has run ``setup``, shut down on leaving."""
    k = Kernel(**kwargs)
    try:
        k.run(setup)
        yield k
    finally:
        k.close()
