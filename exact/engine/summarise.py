"""The answers summarised from every match (docs/semantics.md §7): a funnel's steps, the events that follow
the matches, the time between their steps, and their counts grouped by a bound event's field.

Everything here works on a matches table (:mod:`exact.engine.answer_columns`: ``start_seq``, ``end_seq``,
``start_ts``, ``end_ts``, ``case``, ``<var>.seq`` and ``<var>.ts``, lists for Kleene variables) and plain
arrays, column by column; reading the store is the service's (:mod:`api.service.summaries`).

Times are reported in milliseconds (the store keeps microseconds).  A quantile *q* of *n* values is the
nearest-rank one: the ⌈q·n⌉-th smallest.  A histogram cuts ``[min, max]`` into :data:`BUCKETS` equal
spans (one span when every value is equal); the last span holds the maximum.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exact.arrays import distinct_ints
from exact.engine.answer_columns import python_values
from exact.query.ast import Absent, AnyOf, Element, EventSet, Query, Return, Single, Strategy, WithinEvents, WithinTime

_I64 = np.int64
#: the spans of a durations histogram
BUCKETS = 20
#: the quantiles a distribution reports, by name
QUANTILES = (("p50_ms", 0.5), ("p90_ms", 0.9), ("p99_ms", 0.99))


# ------------------------------------------------------------------------------------------------ steps


def steps(query: Query) -> list[Element]:
    """The query's steps: its positive positions in pattern order (a negation belongs to the step after it)."""
    return [e for e in query.pattern if not isinstance(e, Absent)]


def step_label(element: Element) -> str:
    """How an answer names a step: its variable, ``{a, b}`` for an event set, ``OR(a, b)`` for alternatives."""
    names = ", ".join(v.name for v in element.vars)
    if isinstance(element, EventSet):
        return "{" + names + "}"
    if isinstance(element, AnyOf):
        return f"OR({names})"
    assert isinstance(element, Single)
    return element.var.name


def prefix(query: Query, j: int) -> Query:
    """The funnel's query of its first ``j`` steps: the pattern up to the ``j``-th step (a negation after it
    belongs to the next step; the whole pattern for the last step), the conditions on those variables only,
    the same partition, window, range and strategy, every match listed."""
    positions = [k for k, e in enumerate(query.pattern) if not isinstance(e, Absent)]
    end = len(query.pattern) if j == len(positions) else positions[j - 1] + 1
    pattern = query.pattern[:end]
    names = {v.name for e in pattern for v in e.vars}
    where = tuple(c for c in query.where if c.variables() <= names)
    return replace(query, pattern=pattern, where=where, returns=Return.MATCHES, group_by=None, top=None,
                   following=None, following_within=None)


# ------------------------------------------------------------------------------------------ distributions


def quantile(sorted_values: np.ndarray, q: float) -> float:
    """The nearest-rank ``q``-quantile of values sorted ascending (not empty)."""
    rank = max(1, math.ceil(q * len(sorted_values)))
    return float(sorted_values[rank - 1])


def distribution(micros: np.ndarray, *, histogram: bool = True) -> dict[str, Any]:
    """``count``, ``min_ms``, the quantiles, ``max_ms``, ``mean_ms`` (None without values) and, with
    ``histogram``, ``histogram``: ``[{lo_ms, hi_ms, count}]`` over :data:`BUCKETS` equal spans."""
    values = np.sort(np.asarray(micros, dtype=_I64))
    out: dict[str, Any] = {"count": int(len(values))}
    if not len(values):
        out.update({"min_ms": None, **{name: None for name, _ in QUANTILES}, "max_ms": None, "mean_ms": None})
        if histogram:
            out["histogram"] = []
        return out
    ms = values / 1000.0
    out.update({"min_ms": float(ms[0]), **{name: quantile(ms, q) for name, q in QUANTILES},
                "max_ms": float(ms[-1]), "mean_ms": float(values.mean() / 1000.0)})
    if histogram:
        lo, hi = int(values[0]), int(values[-1])
        spans = BUCKETS if hi > lo else 1
        width = (hi - lo) / spans if hi > lo else 1.0
        at = np.minimum(((values - lo) / width).astype(_I64), spans - 1)
        counts = np.bincount(at, minlength=spans)
        out["histogram"] = [{"lo_ms": (lo + k * width) / 1000.0,
                             "hi_ms": (lo + (k + 1) * width) / 1000.0 if hi > lo else hi / 1000.0,
                             "count": int(c)} for k, c in enumerate(counts.tolist())]
    return out


