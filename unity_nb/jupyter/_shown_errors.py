"""unity_nb's own errors as a person reads them in a cell: the one clear line, the traceback on request.

An error unity_nb raises on purpose (:class:`unity_nb.UnityError`: ``await h`` on a failed or stopped handle, a
``UserError`` saying what to do) says everything in its message; the frames under it are unity_nb's own (a failed
loop's error carries the dozens of frames of the task that ran it). So in a cell such an error shows as its message
and a hint, and ``%tb`` (or ``%xmode Verbose``) shows the whole traceback. Other errors are IPython's as ever.

The extension installs this for its shell only, through IPython's ``set_custom_exc`` (scoped to these exception
classes; a handler another extension set stays in charge of its own), and unloading it puts back what was there.
"""

from __future__ import annotations

import sys
from typing import Any

from .._errors import UnityError

__all__ = ("HINT", "install", "uninstall")

HINT = "(%tb shows where it was raised)"

_PRIOR: dict[int, tuple[tuple, Any]] = {}
"""Per shell (by id): the custom exceptions and handler it had before :func:`install`."""


def _short(shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: int | None = None) -> list[str]:
    sys.last_type, sys.last_value, sys.last_traceback = etype, value, tb  # what %tb shows
    if sys.version_info >= (3, 12):
        sys.last_exc = value
    if shell.InteractiveTB.mode == "Verbose":  # asked for every frame
        stb = shell.InteractiveTB.structured_traceback(etype, value, tb, tb_offset=tb_offset)
    else:
        stb = [f"\x1b[0;31m{etype.__name__}\x1b[0m: {value}", HINT]
    shell._showtraceback(etype, value, stb)  # (the shell's way to show one: ipykernel sends it as the cell's error)
    return stb


def install(shell: Any) -> None:
    """Show unity_nb's errors in ``shell``'s cells as their message and a hint (see the module)."""
    if id(shell) in _PRIOR:
        return
    prior_exc, prior_tb = tuple(shell.custom_exceptions or ()), getattr(shell, "CustomTB", None)
    _PRIOR[id(shell)] = (prior_exc, prior_tb)

    def handler(self: Any, etype: type, value: BaseException, tb: Any, tb_offset: int | None = None) -> Any:
        if prior_exc and prior_tb is not None and issubclass(etype, prior_exc):  # the other handler's own
            return prior_tb(etype, value, tb, tb_offset=tb_offset)
        return _short(self, etype, value, tb, tb_offset)

    shell.set_custom_exc((*prior_exc, UnityError), handler)


def uninstall(shell: Any) -> None:
    """Put back the custom exceptions ``shell`` had before :func:`install`."""
    prior = _PRIOR.pop(id(shell), None)
    if prior is None:
        return
    prior_exc, prior_tb = prior
    shell.custom_exceptions = prior_exc
    if prior_tb is not None:
        shell.CustomTB = prior_tb
