"""The process :class:`~unity_nb.models.LocalServer` starts: llama-cpp-python's OpenAI-compatible server on a socket
the kernel bound and handed over. Run as a script (``python -P _llama_serve.py``), never imported by the package.

Its settings come as one JSON line on stdin, not on its command line (which any local user can read):

- ``fd``: a TCP socket bound to 127.0.0.1 by the kernel before this process started. It is served as it is
  (uvicorn never binds), so the port the kernel announces was never free for another process to take.
- ``api_key``: the key every request must carry (a random one the kernel made; llama-cpp-python's ``api_key``).
- ``parent``: the kernel's process id. A thread watches it and ends this process the moment the kernel is gone,
  however it ended (SIGKILL included), whichever of its threads started this one: ``PR_SET_PDEATHSIG``, used
  before, fires when the *thread* that forked the server exits, so a server started from a thread died with it.
- ``model``, ``model_alias``, ``n_ctx``, ``chat_format``: llama-cpp-python's own settings.
"""

from __future__ import annotations

import json
import os
import select
import socket
import sys
import threading
import time


def _watch(parent: int) -> None:
    """End this process when ``parent`` (the kernel) is gone: it is then no longer this process's parent."""
    try:
        pidfd: int | None = os.pidfd_open(parent)  # Linux 5.3+: readable once the process has ended
    except (AttributeError, OSError):
        pidfd = None
    if pidfd is not None and os.getppid() == parent:  # still our parent: the pidfd is the kernel's, not a reused pid's
        select.select([pidfd], [], [])
    while os.getppid() == parent:  # elsewhere (or on a spurious wake-up): asked five times a second
        time.sleep(0.2)
    os._exit(0)  # no graceful shutdown: nobody is left to answer


def main() -> None:
    config = json.loads(sys.stdin.readline())
    threading.Thread(target=_watch, args=(int(config["parent"]),), name="unity_nb-kernel-watch", daemon=True).start()
    listener = socket.socket(fileno=int(config["fd"]))

    import uvicorn
    from llama_cpp.server.app import create_app
    from llama_cpp.server.settings import ModelSettings, ServerSettings

    app = create_app(
        server_settings=ServerSettings(host="127.0.0.1", port=listener.getsockname()[1], api_key=config["api_key"]),
        model_settings=[ModelSettings(
            model=config["model"], model_alias=config["model_alias"], n_ctx=int(config["n_ctx"]),
            chat_format=config["chat_format"],
        )],
    )
    uvicorn.Server(uvicorn.Config(app, log_level="info")).run(sockets=[listener])


if __name__ == "__main__":
    main()
