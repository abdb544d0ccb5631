"""Where verification reads its events: a stream held in memory (:class:`TableSource`) or an event store's
snapshot (:class:`StoreSource`), behind one protocol (:class:`EventSource`); and what a read for a query asks
of them — its columns and its types (:func:`needed_columns`, :func:`read_types`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import pyarrow as pa

from exact.arrays import distinct_ints
from exact.events import ATTRS, micros
from exact.frame import EventFrame
from exact.query.ast import Query
from exact.query.normalize import Plan, normalize
from exact.store import EventStore, Snapshot, type_mask
from exact.store.links import store_partition_next
from exact.store.manifest import SeqRanges
from exact.store.rowfilter import RowFilter, filterable
from sketch.partition.group_answers import runs_of

_I64 = np.int64


class EventSource(Protocol):
    """Reads rows of a stream by seq ranges (inclusive, sorted, disjoint)."""

    events_total: int
    #: the seqs are stream positions (consecutive): a read that leaves rows out leaves gaps in seq, and its
    #: frames are marked ``sparse`` (see :class:`exact.frame.EventFrame`)
    positional: bool

    def read_ranges(self, ranges: SeqRanges, columns: Sequence[str],
                    types: frozenset[str] | None = None, keep: RowFilter | None = None) -> tuple[pa.Table, int]:
        """The rows in ``ranges`` (only ``columns``; only rows of ``types`` unless None; only rows ``keep``
        keeps unless None — it may keep more), and the number of rows decoded to get them."""
        ...

    def read_frame(self, ranges: SeqRanges, columns: Sequence[str],
                   types: frozenset[str] | None = None, keep: RowFilter | None = None) -> tuple[EventFrame, int]:
        """:meth:`read_ranges` as the exact engine's frame."""
        ...

    def read_all(self, columns: Sequence[str]) -> pa.Table: ...

    def type_counts(self) -> dict[str, int] | None: ...

    def partition_next(self, ranges: SeqRanges, attrs: Sequence[str], seqs: np.ndarray,
                       horizon: np.ndarray | None = None, joins: np.ndarray | None = None
                       ) -> tuple[np.ndarray, int] | None:
        """Each of ``seqs``' next event in its partition among the events of ``ranges`` (-1: none) and the
        rows looked at, when the source can tell without reading the events (else None); with ``horizon``
        (and ``joins``) only the links a run can follow (:func:`exact.store.links.partition_next_near`)."""
        ...


class TableSource:
    """A stream held in memory as an Arrow table (seq-sorted)."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table
        self.seq = int_column(table, "seq")
        self.events_total = table.num_rows
        self.positional = bool(np.all(np.diff(self.seq) == 1))

    def read_ranges(self, ranges: SeqRanges, columns: Sequence[str],
                    types: frozenset[str] | None = None, keep: RowFilter | None = None) -> tuple[pa.Table, int]:
        cols = self._columns(columns)
        pieces = []
        for lo, hi in ranges:
            a, b = np.searchsorted(self.seq, [lo, hi + 1])
            pieces.append(self.table.select(cols).slice(int(a), int(b - a)))
        table = pa.concat_tables(pieces) if pieces else self.table.select(cols).slice(0, 0)
        decoded = table.num_rows
        if types is not None and decoded:
            table = table.filter(type_mask(table.column("type"), pa.array(sorted(types), pa.string())))
        if keep is not None and table.num_rows and keep.attributes() <= {c[len(ATTRS) + 1:] for c in columns}:
            table = table.filter(pa.array(keep.frame_mask(EventFrame.build(table))))
        return table, decoded

    def read_frame(self, ranges: SeqRanges, columns: Sequence[str],
                   types: frozenset[str] | None = None, keep: RowFilter | None = None) -> tuple[EventFrame, int]:
        table, decoded = self.read_ranges(ranges, columns, types, keep)
        frame = EventFrame.build(table)
        frame.sparse = self.positional
        return frame, decoded

    def read_all(self, columns: Sequence[str]) -> pa.Table:
        return self.table.select(self._columns(columns))

    def _columns(self, columns: Sequence[str]) -> list[str]:
        """The table's columns a read of ``columns`` needs (``attrs.NAME`` reads the whole ``attrs``)."""
        wanted = {ATTRS if c.startswith(ATTRS + ".") else c for c in columns}
        return [c for c in self.table.column_names if c in wanted]

    def type_counts(self) -> dict[str, int] | None:
        return None

    def partition_next(self, ranges: SeqRanges, attrs: Sequence[str], seqs: np.ndarray,
                       horizon: np.ndarray | None = None, joins: np.ndarray | None = None
                       ) -> tuple[np.ndarray, int] | None:
        return None


