"""Batches: one steerable operation over every row of a DataFrame, a Series or any iterable, and the operators
built on it. A batch is a :class:`MapHandle` (a facade) over a :class:`Book` of rows, its :class:`Spending` and an
engine that owns the row work; an operator is a row plan on the map or a phased plan (:class:`Phase`), one entry of
:data:`OPERATORS` (see ``docs/architecture.md``)."""

from ._agg import AggHandle, agg
from ._book import Book
from ._estimate import Estimate
from ._join import JoinHandle, join
from ._map import MapHandle, estimate_map, finished_rows, map_rows
from ._operators import ExtractHandle, FilterHandle, extract, filter_rows
from ._phased import Phase, PhasedHandle
from ._provider_batch import provider_batches
from ._registry import OPERATORS, Operator, Param, register_operator, reserve_operator_names, unregister_operator
from ._spend import Spending, spent_in_store
from ._topk import TopKHandle, topk

__all__ = (
    "AggHandle", "Book", "Estimate", "ExtractHandle", "FilterHandle", "JoinHandle", "MapHandle", "OPERATORS",
    "Operator", "Param", "Phase", "PhasedHandle", "Spending", "TopKHandle", "agg", "estimate_map", "extract",
    "filter_rows", "finished_rows", "join", "map_rows", "provider_batches", "register_operator",
    "reserve_operator_names", "spent_in_store", "topk", "unregister_operator",
)
