"""The package's version (its own module, so a module of the package reads it without importing the package)."""

__version__ = "0.1.0"
