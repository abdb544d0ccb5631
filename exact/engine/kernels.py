"""Compiled kernels of the SES automaton: the sequential heart of every selection strategy (numba).

Each kernel runs the automaton of a :class:`~exact.engine.program.Program` — states, transitions and their
conditions as flat arrays — over the events of the program, one match window per first event in ``starts``
(given in stream order).  Strategies (Cadonna 2013):

* :func:`next_match` — skip-till-next-match, Algorithm 2 with the corrected line 12 (docs/semantics.md A1): an instance
  takes every transition that fires on an event and skips the events that fire none; instances live to the
  window's end, so a trailing Kleene variable extends maximally (docs/semantics.md A3).  An instance in a final state
  with no transition left can never change: it is reported at once and dropped.
* :func:`robust_next_match` — Algorithm 4: the same with an execution tree, and backtracking of the last
  transition of an instance that is not final at the window's end, unless that node has siblings (Lemma
  6.1) or is a child of the root; results are deduplicated per window.
* :func:`any_match` — skip-till-any-match (Def. 3.2): depth first over the next bound event, each match
  once.
* :func:`contiguous` — strict / partition contiguity: the next bound event is the successor of the last.

A run's bindings are a chain of nodes (event, variable, parent) in a pool that is reset per window (for
Algorithm 4 the nodes are the execution tree's).  A condition between two variables must hold for every
event bound to the other one (∀, walking the chain); ``prev`` compares with the variable's last event.
Values compare by the project's rule (:func:`exact.query.normalize.compare`): a null operand is false, values of
different kinds are never equal, integers compare exactly with integers and with floats.

**Kleene runs and aggregates** (SASE+; docs/query-language.md, "Kleene runs and aggregates").  Where a query
has run conditions, every pool node also has a row — integers in ``ri``, floats in ``rf``, grown with the
pool — holding the state, after that node, of every run of its chain (SASE+ Fig. 5's vector V): per *run
variable* its first and last event and its number of events; per *accumulator slot* (a variable, an
attribute, and sum/avg, min or max) the number of values, the exact integer sum or the extreme and its
kind, flags (a non-number seen, floats seen, an int64 overflow, a NaN, the kinds seen) and the float sum or
extreme.  A node's row is its parent's with its own variable's run advanced by its event, or begun anew at
the run's first event (:func:`_push_run`, :func:`_fold`): a run is never read again, and chains that branch
keep rows of their own.  The checks (:class:`exact.engine.program.RunTables`) run where they are decided:

* in :func:`_fires`, on the transition that decides them, reading the parent's row — for the variable being
  taken that is its run *before* the event, i.e. ``v[..i-1]`` (from the run's second event on for a
  condition reading an earlier one of its events); a finished run's conditions on the first transition of
  the next element, so that under skip-till-next-match an event failing them is skipped like any event
  that fires nothing, and ``v``'s run may go on growing;
* those left for a final state — conditions reading a run of the last element — when a match is reported
  (:func:`_reportable`), after the trailing run has grown as far as it can: skip-till-next-match then
  reports nothing, robust skip-till-next-match backtracks as from an instance that is not final, the other
  strategies drop that match.

Aggregates have the values of :func:`exact.query.operands.aggregate`: integer sums exact in int64, an average of
integers the float nearest the exact quotient (:func:`_int_avg`), floats summed left to right.  An int64
sum that overflows sets ``out[INEXACT]`` when it is read; the caller then evaluates the query with
:func:`python_kernels` — this module as plain Python, with Python's integers in the rows.

What a kernel keeps depends on ``mode``: :data:`EXISTS` stops at the first match, :data:`COUNT` counts,
:data:`SPANS` also merges match spans into intervals as it goes (matches come in order of their first
event), :data:`MATCHES` also keeps the bindings of whole windows while fewer than ``keep`` matches are
kept.  Counters go to ``out`` (see :data:`OUT_FIELDS`).  A kernel returns after the window in which its
work passes ``max_steps`` — the caller looks at its clock and calls again from ``out[NEXT]`` — and abandons
a window whose own work passes ``abort_steps``, undoing what that window reported (``out[ABORTED]``), so
that no single window holds a query past its time limit.

numba compiles each kernel on its first use and caches the machine code on disk (``cache=True``: beside this
module, or in ``NUMBA_CACHE_DIR`` where that is not writable).
"""

