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
different kinds are never equal.

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

import numpy as np
from numba import njit

#: Modes: what a kernel keeps.
EXISTS, COUNT, SPANS, MATCHES = 0, 1, 2, 3
#: Fields of a kernel's ``out`` counters.
FOUND, NEXT, STEPS, INTERVALS, KEPT, ROWS, ABORTED, DONE_FOUND = range(8)
OUT_FIELDS = 8
#: Node fields of the pool.
_POS, _VAR, _PARENT, _SRC, _KIDS = 0, 1, 2, 3, 4

_NEVER = 1 << 62


@njit(cache=True, nogil=True)
def _compare(kx, vx, ix, op, ky, vy, iy):
    """``x op y`` by the project's rule: null → false; different kinds: only ``!=`` holds.  Kinds: 0 null,
    1 float, 4 integer (both numbers: two integers compare exactly as integers), 2 string (by rank),
    3 boolean.  Operators as :data:`exact.ast.OPERATORS` orders them: = != < <= > >=."""
    if kx == 0 or ky == 0:
        return False
    if kx == 4 and ky == 4:
        if op == 0:
            return ix == iy
        if op == 1:
            return ix != iy
        if op == 2:
            return ix < iy
        if op == 3:
            return ix <= iy
        if op == 4:
            return ix > iy
        return ix >= iy
    if kx == 4:
        kx = 1
    if ky == 4:
        ky = 1
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


@njit(cache=True, nogil=True)
def _fires(t, x, node, pool, em, tr_var, rc_off, rc_ax, rc_op, rc_w, rc_ay, pc_off, pc_ap, pc_op, pc_ax,
           akind, aval, aint):
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
def _emit(mode, keep, s, node, pool, seq, out, iv, m_start, m_off, b_var, b_pos):
    """Report the run ending at ``node`` (a chain of bindings) that started at event ``s``."""
    out[0] += 1
    if mode == 0:
        return iv, m_start, m_off, b_var, b_pos
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
        m = out[4]
        r = out[5]
        n = 0
        nd = node
        while nd >= 0:
            if pool[nd, 1] >= 0:
                n += 1
            nd = pool[nd, 2]
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
    return iv, m_start, m_off, b_var, b_pos


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
               rc_off, rc_ax, rc_op, rc_w, rc_ay, pc_off, pc_ap, pc_op, pc_ax, akind, aval, aint,
               mode, keep, first, max_steps, abort_steps, out, iv, m_start, m_off, b_var, b_pos):
    """Skip-till-next-match over the windows of ``starts[first:]`` (see the module docstring)."""
    pool = np.empty((64, 5), dtype=np.int64)
    ist = np.empty(16, dtype=np.int64)
    ind = np.empty(16, dtype=np.int64)
    nst = np.empty(16, dtype=np.int64)
    nnd = np.empty(16, dtype=np.int64)
    steps = 0
    si = first
    out[6] = 0
    while si < starts.shape[0]:
        s = starts[si]
        end = wend[s]
        mark = _mark(out, iv)
        window_steps = 0
        nodes = 0
        ninst = 0
        for t in range(tr_off[0], tr_off[1]):
            if _fires(t, s, -1, pool, em, tr_var, rc_off, rc_ax, rc_op, rc_w, rc_ay, pc_off, pc_ap, pc_op,
                      pc_ax, akind, aval, aint):
                pool = _push(pool, nodes, s, tr_var[t], -1, 0)
                q = tr_target[t]
                if st_final[q] and st_rel[q] == 0:
                    iv, m_start, m_off, b_var, b_pos = _emit(mode, keep, s, nodes, pool, seq, out, iv,
                                                             m_start, m_off, b_var, b_pos)
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
            if window_steps > abort_steps:
                break
            nnew = 0
            for k in range(ninst):
                q = ist[k]
                fired = False
                if em[nxt] & st_rel[q]:
                    for t in range(tr_off[q], tr_off[q + 1]):
                        if _fires(t, nxt, ind[k], pool, em, tr_var, rc_off, rc_ax, rc_op, rc_w, rc_ay, pc_off,
                                  pc_ap, pc_op, pc_ax, akind, aval, aint):
                            fired = True
                            pool = _push(pool, nodes, nxt, tr_var[t], ind[k], q)
                            target = tr_target[t]
                            if st_final[target] and st_rel[target] == 0:
                                iv, m_start, m_off, b_var, b_pos = _emit(mode, keep, s, nodes, pool, seq, out,
                                                                         iv, m_start, m_off, b_var, b_pos)
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
        if window_steps > abort_steps:
            _undo(out, iv, mark)
            break
        if not (mode == 0 and out[0] > 0):
            for k in range(ninst):
                if st_final[ist[k]]:
                    iv, m_start, m_off, b_var, b_pos = _emit(mode, keep, s, ind[k], pool, seq, out, iv,
                                                             m_start, m_off, b_var, b_pos)
        steps += window_steps + 1
        si += 1
        out[7] = out[0]
        if mode == 0 and out[0] > 0:
            break
        if mode == 3 and out[0] >= keep:
            break
        if steps >= max_steps:
            break
    out[1] = si
    out[2] += steps
    return iv, m_start, m_off, b_var, b_pos


