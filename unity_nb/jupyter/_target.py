"""The variable a ``%unity`` line is assigned to: ``labels = %unity map ...`` names the operation ``labels``.

IPython gives a line magic its line only, and turns ``labels = %unity map ...`` into
``labels = get_ipython().run_line_magic('unity', 'map ...')``. The code that made that call is the cell's (or a
function's in it), run from a source IPython keeps in ``linecache`` for tracebacks; the frame that called
``run_line_magic`` says which line of it is running. The assignment at that line whose value is the call with this
very line names the operation. Where that cannot be told (called from code, a target that is no plain name, a source
not kept), there is none, and the operation takes the next ``hN``.
"""

from __future__ import annotations

import ast
import linecache
import sys
from types import FrameType

__all__ = ("assigned_name",)


def _is_call_of(node: ast.AST, line: str) -> bool:
    """``node`` is ``get_ipython().run_line_magic('unity', line)``, as IPython writes a ``%unity`` line (code calling
    ``shell.run_line_magic`` itself names its operations)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "run_line_magic" and len(node.args) >= 2):
        return False
    shell = node.func.value
    if not (isinstance(shell, ast.Call) and isinstance(shell.func, ast.Name) and shell.func.id == "get_ipython"):
        return False
    magic, text = node.args[:2]
    return isinstance(magic, ast.Constant) and magic.value == "unity" and isinstance(text, ast.Constant) \
        and text.value == line


def _caller() -> FrameType | None:
    """The frame that called IPython's ``run_line_magic`` for the magic running now."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "run_line_magic" and frame.f_globals.get("__name__", "").startswith("IPython."):
            return frame.f_back
        frame = frame.f_back
    return None


def assigned_name(line: str) -> str | None:
    """The plain name that the ``%unity`` call with ``line``, running now, is assigned to (``None``: none)."""
    caller = _caller()
    if caller is None:
        return None
    source = "".join(linecache.getlines(caller.f_code.co_filename))
    if not source:
        return None
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    at = caller.f_lineno
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.lineno <= at <= (node.end_lineno or node.lineno) and _is_call_of(node.value, line)):
            return node.targets[0].id
    return None