from __future__ import annotations

import functools
import importlib.util
import sys
import types

import numpy as np

from exact.engine.kernel_parts import (  # noqa: F401 - the kernels' parts, and names callers read here
    _FLIP,
    _FLOATS,
    _I64_MAX,
    _I64_MIN,
    _KIDS,
    _NAN,
    _NEVER,
    _NONNUM,
    _OVERFLOW,
    _PARENT,
    _POS,
    _SRC,
    _TWO53,
    _VAR,
    ABORTED,
    COUNT,
    DONE_FOUND,
    EXISTS,
    FOUND,
    INEXACT,
    INTERVALS,
    KEPT,
    MATCHES,
    NEXT,
    OUT_FIELDS,
    ROWS,
    SPANS,
    STEPS,
    WINDOW_NOTED,
    _agg_value,
    _check,
    _checks,
    _compare,
    _emit,
    _even,
    _fires,
    _flush,
    _fold,
    _grow,
    _int_avg,
    _int_float,
    _mark,
    _mixed,
    _next_event,
    _operand,
    _order,
    _push,
    _push_run,
    _reportable,
    _undo,
)

#: True in the pure-Python copy of this module (:func:`python_kernels`), where integers are Python's own.
_PYTHON = bool(globals().get("_PURE_PYTHON", False))
if _PYTHON:
    def njit(*_args, **_kwargs):  # noqa: ANN202 - the identity decorator of the Python copy
        return lambda f: f
else:
    from numba import njit


