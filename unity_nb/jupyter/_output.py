"""Output routing for the notebook (see :mod:`unity_nb._output`)."""

from .._output import install, install_display, uninstall

__all__ = ("install", "install_display", "uninstall")
