"""The answers summarised from every match (docs/semantics.md §7; docs/contract.md §3.7): ``RETURN funnel``,
``RETURN next k``, ``RETURN durations``, ``RETURN count BY v.attr`` and ``RETURN cases BY v.attr``.

Each is made from the matches the verified or exact mode finds — every match, in columns, under the
caller's time budget — by :mod:`exact.engine.summaries`; what it needs beyond them is read from the store
here: a funnel's prefixes are answered as queries of their own, the events after each match are read by
seq (the stream) or with their partition's values (a partitioned query), a grouping field is read from the
bound events."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exact.engine import Budget
from exact.engine.columns import python_values
from exact.engine.summaries import durations, empty_rows, funnel, groups, next_rows, prefix, steps
from exact.errors import QuerySemanticError
from exact.events import ATTRS, iso_of_micros
from exact.query.ast import BUILTIN_FIELDS, DEFAULT_TOP, Query, Return
from exact.store import EventStore, dataset_dir, store_dir
from sketch.partition.answer import runs_of

_I64 = np.int64


#: how a summary asks for every match of a query: ``(query, mode, budget)`` → a columnar answer (§3.6)
Ask = Callable[[Query, str, Budget | None], dict[str, Any]]
#: how it reads the bound events' fields of a matches table: ``rows`` → ``rows`` with ``<var>.type`` and
#: ``<var>.attrs.<name>`` columns
Bind = Callable[[pa.Table], pa.Table]


def summarised_answer(home: Path, name: str, query: Query, *, mode: str, ask: Ask, bind: Bind,
                      budget: Budget | None = None) -> dict[str, Any]:
    """The §3.7 answer of a summarising ``query`` on dataset ``name`` in ``mode`` (verified or exact), its
    matches found by ``ask`` and their bound fields read by ``bind``."""
    if mode == "approximate":
        raise QuerySemanticError(f"RETURN {_what(query)} summarises every match: ask it in the verified or "
                                 "exact mode", where="mode")
    started = time.perf_counter()
    stats: dict[str, Any] = {"events_scanned": 0, "queries": 0}
    head: dict[str, Any] = {}

    def matches_of(question: Query) -> pa.Table:
        answer = ask(question, mode, budget)
        stats["queries"] += 1
        stats["events_scanned"] += int((answer.get("stats") or {}).get("events_scanned") or 0)
        if not head:
            head.update({k: answer[k] for k in ("dataset", "index_version", "mode") if k in answer})
            head["events_total"] = (answer.get("stats") or {}).get("events_total")
        rows = answer.get("rows")
        return rows if isinstance(rows, pa.Table) and rows.num_rows else empty_rows(question)

    everything = dataclasses.replace(query, returns=Return.MATCHES, group_by=None, top=None, following=None)
    body: dict[str, Any] = {"strategy": query.strategy.value}
    if query.returns is Return.FUNNEL:
        count = len(steps(query))
        tables = [matches_of(prefix(query, j)) for j in range(1, count + 1)]
        rows = tables[-1]
        body["funnel"], units = funnel(query, tables)
        body.update(units="partitions" if query.partition_by else "windows", unit_count=units)
    else:
        rows = matches_of(everything)
        if query.returns is Return.DURATIONS:
            body["durations"] = durations(query, rows) if rows.num_rows else durations(query, empty_rows(query))
        elif query.returns is Return.NEXT:
            body["next"] = _next(home, name, query, rows)
        else:
            assert query.group_by is not None
            values = _group_values(query, rows, bind)
            cases = rows.column("case").to_pylist() if query.returns is Return.CASES else None
            listed, rest = groups(values, cases, query.top or DEFAULT_TOP)
            body.update(groups=listed, other=rest, group_count=len(listed) + rest["groups"])
            if cases is not None:
                body["case_count"] = len({repr(c) for c in cases})
    body.update(exists=bool(rows.num_rows), count=int(rows.num_rows), truncated=False)
    stats["total_ms"] = round((time.perf_counter() - started) * 1000.0, 3)
    if head.get("events_total") is not None:
        stats["events_total"] = head["events_total"]
    head.pop("events_total", None)
    return {"dataset": name, **head, **body, "stats": stats}


def _what(query: Query) -> str:
    if query.group_by is not None:
        return f"{query.returns.value} BY {query.group_by.var}.{query.group_by.attr}"
    return query.returns.value


# --------------------------------------------------------------------------------------------- next k


def _next(home: Path, name: str, query: Query, rows: pa.Table) -> list[dict[str, Any]]:
    """The ``k`` events after each match's last event, in its partition (or the stream), as
    :func:`exact.engine.summaries.next_rows` counts them."""
    k = query.following or 1
    n = rows.num_rows
    if not n:
        return []
    store = EventStore.open(store_dir(dataset_dir(name, home)))
    snap = store.snapshot()
    ends = rows.column("end_seq").to_numpy().astype(_I64)
    end_ts = rows.column("end_ts").cast(pa.int64()).to_numpy().astype(_I64)
    types = np.zeros((n, k), dtype=_I64)
    gaps = np.zeros((n, k), dtype=_I64)
    held = np.zeros((n, k), dtype=bool)
    if not query.partition_by:  # the stream: the k seqs after the end
        wanted = np.unique((ends[:, None] + np.arange(1, k + 1, dtype=_I64)[None, :]).ravel())
        wanted = wanted[wanted < snap.events]
        events, _ = store.read_ranges(runs_of(wanted), columns=["seq", "ts", "type"], snapshot=snap)
        seqs = events.column("seq").to_numpy().astype(_I64)
        codes, names = _codes(events.column("type"))
        ts = events.column("ts").cast(pa.int64()).to_numpy().astype(_I64)
        for offset in range(k):
            target = ends + offset + 1
            at = np.searchsorted(seqs, target)
            found = (at < len(seqs)) & (seqs[np.minimum(at, len(seqs) - 1)] == target) if len(seqs) else \
                np.zeros(n, dtype=bool)
            held[:, offset] = found
            types[found, offset] = codes[at[found]]
            gaps[found, offset] = ts[at[found]] - end_ts[found]
        return next_rows(types, gaps, held, names)
    # a partition: every event from the earliest end on, with its partition's values, grouped by them
    first = int(ends.min())
    columns = ["seq", "ts", "type"] + [f"{ATTRS}.{a}" for a in query.partition_by if a not in BUILTIN_FIELDS]
    events = store.read_table(first, None, columns=columns, snapshot=snap)
    seqs = events.column("seq").to_numpy().astype(_I64)
    codes, names = _codes(events.column("type"))
    ts = events.column("ts").cast(pa.int64()).to_numpy().astype(_I64)
    keys = _partition_codes(events, query.partition_by)
    order = np.lexsort((seqs, keys))  # by partition, then stream order
    place = np.empty(len(order), dtype=_I64)
    place[order] = np.arange(len(order), dtype=_I64)
    row = np.searchsorted(seqs, ends)  # (every end is an event of the read)
    mine = keys[row]
    for offset in range(k):
        at = place[row] + offset + 1
        inside = at < len(order)
        nxt = order[np.minimum(at, len(order) - 1)]
        found = inside & (keys[nxt] == mine)
        held[:, offset] = found
        types[found, offset] = codes[nxt[found]]
        gaps[found, offset] = ts[nxt[found]] - end_ts[found]
    return next_rows(types, gaps, held, names)


def _codes(column: pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    encoded = pc.dictionary_encode(column.combine_chunks().cast(pa.string()))
    return (encoded.indices.to_numpy(zero_copy_only=False).astype(_I64),
            [str(t) for t in encoded.dictionary.to_pylist()])


def _partition_codes(events: pa.Table, attributes: tuple[str, ...]) -> np.ndarray:
    """One integer per event naming its partition (its values of ``attributes`` together; null is a value)."""
    parts = []
    for attribute in attributes:
        if attribute in BUILTIN_FIELDS:
            array = events.column(attribute).combine_chunks()
        elif f"{ATTRS}.{attribute}" in events.column_names:
            array = events.column(f"{ATTRS}.{attribute}").combine_chunks()
        else:  # (a read of attrs.NAME gives the attrs struct with that field)
            array = events.column(ATTRS).combine_chunks().field(attribute)
        encoded = pc.dictionary_encode(array, null_encoding="encode")
        parts.append(encoded.indices.to_numpy(zero_copy_only=False).astype(_I64))
    if len(parts) == 1:
        return parts[0]
    return np.unique(np.stack(parts, axis=1), axis=0, return_inverse=True)[1].astype(_I64).ravel()


# --------------------------------------------------------------------------------------------- BY


def _group_values(query: Query, rows: pa.Table, bind: Bind) -> list[Any]:
    """Each match's value of the grouping field: its bound event's (a Kleene run's first event's)."""
    by = query.group_by
    assert by is not None
    if not rows.num_rows:
        return []
    if by.attr in ("seq", "ts"):
        column = rows.column(f"{by.var}.{by.attr}")
    else:
        bound = bind(rows)
        wanted = f"{by.var}.type" if by.attr == "type" else f"{by.var}.{ATTRS}.{by.attr}"
        if wanted not in bound.column_names:  # (no bound event has it)
            return [None] * rows.num_rows
        column = bound.column(wanted)
    array = column.combine_chunks()
    if pa.types.is_list(array.type):
        array = _first_of(array)
    if pa.types.is_timestamp(array.type):
        return [None if v is None else iso_of_micros(v) for v in array.cast(pa.int64()).to_pylist()]
    return python_values(array)


def _first_of(lists: pa.Array) -> pa.Array:
    """Each list's first value (null for a null or empty list)."""
    offsets = lists.offsets.to_numpy(zero_copy_only=False).astype(_I64)
    length = np.diff(offsets)
    valid = length > 0
    if lists.null_count:
        valid &= lists.is_valid().to_numpy(zero_copy_only=False)
    at = np.where(valid, offsets[:-1], 0)
    values = lists.values
    if not len(values):
        return pa.nulls(len(lists), values.type)
    taken = values.take(pa.array(np.minimum(at, len(values) - 1)))
    return pc.if_else(pa.array(valid), taken, pa.nulls(len(lists), values.type))
