"""The reference's answer: the strategy's matches, one per OR alternative, less those SASE+ negation drops,
as the engine's :class:`~exact.engine.matchtable.Match` objects (see :mod:`exact.reference`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from exact.engine.matchtable import Match
from exact.query.ast import Query, Strategy
from exact.query.normalize import normalize
from exact.reference.matches import Binding, _holds, _partition_ok, _structure, _types_ok, all_matches
from exact.reference.reference_events import Ev, read_events
from exact.reference.reference_strategies import (
    _after_in_window,
    _flat,
    contiguous_matches,
    next_matches,
    robust_next_matches,
)


def one_alternative(query: Query, bs: list[Binding]) -> list[Binding]:
    """An OR position bound to the same events by several alternatives: keep the first alternative."""
    pattern = _structure(query)
    ors = [g for groups in pattern.elements for g in groups if len(g) > 1]
    if not ors:
        return bs
    best: dict[Any, tuple[tuple[int, ...], Binding]] = {}
    for b in bs:
        rank = []
        key_parts = []
        for g in ors:
            i, v = next((i, v) for i, v in enumerate(g) if v.name in b)
            rank.append(i)
            key_parts.append(b[v.name])
        or_names = {v.name for g in ors for v in g}
        key = (tuple(sorted((k, xs) for k, xs in b.items() if k not in or_names)), tuple(key_parts))
        if key not in best or tuple(rank) < best[key][0]:
            best[key] = (tuple(rank), b)
    return [b for _, b in best.values()]


def negation_filter(query: Query, events: Sequence[Ev], bs: list[Binding]) -> list[Binding]:
    """SASE+ negation: no event satisfying a negated variable (type, conditions, partition) lies strictly
    between the neighbouring positive elements (trailing: after the last one, within the window)."""
    pattern = _structure(query)
    if not pattern.negated:
        return bs
    elem = pattern.element_of()
    out = []
    for b in bs:
        first = min(_flat(b))
        bad = False
        for var, gap in pattern.negated:
            lo = max(x for name, xs in b.items() if elem[name] == gap - 1 for x in xs)
            if gap < len(pattern.elements):
                hi = min(x for name, xs in b.items() if elem[name] == gap for x in xs)
                span = range(lo + 1, hi)
            else:
                span = _after_in_window(query, events, first, lo)
            conds = [c for c in query.where if var.name in c.variables()]
            for y in span:
                if not _types_ok(var, events, [y]):
                    continue
                if query.partition_by and not _partition_ok(query, events, [min(_flat(b)), y]):
                    continue
                trial = dict(b)
                trial[var.name] = (y,)
                if all(_holds(c, trial, events) for c in conds):
                    bad = True
                    break
            if bad:
                break
        if not bad:
            out.append(b)
    return out


def reference_matches(query: Query, table: pa.Table) -> list[Match]:
    """The matches of ``query`` in ``table`` by the definitions (see :mod:`exact.reference`)."""
    events = read_events(table)
    if query.between is not None:
        events = [e for e in events if query.between.start <= e.ts <= query.between.end]
    normalize(query)  # same validation as the engine
    gamma = all_matches(query, events)
    s = query.strategy
    if s == Strategy.SKIP_TILL_ANY_MATCH:
        chosen = gamma
    elif s == Strategy.SKIP_TILL_NEXT_MATCH:
        chosen = next_matches(query, events, gamma)
    elif s == Strategy.ROBUST_SKIP_TILL_NEXT_MATCH:
        chosen = robust_next_matches(query, events, gamma)
    else:
        chosen = contiguous_matches(query, events, gamma, s == Strategy.PARTITION_CONTIGUITY)
    chosen = negation_filter(query, events, one_alternative(query, chosen))
    pattern = _structure(query)
    order = [v.name for v in pattern.positive_vars()]
    result = set()
    for b in chosen:
        bindings = tuple((name, tuple(events[x].seq for x in b[name])) for name in order if name in b)
        seqs = [s for _, ss in bindings for s in ss]
        result.add(Match(min(seqs), max(seqs), bindings))
    return sorted(result)

