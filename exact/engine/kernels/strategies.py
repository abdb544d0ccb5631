"""The strategy loops: the SES automaton run over the windows of one call, one kernel per strategy.

Each kernel is called as ``kernel(events, machine, runs, windows, found) -> found``
(:mod:`exact.engine.kernels.layout`) and runs one window per first event in ``windows.starts[first:]``, inside
the frame of :mod:`exact.engine.kernels.windows`.  Strategies (Cadonna 2013):

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

A match whose run checks left for its final state fail (:func:`exact.engine.kernels.runs.reportable`) is not
reported: skip-till-next-match then reports nothing, robust skip-till-next-match backtracks as from an
instance that is not final, the other strategies drop that match.

Plain functions: :mod:`exact.engine.kernels.factory` compiles them (numba, or plain Python).
"""

from __future__ import annotations

import numpy as np

from exact.engine.kernels.layout import (
    KIDS,
    NEVER,
    PARENT,
    POS,
    SRC,
    VAR,
    Arrays,
    Events,
    Found,
    Machine,
    RunProgram,
    Windows,
)
from exact.engine.kernels.runs import reportable
from exact.engine.kernels.transitions import bind, fires, next_event
from exact.engine.kernels.values import grow
from exact.engine.kernels.windows import (
    abandon,
    begin_call,
    call_done,
    close_window,
    emit,
    end_call,
    exists_found,
    new_nodes,
    open_window,
    over_budget,
)


def next_match(events: Events, machine: Machine, runs: RunProgram, windows: Windows, found: Found) -> Arrays:
    """Skip-till-next-match over the windows of ``windows.starts[first:]`` (see the module docstring)."""
    m = machine
    nodes = new_nodes(runs)
    ist = np.empty(16, dtype=np.int64)  # the live instances: state, last node
    ind = np.empty(16, dtype=np.int64)
    nst = np.empty(16, dtype=np.int64)  # the next event's instances
    nnd = np.empty(16, dtype=np.int64)
    steps = 0
    si = windows.first
    call0 = begin_call(found)
    while si < windows.starts.shape[0]:
        s = windows.starts[si]
        end = events.window_end[s]
        mark = open_window(found)
        window_steps = 0
        n = 0
        ninst = 0
        for t in range(m.tr_off[0], m.tr_off[1]):
            if (events.mask[s] >> m.tr_var[t]) & 1 and (
                    m.plain[t] or fires(t, s, -1, nodes, m, runs, events, found.out)):
                nodes = bind(nodes, n, s, m.tr_var[t], -1, 0, t, runs, events)
                q = m.tr_target[t]
                if m.final[q] and m.relevant[q] == 0:
                    if reportable(q, n, nodes, runs, events, found.out):
                        nodes, found = emit(s, n, nodes, events, windows, found)
                else:
                    ist = grow(ist, ninst + 1)
                    ind = grow(ind, ninst + 1)
                    ist[ninst] = q
                    ind[ninst] = n
                    ninst += 1
                n += 1
        i = s
        while ninst > 0 and not exists_found(found, windows):
            nxt = NEVER
            for k in range(ninst):
                p = next_event(m.relevant[ist[k]], i, end, events)
                if p < nxt:
                    nxt = p
            if nxt == NEVER:
                break
            window_steps += ninst
            if over_budget(window_steps, found, mark, windows):
                break
            nnew = 0
            for k in range(ninst):
                q = ist[k]
                fired = False
                if events.mask[nxt] & m.relevant[q]:
                    for t in range(m.tr_off[q], m.tr_off[q + 1]):
                        if (events.mask[nxt] >> m.tr_var[t]) & 1 and (
                                m.plain[t] or fires(t, nxt, ind[k], nodes, m, runs, events, found.out)):
                            fired = True
                            nodes = bind(nodes, n, nxt, m.tr_var[t], ind[k], q, t, runs, events)
                            target = m.tr_target[t]
                            if m.final[target] and m.relevant[target] == 0:
                                if reportable(target, n, nodes, runs, events, found.out):
                                    nodes, found = emit(s, n, nodes, events, windows, found)
                            else:
                                nst = grow(nst, nnew + 1)
                                nnd = grow(nnd, nnew + 1)
                                nst[nnew] = target
                                nnd[nnew] = n
                                nnew += 1
                            n += 1
                if not fired:
                    nst = grow(nst, nnew + 1)
                    nnd = grow(nnd, nnew + 1)
                    nst[nnew] = q
                    nnd[nnew] = ind[k]
                    nnew += 1
            ist, nst = nst, ist
            ind, nnd = nnd, ind
            ninst = nnew
            i = nxt
        if over_budget(window_steps, found, mark, windows):
            abandon(found, mark)
            break
        if not exists_found(found, windows):
            for k in range(ninst):
                if m.final[ist[k]] and reportable(ist[k], ind[k], nodes, runs, events, found.out):
                    nodes, found = emit(s, ind[k], nodes, events, windows, found)
        steps += window_steps + 1
        si += 1
        found = close_window(s, nodes, windows, found)
        if call_done(found, windows, steps, call0):
            break
    return end_call(found, si, steps)


