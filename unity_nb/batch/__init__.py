"""Batches: one steerable operation over every row of a DataFrame, a Series or any iterable."""

from ._map import MapHandle, finished_rows, map_rows

__all__ = ("MapHandle", "finished_rows", "map_rows")
