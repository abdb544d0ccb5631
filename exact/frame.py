"""The engine's columnar stream: :class:`EventFrame` holds one stream (a pyarrow Table in the project's stream
schema, see ``exact.events``) after validation, seq ordering and the ``BETWEEN`` restriction, with its columns
as NumPy arrays and each condition's mask kept once computed (:mod:`exact.prefilter` computes them)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from exact.errors import InputError
from exact.events import micros
from exact.query.ast import Between

#: Up to this many distinct types in a frame, type sets are tested on the types as Python strings.
_FEW_TYPES = 4096


def _as_table(events: pa.Table | Iterable[pa.RecordBatch]) -> pa.Table:
    if isinstance(events, pa.Table):
        return events
    if isinstance(events, pa.RecordBatch):
        return pa.Table.from_batches([events])
    batches = list(events)
    if not batches:
        return pa.table({"seq": pa.array([], pa.int64()),
                         "ts": pa.array([], pa.timestamp("us", tz="UTC")),
                         "type": pa.array([], pa.string())})
    return pa.Table.from_batches(batches)



@dataclass
class EventFrame:
    """One validated stream, seq-ordered, restricted to ``BETWEEN`` (if given); columns cached.

    Made from an Arrow table (:meth:`build`), or from columns already known valid (:meth:`of_columns`,
    as the event store reads them), whose table is then made only if a condition asks for a column."""

    _table: pa.Table | None
    seq: NDArray[np.int64]
    #: the events' ts (UTC µs), or None until asked for, when ``_ts_at`` gives them
    _ts: NDArray[np.int64] | None
    _cache: dict[str, pa.Array] = field(default_factory=dict)
    _lists: dict[str, list[Any]] = field(default_factory=dict)
    #: conditions' masks over this frame, by what they compare (see :func:`condition_mask`)
    _masks: dict[tuple[Any, ...], NDArray[np.bool_]] = field(default_factory=dict)
    _codes: tuple[NDArray[np.integer[Any]], pa.Array] | None = None
    _names: Sequence[str | None] | None = None
    _make_table: Callable[[], pa.Table] | None = None
    #: per attribute, a code per event standing for its value (equal codes ⇔ equal values, -1: none), as a
    #: store's partition layout knows them; the partition and "x is present" use them instead of the values
    keys: dict[str, np.ndarray] = field(default_factory=dict)
    _columns_only: bool = False
    #: the seqs are stream positions and the read may have left events out: where two events' seqs are not
    #: consecutive, the events between exist and no variable can bind them (a filtered read of the event
    #: store).  The contiguity strategies then find adjacency by seq, not by place in the frame.
    sparse: bool = False
    #: under ``partition_contiguity`` on a read that left events out: per event, the seq of the next event of
    #: its partition (``PARTITION BY``) in the stream read, -1 for none — whether it was read or not
    partition_next: np.ndarray | None = None
    #: the ts of the events at some positions, for a frame whose ts are decoded only where asked for (a read
    #: of packed seek files: a pattern without a time window needs the ts of its matches' ends only)
    _ts_at: Callable[[np.ndarray], NDArray[np.int64]] | None = None

    @property
    def ts(self) -> NDArray[np.int64]:
        """Every event's ts (UTC µs), decoded on first use where the frame was made without them."""
        if self._ts is None:
            assert self._ts_at is not None
            self._ts = self._ts_at(np.arange(len(self.seq), dtype=np.int64))
        return self._ts

    @property
    def ts_decoded(self) -> bool:
        """Are every event's ts at hand (not decoded only where asked for)?"""
        return self._ts is not None

    def ts_at(self, positions: np.ndarray) -> NDArray[np.int64]:
        """The ts of the events at ``positions`` (indices into the frame), decoding only theirs."""
        if self._ts is None and self._ts_at is not None:
            return self._ts_at(np.asarray(positions, dtype=np.int64))
        out: NDArray[np.int64] = self.ts[positions]
        return out

    @property
    def table(self) -> pa.Table:
        if self._table is None:
            assert self._make_table is not None
            self._table = self._make_table()
        return self._table

    @classmethod
    def of_columns(cls, seq: np.ndarray, ts: np.ndarray | Callable[[np.ndarray], NDArray[np.int64]],
                   codes: np.ndarray, distinct: pa.Array, names: Sequence[str | None],
                   make_table: Callable[[], pa.Table]) -> EventFrame:
        """A frame of events given as columns: seqs (increasing), ts (UTC µs, never decreasing; or what
        gives the ts of events at positions, asked only where needed), and type codes into ``distinct``
        (whose values are ``names``); ``make_table`` makes the same events as a table in the stream schema,
        when a condition needs a column."""
        few = names if len(names) <= _FEW_TYPES else None
        if callable(ts):
            return cls(None, seq, None, _codes=(codes, distinct), _names=few, _make_table=make_table,
                       _columns_only=True, _ts_at=ts)
        return cls(None, seq, ts, _codes=(codes, distinct), _names=few, _make_table=make_table,
                   _columns_only=True)

    def restrict(self, between: Between | None) -> EventFrame:
        """The events within ``between`` (this frame when all are)."""
        if between is None or not len(self.ts):
            return self
        lo = int(np.searchsorted(self.ts, between.start, "left"))
        hi = int(np.searchsorted(self.ts, between.end, "right"))
        if lo == 0 and hi == len(self.ts):
            return self
        hi = max(hi, lo)
        if self._codes is None:  # codes (and names) are then made from the slice's own table
            codes, names = None, None
        else:
            codes, names = (self._codes[0][lo:hi], self._codes[1]), self._names
        return EventFrame(None, self.seq[lo:hi], self.ts[lo:hi], _codes=codes, _names=names,
                          _make_table=lambda: self.table.slice(lo, hi - lo),
                          keys={a: c[lo:hi] for a, c in self.keys.items()}, _columns_only=self._columns_only,
                          sparse=self.sparse,
                          partition_next=None if self.partition_next is None else self.partition_next[lo:hi])

    def take(self, keep: np.ndarray) -> EventFrame:
        """The events where ``keep`` (a bool per event) is true, in order."""
        if keep.all():
            return self
        at = np.flatnonzero(keep)
        codes = None if self._codes is None else (self._codes[0][at], self._codes[1])
        lazy = self._ts is None and self._ts_at is not None
        return EventFrame(None, self.seq[at], None if lazy else self.ts[at], _codes=codes, _names=self._names,
                          _ts_at=(lambda positions: self.ts_at(at[positions])) if lazy else None,
                          _make_table=lambda: self.table.take(pa.array(at)),
                          keys={a: c[at] for a, c in self.keys.items()}, _columns_only=self._columns_only,
                          sparse=self.sparse,
                          partition_next=None if self.partition_next is None else self.partition_next[at])

    def with_keys(self, attr: str, codes: np.ndarray) -> EventFrame:
        """This frame, knowing ``attr``'s values by ``codes`` (see :attr:`keys`)."""
        self.keys[attr] = np.asarray(codes, dtype=np.int64)
        return self

    @classmethod
    def build(cls, events: pa.Table | Iterable[pa.RecordBatch], between: Between | None = None
              ) -> EventFrame:
        table = _as_table(events)
        names = table.column_names
        for name in ("seq", "ts", "type"):
            if name not in names:
                raise InputError(f"event table has no {name!r} column", where="events")
        seq_col = table.column("seq")
        if seq_col.null_count:
            first_null = int(pc.index(pc.is_null(seq_col), True).as_py())
            raise InputError("seq is null", where=f"events: record {first_null}")
        # (a chunked array without chunks converts through pandas: answered directly)
        seq = (seq_col.to_numpy(zero_copy_only=False).astype(np.int64, copy=False) if seq_col.num_chunks
               else np.zeros(0, dtype=np.int64))
        if len(seq) > 1 and not bool(np.all(seq[1:] > seq[:-1])):
            order = np.argsort(seq, kind="stable")
            table = table.take(pa.array(order))
            seq = seq[order]
            dup = np.flatnonzero(seq[1:] == seq[:-1])
            if len(dup):
                raise InputError(f"seq {int(seq[dup[0]])} occurs twice", where="events")
        ts_col = table.column("ts")
        if ts_col.null_count:
            bad = int(np.flatnonzero(pc.is_null(ts_col).to_numpy(zero_copy_only=False))[0])
            raise InputError("ts is null", where=f"events: seq {int(seq[bad])}")
        ts = micros(ts_col)
        if len(ts) > 1:
            back = np.flatnonzero(ts[1:] < ts[:-1])
            if len(back):
                i = int(back[0]) + 1
                raise InputError("ts goes back in time (stream order is seq; ts must not decrease)",
                                 where=f"events: seq {int(seq[i])}")
        return cls(table, np.ascontiguousarray(seq), np.ascontiguousarray(ts)).restrict(between)

    def __len__(self) -> int:
        return len(self.seq)

    def type_codes(self) -> tuple[NDArray[np.integer[Any]], pa.Array]:
        """Each event's type as a code into the frame's distinct types (made once per frame)."""
        if self._codes is None:
            column = self.table.column("type")
            if pa.types.is_dictionary(column.type):
                # as the event store reads it: one dictionary per part, unified here (the dictionaries,
                # not the rows, are compared); a single part is used as it is
                encoded = (column.chunk(0) if column.num_chunks == 1
                           else column.unify_dictionaries().combine_chunks())
            else:
                encoded = pc.dictionary_encode(column.combine_chunks())
            self._codes = (encoded.indices.to_numpy(zero_copy_only=False), encoded.dictionary)
        return self._codes

    def type_names(self) -> Sequence[str | None] | None:
        """The distinct types of :meth:`type_codes` as Python strings, when there are few enough that
        testing them in Python beats a ``pyarrow.compute`` call (which costs tens of µs even on a
        dictionary of twenty types); None for many distinct types."""
        if self._names is None:
            distinct = self.type_codes()[1]
            if len(distinct) > _FEW_TYPES:
                return None
            self._names = distinct.to_pylist()
        return self._names

    def has_attribute(self, attr: str) -> bool:
        """Does the frame hold the values of attribute ``attr`` (not only codes for them)?"""
        if self._columns_only:
            return False  # made of seq, ts and type columns (:meth:`of_columns`)
        return "attrs" in self.table.column_names and self.table.schema.field("attrs").type.get_field_index(
            attr) >= 0

    def array(self, attr: str) -> pa.Array:
        """The values of ``attr`` (a builtin field or an attribute; all-null when missing)."""
        if attr in self._cache:
            return self._cache[attr]
        n = len(self)
        if attr == "seq":
            arr: pa.Array = pa.array(self.seq)
        elif attr == "ts":
            arr = pa.array(self.ts)
        elif attr == "type":
            arr = self.table.column("type").combine_chunks()
            if pa.types.is_dictionary(arr.type):
                # conditions compare strings: a dictionary-encoded column is decoded when one names it
                arr = arr.cast(arr.type.value_type)
        elif "attrs" in self.table.column_names:
            attrs = self.table.column("attrs")
            struct_type = attrs.type
            if struct_type.get_field_index(attr) >= 0:
                arr = pc.struct_field(attrs, attr)
                if isinstance(arr, pa.ChunkedArray):
                    arr = arr.combine_chunks()
                # a null struct (no attributes) makes every field null: struct_field already gives that
                if attrs.null_count:
                    arr = pc.if_else(pc.is_valid(attrs), arr, pa.nulls(n, arr.type))
            else:
                arr = pa.nulls(n)
        else:
            arr = pa.nulls(n)
        self._cache[attr] = arr
        return arr

    def values(self, attr: str, positions: np.ndarray | None = None) -> list[Any]:
        """Python values of ``attr`` (all events, or at the sorted, distinct ``positions``)."""
        if positions is None or len(positions) == len(self):
            if attr not in self._lists:
                self._lists[attr] = self.array(attr).to_pylist()
            return self._lists[attr]
        column = self.seq if attr == "seq" else self.ts if attr == "ts" else None
        values: list[Any] = (column[positions].tolist() if column is not None
                             else self.array(attr).take(pa.array(positions, pa.int64())).to_pylist())
        return values
