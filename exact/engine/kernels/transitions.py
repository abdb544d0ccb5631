"""The automaton's step inside the kernels, the one every strategy takes: a transition taken, the event bound.

A run's bindings are a chain of nodes (event, variable, parent) in a pool that is reset per window (for the
robust strategy the nodes are the execution tree's); :func:`bind` adds one, with its run row.  A transition
takes an event (in :func:`step`, Cadonna's ``Θ_δ``) when the event has its variable's properties and the
transition is plain or its conditions hold (:func:`holds`): a relation between two variables for every
event bound to the other one (∀, walking the chain), ``prev`` against the variable's last event, the run
checks it decides.
:func:`next_event` jumps to the next event that can change a run (lazily, after Kolchinsky & Schuster).

The runs alive in a window are rows of an instance table (columns ``STATE``, ``NODE``, ``AFTER`` of
:mod:`exact.engine.kernels.layout`): :func:`step` takes every transition of each instance of a table on
one event and pushes the instances they lead to, :func:`earliest` finds the next event any instance of a
table can use.  Both are spliced into the strategies (:data:`exact.engine.kernels.factory.SPLICED`).  They
write in place and return counts only: the caller makes room first (:func:`short`, :func:`make_room`;
``widest`` rows and nodes for each instance), so that no array changes hands in the loops a strategy runs
for every event.

Plain functions: :mod:`exact.engine.kernels.factory` compiles them into the kernels.
"""

from __future__ import annotations

import numpy as np

from exact.engine.kernels.layout import (
    AFTER,
    KIDS,
    NEVER,
    NODE,
    PARENT,
    POS,
    SRC,
    STATE,
    VAR,
    Events,
    Machine,
    Nodes,
    RunProgram,
    Step,
)
from exact.engine.kernels.runs import checks, push_run
from exact.engine.kernels.values import compare, grow


def room(nodes: Nodes, need: int) -> Nodes:
    """``nodes``, or a copy whose pool and run rows have room for ``need`` nodes."""
    if need <= nodes.pool.shape[0]:
        return nodes
    return Nodes(grow(nodes.pool, need), grow(nodes.ri, need), grow(nodes.rf, need), nodes.noted)


def short(pool: np.ndarray, n: int, table: np.ndarray, count: int, need: int) -> bool:
    """Do ``pool`` (from node ``n``) or ``table`` (from row ``count``) lack room for ``need`` more?"""
    return bool(n + need > pool.shape[0] or count + need > table.shape[0])


def make_room(nodes: Nodes, n: int, table: np.ndarray, count: int, need: int) -> tuple[Nodes, np.ndarray]:
    """``nodes`` and ``table`` with room for ``need`` more nodes from ``n`` and rows from ``count``."""
    return room(nodes, n + need), grow(table, count + need)


def widest(machine: Machine) -> int:
    """The most transitions any state has: the most instances (and nodes) one instance advances to."""
    most = 1
    for q in range(machine.tr_off.shape[0] - 1):
        most = max(most, machine.tr_off[q + 1] - machine.tr_off[q])
    return most


def bind(nodes: Nodes, n: int, x: int, var: int, parent: int, src: int, t: int, runs: RunProgram,
         events: Events) -> None:
    """Node ``n`` (room made for it): event ``x`` bound to ``var`` after node ``parent`` by transition ``t``
    from state ``src`` (``t`` = -1, ``var`` = -1: a tree's root), and its run row when the query has runs;
    the parent counts it among its children (which only the robust strategy's execution tree reads)."""
    pool = nodes.pool
    pool[n, POS] = x
    pool[n, VAR] = var
    pool[n, PARENT] = parent
    pool[n, SRC] = src
    pool[n, KIDS] = 0
    if parent >= 0:
        pool[parent, KIDS] += 1
    if nodes.ri.shape[1] > 0:
        push_run(nodes, n, parent, x, t, var, runs, events)


