"""The answers summarised from every match (docs/semantics.md §7; docs/contract.md §3.7): ``RETURN funnel``,
``RETURN next k``, ``RETURN durations``, ``RETURN count BY v.attr`` and ``RETURN cases BY v.attr``.

Each is made from the matches the verified or exact mode finds — every match, in columns, under the
caller's time budget — by :mod:`exact.engine.summarise`; what it needs beyond them is read from the store
here: a funnel's prefixes are answered as queries of their own, the events after each match are read by
seq (the stream), found in the match's own group of the partition layout (a query partitioned by the layout's
key: only their ts are read), or read with their partition's values (another partition), a grouping field is
read from the bound events."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exact.arrays import distinct_ints
from exact.engine import Budget
from exact.engine.answer_columns import python_values, without_times
from exact.engine.summarise import (
    chained_funnel,
    chains_apply,
    durations,
    empty_rows,
    funnel,
    groups,
    next_rows,
    prefix,
    steps,
)
from exact.errors import Conflict, QuerySemanticError
from exact.events import ATTRS, iso_of_micros
from exact.query.ast import BUILTIN_FIELDS, DEFAULT_TOP, Query, Return, Strategy
from exact.store import EventStore, dataset_dir, store_dir
from exact.store.grouping import layout_of
from sketch.partition.group_answers import runs_of

_I64 = np.int64


#: how a summary asks for every match of a query: ``(query, mode, budget)`` → a columnar answer (docs/contract.md §3.6)
Ask = Callable[[Query, str, Budget | None], dict[str, Any]]
#: how it reads a bound event's field for each match of a matches table: ``(rows, var, attribute)`` → ``rows``
#: with ``<var>.type`` and (an attribute of the events) ``<var>.attrs.<attribute>`` columns
Bind = Callable[[pa.Table, str, str], pa.Table]
#: what an answer in a mode says of the dataset, without a question: ``mode`` → ``dataset``,
#: ``index_version``, ``mode`` and ``stats`` (``events_total``, ``history_from``)
Describe = Callable[[str], dict[str, Any]]


def summarised_answer(home: Path, name: str, query: Query, *, mode: str, ask: Ask, bind: Bind,
                      describe: Describe, budget: Budget | None = None) -> dict[str, Any]:
    """The docs/contract.md §3.7 answer of a summarising ``query`` on dataset ``name`` in ``mode`` (verified or
    exact), its matches found by ``ask`` and their bound fields read by ``bind``; ``describe`` says what an
    answer says of the dataset where no question is asked."""
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
            _keep_history(answer, stats)
        if question.returns is Return.MATCHES and len(question.pattern) == len(query.pattern) and \
                answer.get("explain"):
            head["explain"] = answer["explain"]  # (why the whole pattern has no match, as any answer says)
        rows = answer.get("rows")
        return rows if isinstance(rows, pa.Table) and rows.num_rows else empty_rows(question)

    everything = dataclasses.replace(query, returns=Return.MATCHES, group_by=None, top=None, following=None,
                                     following_within=None)
    body: dict[str, Any] = {"strategy": query.strategy.value}
    chained = _chained(home, name, query) if query.returns is Return.FUNNEL else None
    if chained is not None:  # (steps of one typed event each: one pass over their events)
        body["funnel"], units, complete, scanned = chained
        body.update(units="partitions" if query.partition_by else "windows", unit_count=units)
        # under skip-till-next-match the pass counted the matches (one per start whose chain is whole): the
        # pattern is asked again only for why it has none (explain)
        counted = query.strategy is Strategy.SKIP_TILL_NEXT_MATCH
        whole = describe(mode) if counted and complete else \
            ask(dataclasses.replace(everything, returns=Return.COUNT), mode, budget)
        stats["queries"] += 1
        stats["events_scanned"] += scanned + int((whole.get("stats") or {}).get("events_scanned") or 0)
        head.update({k: whole[k] for k in ("dataset", "index_version", "mode", "explain") if k in whole})
        head["events_total"] = (whole.get("stats") or {}).get("events_total")
        _keep_history(whole, stats)
        rows = pa.table({"n": pa.nulls(complete if counted else int(whole.get("count") or 0), pa.int8())})
    elif query.returns is Return.FUNNEL:
        count = len(steps(query))
        tables = [matches_of(prefix(query, j)) for j in range(1, count + 1)]
        rows = tables[-1]
        body["funnel"], units = funnel(query, tables)
        body.update(units="partitions" if query.partition_by else "windows", unit_count=units)
    else:
        untimed = query.group_by is not None and query.group_by.attr != "ts"  # (seqs and a field: no ts)
        with without_times() if untimed else contextlib.nullcontext():
            rows = matches_of(everything)
        if query.returns is Return.DURATIONS:
            body["durations"] = durations(query, rows) if rows.num_rows else durations(query, empty_rows(query))
        elif query.returns is Return.NEXT:
            body["next"] = _next(home, name, query, rows)
        else:
            assert query.group_by is not None
            values = _group_values(query, rows, bind)
            cases = rows.column("case").combine_chunks() if query.returns is Return.CASES else None
            listed, rest = groups(values, cases, query.top or DEFAULT_TOP)
            body.update(groups=listed, other=rest, group_count=len(listed) + rest["groups"])
            if cases is not None:
                body["case_count"] = len({repr(c) for c in python_values(cases)})
    body.update(exists=bool(rows.num_rows), count=int(rows.num_rows), truncated=False)
    if "explain" in head:
        body["explain"] = head.pop("explain")
    stats["total_ms"] = round((time.perf_counter() - started) * 1000.0, 3)
    if head.get("events_total") is not None:
        stats["events_total"] = head["events_total"]
    head.pop("events_total", None)
    return {"dataset": name, **head, **body, "stats": stats}


def _keep_history(answer: dict[str, Any], stats: dict[str, Any]) -> None:
    """A trimmed dataset's answers say where its history starts (``stats.history_from``): so does a summary."""
    start = (answer.get("stats") or {}).get("history_from")
    if start is not None:
        stats["history_from"] = start