def any_match(events: Events, machine: Machine, runs: RunProgram, windows: Windows, found: Found) -> Arrays:
    """Skip-till-any-match over the windows of ``windows.starts[first:]``: every match starting at each first
    event, depth first by the next bound event in stream order (each match once)."""
    m = machine
    nodes = new_nodes(runs)
    stack = np.empty((16, 3), dtype=np.int64)  # state, node, last event
    steps = 0
    si = windows.first
    call0 = begin_call(found)
    while si < windows.starts.shape[0]:
        s = windows.starts[si]
        end = events.window_end[s]
        mark = open_window(found)
        window_steps = 0
        n = 0
        top = 0
        for t in range(m.tr_off[0], m.tr_off[1]):
            if (events.mask[s] >> m.tr_var[t]) & 1 and (
                    m.plain[t] or fires(t, s, -1, nodes, m, runs, events, found.out)):
                nodes = bind(nodes, n, s, m.tr_var[t], -1, 0, t, runs, events)
                stack = grow(stack, top + 1)
                stack[top, 0] = m.tr_target[t]
                stack[top, 1] = n
                stack[top, 2] = s
                top += 1
                n += 1
        while top > 0 and not exists_found(found, windows):
            top -= 1
            q = stack[top, 0]
            nd = stack[top, 1]
            last = stack[top, 2]
            if m.final[q] and reportable(q, nd, nodes, runs, events, found.out):
                nodes, found = emit(s, nd, nodes, events, windows, found)
            mask = m.relevant[q]
            j = next_event(mask, last, end, events)
            while j != NEVER:
                window_steps += 1
                for t in range(m.tr_off[q], m.tr_off[q + 1]):
                    if (events.mask[j] >> m.tr_var[t]) & 1 and (
                            m.plain[t] or fires(t, j, nd, nodes, m, runs, events, found.out)):
                        nodes = bind(nodes, n, j, m.tr_var[t], nd, q, t, runs, events)
                        stack = grow(stack, top + 1)
                        stack[top, 0] = m.tr_target[t]
                        stack[top, 1] = n
                        stack[top, 2] = j
                        top += 1
                        n += 1
                j = next_event(mask, j, end, events)
            if over_budget(window_steps, found, mark, windows):
                break
        if over_budget(window_steps, found, mark, windows):
            abandon(found, mark)
            break
        steps += window_steps + 1
        si += 1
        found = close_window(s, nodes, windows, found)
        if call_done(found, windows, steps, call0):
            break
    return end_call(found, si, steps)


