"""All matches Γ (Cadonna 2013, Def. 3.2) by search: the pattern's structure, the conditions under the
∀-interpretation, and the check of a complete substitution (the first item of :mod:`exact.reference`)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from exact.query.ast import (
    Absent,
    Aggregate,
    AnyOf,
    Condition,
    EventSet,
    Field,
    Literal,
    Operand,
    Query,
    RunEvent,
    Single,
    Var,
    WithinEvents,
    WithinTime,
)
from exact.query.normalize import compare
from exact.query.operands import aggregate, first_position, iterated
from exact.reference.reference_events import Ev

Binding = dict[str, tuple[int, ...]]  # var name → positions (indices into the event list), increasing


# ---------------------------------------------------------------------------------------------- structure


@dataclass(frozen=True)
class _Pattern:
    elements: tuple[tuple[tuple[Var, ...], ...], ...]  # per positive element: its groups (alternatives)
    negated: tuple[tuple[Var, int], ...]  # (var, gap = number of positive elements before it)

    def element_of(self) -> dict[str, int]:
        return {v.name: i for i, groups in enumerate(self.elements) for g in groups for v in g}

    def positive_vars(self) -> list[Var]:
        return [v for groups in self.elements for g in groups for v in g]


def _structure(query: Query) -> _Pattern:
    elements: list[tuple[tuple[Var, ...], ...]] = []
    negated: list[tuple[Var, int]] = []
    for el in query.pattern:
        if isinstance(el, Absent):
            negated.extend((v, len(elements)) for v in el.vars)
        elif isinstance(el, AnyOf):
            elements.append((tuple(el.alternatives),))
        elif isinstance(el, EventSet):
            elements.append(tuple((v,) for v in el.vars))
        else:
            assert isinstance(el, Single)
            elements.append(((el.var,),))
    return _Pattern(tuple(elements), tuple(negated))


def _value(events: Sequence[Ev], x: int, attr: str) -> Any:
    return events[x].get(attr)


def _holds(cond: Condition, binding: Binding, events: Sequence[Ev]) -> bool:
    """I(θγ) with the ∀-interpretation; conditions naming an unbound variable do not apply.

    The condition holds at every combination of positions of the variables it iterates (``v.x``, ``prev``,
    ``v[..i-1]``; :func:`exact.query.operands.iterated`), each from its first checked position on (the second
    event of a run when the condition reads an earlier event of it, ``prev(v.x) φ v.x`` over consecutive
    pairs); ``v[1]``, ``v[last]`` and whole-run aggregates are single values of the binding."""
    if any(v not in binding for v in cond.variables()):
        return True
    loops = sorted(iterated(cond))
    ranges = [range(first_position(cond, v), len(binding[v])) for v in loops]
    for positions in itertools.product(*ranges):
        at = dict(zip(loops, positions, strict=True))
        left = _operand_value(cond.left, binding, events, at)
        right = _operand_value(cond.right, binding, events, at)
        if not compare(left, cond.op, right):
            return False
    return True


def _operand_value(o: Operand, binding: Binding, events: Sequence[Ev], at: Mapping[str, int]) -> Any:
    """The value of ``o`` with each iterated variable at position ``at[var]`` of its run (0-based)."""
    if isinstance(o, Literal):
        return o.value
    xs = binding[o.var]
    if isinstance(o, Field):
        i = at[o.var]
        return _value(events, xs[i - 1] if o.prev else xs[i], o.attr)
    if isinstance(o, RunEvent):
        return _value(events, xs[0] if o.end == "first" else xs[-1], o.attr)
    assert isinstance(o, Aggregate)
    run = xs[:at[o.var]] if o.before else xs  # v[..i-1]: the events before the current one
    if o.func == "count":
        return len(run)
    assert o.attr is not None
    return aggregate(o.func, [_value(events, x, o.attr) for x in run])


def _is_property(cond: Condition, name: str) -> bool:
    """A condition on one event of ``name`` alone (checked on each event; used to prune the search)."""
    return cond.variables() == {name} and all(
        isinstance(o, Literal) or (isinstance(o, Field) and not o.prev) for o in (cond.left, cond.right))


def _window_ok(query: Query, events: Sequence[Ev], xs: Iterable[int]) -> bool:
    xs = list(xs)
    first, last = min(xs), max(xs)
    w = query.within
    if isinstance(w, WithinTime):
        return events[last].ts - events[first].ts <= w.micros
    if isinstance(w, WithinEvents):
        return events[last].seq - events[first].seq < w.count
    return True


def _partition_ok(query: Query, events: Sequence[Ev], xs: Sequence[int]) -> bool:
    for attr in query.partition_by:
        vals = [events[x].get(attr) for x in xs]
        if any(v is None for v in vals):
            return False
        if not all(compare(vals[0], "=", v) for v in vals[1:]):
            return False
    return True


def _types_ok(var: Var, events: Sequence[Ev], xs: Iterable[int]) -> bool:
    return var.type is None or all(events[x].type == var.type for x in xs)


def _order_ok(pattern: _Pattern, binding: Binding, events: Sequence[Ev]) -> bool:
    """(3.2): the last event of element i precedes the first event of element i+1 (bound elements)."""
    elem = pattern.element_of()
    spans: dict[int, tuple[int, int]] = {}
    for name, xs in binding.items():
        i = elem[name]
        lo, hi = spans.get(i, (min(xs), max(xs)))
        spans[i] = (min(lo, min(xs)), max(hi, max(xs)))
    keys = sorted(spans)
    return all(spans[a][1] < spans[b][0] for a, b in zip(keys, keys[1:], strict=False))


def bound_events(pattern: _Pattern, binding: Binding, events: Sequence[Ev]) -> list[int] | None:
    """The events ``binding`` binds, each once, when every variable it names binds a run it may bind (one
    event unless Kleene, increasing, of the variable's types) and no event twice; None otherwise."""
    vars_ = {v.name: v for v in pattern.positive_vars()}
    used: list[int] = []
    for name, xs in binding.items():
        v = vars_[name]
        if not xs or (not v.kleene and len(xs) != 1) or list(xs) != sorted(set(xs)):
            return None
        if not _types_ok(v, events, xs):
            return None
        used.extend(xs)
    return used if len(used) == len(set(used)) else None


def is_match(query: Query, conditions: Sequence[Condition], pattern: _Pattern, binding: Binding,
             events: Sequence[Ev]) -> bool:
    """Def. 3.2 for a complete substitution (every group bound by exactly one alternative)."""
    used = bound_events(pattern, binding, events)
    if used is None:
        return False
    return (_order_ok(pattern, binding, events) and _window_ok(query, events, used)
            and _partition_ok(query, events, used)
            and all(_holds(c, binding, events) for c in conditions))


# ----------------------------------------------------------------------------------------- all matches


def all_matches(query: Query, events: Sequence[Ev]) -> list[Binding]:
    """Γ (Def. 3.2), every OR alternative separately (the dedup of :func:`one_alternative` comes later)."""
    pattern = _structure(query)
    positive = pattern.positive_vars()
    names = [v.name for v in positive]
    elem = pattern.element_of()
    conds = [c for c in query.where if not (c.variables() & {v.name for v, _ in pattern.negated})]
    group_of = _group_ids(pattern)
    ngroups = len(set(group_of.values()))
    literal_props = {v.name: [c for c in conds if _is_property(c, v.name)] for v in positive}
    vars_ = {v.name: v for v in positive}
    out: list[Binding] = []
    n = len(events)

    def fits(name: str, x: int) -> bool:
        return _types_ok(vars_[name], events, [x]) and all(
            _holds(c, {name: (x,)}, events) for c in literal_props[name])

    def search(i: int, binding: dict[str, list[int]], max_elem: int, first: int) -> None:
        if len({group_of[k] for k in binding}) == ngroups:
            b = {k: tuple(v) for k, v in binding.items()}
            if is_match(query, conds, pattern, b, events):
                out.append(b)
        for j in range(i, n):  # the next bound event is j; events i..j-1 are left out
            if not _window_ok(query, events, [first, j]):
                break
            for name in names:
                e = elem[name]
                if e < max_elem:
                    continue
                if name in binding and not vars_[name].kleene:
                    continue
                if name not in binding and any(group_of[k] == group_of[name] for k in binding):
                    continue
                if e > max_elem and not _elements_complete(pattern, binding, e - 1, group_of):
                    continue
                if not fits(name, j):
                    continue
                binding.setdefault(name, []).append(j)
                search(j + 1, binding, e, first)
                binding[name].pop()
                if not binding[name]:
                    del binding[name]

    for start in range(n):  # the first event of a match binds a variable of the first element
        for name in names:
            if elem[name] == 0 and fits(name, start):
                search(start + 1, {name: [start]}, 0, start)
    return _dedupe(out)


def _group_ids(pattern: _Pattern) -> dict[str, int]:
    """Variable name → the id of its position (an OR's alternatives share one)."""
    out: dict[str, int] = {}
    gid = 0
    for groups in pattern.elements:
        for g in groups:
            for v in g:
                out[v.name] = gid
            gid += 1
    return out


def _elements_complete(pattern: _Pattern, binding: Mapping[str, Any], upto: int,
                       group_of: Mapping[str, int]) -> bool:
    bound_groups = {group_of[k] for k in binding}
    for i in range(upto + 1):
        for g in pattern.elements[i]:
            if group_of[g[0].name] not in bound_groups:
                return False
    return True


def _dedupe(bs: list[Binding]) -> list[Binding]:
    seen = set()
    out = []
    for b in bs:
        key = tuple(sorted(b.items()))
        if key not in seen:
            seen.add(key)
            out.append(b)
    return out