class StoreSource:
    """A snapshot of an :class:`~exact.store.EventStore`: ranges are read row group by row group, each
    needed row group once (neighbouring ranges within one row group are read together); ``type`` comes
    dictionary-encoded as stored, which the exact engine works on directly."""

    def __init__(self, store: EventStore, snapshot: Snapshot | None = None) -> None:
        self.store = store
        self.snapshot = snapshot if snapshot is not None else store.snapshot()
        self.events_total = int(self.snapshot.events)
        self.positional = True

    def _columns(self, columns: Sequence[str]) -> list[str]:
        """``columns`` without ``attrs`` when the stream has no attributes (the store has no such column)."""
        return [c for c in columns if not (c == ATTRS or c.startswith(ATTRS + ".")) or self.snapshot.attrs]

    def read_ranges(self, ranges: SeqRanges, columns: Sequence[str],
                    types: frozenset[str] | None = None, keep: RowFilter | None = None) -> tuple[pa.Table, int]:
        """:meth:`EventStore.read_ranges <exact.store.EventStore.read_ranges>` on the snapshot."""
        return self.store.read_ranges(ranges, self._columns(columns), types, snapshot=self.snapshot,
                                      type_dictionary=True, keep=keep)

    def read_frame(self, ranges: SeqRanges, columns: Sequence[str],
                   types: frozenset[str] | None = None, keep: RowFilter | None = None) -> tuple[EventFrame, int]:
        """:meth:`EventStore.read_frame <exact.store.EventStore.read_frame>` on the snapshot."""
        return self.store.read_frame(ranges, self._columns(columns), types, snapshot=self.snapshot, keep=keep)

    def read_all(self, columns: Sequence[str]) -> pa.Table:
        return self.store.read_table(0, None, self._columns(columns), snapshot=self.snapshot,
                                     type_dictionary=True)

    def type_counts(self) -> dict[str, int] | None:
        return dict(self.snapshot.type_counts)

    def partition_next(self, ranges: SeqRanges, attrs: Sequence[str], seqs: np.ndarray,
                       horizon: np.ndarray | None = None, joins: np.ndarray | None = None
                       ) -> tuple[np.ndarray, int] | None:
        """:func:`exact.store.links.store_partition_next` on the snapshot."""
        return store_partition_next(self.store, ranges, attrs, seqs, self.snapshot, horizon, joins)

    def seq_span(self, start_us: int, end_us: int) -> tuple[int, int]:
        """The seqs of the events with ``start_us <= ts <= end_us`` as an inclusive range (empty: lo > hi):
        the store is ordered by ts, so two searches — over the parts' ts ranges, then in the one part where
        each bound falls, its ts read in place."""
        return self._first_at_least(start_us), self._first_at_least(end_us + 1) - 1

    def _first_at_least(self, ts: int) -> int:
        """The first seq whose ts is at least ``ts`` (the event count when none is)."""
        parts = self.snapshot.parts
        at = int(np.searchsorted(np.asarray([p.max_ts for p in parts], dtype=_I64), ts, "left"))
        if at == len(parts):
            return self.events_total
        part = parts[at]
        if part.min_ts >= ts:
            return part.first_seq
        frame, _ = self.read_frame([(part.first_seq, part.last_seq)], ["seq", "ts", "type"])
        return part.first_seq + int(np.searchsorted(frame.ts, ts, "left"))

    def ts_of(self, seqs: np.ndarray) -> np.ndarray:
        """The ts (UTC µs) of events ``seqs``."""
        wanted = distinct_ints(seqs)
        frame, _ = self.read_frame(runs_of(wanted), ["seq", "ts", "type"])
        return frame.ts[np.searchsorted(frame.seq, seqs)]


def int_column(table: pa.Table, name: str) -> np.ndarray:
    """A seq or ts column as int64 (ts in UTC microseconds; see :func:`exact.events.micros`)."""
    if table.num_rows == 0:
        return np.zeros(0, dtype=_I64)
    return micros(table.column(name))


def needed_columns(query: Query) -> list[str]:
    """The stream columns the exact engine reads for ``query``: ``seq, ts, type``, and ``attrs.NAME`` for
    each attribute a condition or ``PARTITION BY`` names (Parquet decodes only those)."""
    named = list(query.partition_by) + sorted({a for c in query.where for a in c.attributes()})
    return ["seq", "ts", "type"] + [f"{ATTRS}.{n}" for n in dict.fromkeys(named)]


def read_types(query: Query, plan: Plan | None = None, *, positional: bool = False) -> frozenset[str] | None:
    """The types a read for ``query`` must keep (None = every event): no strategy changes a run on an event
    no positive or negated variable can bind, but under the contiguity strategies such an event ends a run,
    so it may be left out only where the read shows the gap (see :func:`exact.store.rowfilter.filterable`)."""
    if not filterable(query, positional):
        return None
    return _relevant_types(plan if plan is not None else normalize(query))


def _relevant_types(plan: Plan) -> frozenset[str] | None:
    """Types some positive or negated variable can bind (None = any type)."""
    out: set[str] = set()
    for v in plan.positives + plan.negatives:
        if v.types is None:
            return None
        out |= v.types
    return frozenset(out)
