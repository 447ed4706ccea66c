"""The notebook surface: ``%unity`` magics and the live handle widget (imports IPython lazily)."""

from __future__ import annotations

import re
from typing import Any

__all__ = ("load_ipython_extension", "unload_ipython_extension", "show")

# IPython reads a line ending in "?" as a help request (`%unity ask h1 what now?` would become
# `%pinfo now`). Questions are the point of `%unity ask`, so before that syntax applies, a
# `%unity` line ending in "?" is rewritten to the explicit magic call. Only such lines change.
_QUESTION_LINE = re.compile(r"^(\s*)((?:[A-Za-z_][\w.]*\s*=\s*)?)%unity\b(.*\?)\s*$")


def _keep_question_marks(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        m = _QUESTION_LINE.match(line.rstrip("\n"))
        if m is not None:
            line = f"{m[1]}{m[2]}get_ipython().run_line_magic('unity', {m[3].strip()!r})\n"
        out.append(line)
    return out


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext unity_nb``: register the ``%unity`` magics (and keep ``?`` in ``%unity`` lines), and
    open the store that records every loop (``.unity_nb/state.db`` beside the notebook by default)."""
    from ..loop import LoopHandle
    from . import _output, _shown_errors
    from ._magics import UnityMagics

    ipython.register_magics(UnityMagics)
    magics = ipython.magics_manager.registry["UnityMagics"]
    magics.store  # noqa: B018 - record every loop from now on
    # a handle displays as its live widget; none under the widget %unity act already showed in the cell
    ipython.display_formatter.ipython_display_formatter.for_type(LoopHandle, magics.display_handle)
    _output.install()
    _shown_errors.install(ipython)  # unity_nb's own errors: one line and a hint in a cell; %tb for the traceback
    if _keep_question_marks not in ipython.input_transformers_cleanup:
        ipython.input_transformers_cleanup.append(_keep_question_marks)


def unload_ipython_extension(ipython: Any) -> None:
    """Remove the magics (and the output routing); operations already started keep running."""
    from ..loop import LoopHandle
    from . import _output, _shown_errors

    _output.uninstall()
    _shown_errors.uninstall(ipython)
    registered = ipython.magics_manager.registry.get("UnityMagics")
    if registered is not None:
        registered.close()
    magics = ipython.magics_manager.magics
    magics["line"].pop("unity", None)
    magics["cell"].pop("unity", None)
    ipython.magics_manager.registry.pop("UnityMagics", None)
    ipython.display_formatter.ipython_display_formatter.pop(LoopHandle, None)
    if _keep_question_marks in ipython.input_transformers_cleanup:
        ipython.input_transformers_cleanup.remove(_keep_question_marks)


def show(handle: Any, **options: Any) -> Any:
    """A live widget for any handle (what ``%unity act`` displays)."""
    from ._widget import HandleWidget

    return HandleWidget(handle, **options)