def _what(query: Query) -> str:
    if query.group_by is not None:
        return f"{query.returns.value} BY {query.group_by.var}.{query.group_by.attr}"
    return query.returns.value


# --------------------------------------------------------------------------------------------- funnel


def _chained(home: Path, name: str, query: Query) -> tuple[list[dict[str, Any]], int, int, int] | None:
    """The funnel of a query of typed single steps (:func:`chains_apply`), from one read of its step types'
    events (:func:`chained_funnel`: its steps, units and whole chains), and the events read; None when it
    does not apply (the prefixes are then asked as queries of their own)."""
    if not chains_apply(query):
        return None
    store = EventStore.open(store_dir(dataset_dir(name, home)))
    snap = store.snapshot()
    names = frozenset(v.type for v in query.positive_variables() if v.type is not None)
    keyed = [a for a in query.partition_by if a not in BUILTIN_FIELDS]
    stored = snap.attr_types()
    if any(a in stored and pa.types.is_floating(stored[a]) for a in keyed):
        return None  # (NaN is a value no partition shares: left to the engine)
    # the partition layout numbers each event's partition when it covers them all and is by the same key
    layout = layout_of(store.root, snap.extra) if query.partition_by else None
    grouped = layout is not None and query.partition_by == (layout.key,) and layout.events == snap.events
    if snap.events <= snap.retained_from:  # (nothing left to read)
        empty = np.zeros(0, dtype=_I64)
        return (*chained_funnel(query, empty, empty, [], empty, empty), 0)
    whole = np.array([[snap.retained_from, snap.events - 1]], dtype=_I64)
    if grouped or not query.partition_by:
        # (the step types' events as the engine's frame: numpy columns from the seek files, no Arrow table)
        frame, _ = store.read_frame(whole, ["seq", "ts", "type"], types=names, snapshot=snap)
        codes, distinct = frame.type_codes()
        names_of = frame.type_names()
        units = (layout.group_of[frame.seq].astype(_I64) if layout is not None and grouped else
                 np.zeros(len(frame.seq), _I64))
        return (*chained_funnel(query, frame.seq.astype(_I64), frame.ts, list(names_of) if names_of is not None
                                else [str(t) for t in distinct.to_pylist()], codes.astype(_I64), units),
                len(frame.seq))
    # another partition: its values read with the events
    events, _ = store.read_ranges(whole, columns=["seq", "ts", "type"] + [f"{ATTRS}.{a}" for a in keyed],
                                  types=names, snapshot=snap, type_dictionary=True)
    codes, types = _codes(events.column("type"))
    return (*chained_funnel(query, events.column("seq").to_numpy().astype(_I64),
                            events.column("ts").cast(pa.int64()).to_numpy().astype(_I64), types, codes,
                            _partition_units(events, query.partition_by)), events.num_rows)