@njit(cache=True, nogil=True)
def next_match(starts, wend, em, seq, vpos_off, vpos, st_final, st_rel, tr_off, tr_var, tr_target,
               rc_off, rc_ax, rc_op, rc_w, rc_ay, pc_off, pc_ap, pc_op, pc_ax, akind, aval, aint, rp,
               mode, keep, first, max_steps, abort_steps, out, iv, m_start, m_off, b_var, b_pos):
    """Skip-till-next-match over the windows of ``starts[first:]`` (see the module docstring)."""
    pool = np.empty((64, 5), dtype=np.int64)
    ri = np.zeros((64, rp[10].shape[1]), dtype=rp[10].dtype)
    rf = np.zeros((64, rp[11].shape[1]), dtype=np.float64)
    rows = rp[10].shape[1] > 0
    wl = np.empty((16, 2), dtype=np.int64)
    ist = np.empty(16, dtype=np.int64)
    ind = np.empty(16, dtype=np.int64)
    nst = np.empty(16, dtype=np.int64)
    nnd = np.empty(16, dtype=np.int64)
    steps = 0
    si = first
    out[6] = 0
    call0 = out[2]
    while si < starts.shape[0]:
        s = starts[si]
        end = wend[s]
        mark = _mark(out, iv)
        out[8] = 0
        window_steps = 0
        emit0 = out[2]
        nodes = 0
        ninst = 0
        for t in range(tr_off[0], tr_off[1]):
            if _fires(t, s, -1, pool, em, tr_var, rc_off, rc_ax, rc_op, rc_w, rc_ay, pc_off, pc_ap, pc_op,
                      pc_ax, akind, aval, aint, rp, ri, rf, out):
                pool = _push(pool, nodes, s, tr_var[t], -1, 0)
                if rows:
                    ri, rf = _push_run(ri, rf, nodes, -1, s, t, tr_var, rp, akind, aval, aint)
                q = tr_target[t]
                if st_final[q] and st_rel[q] == 0:
                    if _reportable(q, nodes, pool, ri, rf, rp, akind, aval, aint, out):
                        iv, wl = _emit(mode, keep, s, nodes, pool, seq, out, iv, wl)
                else:
                    ist = _grow(ist, ninst + 1)
                    ind = _grow(ind, ninst + 1)
                    ist[ninst] = q
                    ind[ninst] = nodes
                    ninst += 1
                nodes += 1
        i = s
        while ninst > 0:
            if mode == 0 and out[0] > 0:
                break
            nxt = _NEVER
            for k in range(ninst):
                p = _next_event(st_rel[ist[k]], i, end, vpos_off, vpos)
                if p < nxt:
                    nxt = p
            if nxt == _NEVER:
                break
            window_steps += ninst
            if window_steps + out[2] - emit0 > abort_steps:
                break
            nnew = 0
            for k in range(ninst):
                q = ist[k]
                fired = False
                if em[nxt] & st_rel[q]:
                    for t in range(tr_off[q], tr_off[q + 1]):
                        if _fires(t, nxt, ind[k], pool, em, tr_var, rc_off, rc_ax, rc_op, rc_w, rc_ay, pc_off,
                                  pc_ap, pc_op, pc_ax, akind, aval, aint, rp, ri, rf, out):
                            fired = True
                            pool = _push(pool, nodes, nxt, tr_var[t], ind[k], q)
                            if rows:
                                ri, rf = _push_run(ri, rf, nodes, ind[k], nxt, t, tr_var, rp, akind, aval,
                                                   aint)
                            target = tr_target[t]
                            if st_final[target] and st_rel[target] == 0:
                                if _reportable(target, nodes, pool, ri, rf, rp, akind, aval, aint, out):
                                    iv, wl = _emit(mode, keep, s, nodes, pool, seq, out, iv, wl)
                            else:
                                nst = _grow(nst, nnew + 1)
                                nnd = _grow(nnd, nnew + 1)
                                nst[nnew] = target
                                nnd[nnew] = nodes
                                nnew += 1
                            nodes += 1
                if not fired:
                    nst = _grow(nst, nnew + 1)
                    nnd = _grow(nnd, nnew + 1)
                    nst[nnew] = q
                    nnd[nnew] = ind[k]
                    nnew += 1
            ist, nst = nst, ist
            ind, nnd = nnd, ind
            ninst = nnew
            i = nxt
        if window_steps + out[2] - emit0 > abort_steps:
            _undo(out, iv, mark)
            break
        if not (mode == 0 and out[0] > 0):
            for k in range(ninst):
                if st_final[ist[k]] and _reportable(ist[k], ind[k], pool, ri, rf, rp, akind, aval, aint, out):
                    iv, wl = _emit(mode, keep, s, ind[k], pool, seq, out, iv, wl)
        steps += window_steps + 1
        si += 1
        if mode == 3:
            m_start, m_off, b_var, b_pos = _flush(keep, s, pool, out, wl, m_start, m_off, b_var, b_pos)
        out[7] = out[0]
        if mode == 0 and out[0] > 0:
            break
        if steps + out[2] - call0 >= max_steps:
            break
    out[1] = si
    out[2] += steps
    return iv, m_start, m_off, b_var, b_pos


