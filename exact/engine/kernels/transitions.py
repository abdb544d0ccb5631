"""The automaton's step inside the kernels: does a transition fire, bind the event, which event comes next.

A run's bindings are a chain of nodes (event, variable, parent) in a pool that is reset per window (for the
robust strategy the nodes are the execution tree's); :func:`bind` adds one, with its run row.  A transition
fires (:func:`fires`, Cadonna's ``Θ_δ``) when the event has its variable's properties and its conditions
hold: a relation between two variables for every event bound to the other one (∀, walking the chain),
``prev`` against the variable's last event, the run checks it decides.  :func:`next_event` jumps to the next
event that can change a run (lazily, after Kolchinsky & Schuster).

Plain functions: :mod:`exact.engine.kernels.factory` compiles them into the kernels.
"""

from __future__ import annotations

import numpy as np

from exact.engine.kernels.layout import KIDS, NEVER, PARENT, POS, SRC, VAR, Events, Machine, Nodes, RunProgram, Step
from exact.engine.kernels.runs import checks, push_run
from exact.engine.kernels.values import compare, grow


def bind(nodes: Nodes, n: int, x: int, var: int, parent: int, src: int, t: int, runs: RunProgram,
         events: Events) -> Nodes:
    """``nodes`` with node ``n``: event ``x`` bound to ``var`` after node ``parent`` by transition ``t`` from
    state ``src`` (``t`` = -1, ``var`` = -1: a tree's root), and its run row when the query has runs."""
    if n >= nodes.pool.shape[0]:
        nodes = Nodes(grow(nodes.pool, n + 1), nodes.ri, nodes.rf, nodes.noted)
    pool = nodes.pool
    pool[n, POS] = x
    pool[n, VAR] = var
    pool[n, PARENT] = parent
    pool[n, SRC] = src
    pool[n, KIDS] = 0
    if nodes.ri.shape[1] == 0:
        return nodes
    ri, rf = push_run(nodes, n, parent, x, t, var, runs, events)
    return Nodes(pool, ri, rf, nodes.noted)


def fires(t: int, x: int, node: int, nodes: Nodes, machine: Machine, runs: RunProgram, events: Events,
          out: np.ndarray) -> bool:
    """Does transition ``t`` fire on event ``x`` for the run whose last node is ``node``?"""
    v = machine.tr_var[t]
    if not (events.mask[x] >> v) & 1:
        return False
    pool = nodes.pool
    kind = events.kind
    value = events.value
    integer = events.integer
    for r in range(machine.rc_off[t], machine.rc_off[t + 1]):
        ax = machine.rc_ax[r]
        op = machine.rc_op[r]
        w = machine.rc_w[r]
        ay = machine.rc_ay[r]
        kx = kind[ax, x]
        vx = value[ax, x]
        ix = integer[ax, x]
        nd = node
        while nd >= 0:
            if pool[nd, VAR] == w:
                y = pool[nd, POS]
                if not compare(kx, vx, ix, op, kind[ay, y], value[ay, y], integer[ay, y]):
                    return False
            nd = pool[nd, PARENT]
    if machine.pc_off[t] < machine.pc_off[t + 1]:
        nd = node
        while nd >= 0 and pool[nd, VAR] != v:
            nd = pool[nd, PARENT]
        last = pool[nd, POS]
        for p in range(machine.pc_off[t], machine.pc_off[t + 1]):
            ap = machine.pc_ap[p]
            ax = machine.pc_ax[p]
            if not compare(kind[ap, last], value[ap, last], integer[ap, last], machine.pc_op[p], kind[ax, x],
                           value[ax, x], integer[ax, x]):
                return False
    ck_off = runs.ck_off
    if ck_off[t] < ck_off[t + 1]:
        return checks(ck_off[t], ck_off[t + 1], Step(x, v, runs.tr_begin[t] == 1, node), nodes, runs, events, out)
    return True


def next_event(mask: int, i: int, end: int, events: Events) -> int:
    """The first event after ``i`` (up to ``end``) that may fire one of the variables in ``mask``."""
    var_off = events.var_off
    var_pos = events.var_pos
    best = NEVER
    v = 0
    m = mask
    while m:
        if m & 1:
            lo = var_off[v]
            hi = var_off[v + 1]
            k = lo + np.searchsorted(var_pos[lo:hi], i, side="right")
            if k < hi and var_pos[k] < best:
                best = var_pos[k]
        m >>= 1
        v += 1
    if best > end:
        return NEVER
    return best