def contiguous(events: Events, machine: Machine, runs: RunProgram, windows: Windows, found: Found) -> Arrays:
    """Strict / partition contiguity over the windows of ``windows.starts[first:]``: the runs whose events
    are ``s, successor[s], successor[successor[s]], …`` (``-1``: the next event cannot be bound)."""
    m = machine
    nodes = new_nodes(runs)
    cur = np.empty((16, 2), dtype=np.int64)  # state, node
    nxt = np.empty((16, 2), dtype=np.int64)
    steps = 0
    si = windows.first
    call0 = begin_call(found)
    while si < windows.starts.shape[0]:
        s = windows.starts[si]
        end = events.window_end[s]
        mark = open_window(found)
        window_steps = 0
        n = 0
        ncur = 0
        for t in range(m.tr_off[0], m.tr_off[1]):
            if (events.mask[s] >> m.tr_var[t]) & 1 and (
                    m.plain[t] or fires(t, s, -1, nodes, m, runs, events, found.out)):
                nodes = bind(nodes, n, s, m.tr_var[t], -1, 0, t, runs, events)
                cur = grow(cur, ncur + 1)
                cur[ncur, 0] = m.tr_target[t]
                cur[ncur, 1] = n
                ncur += 1
                n += 1
        x = s
        while ncur > 0:
            for k in range(ncur):
                q = cur[k, 0]
                if m.final[q] and reportable(q, cur[k, 1], nodes, runs, events, found.out):
                    nodes, found = emit(s, cur[k, 1], nodes, events, windows, found)
            if exists_found(found, windows):
                break
            y = events.successor[x]
            if y < 0 or y > end:
                break
            window_steps += ncur
            if over_budget(window_steps, found, mark, windows):
                break
            nn = 0
            for k in range(ncur):
                q = cur[k, 0]
                for t in range(m.tr_off[q], m.tr_off[q + 1]):
                    if (events.mask[y] >> m.tr_var[t]) & 1 and (
                            m.plain[t] or fires(t, y, cur[k, 1], nodes, m, runs, events, found.out)):
                        nodes = bind(nodes, n, y, m.tr_var[t], cur[k, 1], q, t, runs, events)
                        nxt = grow(nxt, nn + 1)
                        nxt[nn, 0] = m.tr_target[t]
                        nxt[nn, 1] = n
                        nn += 1
                        n += 1
            cur, nxt = nxt, cur
            ncur = nn
            x = y
        if over_budget(window_steps, found, mark, windows):
            abandon(found, mark)
            break
        steps += window_steps + 1
        si += 1
        found = close_window(s, nodes, windows, found)
        if call_done(found, windows, steps, call0):
            break
    return end_call(found, si, steps)


def same_chain(pool: np.ndarray, a: int, b: int) -> bool:
    """Do the chains ending at nodes ``a`` and ``b`` bind the same events to the same variables?"""
    while True:
        while a >= 0 and pool[a, VAR] < 0:
            a = pool[a, PARENT]
        while b >= 0 and pool[b, VAR] < 0:
            b = pool[b, PARENT]
        if a < 0 or b < 0:
            return a < 0 and b < 0
        if pool[a, POS] != pool[b, POS] or pool[a, VAR] != pool[b, VAR]:
            return False
        a = pool[a, PARENT]
        b = pool[b, PARENT]