# ------------------------------------------------------------------------------------------ step times


def _ends_of(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per match: the first and last time (µs) a variable's column holds, and whether it holds any."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_list(array.type):
        offsets = array.offsets.to_numpy(zero_copy_only=False).astype(_I64)
        values = array.values.cast(pa.int64()).to_numpy(zero_copy_only=False)
        length = np.diff(offsets)
        held = length > 0
        if array.null_count:
            held &= array.is_valid().to_numpy(zero_copy_only=False)
        first = np.zeros(len(array), dtype=_I64)
        last = np.zeros(len(array), dtype=_I64)
        first[held] = values[offsets[:-1][held]]
        last[held] = values[offsets[1:][held] - 1]
        return first, last, held
    ts = array.cast(pa.int64())
    held = ts.is_valid().to_numpy(zero_copy_only=False)
    plain = ts.fill_null(0).to_numpy(zero_copy_only=False).astype(_I64)
    return plain, plain, held


def step_times(rows: pa.Table, element: Element) -> tuple[np.ndarray, np.ndarray]:
    """Per match: the time (µs) of the step's first event and of its last (an event set's earliest and
    latest, a Kleene run's first and last, the alternative that bound)."""
    n = rows.num_rows
    first = np.full(n, np.iinfo(_I64).max, dtype=_I64)
    last = np.full(n, np.iinfo(_I64).min, dtype=_I64)
    for var in element.vars:
        lo, hi, held = _ends_of(rows.column(f"{var.name}.ts"))
        first = np.where(held, np.minimum(first, lo), first)
        last = np.where(held, np.maximum(last, hi), last)
    return first, last


def durations(query: Query, rows: pa.Table) -> list[dict[str, Any]]:
    """``RETURN durations``: for each two consecutive steps, the gaps from the last event of the one to the
    first event of the next over every match; then from each match's first event to its last."""
    elements = steps(query)
    times = [step_times(rows, e) for e in elements]
    out = []
    for k in range(len(elements) - 1):
        gap = times[k + 1][0] - times[k][1]
        out.append({"from": step_label(elements[k]), "to": step_label(elements[k + 1]), "from_step": k + 1,
                    "to_step": k + 2, **distribution(gap)})
    whole = _micros(rows.column("end_ts")) - _micros(rows.column("start_ts"))
    out.append({"from": step_label(elements[0]), "to": step_label(elements[-1]), "from_step": 1,
                "to_step": len(elements), "whole": True, **distribution(whole)})
    return out


def _micros(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return np.asarray(column.cast(pa.int64()).to_numpy(zero_copy_only=False), dtype=_I64)


# -------------------------------------------------------------------------------------------- funnel


def funnel(query: Query, prefixes: Sequence[pa.Table]) -> tuple[list[dict[str, Any]], int]:
    """``RETURN funnel`` from the matches of each prefix (:func:`prefix` 1…n, in order): each step's
    ``reached`` — the units (the partitions with ``PARTITION BY``, else the windows a first step's event opens,
    by its seq) whose furthest prefix with a match is that step or later — ``stopped`` (those whose furthest
    is that step), and its conversion time: over the
    units with a match of the prefix, the time from the first event to the last of the unit's earliest-ending
    such match.  Also the number of units."""
    keyed = bool(query.partition_by)
    furthest: dict[Any, int] = {}
    conversions: list[np.ndarray] = []
    for j, rows in enumerate(prefixes, start=1):
        if not rows.num_rows:
            conversions.append(np.zeros(0, dtype=_I64))
            continue
        units = _unit_keys(rows, keyed)
        ends = rows.column("end_seq").to_numpy()
        took = _micros(rows.column("end_ts")) - _micros(rows.column("start_ts"))
        order = np.lexsort((ends,))
        best: dict[Any, int] = {}
        for i in order.tolist():  # (the earliest-ending match of each unit first)
            best.setdefault(units[i], int(took[i]))
        for unit in best:
            furthest[unit] = max(furthest.get(unit, 0), j)
        conversions.append(np.fromiter(best.values(), dtype=_I64, count=len(best)))
    reached = np.bincount(np.fromiter(furthest.values(), dtype=_I64, count=len(furthest)),
                          minlength=len(prefixes) + 1)
    at_least = np.cumsum(reached[::-1])[::-1]
    out = []
    for j, element in enumerate(steps(query), start=1):
        spread = distribution(conversions[j - 1], histogram=False)
        out.append({"step": j, "label": step_label(element), "reached": int(at_least[j]),
                    "stopped": int(reached[j]), "converted": spread["count"], "median_ms": spread["p50_ms"],
                    "p90_ms": spread["p90_ms"]})
    return out, len(furthest)


def _unit_keys(rows: pa.Table, keyed: bool) -> list[Any]:
    if not keyed:
        return list(rows.column("start_seq").to_pylist())
    return [_hashable(v) for v in rows.column("case").to_pylist()]


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, float) and math.isnan(value):
        return ("nan",)
    return value


# -------------------------------------------------------------------------------------------- next


def next_rows(types: np.ndarray, gaps: np.ndarray, held: np.ndarray, names: Sequence[str]) -> list[dict[str, Any]]:
    """``RETURN next k`` rows from per match × offset arrays (``types``: codes into ``names``, ``gaps``: µs
    from the match's last event, ``held``: whether such an event exists): per offset, each type with the
    matches it follows there (most first, then by name) and the time to it; then a row with ``type`` None for
    the matches whose stream (or partition) ended before that offset."""
    out: list[dict[str, Any]] = []
    matches, k = types.shape if types.ndim == 2 else (0, 0)
    for offset in range(k):
        there = held[:, offset]
        codes = types[there, offset]
        waits = gaps[there, offset]
        found = []
        for code in np.unique(codes).tolist():
            mine = np.sort(waits[codes == code])
            found.append({"offset": offset + 1, "type": names[code], "count": int(len(mine)),
                          "median_ms": quantile(mine, 0.5) / 1000.0, "p90_ms": quantile(mine, 0.9) / 1000.0})
        found.sort(key=lambda r: (-r["count"], r["type"]))
        out.extend(found)
        ended = int(matches - there.sum())
        if ended:
            out.append({"offset": offset + 1, "type": None, "count": ended, "median_ms": None, "p90_ms": None})
    return out


# -------------------------------------------------------------------------------------------- groups


def groups(values: pa.Array, units: pa.Array | None, top: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``RETURN count BY`` (``units`` None: each value's matches) and ``RETURN cases BY`` (``units``: each
    match's case; each value's distinct cases): the ``top`` values by count (most first; ties in the order
    the values first occur), and the rest summed as ``{"groups": …, "count": …}``.  ``values`` and
    ``units`` are one entry per match, in answer order."""
    if pa.types.is_struct(values.type) or (units is not None and pa.types.is_struct(units.type)):
        return _groups_of_lists(python_values(values), None if units is None else units.to_pylist(), top)
    encoded = pc.dictionary_encode(values, null_encoding="encode")  # (codes in order of first occurrence)
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(_I64)
    width = len(encoded.dictionary)
    if units is None:
        counts = np.bincount(codes, minlength=width)
    else:
        cases = pc.dictionary_encode(units, null_encoding="encode").indices.to_numpy(zero_copy_only=False)
        pairs = distinct_ints(codes * (int(cases.max()) + 1 if len(cases) else 1) + cases.astype(_I64))
        counts = np.bincount(pairs // (int(cases.max()) + 1 if len(cases) else 1), minlength=width)
    ranked = np.argsort(-counts, kind="stable")
    named = python_values(encoded.dictionary.take(pa.array(ranked[:top], pa.int64())))
    shown = [{"value": v, "count": int(c)} for v, c in zip(named, counts[ranked[:top]].tolist(), strict=True)]
    rest = counts[ranked[top:]]
    return shown, {"groups": int(len(rest)), "count": int(rest.sum())}


def _groups_of_lists(values: list[Any], units: list[Any] | None, top: int
                     ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """:func:`groups` of plain values (a case of several attributes is an object)."""
    counted: dict[Any, list[Any]] = {}
    for i, value in enumerate(values):
        key = _hashable(value)
        slot = counted.get(key)
        if slot is None:
            slot = counted[key] = [value, 0, set()]
        slot[1] += 1
        if units is not None:
            slot[2].add(_hashable(units[i]))
    listed = [{"value": v, "count": c if units is None else len(s)} for v, c, s in counted.values()]
    ranked = sorted(range(len(listed)), key=lambda i: -listed[i]["count"])  # (stable: first occurrence)
    rest = [listed[i] for i in ranked[top:]]
    return [listed[i] for i in ranked[:top]], {"groups": len(rest), "count": sum(r["count"] for r in rest)}


def empty_rows(query: Query) -> pa.Table:
    """A matches table with no rows and the columns of ``query``'s variables (when an answer had no rows)."""
    columns: dict[str, pa.Array] = {"start_seq": pa.array([], pa.int64()), "end_seq": pa.array([], pa.int64()),
                                    "start_ts": pa.array([], pa.int64()), "end_ts": pa.array([], pa.int64())}
    for var in query.positive_variables():
        columns[f"{var.name}.seq"] = pa.array([], pa.int64())
        columns[f"{var.name}.ts"] = pa.array([], pa.int64())
    if query.partition_by:
        columns["case"] = pa.array([], pa.null())
    return pa.table(columns)




# ------------------------------------------------------------------------------------- a funnel in one pass


def chains_apply(query: Query) -> bool:
    """Can a funnel of ``query`` be found by :func:`chained_funnel`?  Steps of one typed event each (no Kleene
    run, set, alternative or ``ANY``), no condition, no ``NOT``, no ``BETWEEN``, and a strategy under which
    a start's earliest-ending match of each prefix takes, step by step, the next event of the step's type
    (in its partition) — ``skip_till_next_match`` binds exactly that, and under ``skip_till_any_match`` it is
    the earliest-ending of the start's matches."""
    return (all(isinstance(e, Single) and not e.var.kleene and e.var.type is not None for e in query.pattern)
            and not query.where and query.between is None
            and query.strategy in (Strategy.SKIP_TILL_NEXT_MATCH, Strategy.SKIP_TILL_ANY_MATCH))


def chained_funnel(query: Query, seq: np.ndarray, ts: np.ndarray, types: Sequence[str | None],
                   codes: np.ndarray, units: np.ndarray) -> tuple[list[dict[str, Any]], int, int]:
    """``RETURN funnel`` (as :func:`funnel` gives it) of a query :func:`chains_apply` to, in one pass over its
    step types' events: ``seq``, ``ts`` (µs), type ``codes`` into ``types``, and each event's partition
    (``units``: an integer per partition, -1 for an event without one; unpartitioned, all 0), in stream
    order.  From every event of the first step, each next step is the first event of its type after the last
    one in the same partition, within the window.  Also the number of starts whose chain takes every step
    (under ``skip_till_next_match``, the pattern's matches)."""
    from exact.engine.funnel_pass import EVENT_WINDOW, NO_WINDOW, TIME_WINDOW, funnel_times

    elements = steps(query)
    n = len(elements)
    keyed = bool(query.partition_by)
    usable = units >= 0
    code_of = {t: i for i, t in enumerate(types)}
    step_codes = np.asarray([code_of.get(e.var.type, -1) for e in elements if isinstance(e, Single)],
                            dtype=_I64)
    window = query.within
    kind, bound = ((TIME_WINDOW, window.micros) if isinstance(window, WithinTime) else
                   (EVENT_WINDOW, window.count) if isinstance(window, WithinEvents) else (NO_WINDOW, 0))
    if not usable.all():
        seq, ts, codes, units = seq[usable], ts[usable], codes[usable], units[usable]
    took, complete = funnel_times(seq, ts, codes, units, step_codes, kind, bound, keyed)
    out = []
    reached_units = []
    for j, element in enumerate(elements, start=1):
        times = took[j - 1]
        times = times[times >= 0]
        reached_units.append(len(times))
        spread = distribution(times, histogram=False)
        out.append({"step": j, "label": step_label(element), "converted": spread["count"],
                    "median_ms": spread["p50_ms"], "p90_ms": spread["p90_ms"]})
    for j, entry in enumerate(out, start=1):
        entry["reached"] = reached_units[j - 1]
        entry["stopped"] = reached_units[j - 1] - (reached_units[j] if j < n else 0)
        order = ("step", "label", "reached", "stopped", "converted", "median_ms", "p90_ms")
        out[j - 1] = {k: entry[k] for k in order}
    return out, reached_units[0] if reached_units else 0, complete
