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

Comparison semantics (used everywhere, scalar and vectorised): a condition with a null or missing operand is
false; values of different kinds (number, string, boolean) are never equal, so ``=`` is false, ``!=`` true
and orderings false.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from exact.errors import QuerySemanticError
from exact.query.ast import (
    OPERATORS,
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
    Scalar,
    Single,
    Var,
    WithinEvents,
    WithinTime,
)
from exact.query.operands import condition_problem, operand_problem

OP_FUNCS: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}

#: The operator with its operands swapped (``a < b`` ⇔ ``b > a``).
FLIPPED = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def value_kind(value: Any) -> str | None:
    """The comparison kind of a scalar: ``"b"`` boolean, ``"n"`` number, ``"s"`` string, None for null."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "b"
    if isinstance(value, int | float):
        return "n"
    if isinstance(value, str):
        return "s"
    return "o"


def compare(left: Any, op: str, right: Any) -> bool:
    """Evaluate ``left op right`` with the project's semantics: null → false; mixed kinds never equal."""
    if left is None or right is None:
        return False
    kl, kr = value_kind(left), value_kind(right)
    if kl != kr:
        return op == "!="
    try:
        return bool(OP_FUNCS[op](left, right))
    except TypeError:
        return op == "!="


_NUMBERS = (int, float)


def comparator(op: str) -> Callable[[Any, Any], bool]:
    """``compare`` specialised to one operator (the hot loops call this once per pair of events)."""
    fn = OP_FUNCS[op]
    mixed = op == "!="

    def cmp(left: Any, right: Any) -> bool:
        if left is None or right is None:
            return False
        tl, tr = type(left), type(right)
        if tl is tr or (tl in _NUMBERS and tr in _NUMBERS):
            try:
                return bool(fn(left, right))
            except TypeError:
                return mixed
        return compare(left, op, right)  # mixed kinds, or subclasses: the general rule

    return cmp


COMPARATORS: dict[str, Callable[[Any, Any], bool]] = {op: comparator(op) for op in OP_FUNCS}


@dataclass(frozen=True)
class VarPlan:
    """One variable of the plan.

    ``index`` is the variable's bit in automaton states (positive variables, pattern order) or its position
    among the negated variables; ``element`` the index of its positive element (for a negated variable: the
    gap, i.e. the number of positive elements before it); ``group`` the index of the first alternative of
    its OR element (its own index otherwise).
    """

    name: str
    index: int
    element: int
    group: int
    kleene: bool
    declared_type: str | None
    types: frozenset[str] | None
    properties: tuple[Condition, ...]
    negated: bool = False


@dataclass(frozen=True)
class Plan:
    """A normalised query (see the module docstring)."""

    query: Query
    positives: tuple[VarPlan, ...]
    negatives: tuple[VarPlan, ...]
    #: per positive element: the indices of its OR groups' first variables (a group = one position)
    elements: tuple[tuple[int, ...], ...]
    #: per group (keyed by its first variable's index): all alternative indices; singles map to themselves
    group_members: tuple[tuple[int, ...], ...]
    relations: tuple[Condition, ...]
    prevs: tuple[Condition, ...]
    #: per negated variable (same order as ``negatives``): its conditions involving positive variables
    negative_relations: tuple[tuple[Condition, ...], ...]
    partition_attrs: tuple[str, ...]
    #: a condition over literals only that is false makes the query unsatisfiable
    unsatisfiable: bool
    var_types: tuple[tuple[str, frozenset[str] | None], ...]
    #: conditions of positive variables with operands over whole Kleene runs (``v[1]``, ``v[last]``,
    #: aggregates; :mod:`exact.query.operands` says when each is decided); none of them is in the buckets above
    run_conditions: tuple[Condition, ...] = ()

    @property
    def types(self) -> dict[str, frozenset[str] | None]:
        """Variable name → the event types it can bind (None = any); positive and negated variables."""
        return dict(self.var_types)

    @property
    def window(self) -> WithinTime | WithinEvents | None:
        return self.query.within

    @property
    def nvars(self) -> int:
        return len(self.positives)

    def var(self, name: str) -> VarPlan:
        for v in self.positives + self.negatives:
            if v.name == name:
                return v
        raise KeyError(name)

    def positive_index(self) -> dict[str, int]:
        return {v.name: v.index for v in self.positives}


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
# Equality closure


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[Any, Any] = {}

    def find(self, x: Any) -> Any:
        self.parent.setdefault(x, x)
        root = x
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[x] != root:
            self.parent[x], x = root, self.parent[x]
        return root

    def union(self, a: Any, b: Any) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra


def _lit_key(lit: Literal) -> tuple[str, str | None, Scalar]:
    # bool and int hash alike in Python; keep them apart
    return ("lit", value_kind(lit.value), lit.value)


def _operand_key(o: Field | Literal) -> Any:
    return _lit_key(o) if isinstance(o, Literal) else ("f", o.var, o.attr)


def canonical(cond: Condition) -> Condition:
    """A canonical orientation, so equal conditions written differently compare equal."""
    def key(o: Operand) -> tuple[int | str | bool, ...]:
        if isinstance(o, Literal):
            return (4, value_kind(o.value) or "", repr(o.value))
        if isinstance(o, RunEvent):
            return (2, o.var, o.attr, o.end)
        if isinstance(o, Aggregate):
            return (3, o.var, o.attr or "", o.func, o.before)
        return (0 if o.prev else 1, o.var, o.attr)
    if key(cond.right) < key(cond.left):
        return Condition(cond.right, FLIPPED[cond.op], cond.left)
    return cond


def _closure(query: Query, conds: list[Condition], core: set[str], alternatives: set[str]) -> list[Condition]:
    """Equalities implied by ``conds`` among fields of ``core`` variables (and literals), plus their
    consequences for OR alternatives (end points only)."""
    uf = _UnionFind()
    members: dict[Any, Field | Literal] = {}
    for c in conds:
        left, right = c.left, c.right
        if c.op != "=" or not isinstance(left, Field | Literal) or not isinstance(right, Field | Literal):
            continue  # run operands (v[1], v[last], aggregates) take no part in the closure
        ops = (left, right)
        if any(isinstance(o, Field) and (o.prev or o.var not in core) for o in ops):
            continue
        if isinstance(c.left, Field) and isinstance(c.right, Field) and c.left.var == c.right.var:
            # ``v.x = v.y`` holds per event; it says nothing about a value shared by all of v's events
            continue
        for o in ops:
            members[_operand_key(o)] = o
        uf.union(_operand_key(left), _operand_key(right))
    classes: dict[Any, list[Field | Literal]] = {}
    for k, o in members.items():
        classes.setdefault(uf.find(k), []).append(o)
    out: list[Condition] = []
    for ms in classes.values():
        fields = [m for m in ms if isinstance(m, Field)]
        lits = [m for m in ms if isinstance(m, Literal)]
        for i, f in enumerate(fields):
            for g in fields[i + 1:]:
                out.append(Condition(f, "=", g))
            for lit in lits:
                out.append(Condition(f, "=", lit))
        kleene_fields = [f for f in fields if query.var(f.var).kleene]
        for f in kleene_fields:
            # all events of a Kleene variable equal the class value (∀-semantics), i.e. equal each other
            if len(fields) > 1 or lits:
                out.append(Condition(Field(f.var, f.attr, prev=True), "=", Field(f.var, f.attr)))
    # an alternative equal to a core field equals its whole class
    field_class = {_operand_key(m): uf.find(_operand_key(m)) for m in members.values()}
    for c in conds:
        left, right = c.left, c.right
        if (c.op != "=" or not isinstance(left, Field | Literal) or not isinstance(right, Field | Literal)
                or (isinstance(left, Field) and isinstance(right, Field) and left.var == right.var)):
            continue  # run operands, as above
        for a, b in ((left, right), (right, left)):
            if (isinstance(a, Field) and not a.prev and a.var in alternatives
                    and _operand_key(b) in field_class):
                for m in classes[field_class[_operand_key(b)]]:
                    if m != a:
                        out.append(Condition(a, "=", m))
    return out


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

