"""Rows that never pass through the kernel: a Ray Dataset, or a Parquet path (``u.map("s3://bucket/papers/",
"Label {abstract}", backend="ray")``). The kernel learns how many rows there are and each block's object ref;
the batch's control actor reads one block at a time (from the cluster's object store) and makes its rows' tasks;
the workers run them. ``await`` gives a Series (or a DataFrame) indexed 0..n-1, in the input's order.
"""

from __future__ import annotations

import os
from typing import Any

from .._errors import UserError
from ._rows import Row, Template

__all__ = ("RemoteRows", "is_remote", "remote_blocks")


def is_remote(items: Any) -> bool:
    """``items`` is read on the cluster: a Ray Dataset, or a path (a Parquet file or folder, local or remote)."""
    return isinstance(items, str | os.PathLike) or type(items).__module__.startswith("ray.data")


class RemoteRows:
    """The source of a batch whose rows are read on the cluster: no row is made in the kernel (``total`` is set
    once the cluster counted them)."""

    single = False

    def __init__(self, items: Any, template: str) -> None:
        if not isinstance(template, str) or not template.strip():
            raise UserError("map needs a task: a non-empty string (a template like 'Label {abstract}' fills it per "
                            "row)")
        self.items = items
        self.template = template
        self.parsed = Template(template)
        self.total: int | None = None
        self.index: Any = None
        self.made = 0

    def __iter__(self) -> RemoteRows:
        return self

    def __next__(self) -> Row:
        raise StopIteration  # its rows are made on the cluster

    @property
    def taken(self) -> int:
        """Rows taken in the kernel: none (they are made on the cluster)."""
        return self.made

    def peek(self, n: int) -> list[Row]:
        return []

    def index_for(self, count: int) -> Any:
        import pandas as pd

        return pd.RangeIndex(count)


def remote_blocks(ray: Any, items: Any, template: Template) -> tuple[list[tuple[Any, int, int]], int]:
    """The blocks of ``items`` as ``(object ref of a pandas DataFrame, first position, rows)``, and the number of
    rows (read and counted on the cluster: only refs and counts come to the kernel). A template naming a column the
    rows lack is refused here."""
    from ._ray_actors import rows_in

    try:
        import ray.data
    except ImportError:
        raise UserError("a Dataset or a Parquet path needs Ray Data: pip install 'unity_nb[ray]'") from None
    ds = ray.data.read_parquet(os.fspath(items)) if isinstance(items, str | os.PathLike) else items
    schema = ds.schema()
    columns = [str(c) for c in (getattr(schema, "names", None) or [])]
    if columns:
        template.check(columns)
    refs = ds.to_pandas_refs()
    counter = ray.remote(num_cpus=0)(rows_in)
    lengths = ray.get([counter.remote(r) for r in refs])
    blocks, start = [], 0
    for ref, n in zip(refs, lengths):
        if n:
            blocks.append((ref, start, n))
            start += n
    if not start:
        raise UserError("map needs at least one row; the input is empty")
    return blocks, start