@njit(cache=True, nogil=True)
def any_match(starts, wend, em, seq, vpos_off, vpos, st_final, st_rel, tr_off, tr_var, tr_target,
              rc_off, rc_ax, rc_op, rc_w, rc_ay, pc_off, pc_ap, pc_op, pc_ax, akind, aval, aint, rp,
              mode, keep, first, max_steps, abort_steps, out, iv, m_start, m_off, b_var, b_pos):
    """Skip-till-any-match over the windows of ``starts[first:]``: every match starting at each first
    event, depth first by the next bound event in stream order (each match once)."""
    pool = np.empty((64, 5), dtype=np.int64)
    ri = np.zeros((64, rp[10].shape[1]), dtype=rp[10].dtype)
    rf = np.zeros((64, rp[11].shape[1]), dtype=np.float64)
    rows = rp[10].shape[1] > 0
    wl = np.empty((16, 2), dtype=np.int64)
    stack = np.empty((16, 3), dtype=np.int64)  # state, node, last event
    steps = 0
    si = first
    out[6] = 0
    call0 = out[2]
    while si < starts.shape[0]:
        s = starts[si]
        end = wend[s]
        mark = _mark(out, iv)
        out[8] = 0
        window_steps = 0
        emit0 = out[2]
        nodes = 0
        top = 0
        for t in range(tr_off[0], tr_off[1]):
            if _fires(t, s, -1, pool, em, tr_var, rc_off, rc_ax, rc_op, rc_w, rc_ay, pc_off, pc_ap, pc_op,
                      pc_ax, akind, aval, aint, rp, ri, rf, out):
                pool = _push(pool, nodes, s, tr_var[t], -1, 0)
                if rows:
                    ri, rf = _push_run(ri, rf, nodes, -1, s, t, tr_var, rp, akind, aval, aint)
                stack = _grow(stack, top + 1)
                stack[top, 0] = tr_target[t]
                stack[top, 1] = nodes
                stack[top, 2] = s
                top += 1
                nodes += 1
        while top > 0:
            if mode == 0 and out[0] > 0:
                break
            top -= 1
            q = stack[top, 0]
            nd = stack[top, 1]
            last = stack[top, 2]
            if st_final[q] and _reportable(q, nd, pool, ri, rf, rp, akind, aval, aint, out):
                iv, wl = _emit(mode, keep, s, nd, pool, seq, out, iv, wl)
            mask = st_rel[q]
            j = _next_event(mask, last, end, vpos_off, vpos)
            while j != _NEVER:
                window_steps += 1
                for t in range(tr_off[q], tr_off[q + 1]):
                    if _fires(t, j, nd, pool, em, tr_var, rc_off, rc_ax, rc_op, rc_w, rc_ay, pc_off, pc_ap,
                              pc_op, pc_ax, akind, aval, aint, rp, ri, rf, out):
                        pool = _push(pool, nodes, j, tr_var[t], nd, q)
                        if rows:
                            ri, rf = _push_run(ri, rf, nodes, nd, j, t, tr_var, rp, akind, aval, aint)
                        stack = _grow(stack, top + 1)
                        stack[top, 0] = tr_target[t]
                        stack[top, 1] = nodes
                        stack[top, 2] = j
                        top += 1
                        nodes += 1
                j = _next_event(mask, j, end, vpos_off, vpos)
            if window_steps + out[2] - emit0 > abort_steps:
                break
        if window_steps + out[2] - emit0 > abort_steps:
            _undo(out, iv, mark)
            break
        steps += window_steps + 1
        si += 1
        if mode == 3:
            m_start, m_off, b_var, b_pos = _flush(keep, s, pool, out, wl, m_start, m_off, b_var, b_pos)
        out[7] = out[0]
        if mode == 0 and out[0] > 0:
            break
        if steps + out[2] - call0 >= max_steps:
            break
    out[1] = si
    out[2] += steps
    return iv, m_start, m_off, b_var, b_pos


