"""Normalisation of a query into an evaluation :class:`Plan` (Cadonna 2013, Def. 3.1 and docs/semantics.md A7/A8).

The plan is what the automaton, the strategies, the two-phase driver and the index read; the raw
:class:`~exact.query.ast.Query` is only read here.  Normalising does four things:

1. *Classify conditions* into per-variable **properties** (``Θ^p_v``: one variable, no ``prev``; these are
   compiled once into vectorised masks), **relationships** (two distinct positive variables), **prev
   conditions** (``prev(v.A) φ v.B`` on a Kleene variable, always stored with ``prev`` on the left), **run
   conditions** (those reading a Kleene run as a whole: ``v[1]``, ``v[last]``, aggregates; see
   :mod:`exact.query.operands`) and the conditions of **negated** variables.
2. *Close equalities* (docs/semantics.md A8): equality conditions between fields of positive variables are closed
   transitively (union-find over ``var.attr`` operands and literals), so that e.g. ``c.PID = p.PID`` and
   ``p.PID = d.PID`` also give ``c.PID = d.PID``, and ``a.x = 5, a.x = b.x`` gives ``b.x = 5``.  The
   skip-till-next-match automaton checks only conditions between bound variables as written, so without
   the closure its results change under partitioning (docs/semantics.md A8, T29).
   Closing only adds conditions implied by
   the original ones, so the set of all matches (Def. 3.2) is unchanged.  OR alternatives take part only as
   end points (a condition on an alternative binds only when that alternative is chosen), negated variables
   not at all (``no b with a.x = b.x = c.x`` does not imply ``a.x = c.x``).
3. *Expand* ``PARTITION BY x``: every positive variable's ``x`` joins one equality class, a Kleene variable
   gets ``prev(v.x) = v.x`` (all its events share ``x``), every variable requires ``x`` to be present, and
   each negated variable is constrained to the partition of the match.
4. *Derive* for each variable the event types it can bind (``plan.types``; ``None`` = any type) from its
   declared type and its ``v.type`` conditions, and the *partitioning attributes* X of the two-phase
   strategy (Def. 5.3 with docs/semantics.md A7: attributes on which all positive variables are in one class).

Comparison follows the project's rule (:mod:`exact.query.comparison`); the plan's classes are in
:mod:`exact.query.plan`, the canonical orientation and the equality closure in :mod:`exact.query.closure`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from exact.errors import QuerySemanticError
from exact.query.ast import (
    OPERATORS,
    Absent,
    AnyOf,
    Condition,
    EventSet,
    Field,
    Literal,
    Query,
    Single,
    Var,
    WithinEvents,
    WithinTime,
)
from exact.query.closure import _closure, canonical
from exact.query.comparison import COMPARATORS, FLIPPED, OP_FUNCS, comparator, compare, value_kind
from exact.query.operands import condition_problem, operand_problem
from exact.query.plan import Plan, VarPlan

#: The names the rest of the project imports from here (the comparison and the plan live in their own modules).
__all__ = ["COMPARATORS", "FLIPPED", "OP_FUNCS", "Plan", "VarPlan", "canonical", "comparator", "compare",
           "literal_signature", "normalize", "value_kind"]


# --------------------------------------------------------------------------------------------------------
# Validation


def _validate(query: Query) -> None:
    if not query.pattern:
        raise QuerySemanticError("the pattern is empty")
    names: set[str] = set()
    for var in query.variables():
        if var.name in names:
            raise QuerySemanticError(f"variable {var.name!r} is declared twice")
        names.add(var.name)
    if isinstance(query.pattern[0], Absent):
        raise QuerySemanticError("a pattern cannot start with NOT(...)")
    if not query.positive_elements():
        raise QuerySemanticError("a pattern needs at least one positive element")
    if isinstance(query.pattern[-1], Absent) and query.within is None:
        raise QuerySemanticError("NOT(...) at the end of a pattern needs WITHIN")
    negated = {v.name for e in query.pattern if isinstance(e, Absent) for v in e.vars}
    kleene = {v.name for v in query.variables() if v.kleene}
    for v in query.variables():
        if v.name in negated and v.kleene:
            raise QuerySemanticError(f"negated variable {v.name!r} cannot be a Kleene variable")
    if isinstance(query.within, WithinTime) and query.within.micros < 0:
        raise QuerySemanticError("WITHIN must not be negative")
    if isinstance(query.within, WithinEvents) and query.within.count < 1:
        raise QuerySemanticError("WITHIN n EVENTS needs n >= 1")
    for cond in query.where:
        if cond.op not in OPERATORS:
            raise QuerySemanticError(f"unknown operator {cond.op!r}")
        for operand in (cond.left, cond.right):
            if isinstance(operand, Literal):
                continue
            if operand.var not in names:
                raise QuerySemanticError(f"condition refers to unknown variable {operand.var!r}")
            problem = operand_problem(operand, kleene, negated)
            if problem:
                raise QuerySemanticError(problem)
        found = condition_problem(cond)
        if found:
            raise QuerySemanticError(found[1])
        vs = cond.variables()
        if len(vs & negated) > 1:
            raise QuerySemanticError("a condition cannot relate two negated variables")


# --------------------------------------------------------------------------------------------------------
# Types


def _derive_types(var: Var, props: Iterable[Condition]) -> frozenset[str] | None:
    allowed: frozenset[str] | None = None if var.type is None else frozenset({var.type})
    excluded: set[str] = set()
    for c in props:
        left, right, op = c.left, c.right, c.op
        if isinstance(left, Literal):
            left, right, op = right, left, FLIPPED[op]
        if not (isinstance(left, Field) and left.attr == "type" and isinstance(right, Literal)):
            continue
        if op == "=":
            value = right.value
            only = frozenset({value}) if isinstance(value, str) else frozenset()
            allowed = only if allowed is None else allowed & only
        elif op == "!=" and isinstance(right.value, str):
            excluded.add(right.value)
    if allowed is not None:
        allowed = allowed - excluded
    return allowed


# --------------------------------------------------------------------------------------------------------


def literal_signature(query: Query) -> tuple[str, ...]:
    """The kinds of the query's literals.  Queries compare equal when their literals do, and Python has
    ``True == 1 == 1.0``; caches key on the query *and* this signature so ``x = true`` and ``x = 1`` (which
    differ: a boolean is never equal to a number) never share an entry."""
    return tuple(type(o.value).__name__ for c in query.where for o in (c.left, c.right)
                 if isinstance(o, Literal))


def normalize(query: Query) -> Plan:
    """Normalise ``query`` (see the module docstring); raises QuerySemanticError for invalid queries."""
    return _normalize(query, literal_signature(query))


@functools.lru_cache(maxsize=256)
def _normalize(query: Query, _signature: tuple[str, ...]) -> Plan:
    _validate(query)
    positives_raw: list[tuple[Var, int, bool]] = []  # var, element index, is-alternative
    negatives_raw: list[tuple[Var, int]] = []
    elements_groups: list[list[int]] = []
    group_of: dict[str, int] = {}
    group_members: list[list[int]] = []
    pos_elem = 0
    for element in query.pattern:
        if isinstance(element, Absent):
            for v in element.vars:
                negatives_raw.append((v, pos_elem))
            continue
        groups: list[int] = []
        if isinstance(element, AnyOf):
            first = len(positives_raw)
            for v in element.alternatives:
                group_of[v.name] = first
                positives_raw.append((v, pos_elem, len(element.alternatives) > 1))
            groups.append(first)
        else:
            vars_ = element.vars if isinstance(element, EventSet) else (element.var,)
            assert isinstance(element, EventSet | Single)
            for v in vars_:
                group_of[v.name] = len(positives_raw)
                groups.append(len(positives_raw))
                positives_raw.append((v, pos_elem, False))
        elements_groups.append(groups)
        pos_elem += 1
    for _ in range(len(positives_raw)):
        group_members.append([])
    for i, (v, _, _) in enumerate(positives_raw):
        group_members[group_of[v.name]].append(i)
    for i in range(len(group_members)):
        if not group_members[i]:
            group_members[i] = [i]

    pos_names = {v.name for v, _, _ in positives_raw}
    alt_names = {v.name for v, _, alt in positives_raw if alt}
    core = pos_names - alt_names
    neg_names = {v.name for v, _ in negatives_raw}

    conds: list[Condition] = list(query.where)
    # PARTITION BY x: x present on every variable and equal between all positive variables (pairs in
    # different positions; two alternatives of one OR are never bound together); a negated variable is
    # tied to every positive one (those of unchosen alternatives do not apply)
    pos_vars = [v for v, _, _ in positives_raw]
    for attr in query.partition_by:
        for i, v in enumerate(pos_vars):
            conds.append(Condition(Field(v.name, attr), "=", Field(v.name, attr)))
            if v.kleene:
                conds.append(Condition(Field(v.name, attr, prev=True), "=", Field(v.name, attr)))
            for w in pos_vars[i + 1:]:
                if group_of[v.name] != group_of[w.name]:
                    conds.append(Condition(Field(v.name, attr), "=", Field(w.name, attr)))
        for v, _ in negatives_raw:
            conds.append(Condition(Field(v.name, attr), "=", Field(v.name, attr)))
            for w in pos_vars:
                conds.append(Condition(Field(v.name, attr), "=", Field(w.name, attr)))
    conds.extend(_closure(query, conds, core, alt_names))

    seen: set[tuple[Condition, str]] = set()
    unique: list[Condition] = []
    for c in conds:
        cc = canonical(c)
        key = (cc, repr(cc))  # repr keeps True and 1 apart
        if key not in seen:
            seen.add(key)
            unique.append(cc)

    props: dict[str, list[Condition]] = {v.name: [] for v in query.variables()}
    relations: list[Condition] = []
    prevs: list[Condition] = []
    run_conditions: list[Condition] = []
    neg_rel: dict[str, list[Condition]] = {n: [] for n in neg_names}
    unsatisfiable = False
    for c in unique:
        vs = c.variables()
        has_prev = any(isinstance(o, Field) and o.prev for o in (c.left, c.right))
        if c.has_run_operand() and vs & neg_names:
            (n,) = tuple(vs & neg_names)
            neg_rel[n].append(c)  # decided with the rest of the negated variable's conditions: on a match
        elif c.has_run_operand():
            run_conditions.append(c)
        elif not vs:
            unsatisfiable |= not compare(c.left.value, c.op, c.right.value)  # type: ignore[union-attr]
        elif has_prev:
            if not isinstance(c.left, Field) or not c.left.prev:
                c = Condition(c.right, FLIPPED[c.op], c.left)
            prevs.append(c)
        elif len(vs) == 1:
            props[next(iter(vs))].append(c)
        elif vs & neg_names:
            (n,) = tuple(vs & neg_names)
            neg_rel[n].append(c)
        else:
            relations.append(c)

    positives = tuple(
        VarPlan(v.name, i, elem, group_of[v.name], v.kleene, v.type,
                _derive_types(v, props[v.name]), tuple(props[v.name]))
        for i, (v, elem, _) in enumerate(positives_raw))
    negatives = tuple(
        VarPlan(v.name, i, gap, -1, False, v.type, _derive_types(v, props[v.name]),
                tuple(props[v.name]), negated=True)
        for i, (v, gap) in enumerate(negatives_raw))

    return Plan(
        query=query,
        positives=positives,
        negatives=negatives,
        elements=tuple(tuple(g) for g in elements_groups),
        group_members=tuple(tuple(m) for m in group_members),
        relations=tuple(relations),
        prevs=tuple(prevs),
        negative_relations=tuple(tuple(neg_rel[v.name]) for v in negatives),
        partition_attrs=_partition_attributes(positives, relations, alt_names),
        unsatisfiable=unsatisfiable,
        var_types=tuple((v.name, v.types) for v in positives + negatives),
        run_conditions=tuple(run_conditions),
    )


def _partition_attributes(positives: tuple[VarPlan, ...], relations: list[Condition],
                          alternatives: set[str]) -> tuple[str, ...]:
    """Def. 5.3 / docs/semantics.md A7: attributes A with ``vi.A = vj.A`` in the closure for all positive variables.

    The closure has already been added to ``relations``, so A qualifies iff every pair of distinct positive
    variables has a same-attribute equality.  One variable alone gives X = ∅.  OR alternatives must each be
    related (a condition on an alternative binds only when it is chosen, which suffices for the match).
    """
    names = [v.name for v in positives]
    if len({v.group for v in positives}) < 2:
        return ()  # one position: nothing ties two bound events together
    pairs: dict[str, set[frozenset[str]]] = {}
    for c in relations:
        if (c.op == "=" and isinstance(c.left, Field) and isinstance(c.right, Field)
                and c.left.attr == c.right.attr and c.left.var != c.right.var):
            pairs.setdefault(c.left.attr, set()).add(frozenset((c.left.var, c.right.var)))
    group_of = {v.name: v.group for v in positives}
    out = []
    for attr, ps in sorted(pairs.items()):
        ok = True
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                if group_of[a] == group_of[b]:
                    continue  # two alternatives of one OR are never bound together
                if frozenset((a, b)) not in ps:
                    ok = False
        if ok:
            out.append(attr)
    return tuple(out)

