"""SASE+ negation as a filter on the positive pattern's matches (docs/contract.md §2, Agrawal et al. 2008).

A match is dropped when an event satisfying a negated variable — its type and properties, its partition
(``PARTITION BY``: the match's), and its conditions on positive variables (∀ over their bindings) — lies
strictly between the neighbouring positive elements (by seq), or, for a trailing ``NOT``, after the last
positive event and within the window of the first one (ts ≤ first ts + d, resp. seq ≤ first seq + n − 1).

The gaps of all matches are found at once from their binding rows, and the forbidden events in each gap are
counted by bisection in one sorted array per negated variable (``key · B + position``, so one array serves
every partition).  Only a match whose gap holds a candidate and whose negated variable has conditions on
positive variables beyond the partition's is looked at one by one; there a condition reading a finished
Kleene run (``w[1]``, ``w[last]``, ``count(w)``, ``avg(w.x)``, …) compares with one value of the match's run,
computed from its bindings by :func:`exact.query.operands.aggregate` (every run of a complete match is finished).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from exact.arrays import sorted_ints
from exact.engine.matchtable import MatchTable
from exact.frame import EventFrame
from exact.prefilter import property_mask
from exact.query.ast import Aggregate, Condition, Field, Literal, RunEvent, WithinEvents, WithinTime
from exact.query.normalize import FLIPPED, Plan, compare
from exact.query.operands import aggregate

_I64 = np.int64


def negation_filter(plan: Plan, frame: EventFrame, table: MatchTable,
                    partition_codes: Callable[[], np.ndarray]) -> np.ndarray:
    """Per kept match of ``table``, does it survive every ``NOT`` of ``plan``?  ``partition_codes()``
    gives the frame's events' ``PARTITION BY`` codes (-1: none)."""
    m = len(table)
    keep = np.ones(m, dtype=bool)
    if not plan.negatives or not m:
        return keep
    lengths = np.diff(table.off)
    match_of_row = np.repeat(np.arange(m, dtype=_I64), lengths)
    element_of_var = np.asarray([v.element for v in plan.positives], dtype=_I64)
    row_element = element_of_var[table.var]
    row_pos = frame.seq.searchsorted(table.seq)
    first_pos = frame.seq.searchsorted(table.start)
    nelem = len(plan.elements)
    by = plan.query.partition_by
    codes = partition_codes() if by else None
    n = len(frame)
    base = n + 1
    match_key = codes[first_pos] if codes is not None else np.zeros(m, dtype=_I64)
    for k, nv in enumerate(plan.negatives):
        alive = np.flatnonzero(keep)
        if not len(alive):
            break
        gap = nv.element
        lo = np.full(m, -1, dtype=_I64)
        sel = row_element == gap - 1
        np.maximum.at(lo, match_of_row[sel], row_pos[sel])
        if gap < nelem:
            hi = np.full(m, n, dtype=_I64)
            sel = row_element == gap
            np.minimum.at(hi, match_of_row[sel], row_pos[sel])
            hi_excl = hi
        else:
            hi_excl = _window_bound(plan, frame, first_pos) + 1
        cand = np.flatnonzero(property_mask(frame, nv))
        if codes is not None:
            cand = cand[codes[cand] >= 0]
            enc = sorted_ints(codes[cand] * base + cand)
        else:
            enc = cand.astype(_I64)
        kb = match_key[alive] * base
        count = (enc.searchsorted(kb + hi_excl[alive], "left")
                 - enc.searchsorted(kb + lo[alive], "right"))
        suspects = alive[count > 0]
        rels = [c for c in plan.negative_relations[k] if not _partition_relation(c, nv.name, by)]
        if not rels:
            keep[suspects] = False
            continue
        check = _relation_check(plan, frame, nv.name, rels, table)
        for j in suspects.tolist():
            a = int(enc.searchsorted(match_key[j] * base + lo[j], "right"))
            b = int(enc.searchsorted(match_key[j] * base + hi_excl[j], "left"))
            if check(j, (enc[a:b] % base).tolist()):
                keep[j] = False
    return keep


def _partition_relation(c: Condition, name: str, by: tuple[str, ...]) -> bool:
    """``n.X = w.X`` with X partitioned by: made true by comparing partition codes."""
    return (c.op == "=" and isinstance(c.left, Field) and isinstance(c.right, Field)
            and c.left.attr == c.right.attr and c.left.attr in by)


def _window_bound(plan: Plan, frame: EventFrame, first_pos: np.ndarray) -> np.ndarray:
    """Per match, the last frame position within the window of its first event (for a trailing NOT)."""
    within = plan.query.within
    bound: np.ndarray
    if isinstance(within, WithinTime):
        bound = frame.ts.searchsorted(frame.ts[first_pos] + within.micros, "right") - 1
        return bound
    assert isinstance(within, WithinEvents)
    bound = frame.seq.searchsorted(frame.seq[first_pos] + within.count - 1, "right") - 1
    return bound


def _relation_check(plan: Plan, frame: EventFrame, name: str, rels: list[Condition], table: MatchTable
                    ) -> Callable[[int, list[int]], bool]:
    """``check(match, positions)``: does one of the candidate events at ``positions`` satisfy every
    condition of negated variable ``name`` on the positive variables bound in the match (∀ over their
    events; a run operand — ``w[1]``, ``w[last]``, ``count(w)``, an aggregate — is one value of the
    match's finished run of ``w``)?"""
    index = plan.positive_index()
    oriented = []
    for c in rels:
        left, op, right = c.left, c.op, c.right
        if isinstance(left, Literal) or left.var != name:
            left, op, right = right, FLIPPED[op], left
        # the negated variable's side is a field (it is never Kleene: no prev, no run); the other names a
        # positive variable
        assert isinstance(left, Field) and not isinstance(right, Literal)
        oriented.append((left.attr, op, index[right.var], right))
    rows_var, rows_seq, off = table.var.tolist(), table.seq.tolist(), table.off.tolist()

    def value(attr: str, pos: int) -> object:
        return frame.values(attr, np.asarray([pos], dtype=_I64))[0]

    def run_value(operand: RunEvent | Aggregate, run: list[int]) -> object:
        if isinstance(operand, RunEvent):
            return value(operand.attr, run[0] if operand.end == "first" else run[-1])
        if operand.func == "count":
            return len(run)
        assert operand.attr is not None
        return aggregate(operand.func, [value(operand.attr, p) for p in run])

    def check(j: int, positions: list[int]) -> bool:
        bound: dict[int, list[int]] = {}
        for r in range(off[j], off[j + 1]):
            bound.setdefault(rows_var[r], []).append(int(frame.seq.searchsorted(rows_seq[r])))
        # per condition: the values the candidate is compared with (none: the variable is unbound)
        against = [(attr, op, [value(o.attr, y) for y in bound.get(w, ())] if isinstance(o, Field)
                    else [run_value(o, bound[w])] if w in bound else [])
                   for attr, op, w, o in oriented]
        for x in positions:
            if all(compare(value(attr, x), op, other) for attr, op, values in against for other in values):
                return True
        return False

    return check
