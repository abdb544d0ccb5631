"""Kleene runs and aggregates inside the kernels (SASE+; docs/query-language.md, "Kleene runs and aggregates").

Where a query has run conditions, every pool node has a row — integers in ``nodes.ri``, floats in
``nodes.rf`` — holding the state, after that node, of every run of its chain (SASE+ Fig. 5's vector V): per
*run variable* its first and last event and its number of events; per *accumulator slot* (a variable, an
attribute, and sum/avg, min or max) the number of values, the exact integer sum or the extreme and its
kind, flags and the float sum or extreme (:class:`~exact.engine.kernels.layout.Nodes`).  A node's row is its
parent's with its own variable's run advanced by its event, or begun anew at the run's first event
(:func:`push_run`, :func:`fold`): a run is never read again, and chains that branch keep rows of their own.

The checks (:class:`~exact.engine.kernels.layout.RunProgram`) run where they are decided: on the transition
that decides them (:func:`checks`, from :func:`exact.engine.kernels.transitions.holds`), reading the parent's
row — for the variable being taken that is its run *before* the event, ``v[..i-1]``; those left for a final
state when a match is reported (:func:`reportable`), after the trailing run has grown as far as it can.

Aggregates have the values of :func:`exact.query.operands.aggregate`: integer sums exact in int64, an average
of integers the float nearest the exact quotient, floats summed left to right.  An int64 sum that overflows
sets ``out[INEXACT]`` when it is read; the caller then evaluates the query again with the plain-Python
kernels, whose rows hold Python's integers.

Plain functions: :mod:`exact.engine.kernels.factory` compiles them into the kernels.
"""

from __future__ import annotations

import numpy as np

from exact.engine.kernels.layout import (
    C_MIN,
    C_SUMAVG,
    CK_MODE,
    CK_OP,
    CK_VAR,
    F_SUM,
    FLOATS,
    GT,
    I64_MAX,
    I64_MIN,
    INEXACT,
    K_BOOL,
    K_FLOAT,
    K_INT,
    K_NULL,
    K_STRING,
    LEFT,
    LT,
    M_ONE,
    NAN,
    NONNUM,
    OP_COUNT,
    OP_EVENT,
    OP_FIRST,
    OP_LAST,
    OP_LIT,
    OVERFLOW,
    PARENT,
    POS,
    PYTHON,
    R_COUNT,
    R_FIRST,
    R_LAST,
    RIGHT,
    S_COUNT,
    S_FLAGS,
    S_KIND,
    S_VALUE,
    SEEN_BOOL,
    SEEN_NUMBER,
    SEEN_STRING,
    SL_ATTR,
    SL_BASE,
    SL_CLASS,
    VAR,
    Events,
    Int,
    Nodes,
    RunProgram,
    Step,
)
from exact.engine.kernels.values import compare, int_avg, mixed


def push_run(nodes: Nodes, n: int, parent: int, x: int, t: int, v: int, runs: RunProgram, events: Events) -> None:
    """Node ``n``'s run rows (room made for them): it binds event ``x`` to variable ``v`` after node ``parent``
    by transition ``t`` (-1: the root of a tree), so its row is the parent's (every run of the chain as it
    was) with ``v``'s run advanced by ``x`` — begun anew when ``t`` binds its first event."""
    ri = nodes.ri
    rf = nodes.rf
    wi = ri.shape[1]
    wf = rf.shape[1]
    if parent >= 0:
        for c in range(wi):
            ri[n, c] = ri[parent, c]
        for c in range(wf):
            rf[n, c] = rf[parent, c]
    else:
        for c in range(wi):
            ri[n, c] = 0
        for c in range(wf):
            rf[n, c] = 0.0
    if t < 0:
        return
    begin = runs.tr_begin[t] == 1
    slots = runs.slots
    b = runs.run_base[v]
    if b >= 0:
        if begin:
            ri[n, b + R_FIRST] = x
            ri[n, b + R_COUNT] = 0
        ri[n, b + R_LAST] = x
        ri[n, b + R_COUNT] += 1
    for j in range(runs.sl_off[v], runs.sl_off[v + 1]):
        bi = slots[j, SL_BASE]
        if begin:
            ri[n, bi + S_COUNT] = 0
            ri[n, bi + S_VALUE] = 0
            ri[n, bi + S_FLAGS] = 0
            ri[n, bi + S_KIND] = 0
            rf[n, j] = 0.0
        ax = slots[j, SL_ATTR]
        fold(ri, rf, n, j, slots, events.kind[ax, x], events.value[ax, x], events.integer[ax, x])


