"""A brute-force reference for the exact engine, written straight from the definitions — slow, for small
streams (a dozen events), and meant to be obviously right.

* **All matches** (Cadonna 2013, Def. 3.2): every substitution binding each positive variable (one
  alternative per OR position) to one event, or a Kleene variable to a non-empty increasing sequence, no
  event used twice, such that (3.1) every condition holds under the ∀-interpretation (a condition naming
  an OR alternative that is not bound does not apply; ``prev`` over consecutive pairs; a condition on one
  variable holds for each of its events), (3.2) every event of element i precedes (by seq) every event of
  element i+1, (3.3) the window holds, ``PARTITION BY`` gives all bound events one equal, non-null value.
  SASE+ run operands (docs/query-language.md, "Kleene runs and aggregates"): a condition with ``v[i-1]`` or
  ``v[..i-1]`` holds at each event of v's run from the second on, ``v[1]``, ``v[last]``, ``count(v)`` and
  whole-run aggregates are values of the complete binding (:mod:`exact.query.operands`).
  The search assigns the stream's events in order to a variable or to none and checks each complete
  substitution against the definition; it prunes only with per-event facts (type, literal properties,
  element order, window) that any match must satisfy.
* **skip-till-any-match** = all matches.  **strict contiguity**: the matches whose events are exactly the
  stream's events between their first and last; **partition contiguity**: the same among the events of
  the match's partition (``PARTITION BY``; without it, the whole stream).
* **skip-till-next-match** (Def. 6.1): no strict prefix ``γ̂`` (the first i events of γ) extends by an
  event ``e`` strictly between its last event and γ's next event, for any variable v, to a match of a
  prefix of the pattern; plus the trailing-Kleene rule of the automaton (docs/semantics.md A3): γ itself
  extends by no event after its last one within the window of its first.  Prefix patterns use the *normalised*
  conditions (the equality closure of :mod:`exact.query.normalize`), on which the strategy depends
  (docs/semantics.md A8),
  each once it is decidable on the prefix: a condition reading the finished run of v (``v[last]``,
  ``count(v)``, ``avg(v.x)``) only once an event of a later element is bound — so it never applies to the
  extension of a trailing Kleene run, which grows maximally and is then judged whole.
* **robust skip-till-next-match** (Def. 6.2): as Def. 6.1, but ``γ̂ ⊎ {v/e}`` must be a prefix of some
  match in Γ; with the same trailing rule.
* An OR position bound to the same events under several alternatives counts once, under the first
  alternative; then SASE+ negation drops matches with a forbidden event (its type, conditions and
  partition) strictly inside a negated gap, or for a trailing NOT after the last positive event and within
  the window of the first.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from exact.engine.matchtable import Match
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
    Strategy,
    Var,
    WithinEvents,
    WithinTime,
)
from exact.query.normalize import compare, normalize
from exact.query.operands import aggregate, decidable, first_position, iterated

Binding = dict[str, tuple[int, ...]]  # var name → positions (indices into the event list), increasing


@dataclass(frozen=True)
class Ev:
    seq: int
    ts: int
    type: str
    attrs: Mapping[str, Any]

    def get(self, attr: str) -> Any:
        if attr == "seq":
            return self.seq
        if attr == "ts":
            return self.ts
        if attr == "type":
            return self.type
        return self.attrs.get(attr)


def stream_table(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """A stream-schema table from rows ``{"seq"?, "ts", "type", attr: value, ...}`` (seq defaults to the
    row index, ts is UTC microseconds); attribute types are inferred per column (int64, double, bool,
    string), a column with no values is left out."""
    names: list[str] = []
    for r in rows:
        for k in r:
            if k not in ("seq", "ts", "type") and k not in names:
                names.append(k)
    seq = [int(r.get("seq", i)) for i, r in enumerate(rows)]
    cols: dict[str, pa.Array] = {
        "seq": pa.array(seq, pa.int64()),
        "ts": pa.array([int(r["ts"]) for r in rows], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        "type": pa.array([str(r["type"]) for r in rows], pa.string()),
    }
    fields = []
    for name in names:
        vals = [r.get(name) for r in rows]
        present = [v for v in vals if v is not None]
        if not present:
            continue
        if all(isinstance(v, bool) for v in present):
            typ = pa.bool_()
        elif all(isinstance(v, int) and not isinstance(v, bool) for v in present):
            typ = pa.int64()
        elif all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
            typ = pa.float64()
            vals = [None if v is None else float(v) for v in vals]
        else:
            typ = pa.string()
            vals = [None if v is None else str(v) for v in vals]
        fields.append((name, pa.array(vals, typ)))
    if fields:
        cols["attrs"] = pa.StructArray.from_arrays([a for _, a in fields], names=[n for n, _ in fields])
    return pa.table(cols)


def read_events(table: pa.Table) -> list[Ev]:
    rows = table.to_pylist()
    out = []
    for r in rows:
        ts = r["ts"]
        micros = ts if isinstance(ts, int) else _micros(ts)
        out.append(Ev(int(r["seq"]), micros, r["type"], dict(r.get("attrs") or {})))
    out.sort(key=lambda e: e.seq)
    return out


def _micros(dt: Any) -> int:
    from datetime import UTC, datetime, timedelta
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    delta: timedelta = dt - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


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


def is_match(query: Query, conditions: Sequence[Condition], pattern: _Pattern, binding: Binding,
             events: Sequence[Ev]) -> bool:
    """Def. 3.2 for a complete substitution (every group bound by exactly one alternative)."""
    vars_ = {v.name: v for v in pattern.positive_vars()}
    used: list[int] = []
    for name, xs in binding.items():
        v = vars_[name]
        if not xs or (not v.kleene and len(xs) != 1) or list(xs) != sorted(set(xs)):
            return False
        if not _types_ok(v, events, xs):
            return False
        used.extend(xs)
    if len(used) != len(set(used)):
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


# ------------------------------------------------------------------------------------------- strategies


def _ordered(binding: Binding) -> list[tuple[int, str]]:
    return sorted((x, name) for name, xs in binding.items() for x in xs)


def _prefix(binding: Binding, i: int) -> Binding:
    """The prefix binding the first i events of the match (Th. §6.2: a Kleene binding may be cut)."""
    out: dict[str, list[int]] = {}
    for x, name in _ordered(binding)[:i]:
        out.setdefault(name, []).append(x)
    return {k: tuple(v) for k, v in out.items()}


def _extend(binding: Binding, name: str, x: int) -> Binding:
    b = dict(binding)
    b[name] = tuple(b.get(name, ())) + (x,)
    return b


def _prefix_vars_ok(pattern: _Pattern, names: Iterable[str]) -> bool:
    """Is ``names`` the variable set of a pattern prefix (Th. §6.2): elements 1..m-1 complete (one
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
    vars_ = {v.name: v for v in pattern.positive_vars()}
    used: list[int] = []
    for name, xs in binding.items():
        v = vars_[name]
        if not xs or (not v.kleene and len(xs) != 1) or list(xs) != sorted(set(xs)):
            return False
        if not _types_ok(v, events, xs):
            return False
        used.extend(xs)
    if len(used) != len(set(used)):
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
    """The matches of ``query`` in ``table`` by the definitions (see the module docstring)."""
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


__all__ = ["reference_matches", "stream_table", "all_matches", "read_events"]
