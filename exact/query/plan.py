"""The evaluation plan of a query: what :func:`exact.query.normalize.normalize` makes of it, and what the
automaton, the strategies, the two-phase driver and the index read instead of the raw query."""

from __future__ import annotations

from dataclasses import dataclass

from exact.query.ast import Condition, Query, WithinEvents, WithinTime


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
    """A normalised query (see :mod:`exact.query.normalize`)."""

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
