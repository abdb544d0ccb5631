"""Conditions in a canonical orientation, and the equality closure of a query's conditions (docs/semantics.md
A8): equalities between fields of positive variables and literals closed transitively, as
:mod:`exact.query.normalize` (its item 2) describes."""

from __future__ import annotations

from typing import Any

from exact.query.ast import Aggregate, Condition, Field, Literal, Operand, Query, RunEvent, Scalar
from exact.query.comparison import FLIPPED, value_kind


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