@njit(cache=True, nogil=True)
def contiguous(starts, wend, em, seq, successor, st_final, tr_off, tr_var, tr_target,
               rc_off, rc_ax, rc_op, rc_w, rc_ay, pc_off, pc_ap, pc_op, pc_ax, akind, aval, aint, rp,
               mode, keep, first, max_steps, abort_steps, out, iv, m_start, m_off, b_var, b_pos):
    """Strict / partition contiguity over the windows of ``starts[first:]``: the runs whose events are
    ``s, successor[s], successor[successor[s]], …`` (``-1``: the next event cannot be bound)."""
    pool = np.empty((64, 5), dtype=np.int64)
    ri = np.zeros((64, rp[10].shape[1]), dtype=rp[10].dtype)
    rf = np.zeros((64, rp[11].shape[1]), dtype=np.float64)
    rows = rp[10].shape[1] > 0
    wl = np.empty((16, 2), dtype=np.int64)
    cur = np.empty((16, 2), dtype=np.int64)  # state, node
    nxt = np.empty((16, 2), dtype=np.int64)
    steps = 0
    si = first
    out[6] = 0
    call0 = out[2]
    while si < starts.shape[0]:
        s = starts[si]
        end = wend[s]
        mark = _mark(out, iv)
        out[8] = 0
        window_steps = 0
        emit0 = out[2]
        nodes = 0
        ncur = 0
        for t in range(tr_off[0], tr_off[1]):
            if _fires(t, s, -1, pool, em, tr_var, rc_off, rc_ax, rc_op, rc_w, rc_ay, pc_off, pc_ap, pc_op,
                      pc_ax, akind, aval, aint, rp, ri, rf, out):
                pool = _push(pool, nodes, s, tr_var[t], -1, 0)
                if rows:
                    ri, rf = _push_run(ri, rf, nodes, -1, s, t, tr_var, rp, akind, aval, aint)
                cur = _grow(cur, ncur + 1)
                cur[ncur, 0] = tr_target[t]
                cur[ncur, 1] = nodes
                ncur += 1
                nodes += 1
        x = s
        while ncur > 0:
            for k in range(ncur):
                q = cur[k, 0]
                if st_final[q] and _reportable(q, cur[k, 1], pool, ri, rf, rp, akind, aval, aint, out):
                    iv, wl = _emit(mode, keep, s, cur[k, 1], pool, seq, out, iv, wl)
            if mode == 0 and out[0] > 0:
                break
            y = successor[x]
            if y < 0 or y > end:
                break
            window_steps += ncur
            if window_steps + out[2] - emit0 > abort_steps:
                break
            nn = 0
            for k in range(ncur):
                q = cur[k, 0]
                for t in range(tr_off[q], tr_off[q + 1]):
                    if _fires(t, y, cur[k, 1], pool, em, tr_var, rc_off, rc_ax, rc_op, rc_w, rc_ay, pc_off,
                              pc_ap, pc_op, pc_ax, akind, aval, aint, rp, ri, rf, out):
                        pool = _push(pool, nodes, y, tr_var[t], cur[k, 1], q)
                        if rows:
                            ri, rf = _push_run(ri, rf, nodes, cur[k, 1], y, t, tr_var, rp, akind, aval, aint)
                        nxt = _grow(nxt, nn + 1)
                        nxt[nn, 0] = tr_target[t]
                        nxt[nn, 1] = nodes
                        nn += 1
                        nodes += 1
            cur, nxt = nxt, cur
            ncur = nn
            x = y
        if window_steps + out[2] - emit0 > abort_steps:
            _undo(out, iv, mark)
            break
        steps += window_steps + 1
        si += 1
        if mode == 3:
            m_start, m_off, b_var, b_pos = _flush(keep, s, pool, out, wl, m_start, m_off, b_var, b_pos)
        out[7] = out[0]
        if mode == 0 and out[0] > 0:
            break
        if steps + out[2] - call0 >= max_steps:
            break
    out[1] = si
    out[2] += steps
    return iv, m_start, m_off, b_var, b_pos


@njit(cache=True, nogil=True)
def _same_chain(pool, a, b):
    """Do the chains ending at nodes ``a`` and ``b`` bind the same events to the same variables?"""
    while True:
        while a >= 0 and pool[a, 1] < 0:
            a = pool[a, 2]
        while b >= 0 and pool[b, 1] < 0:
            b = pool[b, 2]
        if a < 0 or b < 0:
            return a < 0 and b < 0
        if pool[a, 0] != pool[b, 0] or pool[a, 1] != pool[b, 1]:
            return False
        a = pool[a, 2]
        b = pool[b, 2]


