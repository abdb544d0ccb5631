"""The automaton's steps inside the compiled kernels (numba): values, runs, transitions, what is reported.

The strategy loops of :mod:`exact.engine.kernels` are built from these:

* comparison by the project's rule (:func:`_compare`; :func:`exact.query.normalize.compare`): a null operand is
  false, values of different kinds are never equal, integers compare exactly with integers and with floats;
* the pool of nodes a run's bindings are chained through (:func:`_push`), and for Kleene runs with SASE+
  conditions the run rows (:func:`_push_run`, :func:`_fold`) and the conditions on them (:func:`_checks`,
  :func:`_reportable`), with the values of :func:`exact.query.operands.aggregate`;
* a transition's conditions (:func:`_fires`, Cadonna's ``Θ_δ``: properties, relationships read
  symmetrically with ∀ over Kleene bindings, ``prev``, run conditions), the next event that may change a run
  (:func:`_next_event`, lazily, after Kolchinsky & Schuster);
* what a window reports (:func:`_emit`, :func:`_flush`) and its undoing when it is abandoned
  (:func:`_mark`, :func:`_undo`).

Like :mod:`exact.engine.kernels`, this module is loaded a second time as plain Python for the rare query whose
integer sums leave int64 (:func:`exact.engine.kernels.python_kernels`).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

#: True in the pure-Python copy of this module (:func:`python_kernels`), where integers are Python's own.
_PYTHON = bool(globals().get("_PURE_PYTHON", False))
if _PYTHON:
    def njit(*_args, **_kwargs):  # noqa: ANN202 - the identity decorator of the Python copy
        return lambda f: f
else:
    from numba import njit


def date_after_parts(kernels: Path) -> None:
    """``kernels``, the compiled kernels' module (:mod:`exact.engine.kernels`), dated no earlier than this one.

    numba keys a cached kernel on its own source file's time and size only, yet the kernels are compiled
    with the functions of this module inlined: an update that changed only this module would keep
    running the old machine code.  So the kernels' file is dated no earlier than its parts' — a newer
    part makes numba compile the kernels again, once."""
    try:
        parts = Path(__file__).stat().st_mtime_ns
        if parts > kernels.stat().st_mtime_ns:
            os.utime(kernels, ns=(parts, parts))
    except OSError:
        pass  # a read-only installation: its files only change together, when it is installed again


if not _PYTHON:
    date_after_parts(Path(__file__).with_name("kernels.py"))


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
    2 string (by rank), 3 boolean.  Operators as :data:`exact.query.ast.OPERATORS` orders them: = != < <= > >=."""
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
# ``rp`` is a query's run program (:class:`exact.engine.program.RunTables`) as a tuple: tr_begin, ck_off, fin_off,
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
    as :func:`exact.query.operands.aggregate` computes: nulls skipped; sum/avg over numbers only, integers exactly
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