def robust_next_match(events: Events, machine: Machine, runs: RunProgram, windows: Windows, found: Found) -> Arrays:
    """Robust skip-till-next-match over the windows of ``windows.starts[first:]``: Algorithm 4 (see the module
    docstring).  Node 0 of each window's pool is the execution tree's root (variable -1)."""
    m = machine
    nodes = new_nodes(runs)
    omega = np.empty((16, 3), dtype=np.int64)  # state, node, resume after
    back = np.empty((16, 3), dtype=np.int64)
    insts = np.empty((16, 2), dtype=np.int64)  # state, node
    fresh = np.empty((16, 2), dtype=np.int64)
    results = np.empty(16, dtype=np.int64)
    steps = 0
    si = windows.first
    call0 = begin_call(found)
    while si < windows.starts.shape[0]:
        s = windows.starts[si]
        end = events.window_end[s]
        mark = open_window(found)
        window_steps = 0
        nodes = bind(nodes, 0, s - 1, -1, -1, 0, -1, runs, events)
        n = 1
        nres = 0
        nomega = 0
        for t in range(m.tr_off[0], m.tr_off[1]):
            if (events.mask[s] >> m.tr_var[t]) & 1 and (
                    m.plain[t] or fires(t, s, 0, nodes, m, runs, events, found.out)):
                nodes = bind(nodes, n, s, m.tr_var[t], 0, 0, t, runs, events)
                nodes.pool[0, KIDS] += 1
                omega = grow(omega, nomega + 1)
                omega[nomega, 0] = m.tr_target[t]
                omega[nomega, 1] = n
                omega[nomega, 2] = s
                nomega += 1
                n += 1
        first_round = True
        while nomega > 0 and window_steps <= windows.abort_steps:
            nback = 0
            nbatches = 1 if first_round else nomega
            for bi in range(nbatches):
                if first_round:  # the root's children came from one event: one forward pass for all
                    ninst = nomega
                    insts = grow(insts, ninst)
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
                    nxt = NEVER
                    for k in range(ninst):
                        p = next_event(m.relevant[insts[k, 0]], i, end, events)
                        if p < nxt:
                            nxt = p
                    if nxt == NEVER:
                        break
                    window_steps += ninst
                    if over_budget(window_steps, found, mark, windows):
                        break
                    nn = 0
                    for k in range(ninst):
                        q = insts[k, 0]
                        nd = insts[k, 1]
                        fired = False
                        if events.mask[nxt] & m.relevant[q]:
                            for t in range(m.tr_off[q], m.tr_off[q + 1]):
                                if (events.mask[nxt] >> m.tr_var[t]) & 1 and (
                                        m.plain[t] or fires(t, nxt, nd, nodes, m, runs, events, found.out)):
                                    fired = True
                                    nodes = bind(nodes, n, nxt, m.tr_var[t], nd, q, t, runs, events)
                                    nodes.pool[nd, KIDS] += 1
                                    fresh = grow(fresh, nn + 1)
                                    fresh[nn, 0] = m.tr_target[t]
                                    fresh[nn, 1] = n
                                    nn += 1
                                    n += 1
                        if not fired:
                            fresh = grow(fresh, nn + 1)
                            fresh[nn, 0] = q
                            fresh[nn, 1] = nd
                            nn += 1
                    insts, fresh = fresh, insts
                    ninst = nn
                    i = nxt
                if over_budget(window_steps, found, mark, windows):
                    break
                pool = nodes.pool
                for k in range(ninst):
                    q = insts[k, 0]
                    nd = insts[k, 1]
                    if m.final[q] and reportable(q, nd, nodes, runs, events, found.out):
                        results = grow(results, nres + 1)
                        results[nres] = nd
                        nres += 1
                        continue
                    parent = pool[nd, PARENT]
                    if parent != 0 and pool[parent, KIDS] == 1:  # backtrack the last transition (Lemma 6.1)
                        back = grow(back, nback + 1)
                        back[nback, 0] = pool[nd, SRC]
                        back[nback, 1] = parent
                        back[nback, 2] = pool[nd, POS]
                        nback += 1
                    pool[parent, KIDS] -= 1
            first_round = False
            omega, back = back, omega
            nomega = nback
        if over_budget(window_steps, found, mark, windows):
            abandon(found, mark)
            break
        for a in range(nres):
            seen = False
            for b in range(a):
                if same_chain(nodes.pool, results[a], results[b]):
                    seen = True
                    break
            if not seen:
                nodes, found = emit(s, results[a], nodes, events, windows, found)
        steps += window_steps + 1
        si += 1
        found = close_window(s, nodes, windows, found)
        if call_done(found, windows, steps, call0):
            break
    return end_call(found, si, steps)
