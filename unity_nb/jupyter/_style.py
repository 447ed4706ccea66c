"""The widget's front end as installed: its script and its stylesheet, under an anywidget id naming their version
(a notebook saved with another version cannot restyle a live widget: see :func:`style`)."""

from __future__ import annotations

import hashlib
import re
from importlib import resources

__all__ = ("asset", "style")


def asset(name: str) -> str:
    return resources.files("unity_nb._widgets").joinpath(name).read_text(encoding="utf-8")


def _scope_css(css: str, scope: str) -> str:
    """Every rule of ``css`` applied only under ``.unb-root[data-unb-style="<scope>"]``.

    Why: anywidget keeps one ``<style>`` element per ``_anywidget_id`` for the whole page, and a
    notebook's saved widget state carries its own ``_css``. A notebook saved with an older
    version, open in another tab, would replace the stylesheet of every live widget (issue: the
    plans lost their syntax colours). Here the element's id names the version (a hash of the
    installed assets) and every rule names it too, so the installed stylesheet applies to the
    widgets it belongs to, and outranks any older sheet on the page whatever their order.
    """
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    root = f'.unb-root[data-unb-style="{scope}"]'
    out = []
    rest = css
    while "{" in rest:
        prelude, rest = rest.split("{", 1)
        prelude = prelude.strip().lstrip("}").strip()
        if prelude.startswith("@"):  # an at-rule's block (the dark palette's @media): its rules, scoped
            depth, i = 1, 0
            while depth and i < len(rest):
                depth += {"{": 1, "}": -1}.get(rest[i], 0)
                i += 1
            out.append(f"{prelude} {{\n{_scope_css(rest[: i - 1], scope).rstrip()}\n}}")
            rest = rest[i:]
            continue
        body, rest = rest.split("}", 1)
        scoped = []
        for sel in (x.strip() for x in prelude.split(",")):
            if not sel:
                continue
            at = re.match(r"\.unb-root(?![\w-])(\s*)", sel)  # the root itself, in a state (.unb-root.x), or under it
            if at:
                sel = sel[at.end():]
                scoped.append(f"{root}{at.group(1) and ' '}{sel}" if sel else root)
            else:
                scoped.append(f"{root} {sel}")
        out.append(f"{', '.join(scoped)} {{{' '.join(body.split())} }}")  # one rule a line
    return "\n".join(out) + "\n"


def style() -> tuple[str, str]:
    """The installed front end: ``(anywidget id, stylesheet)``, both naming the assets' version."""
    js, css = asset("handle.js"), asset("handle.css")
    version = hashlib.sha256((js + "\0" + css).encode()).hexdigest()[:12]
    anywidget_id = f"unity_nb.HandleWidget.{version}"
    return anywidget_id, _scope_css(css, anywidget_id)