def fold(ri: np.ndarray, rf: np.ndarray, n: int, j: int, slots: np.ndarray, k: int, f: float, i: int) -> None:
    """Fold one value (kind ``k``, float ``f``, integer ``i``) into slot ``j`` of row ``n``, as
    :func:`exact.query.operands.aggregate` computes: nulls skipped; sum/avg over numbers only, integers exactly
    (an int64 overflow is noted), floats left to right; min/max of one kind, NaN noted."""
    if k == K_NULL:
        return
    bi = slots[j, SL_BASE]
    bf = j
    cls = slots[j, SL_CLASS]
    if cls == C_SUMAVG:
        if k == K_STRING or k == K_BOOL:
            ri[n, bi + S_FLAGS] |= NONNUM
            return
        cnt = ri[n, bi + S_COUNT] + 1
        ri[n, bi + S_COUNT] = cnt
        flags = ri[n, bi + S_FLAGS]
        if k == K_INT:
            i = int(i)
            if flags & FLOATS:
                rf[n, bf] = rf[n, bf] + float(i)
            elif cnt == 1:
                ri[n, bi + S_VALUE] = i
            else:
                a = ri[n, bi + S_VALUE]
                # tested before adding: the compiler may assume a signed sum never wraps
                if not PYTHON and ((i > 0 and a > I64_MAX - i) or (i < 0 and a < I64_MIN - i)):
                    ri[n, bi + S_FLAGS] = flags | OVERFLOW
                else:
                    ri[n, bi + S_VALUE] = a + i
        else:
            if flags & FLOATS:
                rf[n, bf] = rf[n, bf] + f
            elif cnt == 1:
                rf[n, bf] = f
            else:
                rf[n, bf] = float(ri[n, bi + S_VALUE]) + f
            ri[n, bi + S_FLAGS] = flags | FLOATS
        return
    bit = SEEN_NUMBER if (k == K_FLOAT or k == K_INT) else (SEEN_STRING if k == K_STRING else SEEN_BOOL)
    flags = ri[n, bi + S_FLAGS] | bit
    if k == K_FLOAT and f != f:
        flags |= NAN
    ri[n, bi + S_FLAGS] = flags
    cnt = ri[n, bi + S_COUNT] + 1
    ri[n, bi + S_COUNT] = cnt
    if cnt > 1:
        if flags & NAN or mixed(flags):
            return  # the value is NaN or null from now on
        op = LT if cls == C_MIN else GT  # replace when smaller (min) or larger (max): the first extreme stays
        if not compare(np.int64(k), f, i, op, ri[n, bi + S_KIND], rf[n, bf], ri[n, bi + S_VALUE]):
            return
    ri[n, bi + S_VALUE] = int(i)
    ri[n, bi + S_KIND] = k
    rf[n, bf] = f


