"""The SES automaton (Cadonna 2013, ch. 4, Def. 4.1, construction §4.3) and its transition function.

States are *sets of bound variables* (bitmasks over the positive variables in pattern order).  The
automaton of one event set ``Bi`` has a transition ``(q, v, Θ_δ)`` for every subset ``q`` of ``Bi`` and
every ``v ∈ Bi \\ q``, and a loop ``(q, v, Θ_δ)`` for every Kleene ``v ∈ q``; the set automata are
concatenated by merging accept and start states, so ``B_{i+1}`` transitions become available once all of
``Bi`` is bound and the loops of ``Bi`` survive at the merged state but not after a ``B_{i+1}`` variable
is bound (docs/semantics.md §3.4).  ``Θ_δ`` consists of ``v``'s properties (checked through a precomputed bitmask per
event), every relationship between ``v`` and an already bound variable, read symmetrically (docs/semantics.md A2)
and evaluated with ∀-semantics over Kleene bindings, and — on loops only — ``prev(v.A) φ v.B``.

OR elements are *groups*: one position whose alternatives are separate variables of which at most one is
bound; the group counts as bound once any alternative is, and only the bound alternative may loop.

The structure depends only on the query, so it is built once per :class:`~exact.query.ast.Query` and cached
(:func:`automaton_for`); per-state transition lists are generated on demand.  :mod:`exact.engine.program` lays the
reachable states out as arrays, and the kernels of :mod:`exact.engine.kernels` implement the transition step ``δ``
of Algorithms 2 and 4 on them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from exact.query.ast import Field, Query
from exact.query.normalize import FLIPPED, Plan, literal_signature, normalize

_T = TypeVar("_T")

@dataclass(frozen=True)
class RelationCheck:
    """``new.attr op other.other_attr`` for every event bound to variable ``other``."""

    attr: str
    op: str
    other: int
    other_attr: str


@dataclass(frozen=True)
class PrevCheck:
    """``prev(v.prev_attr) op v.attr``: the previous event of the Kleene binding against the new one."""

    prev_attr: str
    op: str
    attr: str


@dataclass(frozen=True)
class Transition:
    """``δ = (q, v, Θ_δ)`` leading to ``target`` (= q for a Kleene loop)."""

    var: int
    loop: bool
    target: int
    relations: tuple[RelationCheck, ...]
    prevs: tuple[PrevCheck, ...]


class Automaton:
    """The SES automaton of a normalised plan; states are bitmasks of bound positive variables."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.nvars = plan.nvars
        self.start = 0
        self.kleene = tuple(v.kleene for v in plan.positives)
        self.group_mask = [0] * self.nvars
        for members in {m for m in plan.group_members}:
            mask = 0
            for i in members:
                mask |= 1 << i
            for i in members:
                self.group_mask[i] = mask
        self.element_groups: tuple[tuple[int, ...], ...] = tuple(
            tuple(self.group_mask[g] for g in groups) for groups in plan.elements)
        self.element_mask = tuple(_or(gs) for gs in self.element_groups)
        self.first_element_mask = self.element_mask[0]
        self._relations = self._index_relations(plan)
        self._prevs = self._index_prevs(plan)
        self._transitions: dict[int, tuple[Transition, ...]] = {}
        #: ``is_final(q)`` and ``relevant_mask(q)`` are asked once or twice per event a window reads: they
        #: are per-state memos called as dict lookups (no Python frame once a state is known)
        self.is_final: Callable[[int], bool] = _Memo(self._is_final).__getitem__
        self.relevant_mask: Callable[[int], int] = _Memo(self._relevant_mask).__getitem__

    # -- construction -------------------------------------------------------------------------------

    def _index_relations(self, plan: Plan) -> dict[tuple[int, int], tuple[RelationCheck, ...]]:
        idx = plan.positive_index()
        out: dict[tuple[int, int], list[RelationCheck]] = {}
        for c in plan.relations:
            assert isinstance(c.left, Field) and isinstance(c.right, Field)
            a, b = idx[c.left.var], idx[c.right.var]
            out.setdefault((a, b), []).append(RelationCheck(c.left.attr, c.op, b, c.right.attr))
            out.setdefault((b, a), []).append(RelationCheck(c.right.attr, FLIPPED[c.op], a, c.left.attr))
        return {k: tuple(v) for k, v in out.items()}

    def _index_prevs(self, plan: Plan) -> dict[int, tuple[PrevCheck, ...]]:
        idx = plan.positive_index()
        out: dict[int, list[PrevCheck]] = {}
        for c in plan.prevs:
            assert isinstance(c.left, Field) and isinstance(c.right, Field)
            out.setdefault(idx[c.left.var], []).append(PrevCheck(c.left.attr, c.op, c.right.attr))
        return {k: tuple(v) for k, v in out.items()}

    def _current_element(self, q: int) -> int:
        for i, groups in enumerate(self.element_groups):
            for g in groups:
                if not q & g:
                    return i
        return len(self.element_groups)

    def _is_final(self, q: int) -> bool:
        """Is ``q`` accepting (every element bound)?"""
        return self._current_element(q) == len(self.element_groups)

    def transitions(self, q: int) -> tuple[Transition, ...]:
        """The transitions leaving state ``q`` (the SES thesis §3.2 construction with concatenation)."""
        cached = self._transitions.get(q)
        if cached is not None:
            return cached
        cur = self._current_element(q)
        k = len(self.element_groups)
        out: list[Transition] = []
        if cur < k:
            for g in self.element_groups[cur]:
                if q & g:
                    continue
                for v in _bits(g):
                    out.append(self._make(q, v, loop=False))
        loop_elements = []
        if cur < k:
            loop_elements.append(cur)
        if cur >= 1 and (cur == k or not q & self.element_mask[cur]):
            loop_elements.append(cur - 1)
        for e in loop_elements:
            for v in _bits(self.element_mask[e]):
                if q >> v & 1 and self.kleene[v]:
                    out.append(self._make(q, v, loop=True))
        result = tuple(out)
        self._transitions[q] = result
        return result

    def _make(self, q: int, v: int, loop: bool) -> Transition:
        rels: list[RelationCheck] = []
        for w in _bits(q):
            if w != v:
                rels.extend(self._relations.get((v, w), ()))
        return Transition(v, loop, q | (1 << v), tuple(rels), self._prevs.get(v, ()) if loop else ())

    def _relevant_mask(self, q: int) -> int:
        """Variables some transition out of ``q`` binds (0: the state can never change again)."""
        m = 0
        for t in self.transitions(q):
            m |= 1 << t.var
        return m


class _Memo(dict[int, _T]):
    """A function of the state, computed on first use and then looked up at the speed of a dict."""

    __slots__ = ("_make",)

    def __init__(self, make: Callable[[int], _T]) -> None:
        super().__init__()
        self._make = make

    def __missing__(self, q: int) -> _T:
        value = self[q] = self._make(q)
        return value


def automaton_for(query: Query) -> Automaton:
    """The automaton of ``query``, built once per (frozen, hashable) query and literal kinds."""
    return _automaton(query, literal_signature(query))


@functools.lru_cache(maxsize=128)
def _automaton(query: Query, _signature: tuple[str, ...]) -> Automaton:
    return Automaton(normalize(query))


def _bits(mask: int) -> list[int]:
    out = []
    i = 0
    while mask:
        if mask & 1:
            out.append(i)
        mask >>= 1
        i += 1
    return out


def _or(masks: Sequence[int]) -> int:
    m = 0
    for x in masks:
        m |= x
    return m