@njit(cache=True, nogil=True)
def any_match(starts, wend, em, seq, vpos_off, vpos, st_final, st_rel, tr_off, tr_var, tr_target,
              rc_off, rc_ax, rc_op, rc_w, rc_ay, pc_off, pc_ap, pc_op, pc_ax, akind, aval, aint,
              mode, keep, first, max_steps, abort_steps, out, iv, m_start, m_off, b_var, b_pos):
    """Skip-till-any-match over the windows of ``starts[first:]``: every match starting at each first
    event, depth first by the next bound event in stream order (each match once)."""
    pool = np.empty((64, 5), dtype=np.int64)
    stack = np.empty((16, 3), dtype=np.int64)  # state, node, last event
    steps = 0
    si = first
    out[6] = 0
    while si < starts.shape[0]:
        s = starts[si]
        end = wend[s]
        mark = _mark(out, iv)
        window_steps = 0
        nodes = 0
        top = 0
        for t in range(tr_off[0], tr_off[1]):
            if _fires(t, s, -1, pool, em, tr_var, rc_off, rc_ax, rc_op, rc_w, rc_ay, pc_off, pc_ap, pc_op,
                      pc_ax, akind, aval, aint):
                pool = _push(pool, nodes, s, tr_var[t], -1, 0)
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
            if st_final[q]:
                iv, m_start, m_off, b_var, b_pos = _emit(mode, keep, s, nd, pool, seq, out, iv, m_start,
                                                         m_off, b_var, b_pos)
            mask = st_rel[q]
            j = _next_event(mask, last, end, vpos_off, vpos)
            while j != _NEVER:
                window_steps += 1
                for t in range(tr_off[q], tr_off[q + 1]):
                    if _fires(t, j, nd, pool, em, tr_var, rc_off, rc_ax, rc_op, rc_w, rc_ay, pc_off, pc_ap,
                              pc_op, pc_ax, akind, aval, aint):
                        pool = _push(pool, nodes, j, tr_var[t], nd, q)
                        stack = _grow(stack, top + 1)
                        stack[top, 0] = tr_target[t]
                        stack[top, 1] = nodes
                        stack[top, 2] = j
                        top += 1
                        nodes += 1
                j = _next_event(mask, j, end, vpos_off, vpos)
            if window_steps > abort_steps:
                break
        if window_steps > abort_steps:
            _undo(out, iv, mark)
            break
        steps += window_steps + 1
        si += 1
        out[7] = out[0]
        if mode == 0 and out[0] > 0:
            break
        if mode == 3 and out[0] >= keep:
            break
        if steps >= max_steps:
            break
    out[1] = si
    out[2] += steps
    return iv, m_start, m_off, b_var, b_pos