def agg_value(ri: np.ndarray, rf: np.ndarray, row: int, j: int, func: int, runs: RunProgram,
              out: np.ndarray) -> tuple[int, float, int]:
    """The value ``(kind, float, integer)`` of aggregate ``func`` over slot ``j`` in row ``row``."""
    bi = runs.slots[j, SL_BASE]
    cnt = ri[row, bi + S_COUNT]
    flags = ri[row, bi + S_FLAGS]
    if runs.slots[j, SL_CLASS] == C_SUMAVG:
        if flags & NONNUM or cnt == 0:
            return K_NULL, 0.0, 0
        if flags & OVERFLOW:
            out[INEXACT] = 1  # an int64 sum overflowed: the caller evaluates again with Python integers
        if flags & FLOATS:
            if func == F_SUM:
                return K_FLOAT, rf[row, j], 0
            return K_FLOAT, rf[row, j] / cnt, 0
        total = ri[row, bi + S_VALUE]
        if func == F_SUM:
            return K_INT, float(total), total
        return K_FLOAT, int_avg(total, cnt, out), 0
    if cnt == 0 or mixed(flags):
        return K_NULL, 0.0, 0
    if flags & NAN:
        return K_FLOAT, np.nan, 0
    return ri[row, bi + S_KIND], rf[row, j], ri[row, bi + S_VALUE]


def operand(c: int, side: int, e: int, step: Step, nodes: Nodes, runs: RunProgram, events: Events,
            out: np.ndarray) -> tuple[Int, float, Int]:
    """The value ``(kind, float, integer)`` of an operand of check ``c`` (``side``: ``LEFT`` or ``RIGHT``),
    with ``e`` the event under check, on ``step``."""
    kind = runs.ck[c, side]
    a = runs.ck[c, side + 1]
    b = runs.ck[c, side + 2]
    x = step.x
    row = step.row
    if kind == OP_LIT:
        return runs.lit_kind[a], runs.lit_value[a], runs.lit_int[a]
    if kind == OP_EVENT:
        return np.int64(events.kind[a, e]), events.value[a, e], events.integer[a, e]
    if kind == OP_FIRST and a == step.var and step.begin:
        return np.int64(events.kind[b, x]), events.value[b, x], events.integer[b, x]
    if row < 0:
        return K_NULL, 0.0, 0
    if kind == OP_FIRST or kind == OP_LAST:
        y = nodes.ri[row, runs.run_base[a] + (R_FIRST if kind == OP_FIRST else R_LAST)]
        return np.int64(events.kind[b, y]), events.value[b, y], events.integer[b, y]
    if kind == OP_COUNT:
        n = nodes.ri[row, runs.run_base[a] + R_COUNT]
        return K_INT, float(n), n
    return agg_value(nodes.ri, nodes.rf, row, a, b, runs, out)


def check(c: int, e: int, step: Step, nodes: Nodes, runs: RunProgram, events: Events, out: np.ndarray) -> bool:
    """Does run check ``c`` hold with ``e`` the event under check, on ``step``?"""
    left_kind, left_value, left_int = operand(c, LEFT, e, step, nodes, runs, events, out)
    right_kind, right_value, right_int = operand(c, RIGHT, e, step, nodes, runs, events, out)
    return compare(left_kind, left_value, left_int, runs.ck[c, CK_OP], right_kind, right_value, right_int)


def checks(lo: int, hi: int, step: Step, nodes: Nodes, runs: RunProgram, events: Events, out: np.ndarray) -> bool:
    """Do the run checks ``lo:hi`` hold on ``step`` — a transition, or a match being reported?  A ∀ check
    (``M_EACH``) holds for every event of its variable along the chain."""
    ck = runs.ck
    pool = nodes.pool
    for c in range(lo, hi):
        if ck[c, CK_MODE] == M_ONE:
            if not check(c, step.x, step, nodes, runs, events, out):
                return False
        else:
            each = ck[c, CK_VAR]
            walked = step.row
            while walked >= 0:
                if pool[walked, VAR] == each:
                    if not check(c, pool[walked, POS], step, nodes, runs, events, out):
                        return False
                walked = pool[walked, PARENT]
    return True


def reportable(q: int, node: int, nodes: Nodes, runs: RunProgram, events: Events, out: np.ndarray) -> bool:
    """Do the run checks left for final state ``q`` (runs of the last element) hold on the match at
    ``node``?"""
    fin_off = runs.fin_off
    if fin_off[q] == fin_off[q + 1]:
        return True
    return checks(fin_off[q], fin_off[q + 1], Step(-1, -1, False, node), nodes, runs, events, out)
