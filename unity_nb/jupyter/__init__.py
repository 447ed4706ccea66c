"""The notebook surface: ``%unity`` magics and the live handle widget (imports IPython lazily)."""

from __future__ import annotations

from typing import Any

__all__ = ("load_ipython_extension", "unload_ipython_extension", "show")


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext unity_nb``: register the ``%unity`` magics (nothing else is touched)."""
    from ._magics import UnityMagics

    ipython.register_magics(UnityMagics)


def unload_ipython_extension(ipython: Any) -> None:
    """Remove the magics; operations already started keep running."""
    magics = ipython.magics_manager.magics
    magics["line"].pop("unity", None)
    magics["cell"].pop("unity", None)
    ipython.magics_manager.registry.pop("UnityMagics", None)


def show(handle: Any, **options: Any) -> Any:
    """A live widget for any handle (what ``%unity act`` displays)."""
    from ._widget import HandleWidget

    return HandleWidget(handle, **options)