@njit(cache=True, nogil=True)
def contiguous(starts, wend, em, seq, successor, st_final, tr_off, tr_var, tr_target,
               rc_off, rc_ax, rc_op, rc_w, rc_ay, pc_off, pc_ap, pc_op, pc_ax, akind, aval, aint,
               mode, keep, first, max_steps, abort_steps, out, iv, m_start, m_off, b_var, b_pos):
    """Strict / partition contiguity over the windows of ``starts[first:]``: the runs whose events are
    ``s, successor[s], successor[successor[s]], …`` (``-1``: the next event cannot be bound)."""
    pool = np.empty((64, 5), dtype=np.int64)
    cur = np.empty((16, 2), dtype=np.int64)  # state, node
    nxt = np.empty((16, 2), dtype=np.int64)
    steps = 0
    si = first
    out[6] = 0
    while si < starts.shape[0]:
        s = starts[si]
        end = wend[s]
        mark = _mark(out, iv)
        window_steps = 0
        nodes = 0
        ncur = 0
        for t in range(tr_off[0], tr_off[1]):
            if _fires(t, s, -1, pool, em, tr_var, rc_off, rc_ax, rc_op, rc_w, rc_ay, pc_off, pc_ap, pc_op,
                      pc_ax, akind, aval, aint):
                pool = _push(pool, nodes, s, tr_var[t], -1, 0)
                cur = _grow(cur, ncur + 1)
                cur[ncur, 0] = tr_target[t]
                cur[ncur, 1] = nodes
                ncur += 1
                nodes += 1
        x = s
        while ncur > 0:
            for k in range(ncur):
                if st_final[cur[k, 0]]:
                    iv, m_start, m_off, b_var, b_pos = _emit(mode, keep, s, cur[k, 1], pool, seq, out, iv,
                                                             m_start, m_off, b_var, b_pos)
            if mode == 0 and out[0] > 0:
                break
            y = successor[x]
            if y < 0 or y > end:
                break
            window_steps += ncur
            if window_steps > abort_steps:
                break
            nn = 0
            for k in range(ncur):
                q = cur[k, 0]
                for t in range(tr_off[q], tr_off[q + 1]):
                    if _fires(t, y, cur[k, 1], pool, em, tr_var, rc_off, rc_ax, rc_op, rc_w, rc_ay, pc_off,
                              pc_ap, pc_op, pc_ax, akind, aval, aint):
                        pool = _push(pool, nodes, y, tr_var[t], cur[k, 1], q)
                        nxt = _grow(nxt, nn + 1)
                        nxt[nn, 0] = tr_target[t]
                        nxt[nn, 1] = nodes
                        nn += 1
                        nodes += 1
            cur, nxt = nxt, cur
            ncur = nn
            x = y
        if window_steps > abort_steps:
            _undo(out, iv, mark)
            break
        steps += window_steps + 1
        si += 1
        out[7] = out[0]
        if mode == 0 and out[0] > 0:
            break
        if mode == 3 and out[0] >= keep:
            break
        if steps >= max_steps:
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
                      rc_off, rc_ax, rc_op, rc_w, rc_ay, pc_off, pc_ap, pc_op, pc_ax, akind, aval, aint,
                      mode, keep, first, max_steps, abort_steps, out, iv, m_start, m_off, b_var, b_pos):
    """Robust skip-till-next-match over the windows of ``starts[first:]``: Algorithm 4 (see the module
    docstring).  Node 0 of each window's pool is the execution tree's root (variable -1)."""
    pool = np.empty((64, 5), dtype=np.int64)
    omega = np.empty((16, 3), dtype=np.int64)  # state, node, resume after
    back = np.empty((16, 3), dtype=np.int64)
    insts = np.empty((16, 2), dtype=np.int64)
    fresh = np.empty((16, 2), dtype=np.int64)
    results = np.empty(16, dtype=np.int64)
    steps = 0
    si = first
    out[6] = 0
    while si < starts.shape[0]:
        s = starts[si]
        end = wend[s]
        mark = _mark(out, iv)
        window_steps = 0
        pool = _push(pool, 0, s - 1, -1, -1, 0)
        nodes = 1
        nres = 0
        nomega = 0
        for t in range(tr_off[0], tr_off[1]):
            if _fires(t, s, 0, pool, em, tr_var, rc_off, rc_ax, rc_op, rc_w, rc_ay, pc_off, pc_ap, pc_op,
                      pc_ax, akind, aval, aint):
                pool = _push(pool, nodes, s, tr_var[t], 0, 0)
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
                    if window_steps > abort_steps:
                        break
                    nn = 0
                    for k in range(ninst):
                        q = insts[k, 0]
                        nd = insts[k, 1]
                        fired = False
                        if em[nxt] & st_rel[q]:
                            for t in range(tr_off[q], tr_off[q + 1]):
                                if _fires(t, nxt, nd, pool, em, tr_var, rc_off, rc_ax, rc_op, rc_w, rc_ay,
                                          pc_off, pc_ap, pc_op, pc_ax, akind, aval, aint):
                                    fired = True
                                    pool = _push(pool, nodes, nxt, tr_var[t], nd, q)
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
                if window_steps > abort_steps:
                    break
                for k in range(ninst):
                    q = insts[k, 0]
                    nd = insts[k, 1]
                    if st_final[q]:
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
        if window_steps > abort_steps:
            _undo(out, iv, mark)
            break
        for a in range(nres):
            seen = False
            for b in range(a):
                if _same_chain(pool, results[a], results[b]):
                    seen = True
                    break
            if not seen:
                iv, m_start, m_off, b_var, b_pos = _emit(mode, keep, s, results[a], pool, seq, out, iv,
                                                         m_start, m_off, b_var, b_pos)
        steps += window_steps + 1
        si += 1
        out[7] = out[0]
        if mode == 0 and out[0] > 0:
            break
        if mode == 3 and out[0] >= keep:
            break
        if steps >= max_steps:
            break
    out[1] = si
    out[2] += steps
    return iv, m_start, m_off, b_var, b_pos