def _partition_units(events: pa.Table, attributes: tuple[str, ...]) -> np.ndarray:
    """One integer per event naming its partition, -1 for an event without a value of every attribute (it
    is in none: no match holds it)."""
    parts, missing = [], np.zeros(events.num_rows, dtype=bool)
    for attribute in attributes:
        array = _partition_column(events, attribute)
        if pa.types.is_floating(array.type):  # (-0.0 is 0.0's partition, as the engine compares them)
            array = pc.add(array, pa.scalar(0.0, array.type))
        encoded = pc.dictionary_encode(array)
        missing |= encoded.indices.is_null().to_numpy(zero_copy_only=False)
        parts.append(encoded.indices.fill_null(0).to_numpy(zero_copy_only=False).astype(_I64))
    codes = parts[0] if len(parts) == 1 else \
        np.unique(np.stack(parts, axis=1), axis=0, return_inverse=True)[1].astype(_I64).ravel()
    return np.where(missing, -1, codes)


def _partition_column(events: pa.Table, attribute: str) -> pa.Array:
    if attribute in BUILTIN_FIELDS:
        return events.column(attribute).combine_chunks()
    if f"{ATTRS}.{attribute}" in events.column_names:
        return events.column(f"{ATTRS}.{attribute}").combine_chunks()
    if ATTRS not in events.column_names:  # (a dataset without attributes, or nothing left to read)
        return pa.nulls(events.num_rows)
    column = events.column(ATTRS).combine_chunks()  # (a read of attrs.NAME: the attrs struct with that field)
    if column.type.get_field_index(attribute) < 0:
        return pa.nulls(events.num_rows)
    return column.field(attribute)


# --------------------------------------------------------------------------------------------- next k


