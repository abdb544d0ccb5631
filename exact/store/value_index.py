"""An attribute's value index (seek files from version 5): a part's rows by type and value bucket, so that a
condition such as ``v.amount > 50000`` finds the rows of ``v``'s types that may meet it without testing the
others (:mod:`exact.store.rowfilter`, :mod:`exact.store.links`).  From version 7 its rows are keyed by cell and
bit-packed (:mod:`exact.store.packing`; docs/attribute-index.md).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from exact.store.packing import Packed

#: Value buckets of an attribute's index (at most; fewer where the part's values are fewer).
BUCKETS = 256


@dataclass(frozen=True)
class ValueIndex:
    """An attribute's rows by type and value (version 5): the part's non-null values cut into buckets at
    ``edges`` (quantiles, so each bucket holds about as many rows), and the part's rows ordered by type
    code, then bucket (nulls and NaN last, in a bucket of their own), then row.

    A row's bucket is the number of edges not above its value, so a value equal to, below or above a literal
    lies in the literal's bucket, at or below it, or at or above it: the rows of a type that may meet
    ``v.a <op> literal`` are one slice of ``rows``, and a read tests only those (:mod:`exact.store.rowfilter`)."""

    edges: np.ndarray  # float64, increasing
    rows: np.ndarray  # uint32, a row number per row of the part (keyed: int64, see ``keyed``)
    start: np.ndarray  # int64: where (type code, bucket) begins in ``rows``, code-major; and the end
    #: version 7: ``rows`` holds ``cell * keyed + row`` (``keyed``: the part's rows; a cell is a (type code,
    #: bucket) pair, ``code * width + bucket``), which increases through the whole column — its steps are a
    #: cell's steps, and at a cell's end the short way round to the next cell's first row, so they pack
    #: small where the rows themselves jump back at every cell; 0: plain row numbers
    keyed: int = 0

    @property
    def width(self) -> int:
        """Buckets per type: the value buckets and the null bucket."""
        return len(self.edges) + 2

    def bucket(self, value: float) -> int:
        return bisect.bisect_right(self.edge_list, value)

    @cached_property
    def edge_list(self) -> list[float]:
        """``edges`` as Python floats: a bucket is looked up per condition and part, and a bisection of a
        list costs a fraction of a NumPy call."""
        return [float(e) for e in self.edges.tolist()]

    @cached_property
    def plain_rows(self) -> np.ndarray:
        """The row numbers of ``rows`` as a plain array, for the compiled partition-link search
        (:mod:`exact.store.links`), which bisects every cell of every type for each of many links: packed rows
        are decoded once (4 bytes a row, kept with the open file) rather than a block per probe."""
        if not self.keyed and not isinstance(self.rows, Packed):
            return self.rows
        return np.ascontiguousarray(self.rows_in(0, len(self.rows)), dtype=np.uint32)

    def rows_in(self, a: int, b: int) -> np.ndarray:
        """The row numbers at positions ``a … b - 1`` of ``rows`` (a span of whole cells, or part of one)."""
        if not self.keyed or b <= a:
            return self.rows[a:b]
        assert isinstance(self.rows, Packed)
        return self.rows.decode_runs(a, b, self.start, self.keyed)

    def span(self, code: int, lo: int, hi: int) -> tuple[int, int]:
        """Where the rows of type ``code`` in buckets ``lo … hi`` lie in ``rows``."""
        w = self.width
        return int(self.start[code * w + lo]), int(self.start[code * w + hi + 1])


def value_index(values: np.ndarray, type_codes: np.ndarray, n_types: int, *, keyed: bool = False
                ) -> dict[str, bytes]:
    """The sections of a :class:`ValueIndex` over ``values`` (float64 per row, NaN for null) of rows whose
    types are ``type_codes``; ``keyed``: its rows as ``cell * rows + row`` (int64; version 7)."""
    present = values[~np.isnan(values)]
    cuts = np.linspace(0.0, 1.0, BUCKETS + 1)[1:-1]
    edges = (np.unique(np.quantile(present, cuts, method="lower")) if len(present)
             else np.zeros(0, np.float64)).astype(np.float64)
    width = len(edges) + 2
    bucket = np.searchsorted(edges, values, "right")
    bucket[np.isnan(values)] = width - 1
    key = type_codes.astype(np.int64) * width + bucket
    cells = n_types * width
    order = np.argsort(key.astype(np.uint16) if cells <= 1 << 16 else key, kind="stable").astype(np.uint32)
    start = np.zeros(cells + 1, dtype=np.int64)
    np.cumsum(np.bincount(key, minlength=cells), out=start[1:])
    rows = key[order].astype(np.int64) * len(values) + order if keyed else order
    return {"edges": edges.tobytes(), "vrows": rows.tobytes(), "vstart": start.tobytes()}
