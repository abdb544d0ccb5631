"""The approximate answer of one query: candidate intervals, and what verification must read.

:class:`Approximation` lists the possible start units with their reach (the candidate intervals), the units
verification must read, and an ``explain`` text when nothing can match.  :meth:`Approximation.regions`
groups the starts whose reads overlap, and :meth:`Approximation.read_plan` gives the seq ranges all of them
read at once (vectorised, no Python step per region).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from exact.query.ast import Query
from sketch.evaluate.units import EMPTY, Units

_I64 = np.int64
_ZERO = np.zeros(1, dtype=_I64)
_ZERO.flags.writeable = False


@dataclass(frozen=True)
class Region:
    """Where verification looks: matches starting in ``[start_lo, start_hi]`` (seqs) are reported; events
    up to ``read_end`` are read (of the units listed in ``units``, a sorted index array)."""

    start_lo: int
    start_hi: int
    end: int
    read_end: int
    units: np.ndarray


@dataclass(frozen=True, eq=False)
class Approximation:
    """The approximate answer of one query at one granularity.

    ``starts``: the units where a match may start (sorted); ``ends``: per start, the last seq a match
    starting there may end at; ``read_ends``: per start, the last seq verification must see (the window's
    end after the start for a trailing NOT); ``relevant``: per unit, whether verification must read it.
    """

    query: Query
    units: Units
    starts: np.ndarray
    ends: np.ndarray
    read_ends: np.ndarray
    relevant: np.ndarray
    nodes_probed: int
    expected_false_positive_rate: float
    explain: str | None

    @property
    def exists(self) -> bool:
        return bool(len(self.starts))

    def candidate_spans(self) -> list[tuple[int, int]]:
        """Per start unit, ``(first seq of the unit, last seq a match starting there may end at)``."""
        return list(zip(self.units.lo_seq[self.starts].tolist(), self.ends.tolist(), strict=True))

    def intervals(self) -> list[dict[str, int]]:
        """The candidate intervals: per-start spans merged where they overlap, with the highest tree level
        among their start units (the level they were resolved at)."""
        lo, hi, levels = self._intervals
        return [{"start_seq": a, "end_seq": b, "level": c}
                for a, b, c in zip(lo.tolist(), hi.tolist(), levels.tolist(), strict=True)]

    def interval_bounds(self) -> np.ndarray:
        """The candidate intervals' first and last seqs, an ``(n, 2)`` array in stream order."""
        lo, hi, _ = self._intervals
        return np.stack([lo, hi], axis=1).astype(_I64, copy=False)

    def interval_count(self) -> int:
        """How many :meth:`intervals` there are."""
        return len(self._intervals[0])

    @cached_property
    def _intervals(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The intervals' first and last seqs and levels."""
        lo = self.units.lo_seq[self.starts]
        if not len(lo):
            return EMPTY, EMPTY, EMPTY
        # spans are in start order; one begins a new interval where it starts after every earlier end
        reach = np.maximum.accumulate(self.ends)
        first = np.concatenate((_ZERO, (lo[1:] > reach[:-1]).nonzero()[0] + 1))
        last = np.concatenate((first[1:], [len(lo)])) - 1
        levels = np.maximum.reduceat(self.units.level[self.starts], first)
        return lo[first], reach[last], levels

    def regions(self, merge_gap: int = 0) -> list[Region]:
        """Start units grouped where their read ranges overlap or lie less than ``merge_gap`` events apart,
        each with the units verification reads.

        Merging is sound: a unit inside a region that is not a start can start no exact match (no false
        negatives), so widening ``starts`` over it reports nothing extra.  It trades reading the gap for one
        engine call less (each call has a fixed cost; reads go by whole row groups anyway).
        """
        units = self.units
        if not len(self.starts):
            return []
        first, last, read_ends, last_units = self._groups(merge_gap)
        ends = np.maximum.reduceat(self.ends.astype(_I64), first)
        out = []
        for a, b, end, read_end, last_unit in zip(first.tolist(), last.tolist(), ends.tolist(),
                                                  read_ends.tolist(), last_units.tolist(), strict=True):
            s_first, s_last = int(self.starts[a]), int(self.starts[b])
            span = np.arange(s_first, last_unit + 1)
            out.append(Region(int(units.lo_seq[s_first]), int(units.hi_seq[s_last]), end, read_end,
                              span[self.relevant[span]]))
        return out

    def _groups(self, merge_gap: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The regions as runs of starts: each one's first and last start (indices into ``starts``), its
        read end and the unit that read end lies in."""
        lo = self.units.lo_seq[self.starts]
        # Starts come in stream order and each read end lies at or after its start, so the running maximum
        # of read ends is the current group's reach; a start beyond it (plus the gap) opens a new group.
        reach = np.maximum.accumulate(self.read_ends)
        first = np.concatenate((_ZERO, (lo[1:] > reach[:-1] + merge_gap).nonzero()[0] + 1))
        last = np.concatenate((first[1:], [len(lo)])) - 1
        return first, last, reach[last], self.units.index_of_seq(reach[last])

    def read_plan(self, merge_gap: int = 0) -> tuple[np.ndarray, int, Region | None]:
        """What :meth:`regions` reads, for all regions at once: the seq ranges (an (n, 2) array, inclusive,
        sorted, disjoint, neighbours joined) of the relevant units from each region's first start unit to
        its reach, clipped to its read end; the number of regions; and one region spanning them all (starts
        from the first region's first to the last one's last; None without starts).  Vectorised: the same
        ranges as :meth:`regions` joined region by region, without a Python step per region."""
        units = self.units
        if not len(self.starts):
            return np.zeros((0, 2), dtype=_I64), 0, None
        starts = self.starts
        first, _, read_end, last_unit = self._groups(merge_gap)
        # Region g spans the units [F_g, L_g] (its first start unit, the unit of its reach); F grows, and L
        # and the read end never fall (the reach is a running maximum).  A unit u is read whole when some
        # span holds it before its last unit — then the last region starting at or before u does, the one
        # reaching furthest — and read to the read end when it is some span's last unit (the last region
        # ending there reads furthest).  Spans overlap only with a negative gap.
        F, L = starts[first], last_unit
        u = self.relevant.nonzero()[0]
        g = F.searchsorted(u, "right") - 1
        whole_unit = (g >= 0) & (u < L[g])
        h = L.searchsorted(u, "right") - 1
        at_end = (h >= 0) & (L[h] == u)
        take = whole_unit | at_end
        u, cut, h = u[take], ~whole_unit[take], h[take]
        r_lo = units.lo_seq[u]
        r_hi = units.hi_seq[u]
        r_hi[cut] = np.minimum(r_hi[cut], read_end[h[cut]])
        # neighbours joined (a unit's read begins at its first seq, so none is empty)
        apart = (r_lo[1:] > r_hi[:-1] + 1).nonzero()[0]
        ranges = np.stack([np.concatenate((r_lo[:1], r_lo[apart + 1])),
                           np.concatenate((r_hi[apart], r_hi[-1:]))], axis=1).astype(_I64, copy=False)
        whole = Region(int(units.lo_seq[starts[0]]), int(units.hi_seq[starts[-1]]),
                       int(self.ends[first[-1]:].max()), int(read_end[-1]), EMPTY)
        return ranges, len(first), whole

    def coverage(self) -> int:
        """Events inside the candidate intervals (their union)."""
        lo, hi, _ = self._intervals
        return int((hi - lo).sum()) + len(lo)
