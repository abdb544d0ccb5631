"""An answer's rows as Arrow columns: the matches, the cases or the intervals of docs/contract.md §3.

What an evaluation found stays columnar to the door that needs another form: :func:`matches_arrow` makes the
matches table (one seq and one ts column per variable, Kleene variables as list columns, the case when the
query has ``PARTITION BY``), :func:`cases_of` groups matches by case for ``RETURN cases``, and
:func:`rows_json` turns any of these tables into the JSON objects of the answer, column by column.

Column names (docs/contract.md §3.6): ``start_seq``, ``end_seq``, ``start_ts``, ``end_ts``, ``case``, then per
positive variable ``<var>.seq`` and ``<var>.ts`` (null where an OR alternative did not bind), and with
bound events ``<var>.type`` and ``<var>.attrs.<attribute>``.  Times are ``timestamp[us, UTC]``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exact.arrays import run_positions

_I64 = np.int64
TS_TYPE = pa.timestamp("us", tz="UTC")
#: marks a seq a :class:`SeqTimes` does not know in its table by seq
_UNKNOWN = np.iinfo(np.int64).min
#: the most entries of that table (8 bytes each)
_DENSE_MOST = 1 << 23


@dataclass(frozen=True)
class SeqTimes(Mapping[int, int]):
    """seq → ts (UTC µs) of some events, as two sorted arrays: looked up one at a time (a Mapping) or many
    at once (:meth:`many`)."""

    seq: np.ndarray
    ts: np.ndarray

    @classmethod
    def empty(cls) -> SeqTimes:
        return cls(np.zeros(0, dtype=_I64), np.zeros(0, dtype=_I64))

    @classmethod
    def merged(cls, parts: Sequence[SeqTimes]) -> SeqTimes:
        """The union of ``parts`` (a seq in several parts has the same ts in each)."""
        parts = [p for p in parts if len(p.seq)]
        if not parts:
            return cls.empty()
        if len(parts) == 1:
            return parts[0]
        seq = np.concatenate([p.seq for p in parts])
        ts = np.concatenate([p.ts for p in parts])
        uniq, first = np.unique(seq, return_index=True)
        return cls(uniq, ts[first])

    def many(self, seqs: np.ndarray) -> np.ndarray:
        """The ts of ``seqs`` (each must be known): gathered from a table by seq when the known seqs are dense
        enough (a query's frame), else searched."""
        seqs = np.asarray(seqs, dtype=_I64)
        dense = self._dense()
        if dense is not None and len(seqs):
            lo, table = dense
            at = seqs - lo
            if int(at.min()) >= 0 and int(at.max()) < len(table):
                gathered: np.ndarray = table[at]
                if not (gathered == _UNKNOWN).any():
                    return gathered
            bad = seqs[(at < 0) | (at >= len(table))]
            raise KeyError(int(bad[0]) if len(bad) else int(seqs[table[np.clip(at, 0, len(table) - 1)] == _UNKNOWN][0]))
        out: np.ndarray = self.ts[self._positions(seqs)]
        return out

    def at(self, positions: np.ndarray) -> np.ndarray:
        """The ts of the events at ``positions`` of ``seq``."""
        out: np.ndarray = self.ts[positions]
        return out

    def _positions(self, seqs: np.ndarray) -> np.ndarray:
        """Where each of ``seqs`` lies among the known seqs (KeyError for one not known)."""
        at = _search(self.seq, seqs)
        if len(seqs) and (at.max() >= len(self.seq) or not np.array_equal(self.seq[at], seqs)):
            missing = np.asarray(seqs)[(at >= len(self.seq)) | (self.seq[np.minimum(at, len(self.seq) - 1)]
                                                                != seqs)]
            raise KeyError(int(missing[0]))
        return at

    def _dense(self) -> tuple[int, np.ndarray] | None:
        """``(first seq, ts by seq − first)`` when the seqs span at most a few times their number."""
        if "_table" in self.__dict__:
            cached: tuple[int, np.ndarray] | None = self.__dict__["_table"]
            return cached
        made = None
        if len(self.seq):
            lo, span = int(self.seq[0]), int(self.seq[-1]) - int(self.seq[0]) + 1
            if span <= max(8 * len(self.seq), 1 << 16) and span <= _DENSE_MOST:
                table = np.full(span, _UNKNOWN, dtype=_I64)
                table[self.seq - lo] = self.ts
                made = (lo, table)
        object.__setattr__(self, "_table", made)
        return made

    def __getitem__(self, seq: int) -> int:
        at = int(np.searchsorted(self.seq, seq))
        if at >= len(self.seq) or self.seq[at] != seq:
            raise KeyError(seq)
        return int(self.ts[at])

    def __iter__(self) -> Iterator[int]:
        return iter(self.seq.tolist())

    def __len__(self) -> int:
        return len(self.seq)


class FrameTimes(SeqTimes):
    """The ts of a frame's events (``seq``: theirs, sorted), decoded only for the seqs asked for, by
    ``ts_at`` (positions → ts): the frame was read without its ts, and an answer names few of its events."""

    def __init__(self, seq: np.ndarray, ts_at: Callable[[np.ndarray], np.ndarray]) -> None:
        object.__setattr__(self, "seq", seq)
        object.__setattr__(self, "_ts_at", ts_at)

    _ts_at: Callable[[np.ndarray], np.ndarray]

    @property
    def ts(self) -> np.ndarray:
        """Every event's ts (decoded on first use)."""
        if "_all" not in self.__dict__:
            object.__setattr__(self, "_all", self._ts_at(np.arange(len(self.seq), dtype=_I64)))
        out: np.ndarray = self.__dict__["_all"]
        return out

    def many(self, seqs: np.ndarray) -> np.ndarray:
        seqs = np.asarray(seqs, dtype=_I64)
        if not len(seqs):
            return np.zeros(0, dtype=_I64)
        # (the rows decoded in stream order: a gather of sorted positions reads each block once)
        return _in_order(seqs, lambda keys: self._ts_at(self._positions(keys)))

    def at(self, positions: np.ndarray) -> np.ndarray:
        positions = np.asarray(positions, dtype=_I64)
        if "_all" in self.__dict__ or len(positions) * _WHOLE_FROM >= len(self.seq):
            out: np.ndarray = self.ts[positions]  # (most of the events: decoded in order, once)
            return out
        return _in_order(positions, self._ts_at)

    def __getitem__(self, seq: int) -> int:
        return int(self.many(np.asarray([seq], dtype=_I64))[0])


#: Look-ups of at least this many seqs, not in order, are sorted first: a search for sorted keys narrows
#: from the last one found (measured: 172,000 seqs among 398,000 in 35 ms unsorted, 5 + 5 ms sorted first)
_SORT_FROM = 4096


#: Asked for the ts of at least 1/this of a frame's events, a :class:`FrameTimes` decodes them all in order
_WHOLE_FROM = 4


def _in_order(keys: np.ndarray, look_up: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """``look_up(keys)`` (one value per key), asked with the keys sorted where they are many and out of
    order, and given back in the keys' own order."""
    if len(keys) < _SORT_FROM or not bool(np.any(keys[1:] < keys[:-1])):
        return look_up(keys)
    order = np.argsort(keys, kind="stable")
    found = look_up(keys[order])
    out = np.empty(len(keys), dtype=found.dtype)
    out[order] = found
    return out


def _search(known: np.ndarray, seqs: np.ndarray) -> np.ndarray:
    """``np.searchsorted(known, seqs)``, the keys sorted first where they are many and out of order."""
    return _in_order(seqs, lambda keys: np.searchsorted(known, keys))


#: set inside :func:`without_times`
_UNTIMED: ContextVar[bool] = ContextVar("untimed", default=False)


@contextlib.contextmanager
def without_times() -> Iterator[None]:
    """Matches tables made inside (in this thread) leave out their ts columns: for a summary that reads only
    seqs and bound fields (``count BY v.attr``), whose matches' ts would be decoded for nothing."""
    token = _UNTIMED.set(True)
    try:
        yield
    finally:
        _UNTIMED.reset(token)


def timestamps(micros: np.ndarray) -> pa.Array:
    """UTC microseconds as an Arrow ``timestamp[us, UTC]`` array (the array's own buffer, not copied)."""
    values = np.ascontiguousarray(micros, dtype=_I64)
    return pa.Array.from_buffers(TS_TYPE, len(values), [None, pa.py_buffer(values)])


def matches_arrow(table: Any, order: np.ndarray, times: SeqTimes, kleene: frozenset[str],
                  case: pa.Array | None = None) -> pa.Table:
    """The matches ``order`` of ``table`` (a :class:`~exact.engine.matchtable.MatchTable`) as the matches
    table (see the module docstring; inside :func:`without_times`, no ts column); ``kleene``: the variables
    that bind one or more events; ``case``: each match's case (in ``order``), or None without
    ``PARTITION BY``."""
    n = len(order)
    starts, ends = table.start[order], table.end[order]
    lengths = np.diff(table.off)[order]
    rows = run_positions(table.off[:-1][order], lengths)
    owner = np.repeat(np.arange(n, dtype=_I64), lengths)
    var, seq = table.var[rows], table.seq[rows]  # rows of a match in stream order
    timed = not _UNTIMED.get()
    columns: dict[str, pa.Array] = {
        "start_seq": pa.array(starts, type=pa.int64()), "end_seq": pa.array(ends, type=pa.int64())}
    if not timed:
        stamp = np.zeros(0, dtype=_I64)
    elif table.rows_at is not None and table.rows_in is times.seq:  # (where the evaluation found them)
        stamp = times.at(table.rows_at[rows])
    else:
        stamp = times.many(seq)  # every bound event's ts, looked up once
    last = np.cumsum(lengths) - 1
    if not timed:
        pass
    elif n and bool((lengths > 0).all()) and np.array_equal(seq[last - lengths + 1], starts) \
            and np.array_equal(seq[last], ends):  # (a match's first and last events are its first and last rows)
        columns.update(start_ts=timestamps(stamp[last - lengths + 1]), end_ts=timestamps(stamp[last]))
    else:
        columns.update(start_ts=timestamps(times.many(starts)), end_ts=timestamps(times.many(ends)))
    if case is not None:
        columns["case"] = plain(case)
    k = len(table.names)
    if n and not kleene and len(var) == n * k and bool((lengths == k).all()) \
            and bool((var.reshape(n, k) == np.arange(k)).all()):
        # (each match binds every variable once, in pattern order: its rows are a row of an n × k grid)
        grid_seq = seq.reshape(n, k)
        for v, name in enumerate(table.names):
            columns[f"{name}.seq"] = pa.array(np.ascontiguousarray(grid_seq[:, v]), type=pa.int64())
            if timed:
                columns[f"{name}.ts"] = timestamps(stamp.reshape(n, k)[:, v])
        return pa.table(columns)
    for v, name in enumerate(table.names):
        mine = var == v
        who, seqs, their_ts = owner[mine], seq[mine], stamp[mine] if timed else stamp
        if name in kleene:
            per = np.bincount(who, minlength=n).astype(np.int32)
            offsets = np.zeros(n + 1, dtype=np.int32)
            np.cumsum(per, out=offsets[1:])
            missing = pa.array(per == 0) if (per == 0).any() else None
            columns[f"{name}.seq"] = pa.ListArray.from_arrays(pa.array(offsets), pa.array(seqs, pa.int64()),
                                                              mask=missing)
            if timed:
                columns[f"{name}.ts"] = pa.ListArray.from_arrays(pa.array(offsets), timestamps(their_ts),
                                                                 mask=missing)
        else:
            full = np.zeros(n, dtype=_I64)
            full[who] = seqs
            absent = None
            if len(who) < n:
                present = np.zeros(n, dtype=bool)
                present[who] = True
                absent = ~present
            columns[f"{name}.seq"] = pa.array(full, type=pa.int64(), mask=absent)
            if timed:
                stamps = np.zeros(n, dtype=_I64)
                stamps[who] = their_ts
                columns[f"{name}.ts"] = pa.array(stamps, type=pa.int64(), mask=absent).cast(TS_TYPE)
    return pa.table(columns)


def intervals_arrow(spans: np.ndarray, times: SeqTimes) -> pa.Table:
    """Merged intervals (an ``(k, 2)`` array of seqs) as a table."""
    spans = np.asarray(spans, dtype=_I64).reshape(-1, 2)
    return pa.table({"start_seq": pa.array(spans[:, 0], pa.int64()), "end_seq": pa.array(spans[:, 1], pa.int64()),
                     "start_ts": timestamps(times.many(spans[:, 0])),
                     "end_ts": timestamps(times.many(spans[:, 1]))})


@dataclass(frozen=True)
class Cases:
    """The cases holding a match, in the order of their first matches: each case's value, its number of
    matches, and its first match's first and last seq."""

    value: pa.Array
    matches: np.ndarray
    start: np.ndarray
    end: np.ndarray

    def __len__(self) -> int:
        return len(self.matches)

    def head(self, limit: int | None) -> Cases:
        if limit is None or limit >= len(self):
            return self
        return Cases(self.value.slice(0, limit), self.matches[:limit], self.start[:limit], self.end[:limit])

    def arrow(self, times: SeqTimes) -> pa.Table:
        return pa.table({"case": self.value, "matches": pa.array(self.matches, pa.int64()),
                         "start_seq": pa.array(self.start, pa.int64()), "end_seq": pa.array(self.end, pa.int64()),
                         "start_ts": timestamps(times.many(self.start)), "end_ts": timestamps(times.many(self.end))})


def _codes(values: pa.Array) -> np.ndarray:
    """A code per value: equal codes ⇔ equal values (nulls equal one another)."""
    enc = pc.dictionary_encode(values, null_encoding="encode")
    codes: np.ndarray = enc.indices.to_numpy(zero_copy_only=False).astype(_I64)
    return codes


def plain(values: pa.Array) -> pa.Array:
    """``values`` without dictionary encoding."""
    return values.dictionary_decode() if pa.types.is_dictionary(values.type) else values


def cases_of(starts: np.ndarray, ends: np.ndarray, keys: pa.Array) -> Cases:
    """The matches (``starts``/``ends`` in answer order, ``keys`` each one's case) grouped by case."""
    if not len(starts):
        return Cases(keys.slice(0, 0), np.zeros(0, dtype=_I64), np.zeros(0, dtype=_I64), np.zeros(0, dtype=_I64))
    if pa.types.is_dictionary(keys.type):  # codes given: the first of each and the counts, without sorting
        codes = keys.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(_I64)
        codes[codes < 0] = len(keys.dictionary)  # (no value: a case of its own)
        size = len(keys.dictionary) + 1
        first = np.full(size, len(codes), dtype=_I64)
        np.minimum.at(first, codes, np.arange(len(codes), dtype=_I64))
        counts = np.bincount(codes, minlength=size)
        present = np.flatnonzero(counts)
        by_first = present[np.argsort(first[present], kind="stable")]
        firsts = first[by_first]
        return Cases(plain(keys.take(pa.array(firsts))), counts[by_first].astype(_I64), starts[firsts], ends[firsts])
    if pa.types.is_struct(keys.type):  # several partition attributes: a case is their values together
        stacked = np.stack([_codes(keys.field(i)) for i in range(keys.type.num_fields)], axis=1)
        _, first, inverse = np.unique(stacked, axis=0, return_index=True, return_inverse=True)
    else:
        _, first, inverse = np.unique(_codes(keys), return_index=True, return_inverse=True)
    counts = np.bincount(inverse.ravel())
    by_first = np.argsort(first, kind="stable")
    firsts = first[by_first]
    return Cases(keys.take(pa.array(firsts)), counts[by_first].astype(_I64), starts[firsts], ends[firsts])


# ------------------------------------------------------------------------------------------------ JSON


def iso_texts(column: pa.Array | pa.ChunkedArray) -> list[str | None]:
    """``timestamp[us, UTC]`` values as the ISO 8601 text of docs/contract.md §3 (None for nulls)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    raw = column.cast(pa.int64()).to_numpy(zero_copy_only=False)
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    stamps = np.where(valid, np.nan_to_num(raw, nan=0), 0).astype(_I64).astype("datetime64[us]")
    texts = [t + "+00:00" for t in np.datetime_as_string(stamps, unit="us").tolist()]
    return [t if ok else None for t, ok in zip(texts, valid.tolist(), strict=True)]


def _pylist(column: pa.ChunkedArray) -> list[Any]:
    typ = column.type
    if pa.types.is_timestamp(typ):
        return iso_texts(column)
    if pa.types.is_list(typ) and pa.types.is_timestamp(typ.value_type):
        flat = column.combine_chunks()
        texts = iso_texts(flat.flatten())
        offsets = flat.offsets.to_numpy().tolist()
        valid = flat.is_valid().to_numpy(zero_copy_only=False).tolist()
        return [texts[a:b] if ok else None for a, b, ok in zip(offsets, offsets[1:], valid, strict=False)]
    return python_values(column)


def python_values(values: pa.Array | pa.ChunkedArray) -> list[Any]:
    """The values of an Arrow array as Python's (what ``to_pylist`` gives), made column-wise: a dictionary
    array is decoded with a take, and numbers and strings without nulls go through NumPy — ``to_pylist``
    makes a scalar object per value first, a dictionary's ten times slower than this."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_dictionary(values.type):
        values = values.dictionary.take(values.indices)
    typ = values.type
    if values.null_count == 0 and (pa.types.is_integer(typ) or pa.types.is_floating(typ)
                                   or pa.types.is_boolean(typ) or pa.types.is_string(typ)
                                   or pa.types.is_large_string(typ)):
        return list(values.to_numpy(zero_copy_only=False).tolist())
    return list(values.to_pylist())


def rows_json(rows: pa.Table) -> list[dict[str, Any]]:
    """The rows of a matches, cases or intervals table as the answer's JSON objects (docs/contract.md §3):
    a match's ``<var>.seq`` columns become its ``bindings`` (a list of seqs per bound variable), its
    ``<var>.<field>`` columns of bound events its ``events`` in stream order."""
    names = rows.column_names
    plain = [c for c in names if "." not in c]
    out = [dict(zip(plain, values, strict=True))
           for values in zip(*(_pylist(rows.column(c)) for c in plain), strict=True)] if plain else \
        [{} for _ in range(rows.num_rows)]
    variables = list(dict.fromkeys(c.split(".", 1)[0] for c in names if c.endswith(".seq")))
    if not variables:
        return out
    seqs = {v: rows.column(f"{v}.seq").to_pylist() for v in variables}
    for k, row in enumerate(out):
        bound: dict[str, list[int]] = {}
        for v in variables:
            value = seqs[v][k]
            if value is not None:
                bound[v] = value if isinstance(value, list) else [value]
        row["bindings"] = bound
    event_fields = [c for c in names if "." in c and not c.endswith((".seq", ".ts"))]
    if event_fields:
        _bound_events_json(rows, out, variables, event_fields)
    return out


def _bound_events_json(rows: pa.Table, out: list[dict[str, Any]], variables: list[str],
                       fields: list[str]) -> None:
    """Each match's bound events (``seq``, ``ts``, ``type``, ``attrs``), in stream order."""
    cols = {c: _pylist(rows.column(c)) for c in fields}
    stamps = {v: _pylist(rows.column(f"{v}.ts")) for v in variables}
    seqs = {v: rows.column(f"{v}.seq").to_pylist() for v in variables}
    per_var: dict[str, list[tuple[str, str]]] = {v: [] for v in variables}
    for c in fields:
        v, rest = c.split(".", 1)
        if rest.startswith("attrs."):
            per_var[v].append((rest[len("attrs."):], c))
    for k, row in enumerate(out):
        events: dict[int, dict[str, Any]] = {}
        for v in variables:
            value = seqs[v][k]
            if value is None:
                continue
            many = isinstance(value, list)
            # each field's values of this match: a list per Kleene variable, one value otherwise
            names = [f"{v}.type"] + [c for _, c in per_var[v]]
            fields_here = {c: (cols[c][k] if many else [cols[c][k]]) for c in names}
            times = stamps[v][k] if many else [stamps[v][k]]
            for i, s in enumerate(value if many else [value]):
                attrs = {a: fields_here[c][i] for a, c in per_var[v]}
                events[s] = {"seq": s, "ts": times[i], "type": fields_here[f"{v}.type"][i],
                             "attrs": {a: x for a, x in attrs.items() if x is not None}}
        row["events"] = [events[s] for s in sorted(events)]


def bound_columns_of(rows: pa.Table, variables: Sequence[str], events: pa.Table, *, types: bool = True
                     ) -> pa.Table:
    """``rows`` (a matches table) with ``<var>.type`` (unless not ``types``) and ``<var>.attrs.<attribute>``
    columns taken from ``events`` (seq-sorted, holding every bound event; ``attrs`` a struct column)."""
    event_seq = events.column("seq").to_numpy()
    fields: dict[str, pa.Array] = {}
    if types:
        fields["type"] = events.column("type").combine_chunks()
        if pa.types.is_dictionary(fields["type"].type):
            fields["type"] = fields["type"].cast(pa.string())
    if "attrs" in events.column_names:
        attrs = events.column("attrs").combine_chunks()
        for i in range(attrs.type.num_fields):
            fields[f"attrs.{attrs.type.field(i).name}"] = attrs.field(i)
    for v in variables:
        column = rows.column(f"{v}.seq").combine_chunks()
        listed = pa.types.is_list(column.type)
        values = column.flatten() if listed else column
        seqs = values.fill_null(-1).to_numpy(zero_copy_only=False).astype(_I64)
        at = np.searchsorted(event_seq, seqs)
        index = pa.array(np.minimum(at, max(len(event_seq) - 1, 0)), mask=seqs < 0)
        for name, source in fields.items():
            taken = source.take(index)
            if listed:
                taken = pa.ListArray.from_arrays(column.offsets, taken, mask=column.is_null())
            rows = rows.append_column(f"{v}.{name}", taken)
    return rows
