"""The strategies' choice among all matches: skip-till-next-match (Def. 6.1), robust skip-till-next-match
(Def. 6.2), both with the trailing-Kleene rule (docs/semantics.md A3), and strict and partition contiguity
(see :mod:`exact.reference`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from exact.query.ast import Condition, Query
from exact.query.normalize import normalize
from exact.query.operands import decidable
from exact.reference.matches import (
    Binding,
    _holds,
    _order_ok,
    _partition_ok,
    _Pattern,
    _structure,
    _window_ok,
    bound_events,
)
from exact.reference.reference_events import Ev


def _ordered(binding: Binding) -> list[tuple[int, str]]:
    return sorted((x, name) for name, xs in binding.items() for x in xs)


def _prefix(binding: Binding, i: int) -> Binding:
    """The prefix binding the first i events of the match (the SES thesis §6.2: a Kleene binding may be cut)."""
    out: dict[str, list[int]] = {}
    for x, name in _ordered(binding)[:i]:
        out.setdefault(name, []).append(x)
    return {k: tuple(v) for k, v in out.items()}


def _extend(binding: Binding, name: str, x: int) -> Binding:
    b = dict(binding)
    b[name] = tuple(b.get(name, ())) + (x,)
    return b


def _prefix_vars_ok(pattern: _Pattern, names: Iterable[str]) -> bool:
    """Is ``names`` the variable set of a pattern prefix (the SES thesis §6.2): elements 1..m-1 complete (one
    alternative per group), element m non-empty, none later."""
    names = set(names)
    bound_elems = []
    for i, groups in enumerate(pattern.elements):
        counts = [sum(1 for v in g if v.name in names) for g in groups]
        if any(c > 1 for c in counts):
            return False
        bound_elems.append((i, all(c == 1 for c in counts), any(c == 1 for c in counts)))
    seen_partial = False
    for _i, complete, some in bound_elems:
        if seen_partial and some:
            return False
        if not complete:
            seen_partial = True
            if not some:
                # nothing of this element: nothing later may be bound either
                continue
    # the bound elements form a prefix: every element before the last bound one is complete
    last = max((i for i, _, some in bound_elems if some), default=-1)
    return last >= 0 and all(c for i, c, _ in bound_elems if i < last)


def _prefix_match(query: Query, conditions: Sequence[Condition], pattern: _Pattern, binding: Binding,
                  events: Sequence[Ev]) -> bool:
    """Is ``binding`` a match of the pattern prefix over its own variables (Θ̂: the conditions among
    them)?"""
    if not _prefix_vars_ok(pattern, binding):
        return False
    names = set(binding)
    elem = pattern.element_of()
    last = max(elem[n] for n in names)
    finished = {n for n in names if elem[n] < last}  # runs of earlier elements are over
    sub = [c for c in conditions if decidable(c, names, finished)]
    used = bound_events(pattern, binding, events)
    if used is None:
        return False
    return (_order_ok(pattern, binding, events) and _window_ok(query, events, used)
            and all(_holds(c, binding, events) for c in sub))


def _normalised_conditions(query: Query) -> list[Condition]:
    plan = normalize(query)
    conds: list[Condition] = []
    for v in plan.positives:
        conds.extend(v.properties)
    conds.extend(plan.relations)
    conds.extend(plan.prevs)
    conds.extend(plan.run_conditions)
    return conds


def _after_in_window(query: Query, events: Sequence[Ev], first: int, last: int) -> range:
    """Positions after ``last`` within the window of ``first``."""
    j = last + 1
    while j < len(events) and _window_ok(query, events, [first, j]):
        j += 1
    return range(last + 1, j)


def next_matches(query: Query, events: Sequence[Ev], gamma: list[Binding]) -> list[Binding]:
    """Def. 6.1 with the trailing-Kleene rule (docs/semantics.md A3) over the normalised conditions."""
    pattern = _structure(query)
    conds = _normalised_conditions(query)
    names = [v.name for v in pattern.positive_vars()]

    def extends(b: Binding, lo: int, hi: Iterable[int]) -> bool:
        return any(_prefix_match(query, conds, pattern, _extend(b, v, x), events)
                   for x in hi for v in names if x not in _flat(b))

    out = []
    for g in gamma:
        order = _ordered(g)
        ok = True
        for i in range(1, len(order)):
            if extends(_prefix(g, i), order[i - 1][0], range(order[i - 1][0] + 1, order[i][0])):
                ok = False
                break
        if ok and extends(g, order[-1][0], _after_in_window(query, events, order[0][0], order[-1][0])):
            ok = False
        if ok:
            out.append(g)
    return out


def robust_next_matches(query: Query, events: Sequence[Ev], gamma: list[Binding]) -> list[Binding]:
    """Def. 6.2 with the trailing-Kleene rule: only an event of some other complete match disqualifies."""
    prefixes = set()
    for g in gamma:
        for i in range(1, len(_ordered(g)) + 1):
            prefixes.add(_key(_prefix(g, i)))
    names = [v.name for v in _structure(query).positive_vars()]

    def extends(b: Binding, hi: Iterable[int]) -> bool:
        return any(_key(_extend(b, v, x)) in prefixes for x in hi for v in names if x not in _flat(b))

    out = []
    for g in gamma:
        order = _ordered(g)
        ok = True
        for i in range(1, len(order)):
            if extends(_prefix(g, i), range(order[i - 1][0] + 1, order[i][0])):
                ok = False
                break
        if ok and extends(g, _after_in_window(query, events, order[0][0], order[-1][0])):
            ok = False
        if ok:
            out.append(g)
    return out


def _key(b: Binding) -> frozenset[tuple[str, int]]:
    return frozenset((name, x) for name, xs in b.items() for x in xs)


def _flat(b: Binding) -> set[int]:
    return {x for xs in b.values() for x in xs}


def contiguous_matches(query: Query, events: Sequence[Ev], gamma: list[Binding],
                       by_partition: bool) -> list[Binding]:
    """Strict contiguity, or partition contiguity (among the events of the match's partition)."""
    out = []
    for g in gamma:
        xs = sorted(_flat(g))
        between: Sequence[int] = range(xs[0], xs[-1] + 1)
        if by_partition and query.partition_by:
            between = [y for y in between if _partition_ok(query, events, [xs[0], y])]
        if set(between) == set(xs):
            out.append(g)
    return out

