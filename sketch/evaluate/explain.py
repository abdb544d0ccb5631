"""Why nothing can match: the explanations an approximate answer gives (``explain``).

A pattern's positions (:class:`Position`: a variable, or an OR's alternatives) are labelled lazily, only
when an explanation names them: a position found nowhere (:func:`absent_text`), or the first element no
chain of units gets past, and where (:func:`explain_chain`).
"""

from __future__ import annotations

import numpy as np

from exact.engine import iso_ts
from exact.query.ast import Between, Query, WithinEvents, WithinTime
from exact.query.normalize import Plan
from sketch.evaluate.units import Units, union


class Position:
    """One position of the pattern: a variable, or an OR's alternatives (types None = any type); its label
    (for explain) is made only when asked for."""

    __slots__ = ("members", "types")

    def __init__(self, members: list[frozenset[str] | None]) -> None:
        self.members = members
        if any(t is None for t in members):
            self.types: frozenset[str] | None = None
        else:
            self.types = members[0] if len(members) == 1 else frozenset().union(*members)  # type: ignore[arg-type]

    @property
    def label(self) -> str:
        return " | ".join(_type_label(t) for t in self.members)


def positions_of(plan: Plan) -> list[list[Position]]:
    return [[Position([plan.positives[i].types for i in plan.group_members[g]]) for g in groups]
            for groups in plan.elements]


def _type_label(types: frozenset[str] | None) -> str:
    if types is None:
        return "ANY"
    if not types:
        return "(no type)"
    return " | ".join(sorted(types))


def element_label(element: list[Position]) -> str:
    if len(element) == 1:
        return element[0].label
    return "{" + ", ".join(p.label for p in element) + "}"


def _human_duration(micros: int) -> str:
    for unit, size in (("days", 86_400_000_000), ("h", 3_600_000_000), ("min", 60_000_000),
                       ("s", 1_000_000), ("ms", 1000)):
        if micros >= size and micros % size == 0:
            n = micros // size
            return f"{n} {unit[:-1] if unit == 'days' and n == 1 else unit}"
    return f"{micros} µs"


def window_text(query: Query) -> str:
    w = query.within
    if isinstance(w, WithinTime):
        return f" within {_human_duration(w.micros)}"
    if isinstance(w, WithinEvents):
        return f" within {w.count} events"
    return ""


def absent_text(p: Position, between: Between | None) -> str:
    if not p.types:
        return f"the conditions on {p.label} admit no event type"
    if between is not None:
        return f"{p.label} never occurs between {iso_ts(between.start)} and {iso_ts(between.end)}"
    return f"{p.label} never occurs in the history"


def explain_chain(query: Query, positions: list[list[Position]], units: Units, starts: np.ndarray,
                  reached: np.ndarray, last_unit_of: list[np.ndarray], hits: list[list[np.ndarray]],
                  contiguous: bool) -> str:
    """Why no chain of units can hold a match: the first element no start gets past, and where."""
    k = int(reached.max()) if len(reached) else 0
    window = window_text(query)
    if k >= len(positions):
        return ("no run of consecutive leaves holding only pattern types can hold the whole pattern under "
                f"{query.strategy.value}{window}")
    what = element_label(positions[k])
    if k == 0:
        return f"{what} cannot complete the first element{window}"
    before = " , ".join(element_label(e) for e in positions[:k]) if k > 1 else element_label(positions[0])
    ok = last_unit_of[k - 1] >= 0
    last = int(last_unit_of[k - 1][ok].max()) if ok.any() else -1
    detail = ""
    if last >= 0:
        unit = "unit" if units.granularity else "leaf"
        detail = (f"; the last {unit} where {before} can be completed ends at seq "
                  f"{int(units.hi_seq[last])} ({iso_ts(int(units.hi_ts[last]))})")
        occurs = union(hits[k])
        if occurs.size:
            detail += f", and {what} last occurs by seq {int(units.hi_seq[occurs[-1]])}"
    return f"{what} never occurs after {before}{window}{detail}"
