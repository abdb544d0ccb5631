"""The units an approximate answer is made of, and where a type may occur in them (Baltus 2021, §4.3).

**Units.**  At granularity ``g`` (a tree level; 0 = leaves, the default) the stream is cut into *units*: the
top-level nodes (Baltus 2021 §4.3), each opened down to level ``g`` (a top-level node already at or below ``g`` is one
unit).  Units are consecutive seq intervals in stream order; the evaluation holds for any such cut, so the
granularity only changes how fine the answer is (Baltus 2021 §4.3.2: "the desired level … can be adjusted on a
per-query basis").

A :class:`TypeIndex` says in which units an event type may occur: the Bloom tree
(:class:`~sketch.evaluate.occurrence.TreeIndex`), or :class:`PerfectIndex`, from the true types of every
unit's events, which measures the tree's false positives.  Sets of units travel as sorted index arrays or
as runs ``[first, last)`` (:data:`Runs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from exact.arrays import distinct_ints, run_positions
from exact.query.ast import Between

if TYPE_CHECKING:
    import pyarrow as pa

    from sketch.tree.nodes import TreeNodes

_I64 = np.int64
EMPTY = np.zeros(0, dtype=_I64)
EMPTY.flags.writeable = False


@dataclass(frozen=True, eq=False)
class Units:
    """The stream cut into consecutive tree nodes at one granularity (see the module docstring).

    Column arrays, one entry per unit in stream order: node id, level, seq and ts interval.
    """

    nodes: np.ndarray
    level: np.ndarray
    lo_seq: np.ndarray
    hi_seq: np.ndarray
    lo_ts: np.ndarray
    hi_ts: np.ndarray
    granularity: int

    def __len__(self) -> int:
        return len(self.nodes)

    def index_of_seq(self, seqs: np.ndarray) -> np.ndarray:
        """The unit holding each seq (seqs must lie in the indexed stream)."""
        return np.searchsorted(self.lo_seq, seqs, "right") - 1

    def between_range(self, between: Between | None) -> tuple[int, int]:
        """The units whose ts interval meets ``BETWEEN``: a run ``[lo, hi)`` (units follow the stream's ts
        order, so their first and last ts never decrease)."""
        if between is None:
            return 0, len(self)
        lo = int(np.searchsorted(self.hi_ts, between.start, "left"))
        return lo, max(lo, int(np.searchsorted(self.lo_ts, between.end, "right")))


def units_at(tree: TreeNodes, granularity: int = 0) -> Units:
    """The units of ``tree`` at level ``granularity`` (0 = leaves): every top-level node opened down to it."""
    if granularity < 0:
        raise ValueError(f"granularity must be a tree level ≥ 0, got {granularity}")
    cols = tree.intervals()
    level, children = cols["level"], cols["children"]
    frontier = np.asarray(tree.top_nodes(), dtype=_I64)
    done: list[np.ndarray] = []
    while frontier.size:
        deep = level[frontier] > granularity
        done.append(frontier[~deep])
        kids = children[frontier[deep]].ravel()
        frontier = kids[kids >= 0]
    nodes = np.concatenate(done) if done else np.zeros(0, dtype=_I64)
    nodes = nodes[np.argsort(cols["lo_seq"][nodes], kind="stable")]
    return Units(nodes=nodes, level=level[nodes].astype(_I64), lo_seq=cols["lo_seq"][nodes],
                 hi_seq=cols["hi_seq"][nodes], lo_ts=cols["lo_ts"][nodes], hi_ts=cols["hi_ts"][nodes],
                 granularity=granularity)


#: Runs of units: ``(first, last)`` arrays, each run ``[first, last)``; sorted, disjoint, none empty.
Runs = tuple[np.ndarray, np.ndarray]


def clip_runs(runs: Runs | None, lo: int, hi: int) -> Runs:
    """``runs`` (all units when None) within ``[lo, hi)``."""
    if runs is None:
        return np.asarray([lo], dtype=_I64), np.asarray([hi], dtype=_I64)
    first, last = np.maximum(runs[0], lo), np.minimum(runs[1], hi)
    keep = first < last
    return first[keep], last[keep]


def in_runs(units: np.ndarray, runs: Runs) -> np.ndarray:
    """``units`` (sorted indices) that lie in ``runs``."""
    first, last = runs
    if not len(first):
        return units[:0]
    if len(first) == 1:
        a, b = np.searchsorted(units, (int(first[0]), int(last[0])))
        return units[a:b]
    k = np.searchsorted(first, units, "right") - 1
    return units[(k >= 0) & (units < last[np.maximum(k, 0)])]


def runs_before(x: np.ndarray, runs: Runs) -> np.ndarray:
    """Per ``x``, how many units of ``runs`` lie below it."""
    first, last = runs
    sizes = last - first
    before = np.concatenate(([0], np.cumsum(sizes)))
    k = np.searchsorted(first, x, "left")  # runs starting below x
    j = np.maximum(k - 1, 0)
    return np.where(k > 0, before[j] + np.minimum(x - first[j], sizes[j]), 0) if len(first) else 0 * x


def union(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """The sorted union of sorted index arrays."""
    if len(arrays) == 1:
        return arrays[0]
    return distinct_ints(np.concatenate(arrays))


def expand_runs(first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """The units of the runs ``[first, last)``, concatenated."""
    return run_positions(first, last - first)


class TypeIndex(Protocol):
    """Where event types may occur, per unit: the Bloom tree, or a perfect index for measuring accuracy."""

    units: Units

    def occurrence(self, types: frozenset[str], between: Between | None) -> np.ndarray:
        """The units (sorted indices) where an event of one of ``types`` may occur (within ``between``)."""
        ...

    def occurrences(self, type_sets: Sequence[frozenset[str]], between: Between | None, *,
                    required: int | None = None, allowed: Runs | None = None) -> list[np.ndarray]:
        """:meth:`occurrence` of each of ``type_sets``; once one of the first ``required`` sets (default
        all) occurs nowhere, the others' answers may be left incomplete; only units in ``allowed`` (default
        all) are answered."""
        ...

    def probes(self) -> int: ...

    def top_level_false_positive_rate(self, keys: int, between: Between | None) -> float: ...


class PerfectIndex:
    """A false-positive-free index over the same units, from the true types of every unit's events.

    It answers exactly what the tree would answer if its Bloom filters never erred; running the same
    evaluation on it defines the false positives of the tree's answers (see :func:`false_positives`).
    """

    def __init__(self, units: Units, seq: np.ndarray,
                 types: Sequence[str] | np.ndarray | pa.Array | pa.ChunkedArray) -> None:
        """``seq`` and ``types`` of every event (types as a list, numpy or Arrow array of strings)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        self.units = units
        U = max(len(units), 1)
        unit_of = units.index_of_seq(np.asarray(seq, dtype=_I64))
        if isinstance(types, pa.ChunkedArray):
            types = types.combine_chunks()
        elif not isinstance(types, pa.Array):
            types = pa.array(list(types), pa.string())
        encoded = pc.dictionary_encode(types)
        codes = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=_I64)
        pairs = distinct_ints(codes * U + unit_of)
        code_of, unit = pairs // U, pairs % U
        cuts = np.flatnonzero(np.diff(code_of)) + 1
        vocabulary = encoded.dictionary.to_pylist()
        self._where: dict[str, np.ndarray] = {
            vocabulary[int(chunk_codes[0])]: chunk_units
            for chunk_codes, chunk_units in zip(np.split(code_of, cuts), np.split(unit, cuts), strict=True)
            if len(chunk_codes)}

    def probes(self) -> int:
        return 0

    def occurrences(self, type_sets: Sequence[frozenset[str]], between: Between | None, *,
                    required: int | None = None, allowed: Runs | None = None) -> list[np.ndarray]:
        ok = clip_runs(allowed, *self.units.between_range(between))
        return [in_runs(self._units_of(types), ok) for types in type_sets]

    def occurrence(self, types: frozenset[str], between: Between | None) -> np.ndarray:
        return self.occurrences([types], between)[0]

    def _units_of(self, types: frozenset[str]) -> np.ndarray:
        found = [self._where[t] for t in types if t in self._where]
        return union(found) if found else np.zeros(0, dtype=_I64)

    def top_level_false_positive_rate(self, keys: int, between: Between | None) -> float:
        return 0.0