def _next(home: Path, name: str, query: Query, rows: pa.Table) -> list[dict[str, Any]]:
    """The ``k`` events after each match's last event, in its partition (or the stream), as
    :func:`exact.engine.summarise.next_rows` counts them."""
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
        wanted = distinct_ints((ends[:, None] + np.arange(1, k + 1, dtype=_I64)[None, :]).ravel())
        wanted = wanted[wanted < snap.events]
        events, _ = store.read_ranges(runs_of(wanted), columns=["seq", "ts", "type"], snapshot=snap)
        seqs = events.column("seq").to_numpy().astype(_I64)
        codes, names = _codes(events.column("type"))
        ts = events.column("ts").cast(pa.int64()).to_numpy().astype(_I64)
        for offset in range(k):  # (the stream's followers are the next seqs)
            target = ends + offset + 1
            at = np.searchsorted(seqs, target)
            found = (at < len(seqs)) & (seqs[np.minimum(at, len(seqs) - 1)] == target) if len(seqs) else \
                np.zeros(n, dtype=bool)
            held[:, offset] = found
            types[found, offset] = codes[at[found]]
            gaps[found, offset] = ts[at[found]] - end_ts[found]
        return next_rows(types, gaps, held & _soon(gaps, query), names)
    layout = layout_of(store.root, snap.extra)
    grouped = layout is not None and query.partition_by == (layout.key,) and layout.events == snap.events
    if grouped:  # the followers found in each match's own group of the layout; only their ts are read
        assert layout is not None
        if int(ends.max()) >= layout.events:
            raise Conflict("the dataset changed while its matches were being followed; retry", where=name)
        after, codes = layout.following(ends, k)
        found = after >= 0
        wanted = distinct_ints(after[found])
        frame, _ = store.read_frame(runs_of(wanted), ["seq", "ts", "type"], snapshot=snap)
        if not np.array_equal(frame.seq, wanted):
            raise Conflict("the dataset changed while its matches were being followed; retry", where=name)
        gaps[found] = frame.ts_at(np.searchsorted(frame.seq, after[found])) - np.broadcast_to(
            end_ts[:, None], after.shape)[found]
        types[found] = codes[found]
        return next_rows(types, gaps, found & _soon(gaps, query), list(layout.types))
    # a partition the layout does not number: every event from the earliest end on, with its partition's
    # values, grouped by them
    first = int(ends.min())
    columns = ["seq", "ts", "type"] + [f"{ATTRS}.{a}" for a in query.partition_by if a not in BUILTIN_FIELDS]
    events = store.read_table(first, None, columns=columns, snapshot=snap, type_dictionary=True)
    seqs = events.column("seq").to_numpy().astype(_I64)
    codes, names = _codes(events.column("type"))
    ts = events.column("ts").cast(pa.int64()).to_numpy().astype(_I64)
    keys = _partition_units(events, query.partition_by)
    order = np.argsort(keys, kind="stable")  # by partition, then stream order (the read is in stream order)
    place = np.empty(len(order), dtype=_I64)
    place[order] = np.arange(len(order), dtype=_I64)
    row = np.searchsorted(seqs, ends)  # (every end is an event of the read, unless the dataset changed)
    if len(ends) and (int(row.max()) >= len(seqs) or not np.array_equal(seqs[row], ends)):
        raise Conflict("the dataset changed while its matches were being followed; retry", where=name)
    mine = keys[row]
    for offset in range(k):
        at = place[row] + offset + 1
        inside = at < len(order)
        nxt = order[np.minimum(at, len(order) - 1)]
        found = inside & (keys[nxt] == mine)
        held[:, offset] = found
        types[found, offset] = codes[nxt[found]]
        gaps[found, offset] = ts[nxt[found]] - end_ts[found]
    return next_rows(types, gaps, held & _soon(gaps, query), names)


def _soon(gaps: np.ndarray, query: Query) -> np.ndarray:
    """Which followers count: all, or (``RETURN next k WITHIN d``) those within ``d`` of the match's end."""
    return np.ones(gaps.shape, dtype=bool) if query.following_within is None else gaps <= query.following_within


def _codes(column: pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """Type codes and the names they stand for (a dictionary-encoded column as it is)."""
    if pa.types.is_dictionary(column.type):
        encoded = column.unify_dictionaries().combine_chunks() if column.num_chunks > 1 else \
            (column.chunk(0) if column.num_chunks else pa.array([], column.type))
    else:
        encoded = pc.dictionary_encode(column.combine_chunks().cast(pa.string()))
    return (encoded.indices.to_numpy(zero_copy_only=False).astype(_I64),
            [str(t) for t in encoded.dictionary.to_pylist()])


# --------------------------------------------------------------------------------------------- BY


def _group_values(query: Query, rows: pa.Table, bind: Bind) -> pa.Array:
    """Each match's value of the grouping field: its bound event's (a Kleene run's first event's)."""
    by = query.group_by
    assert by is not None
    if not rows.num_rows:
        return pa.array([], pa.null())
    if by.attr in ("seq", "ts"):
        column = rows.column(f"{by.var}.{by.attr}")
    else:
        bound = bind(rows, by.var, by.attr)
        wanted = f"{by.var}.type" if by.attr == "type" else f"{by.var}.{ATTRS}.{by.attr}"
        if wanted not in bound.column_names:  # (no bound event has it)
            return pa.nulls(rows.num_rows)
        column = bound.column(wanted)
    array = column.combine_chunks()
    if pa.types.is_list(array.type):
        array = _first_of(array)
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if pa.types.is_timestamp(array.type):  # (times as the answers write them)
        return pa.array([None if v is None else iso_of_micros(v) for v in array.cast(pa.int64()).to_pylist()],
                        pa.string())
    return array


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