@njit(cache=True, nogil=True)
def robust_next_match(starts, wend, em, seq, vpos_off, vpos, st_final, st_rel, tr_off, tr_var, tr_target,
                      rc_off, rc_ax, rc_op, rc_w, rc_ay, pc_off, pc_ap, pc_op, pc_ax, akind, aval, aint, rp,
                      mode, keep, first, max_steps, abort_steps, out, iv, m_start, m_off, b_var, b_pos):
    """Robust skip-till-next-match over the windows of ``starts[first:]``: Algorithm 4 (see the module
    docstring).  Node 0 of each window's pool is the execution tree's root (variable -1)."""
    pool = np.empty((64, 5), dtype=np.int64)
    ri = np.zeros((64, rp[10].shape[1]), dtype=rp[10].dtype)
    rf = np.zeros((64, rp[11].shape[1]), dtype=np.float64)
    rows = rp[10].shape[1] > 0
    wl = np.empty((16, 2), dtype=np.int64)
    omega = np.empty((16, 3), dtype=np.int64)  # state, node, resume after
    back = np.empty((16, 3), dtype=np.int64)
    insts = np.empty((16, 2), dtype=np.int64)
    fresh = np.empty((16, 2), dtype=np.int64)
    results = np.empty(16, dtype=np.int64)
    steps = 0
    si = first
    out[6] = 0
    call0 = out[2]
    while si < starts.shape[0]:
        s = starts[si]
        end = wend[s]
        mark = _mark(out, iv)
        out[8] = 0
        window_steps = 0
        emit0 = out[2]
        pool = _push(pool, 0, s - 1, -1, -1, 0)
        if rows:
            ri, rf = _push_run(ri, rf, 0, -1, s - 1, -1, tr_var, rp, akind, aval, aint)
        nodes = 1
        nres = 0
        nomega = 0
        for t in range(tr_off[0], tr_off[1]):
            if _fires(t, s, 0, pool, em, tr_var, rc_off, rc_ax, rc_op, rc_w, rc_ay, pc_off, pc_ap, pc_op,
                      pc_ax, akind, aval, aint, rp, ri, rf, out):
                pool = _push(pool, nodes, s, tr_var[t], 0, 0)
                if rows:
                    ri, rf = _push_run(ri, rf, nodes, 0, s, t, tr_var, rp, akind, aval, aint)
                pool[0, 4] += 1
                omega = _grow(omega, nomega + 1)
                omega[nomega, 0] = tr_target[t]
                omega[nomega, 1] = nodes
                omega[nomega, 2] = s
                nomega += 1
                nodes += 1
        first_round = True
        while nomega > 0 and window_steps <= abort_steps:
            nback = 0
            nbatches = 1 if first_round else nomega
            for bi in range(nbatches):
                if first_round:  # the root's children came from one event: one forward pass for all
                    ninst = nomega
                    insts = _grow(insts, ninst)
                    for k in range(nomega):
                        insts[k, 0] = omega[k, 0]
                        insts[k, 1] = omega[k, 1]
                    i = s
                else:
                    ninst = 1
                    insts[0, 0] = omega[bi, 0]
                    insts[0, 1] = omega[bi, 1]
                    i = omega[bi, 2]
                while ninst > 0:
                    nxt = _NEVER
                    for k in range(ninst):
                        p = _next_event(st_rel[insts[k, 0]], i, end, vpos_off, vpos)
                        if p < nxt:
                            nxt = p
                    if nxt == _NEVER:
                        break
                    window_steps += ninst
                    if window_steps + out[2] - emit0 > abort_steps:
                        break
                    nn = 0
                    for k in range(ninst):
                        q = insts[k, 0]
                        nd = insts[k, 1]
                        fired = False
                        if em[nxt] & st_rel[q]:
                            for t in range(tr_off[q], tr_off[q + 1]):
                                if _fires(t, nxt, nd, pool, em, tr_var, rc_off, rc_ax, rc_op, rc_w, rc_ay,
                                          pc_off, pc_ap, pc_op, pc_ax, akind, aval, aint, rp, ri, rf, out):
                                    fired = True
                                    pool = _push(pool, nodes, nxt, tr_var[t], nd, q)
                                    if rows:
                                        ri, rf = _push_run(ri, rf, nodes, nd, nxt, t, tr_var, rp, akind,
                                                           aval, aint)
                                    pool[nd, 4] += 1
                                    fresh = _grow(fresh, nn + 1)
                                    fresh[nn, 0] = tr_target[t]
                                    fresh[nn, 1] = nodes
                                    nn += 1
                                    nodes += 1
                        if not fired:
                            fresh = _grow(fresh, nn + 1)
                            fresh[nn, 0] = q
                            fresh[nn, 1] = nd
                            nn += 1
                    insts, fresh = fresh, insts
                    ninst = nn
                    i = nxt
                if window_steps + out[2] - emit0 > abort_steps:
                    break
                for k in range(ninst):
                    q = insts[k, 0]
                    nd = insts[k, 1]
                    if st_final[q] and _reportable(q, nd, pool, ri, rf, rp, akind, aval, aint, out):
                        results = _grow(results, nres + 1)
                        results[nres] = nd
                        nres += 1
                        continue
                    parent = pool[nd, 2]
                    if parent != 0 and pool[parent, 4] == 1:
                        back = _grow(back, nback + 1)
                        back[nback, 0] = pool[nd, 3]
                        back[nback, 1] = parent
                        back[nback, 2] = pool[nd, 0]
                        nback += 1
                    pool[parent, 4] -= 1
            first_round = False
            omega, back = back, omega
            nomega = nback
        if window_steps + out[2] - emit0 > abort_steps:
            _undo(out, iv, mark)
            break
        for a in range(nres):
            seen = False
            for b in range(a):
                if _same_chain(pool, results[a], results[b]):
                    seen = True
                    break
            if not seen:
                iv, wl = _emit(mode, keep, s, results[a], pool, seq, out, iv, wl)
        steps += window_steps + 1
        si += 1
        if mode == 3:
            m_start, m_off, b_var, b_pos = _flush(keep, s, pool, out, wl, m_start, m_off, b_var, b_pos)
        out[7] = out[0]
        if mode == 0 and out[0] > 0:
            break
        if steps + out[2] - call0 >= max_steps:
            break
    out[1] = si
    out[2] += steps
    return iv, m_start, m_off, b_var, b_pos


@functools.cache
def python_kernels() -> types.ModuleType:
    """This module and :mod:`exact.engine.kernel_parts` again as plain Python (no numba): the same kernels, slow,
    with Python's unbounded integers in the run rows — for the rare query whose integer sums leave int64
    (``out[INEXACT]``)."""
    parts = _plain("exact.engine.kernel_parts", importlib.util.find_spec("exact.engine.kernel_parts").origin)
    saved = sys.modules.get("exact.engine.kernel_parts")
    sys.modules["exact.engine.kernel_parts"] = parts  # so that the copy below takes the plain parts
    try:
        return _plain(__name__ + "_python", __file__)
    finally:
        if saved is not None:
            sys.modules["exact.engine.kernel_parts"] = saved


def _plain(name: str, path: str | None) -> types.ModuleType:
    """The module at ``path`` loaded anew with ``_PURE_PYTHON`` set (its ``njit`` the identity)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    module._PURE_PYTHON = True  # type: ignore[attr-defined]
    spec.loader.exec_module(module)
    return module
