"""Batches: one steerable operation over every row of a DataFrame, a Series or any iterable."""

from ._agg import AggHandle, agg
from ._estimate import Estimate
from ._join import JoinHandle, join
from ._map import MapHandle, estimate_map, finished_rows, map_rows
from ._operators import ExtractHandle, FilterHandle, extract, filter_rows
from ._spend import spent_in_store
from ._topk import TopKHandle, topk

__all__ = (
    "AggHandle", "Estimate", "ExtractHandle", "FilterHandle", "JoinHandle", "MapHandle", "TopKHandle", "agg",
    "estimate_map", "extract", "filter_rows", "finished_rows", "join", "map_rows", "spent_in_store", "topk",
)