def holds(t: int, x: int, node: int, nodes: Nodes, machine: Machine, runs: RunProgram, events: Events,
          out: np.ndarray) -> bool:
    """Do the conditions of transition ``t`` hold for event ``x`` after node ``node`` (:func:`step` has
    checked the variable's properties)?"""
    var = machine.tr_var[t]
    pool = nodes.pool
    kind = events.kind
    value = events.value
    integer = events.integer
    for r in range(machine.rc_off[t], machine.rc_off[t + 1]):  # relations: x against every event of `other`
        attr = machine.rc_ax[r]
        op = machine.rc_op[r]
        other = machine.rc_w[r]
        other_attr = machine.rc_ay[r]
        x_kind = kind[attr, x]
        x_value = value[attr, x]
        x_int = integer[attr, x]
        walked = node
        while walked >= 0:
            if pool[walked, VAR] == other:
                y = pool[walked, POS]
                if not compare(x_kind, x_value, x_int, op, kind[other_attr, y], value[other_attr, y],
                               integer[other_attr, y]):
                    return False
            walked = pool[walked, PARENT]
    if machine.pc_off[t] < machine.pc_off[t + 1]:  # prev: the variable's last event against x
        walked = node
        while walked >= 0 and pool[walked, VAR] != var:
            walked = pool[walked, PARENT]
        last = pool[walked, POS]
        for p in range(machine.pc_off[t], machine.pc_off[t + 1]):
            last_attr = machine.pc_ap[p]
            attr = machine.pc_ax[p]
            if not compare(kind[last_attr, last], value[last_attr, last], integer[last_attr, last], machine.pc_op[p],
                           kind[attr, x], value[attr, x], integer[attr, x]):
                return False
    ck_off = runs.ck_off
    if ck_off[t] < ck_off[t + 1]:
        return checks(ck_off[t], ck_off[t + 1], Step(x, var, runs.tr_begin[t] == 1, node), nodes, runs, events, out)
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


def push(table: np.ndarray, count: int, state: int, node: int, after: int) -> None:
    """Row ``count`` of ``table`` (room made for it): the instance in ``state`` whose run ends at ``node`` and
    goes on after event ``after``."""
    table[count, STATE] = state
    table[count, NODE] = node
    table[count, AFTER] = after


def step(x: int, live: np.ndarray, count: int, keep_idle: bool, table: np.ndarray, ahead: int, n: int, nodes: Nodes,
         machine: Machine, runs: RunProgram, events: Events, out: np.ndarray) -> tuple[int, int]:
    """The instances ``live[:count]`` meet event ``x``.  Every transition of an instance's state that takes
    ``x`` binds ``x`` as the next new node (``n``, ``n + 1``, …) and pushes the instance it
    leads to (its target state, its node, ``x``) onto ``table`` from row ``ahead``, in order; with
    ``keep_idle``, an instance that takes no transition on ``x`` is pushed as it is.  Room is made by the
    caller (``widest`` rows and nodes for each instance).  Returns ``table``'s count and the next new node."""
    mask = events.mask[x]
    for k in range(count):
        state = live[k, STATE]
        node = live[k, NODE]
        before = ahead
        if mask & machine.relevant[state]:
            for t in range(machine.tr_off[state], machine.tr_off[state + 1]):
                if (mask >> machine.tr_var[t]) & 1 and (
                        machine.plain[t] or holds(t, x, node, nodes, machine, runs, events, out)):
                    bind(nodes, n, x, machine.tr_var[t], node, state, t, runs, events)
                    push(table, ahead, machine.tr_target[t], n, x)
                    ahead += 1
                    n += 1
        if keep_idle and ahead == before:
            push(table, ahead, state, node, live[k, AFTER])
            ahead += 1
    return ahead, n


def earliest(live: np.ndarray, count: int, i: int, end: int, machine: Machine, events: Events) -> int:
    """The first event after ``i`` (up to ``end``) that may take a transition of one of the instances
    ``live[:count]`` (``NEVER``: none)."""
    best = NEVER
    for k in range(count):
        p = next_event(machine.relevant[live[k, STATE]], i, end, events)
        if p < best:
            best = p
    return best
