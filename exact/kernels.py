"""Compiled kernels of the SES automaton: the sequential heart of every selection strategy (numba).

Each kernel runs the automaton of a :class:`~exact.program.Program` — states, transitions and their
conditions as flat arrays — over the events of the program, one match window per first event in ``starts``
(given in stream order).  Strategies (Cadonna 2013):

* :func:`next_match` — skip-till-next-match, Algorithm 2 with the corrected line 12 (digest A1): an instance
  takes every transition that fires on an event and skips the events that fire none; instances live to the
  window's end, so a trailing Kleene variable extends maximally (digest A3).  An instance in a final state
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
Values compare by the project's rule (:func:`exact.normalize.compare`): a null operand is false, values of
different kinds are never equal, integers compare exactly with integers and with floats.

**Kleene runs and aggregates** (SASE+; docs/query-language.md, "Kleene runs and aggregates").  Where a query
has run conditions, every pool node also has a row — integers in ``ri``, floats in ``rf``, grown with the
pool — holding the state, after that node, of every run of its chain (SASE+ Fig. 5's vector V): per *run
variable* its first and last event and its number of events; per *accumulator slot* (a variable, an
attribute, and sum/avg, min or max) the number of values, the exact integer sum or the extreme and its
kind, flags (a non-number seen, floats seen, an int64 overflow, a NaN, the kinds seen) and the float sum or
extreme.  A node's row is its parent's with its own variable's run advanced by its event, or begun anew at
the run's first event (:func:`_push_run`, :func:`_fold`): a run is never read again, and chains that branch
keep rows of their own.  The checks (:class:`exact.program.RunTables`) run where they are decided:

* in :func:`_fires`, on the transition that decides them, reading the parent's row — for the variable being
  taken that is its run *before* the event, i.e. ``v[..i-1]`` (from the run's second event on for a
  condition reading an earlier one of its events); a finished run's conditions on the first transition of
  the next element, so that under skip-till-next-match an event failing them is skipped like any event
  that fires nothing, and ``v``'s run may go on growing;
* those left for a final state — conditions reading a run of the last element — when a match is reported
  (:func:`_reportable`), after the trailing run has grown as far as it can: skip-till-next-match then
  reports nothing, robust skip-till-next-match backtracks as from an instance that is not final, the other
  strategies drop that match.

Aggregates have the values of :func:`exact.operands.aggregate`: integer sums exact in int64, an average of
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
import math
import types

import numpy as np

#: True in the pure-Python copy of this module (:func:`python_kernels`), where integers are Python's own.
_PYTHON = bool(globals().get("_PURE_PYTHON", False))
if _PYTHON:
    def njit(*_args, **_kwargs):  # noqa: ANN202 - the identity decorator of the Python copy
        return lambda f: f
else:
    from numba import njit

#: Modes: what a kernel keeps.
EXISTS, COUNT, SPANS, MATCHES = 0, 1, 2, 3
#: Fields of a kernel's ``out`` counters.
FOUND, NEXT, STEPS, INTERVALS, KEPT, ROWS, ABORTED, DONE_FOUND, WINDOW_NOTED, INEXACT = range(10)
OUT_FIELDS = 10
#: Node fields of the pool.
_POS, _VAR, _PARENT, _SRC, _KIDS = 0, 1, 2, 3, 4

_NEVER = 1 << 62


@njit(cache=True, nogil=True)
def _order(c, op):
    """The operator ``op`` applied to a three-way comparison ``c`` (-1, 0, 1)."""
    if op == 0:
        return c == 0
    if op == 1:
        return c != 0
    if op == 2:
        return c < 0
    if op == 3:
        return c <= 0
    if op == 4:
        return c > 0
    return c >= 0


@njit(cache=True, nogil=True)
def _int_float(i, op, f):
    """``i op f`` for an integer and a float, exactly (as Python compares them): a NaN is unordered."""
    if f != f:
        return op == 1
    if _PYTHON:
        a = int(i)
        b = float(f)
        return _order((a > b) - (a < b), op)
    if f >= 9.223372036854775808e18:
        return _order(-1, op)
    if f < -9.223372036854775808e18:
        return _order(1, op)
    fl = math.floor(f)
    fi = np.int64(fl)
    if i < fi:
        return _order(-1, op)
    if i > fi:
        return _order(1, op)
    return _order(0 if fl == f else -1, op)


#: ``x op y`` ⇔ ``y FLIP[op] x``.
_FLIP = (0, 1, 4, 5, 2, 3)


@njit(cache=True, nogil=True)
def _compare(kx, vx, ix, op, ky, vy, iy):
    """``x op y`` by the project's rule: null → false; different kinds: only ``!=`` holds.  Kinds: 0 null,
    1 float, 4 integer (both numbers: integers compare exactly with integers and floats, as in Python),
    2 string (by rank), 3 boolean.  Operators as :data:`exact.ast.OPERATORS` orders them: = != < <= > >=."""
    if kx == 0 or ky == 0:
        return False
    if kx == 4 and ky == 4:
        a = int(ix)
        b = int(iy)
        return _order((a > b) - (a < b), op)
    if kx == 4 and ky == 1:
        return _int_float(ix, op, vy)
    if kx == 1 and ky == 4:
        return _int_float(iy, _FLIP[op], vx)
    if kx != ky:
        return op == 1
    if op == 0:
        return vx == vy
    if op == 1:
        return vx != vy
    if op == 2:
        return vx < vy
    if op == 3:
        return vx <= vy
    if op == 4:
        return vx > vy
    return vx >= vy


@njit(cache=True, nogil=True)
def _grow(a, need):
    """``a``, or a copy with room for ``need`` rows (1-D or 2-D along the first axis)."""
    if need <= a.shape[0]:
        return a
    size = max(need, 2 * a.shape[0] + 16)
    if a.ndim == 1:
        out = np.empty(size, dtype=a.dtype)
    else:
        out = np.empty((size, a.shape[1]), dtype=a.dtype)
    out[:a.shape[0]] = a
    return out


@njit(cache=True, nogil=True)
def _push(pool, n, pos, var, parent, src):
    pool = _grow(pool, n + 1)
    pool[n, 0] = pos
    pool[n, 1] = var
    pool[n, 2] = parent
    pool[n, 3] = src
    pool[n, 4] = 0
    return pool


# --------------------------------------------------------------------------------- Kleene runs (SASE+)
#
# ``rp`` is a query's run program (:class:`exact.program.RunTables`) as a tuple: tr_begin, ck_off, fin_off,
# ck, run_base, sl_off, slots, lit_kind, lit_value, lit_int, and two empty rows giving the width and dtype of
# a node's integer and float rows (``ri``, ``rf``: one row per pool node, grown with the pool).

#: Flags of an accumulator slot (its third integer); bits 4-6 are the kinds seen by min/max.
_NONNUM, _FLOATS, _OVERFLOW, _NAN = 1, 2, 4, 8
_TWO53 = 9007199254740992
_I64_MAX = 9223372036854775807
_I64_MIN = -9223372036854775808


@njit(cache=True, nogil=True)
def _push_run(ri, rf, n, parent, x, t, tr_var, rp, akind, aval, aint):
    """Node ``n`` binds event ``x`` after node ``parent`` by transition ``t`` (-1: the root of a tree): its
    row is the parent's (every run of the chain as it was) with the run of the variable ``t`` binds
    advanced by ``x`` — begun anew when ``t`` binds its first event."""
    ri = _grow(ri, n + 1)
    rf = _grow(rf, n + 1)
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
        return ri, rf
    v = tr_var[t]
    begin = rp[0][t] == 1
    run_base = rp[4]
    sl_off = rp[5]
    slots = rp[6]
    b = run_base[v]
    if b >= 0:
        if begin:
            ri[n, b] = x
            ri[n, b + 2] = 0
        ri[n, b + 1] = x
        ri[n, b + 2] += 1
    for j in range(sl_off[v], sl_off[v + 1]):
        bi = slots[j, 2]
        if begin:
            ri[n, bi] = 0
            ri[n, bi + 1] = 0
            ri[n, bi + 2] = 0
            ri[n, bi + 3] = 0
            rf[n, j] = 0.0
        ax = slots[j, 1]
        _fold(ri, rf, n, bi, j, slots[j, 0], akind[ax, x], aval[ax, x], aint[ax, x])
    return ri, rf


@njit(cache=True, nogil=True)
def _fold(ri, rf, n, bi, bf, cls, k, f, i):
    """Fold one value (kind ``k``, float ``f``, integer ``i``) into the slot at ``bi``/``bf`` of row ``n``,
    as :func:`exact.operands.aggregate` computes: nulls skipped; sum/avg over numbers only, integers exactly
    (an int64 overflow is noted), floats left to right; min/max of one kind, NaN noted."""
    if k == 0:
        return
    if cls == 0:
        if k == 2 or k == 3:
            ri[n, bi + 2] |= _NONNUM
            return
        cnt = ri[n, bi] + 1
        ri[n, bi] = cnt
        flags = ri[n, bi + 2]
        if k == 4:
            i = int(i)
            if flags & _FLOATS:
                rf[n, bf] = rf[n, bf] + float(i)
            elif cnt == 1:
                ri[n, bi + 1] = i
            else:
                a = ri[n, bi + 1]
                # tested before adding: the compiler may assume a signed sum never wraps
                if not _PYTHON and ((i > 0 and a > _I64_MAX - i) or (i < 0 and a < _I64_MIN - i)):
                    ri[n, bi + 2] = flags | _OVERFLOW
                else:
                    ri[n, bi + 1] = a + i
        else:
            if flags & _FLOATS:
                rf[n, bf] = rf[n, bf] + f
            elif cnt == 1:
                rf[n, bf] = f
            else:
                rf[n, bf] = float(ri[n, bi + 1]) + f
            ri[n, bi + 2] = flags | _FLOATS
        return
    bit = 16 if (k == 1 or k == 4) else (32 if k == 2 else 64)
    flags = ri[n, bi + 2] | bit
    if k == 1 and f != f:
        flags |= _NAN
    ri[n, bi + 2] = flags
    cnt = ri[n, bi] + 1
    ri[n, bi] = cnt
    if cnt > 1:
        if flags & _NAN or _mixed(flags):
            return  # the value is NaN or null from now on
        op = 2 if cls == 1 else 4  # min: replace when smaller; max: when larger (the first extreme stays)
        if not _compare(np.int64(k), f, i, op, ri[n, bi + 3], rf[n, bf], ri[n, bi + 1]):
            return
    ri[n, bi + 1] = int(i)
    ri[n, bi + 3] = k
    rf[n, bf] = f


@njit(cache=True, nogil=True)
def _mixed(flags):
    """Has a min/max slot seen values of more than one kind (numbers, strings, booleans)?"""
    kinds = flags >> 4
    return kinds != 1 and kinds != 2 and kinds != 4


@njit(cache=True, nogil=True)
def _int_avg(total, cnt, out):
    """``total / cnt`` for integers as Python computes it: the float nearest the exact quotient."""
    if _PYTHON:
        return total / cnt
    if -_TWO53 <= total <= _TWO53:
        return float(total) / float(cnt)  # both exact: one rounding
    if cnt >= 2147483648:
        out[9] = 1
        return float(total) / float(cnt)
    q = total // cnt
    r = total - q * cnt  # total = q·cnt + r, 0 <= r < cnt
    if r == 0:
        return float(q)
    if q >= _TWO53 or q < -_TWO53:
        # spacing of floats here >= 2: q + r/cnt rounds as q + 1/2 does (no float or midpoint between)
        return float(2 * q + 1) / 2.0
    # |q| >= 2**22 (|total| > 2**53, cnt < 2**31): floats near q are multiples of 2**-30 and c - q is exact;
    # pick, among the neighbours of an estimate, the float c nearest q + r/cnt by (c - q)·2**30·cnt vs
    # r·2**30 in integers (ties to an even significand)
    y = float(q) + float(r) / float(cnt)
    best = y
    best_err = -1
    c = y
    for _ in range(2):
        c = np.nextafter(c, -np.inf)
    for _ in range(5):
        d = np.int64((c - float(q)) * 1073741824.0)
        err = d * cnt - r * 1073741824
        if err < 0:
            err = -err
        if best_err < 0 or err < best_err or (err == best_err and _even(c) and not _even(best)):
            best = c
            best_err = err
        c = np.nextafter(c, np.inf)
    return best


@njit(cache=True, nogil=True)
def _even(c):
    m, _ = math.frexp(c)
    return np.int64(m * 9007199254740992.0) % 2 == 0


@njit(cache=True, nogil=True)
def _agg_value(ri, rf, row, j, func, rp, out):
    """The value ``(kind, float, integer)`` of aggregate ``func`` over slot ``j`` in row ``row``."""
    slots = rp[6]
    bi = slots[j, 2]
    cnt = ri[row, bi]
    flags = ri[row, bi + 2]
    if slots[j, 0] == 0:
        if flags & _NONNUM or cnt == 0:
            return 0, 0.0, 0
        if flags & _OVERFLOW:
            out[9] = 1  # an int64 sum overflowed: the caller evaluates again with Python integers
        if flags & _FLOATS:
            if func == 1:
                return 1, rf[row, j], 0
            return 1, rf[row, j] / cnt, 0
        total = ri[row, bi + 1]
        if func == 1:
            return 4, float(total), total
        return 1, _int_avg(total, cnt, out), 0
    if cnt == 0 or _mixed(flags):
        return 0, 0.0, 0
    if flags & _NAN:
        return 1, np.nan, 0
    return ri[row, bi + 3], rf[row, j], ri[row, bi + 1]


@njit(cache=True, nogil=True)
def _operand(kind, a, b, e, x, v, begin, row, ri, rf, rp, akind, aval, aint, out):
    """The value ``(kind, float, integer)`` of a check's operand: ``e`` is the event under check, ``x`` the
    event the transition binds to variable ``v`` (its first when ``begin``), ``row`` the node whose row
    holds the runs."""
    if kind == 0:
        return rp[7][a], rp[8][a], rp[9][a]
    if kind == 1:
        return np.int64(akind[a, e]), aval[a, e], aint[a, e]
    if kind == 2 and a == v and begin:
        return np.int64(akind[b, x]), aval[b, x], aint[b, x]
    if row < 0:
        return 0, 0.0, 0
    if kind == 2 or kind == 3:
        y = ri[row, rp[4][a] + (0 if kind == 2 else 1)]
        return np.int64(akind[b, y]), aval[b, y], aint[b, y]
    if kind == 4:
        n = ri[row, rp[4][a] + 2]
        return 4, float(n), n
    return _agg_value(ri, rf, row, a, b, rp, out)


@njit(cache=True, nogil=True)
def _checks(lo, hi, x, v, begin, row, pool, ri, rf, rp, akind, aval, aint, out):
    """Do the run checks ``lo:hi`` hold — on event ``x`` binding ``v`` after node ``row`` (a transition), or
    on the match ending at node ``row`` (``v`` = -1: when it is reported)?"""
    ck = rp[3]
    for c in range(lo, hi):
        if ck[c, 1] == 0:
            if not _check(c, ck, x, x, v, begin, row, ri, rf, rp, akind, aval, aint, out):
                return False
        else:
            u = ck[c, 2]
            nd = row
            while nd >= 0:
                if pool[nd, 1] == u:
                    if not _check(c, ck, pool[nd, 0], x, v, begin, row, ri, rf, rp, akind, aval, aint,
                                  out):
                        return False
                nd = pool[nd, 2]
    return True


@njit(cache=True, nogil=True)
def _check(c, ck, e, x, v, begin, row, ri, rf, rp, akind, aval, aint, out):
    lk, lf, li = _operand(ck[c, 3], ck[c, 4], ck[c, 5], e, x, v, begin, row, ri, rf, rp, akind, aval, aint,
                          out)
    rk, rv, rint = _operand(ck[c, 6], ck[c, 7], ck[c, 8], e, x, v, begin, row, ri, rf, rp, akind, aval, aint,
                            out)
    return _compare(lk, lf, li, ck[c, 0], rk, rv, rint)


@njit(cache=True, nogil=True)
def _reportable(q, node, pool, ri, rf, rp, akind, aval, aint, out):
    """Do the run checks left for final state ``q`` (runs of the last element) hold on the match at
    ``node``?"""
    fin_off = rp[2]
    if fin_off[q] == fin_off[q + 1]:
        return True
    return _checks(fin_off[q], fin_off[q + 1], -1, -1, False, node, pool, ri, rf, rp, akind, aval, aint, out)


@njit(cache=True, nogil=True)
def _fires(t, x, node, pool, em, tr_var, rc_off, rc_ax, rc_op, rc_w, rc_ay, pc_off, pc_ap, pc_op, pc_ax,
           akind, aval, aint, rp, ri, rf, out):
    """Does transition ``t`` fire on event ``x`` for the run whose last node is ``node``?"""
    v = tr_var[t]
    if not (em[x] >> v) & 1:
        return False
    for r in range(rc_off[t], rc_off[t + 1]):
        ax = rc_ax[r]
        op = rc_op[r]
        w = rc_w[r]
        ay = rc_ay[r]
        kx = akind[ax, x]
        vx = aval[ax, x]
        ix = aint[ax, x]
        nd = node
        while nd >= 0:
            if pool[nd, 1] == w:
                y = pool[nd, 0]
                if not _compare(kx, vx, ix, op, akind[ay, y], aval[ay, y], aint[ay, y]):
                    return False
            nd = pool[nd, 2]
    if pc_off[t] < pc_off[t + 1]:
        nd = node
        while nd >= 0 and pool[nd, 1] != v:
            nd = pool[nd, 2]
        last = pool[nd, 0]
        for p in range(pc_off[t], pc_off[t + 1]):
            ap = pc_ap[p]
            ax = pc_ax[p]
            if not _compare(akind[ap, last], aval[ap, last], aint[ap, last], pc_op[p], akind[ax, x],
                            aval[ax, x], aint[ax, x]):
                return False
    ck_off = rp[1]
    if ck_off[t] < ck_off[t + 1]:
        return _checks(ck_off[t], ck_off[t + 1], x, v, rp[0][t] == 1, node, pool, ri, rf, rp, akind, aval,
                       aint, out)
    return True


@njit(cache=True, nogil=True)
def _next_event(mask, i, end, vpos_off, vpos):
    """The first event after ``i`` (up to ``end``) that may fire one of the variables in ``mask``."""
    best = _NEVER
    v = 0
    m = mask
    while m:
        if m & 1:
            lo = vpos_off[v]
            hi = vpos_off[v + 1]
            k = lo + np.searchsorted(vpos[lo:hi], i, side="right")
            if k < hi and vpos[k] < best:
                best = vpos[k]
        m >>= 1
        v += 1
    if best > end:
        return _NEVER
    return best


@njit(cache=True, nogil=True)
def _emit(mode, keep, s, node, pool, seq, out, iv, wl):
    """Report the run ending at ``node`` (a chain of bindings) that started at event ``s``: count it, merge
    its span into the intervals, and (``MATCHES``, while fewer than ``keep`` are kept) note it for the
    window's end, where the first of the window's matches are copied out (:func:`_flush`)."""
    out[0] += 1
    if mode <= 1:
        return iv, wl
    lo = seq[s]
    hi = seq[pool[node, 0]]
    k = out[3]
    if k > 0 and lo <= iv[k - 1, 1]:
        if hi > iv[k - 1, 1]:
            iv[k - 1, 1] = hi
    else:
        iv = _grow(iv, k + 1)
        iv[k, 0] = lo
        iv[k, 1] = hi
        out[3] = k + 1
    if mode == 3 and out[7] < keep:
        w = out[8]
        wl = _grow(wl, w + 1)
        wl[w, 0] = node
        wl[w, 1] = hi
        out[8] = w + 1
    return iv, wl


@njit(cache=True, nogil=True)
def _flush(keep, s, pool, out, wl, m_start, m_off, b_var, b_pos):
    """At a window's end: copy out the bindings of its matches that can be among the first ``keep`` in
    answer order (start, end, bindings) — those with the smallest ends, ties at the cut included — so
    that what is kept stays bounded however many matches the window has."""
    w = out[8]
    need = keep - out[7]
    if w == 0 or need <= 0:
        out[8] = 0
        return m_start, m_off, b_var, b_pos
    order = np.argsort(wl[:w, 1], kind="mergesort")
    take = w
    if need < w:
        cut_end = wl[order[need - 1], 1]
        take = need
        while take < w and wl[order[take], 1] == cut_end:
            take += 1
    for i in range(take):
        node = wl[order[i], 0]
        m = out[4]
        r = out[5]
        n = 0
        nd = node
        while nd >= 0:
            if pool[nd, 1] >= 0:
                n += 1
            nd = pool[nd, 2]
        out[2] += n  # copying a run out is work too
        m_start = _grow(m_start, m + 1)
        m_off = _grow(m_off, m + 2)
        b_var = _grow(b_var, r + n)
        b_pos = _grow(b_pos, r + n)
        nd = node
        j = r + n - 1
        while nd >= 0:  # newest first: filled from the back, so the rows are in stream order
            if pool[nd, 1] >= 0:
                b_var[j] = pool[nd, 1]
                b_pos[j] = pool[nd, 0]
                j -= 1
            nd = pool[nd, 2]
        m_start[m] = s
        m_off[m] = r
        m_off[m + 1] = r + n
        out[4] = m + 1
        out[5] = r + n
    out[8] = 0
    return m_start, m_off, b_var, b_pos


@njit(cache=True, nogil=True)
def _mark(out, iv):
    """What a window's undo needs: the counters and the last interval's end."""
    last = iv[out[3] - 1, 1] if out[3] > 0 else -1
    return out[0], out[3], out[4], out[5], last


@njit(cache=True, nogil=True)
def _undo(out, iv, mark):
    out[0] = mark[0]
    out[3] = mark[1]
    out[4] = mark[2]
    out[5] = mark[3]
    if mark[1] > 0:
        iv[mark[1] - 1, 1] = mark[4]
    out[6] = 1


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
    """This module again as plain Python (no numba): the same kernels, slow, with Python's unbounded
    integers in the run rows — for the rare query whose integer sums leave int64 (``out[INEXACT]``)."""
    spec = importlib.util.spec_from_file_location(__name__ + "_python", __file__)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    module._PURE_PYTHON = True  # type: ignore[attr-defined]
    spec.loader.exec_module(module)
    return module
