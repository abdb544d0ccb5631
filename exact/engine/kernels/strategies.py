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

Every strategy takes the same step (:mod:`exact.engine.kernels.transitions`, spliced into each): :func:`step`
a table of instances on an event by every transition that takes it, after making room for what it may add
(``width`` rows and nodes per instance, :func:`widest`); a window's first event is a step from the start
state.  The names: ``start`` the window's first event, ``end`` its last, ``live`` the table of the runs
alive (columns ``STATE``, ``NODE``, ``AFTER``), ``following`` the table filled for the next event, ``n``
the next free node of the pool.

Plain functions: :mod:`exact.engine.kernels.factory` compiles them (numba, or plain Python).
"""

from __future__ import annotations

import numpy as np

from exact.engine.kernels.layout import (
    AFTER,
    INSTANCE_FIELDS,
    KIDS,
    NEVER,
    NODE,
    PARENT,
    POS,
    SRC,
    STATE,
    VAR,
    Arrays,
    Events,
    Found,
    Machine,
    RunProgram,
    Windows,
)
from exact.engine.kernels.runs import reportable
from exact.engine.kernels.transitions import (
    bind,
    earliest,
    make_room,
    next_event,
    push,
    short,
    step,
    widest,
)
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


def instances() -> np.ndarray:
    """An empty instance table (grown as needed)."""
    return np.empty((16, INSTANCE_FIELDS), dtype=np.int64)


def next_match(events: Events, machine: Machine, runs: RunProgram, windows: Windows, found: Found) -> Arrays:
    """Skip-till-next-match over the windows of ``windows.starts[first:]`` (see the module docstring).  A
    window begins with one instance, the start state before its first event."""
    nodes = new_nodes(runs)
    width = widest(machine)
    live = instances()
    following = instances()
    steps = 0
    window = windows.first
    call_steps = begin_call(found)
    while window < windows.starts.shape[0]:
        start = windows.starts[window]
        end = events.window_end[start]
        mark = open_window(found)
        window_steps = 0
        push(live, 0, 0, -1, start)
        count = 1
        n = 0
        x = start
        keep_idle = False  # the first event is the window's: an instance that does not take it is no run
        while True:
            if short(nodes.pool, n, following, 0, count * width):
                nodes, following = make_room(nodes, n, following, 0, count * width)
            ahead, n = step(x, live, count, keep_idle, following, 0, n, nodes, machine, runs, events, found.out)
            count = 0
            for k in range(ahead):  # an instance in a final state with no transition left never changes again:
                state = following[k, STATE]  # its match is reported at once and it is dropped
                if machine.final[state] and machine.relevant[state] == 0:
                    if reportable(state, following[k, NODE], nodes, runs, events, found.out):
                        nodes, found = emit(start, following[k, NODE], nodes, events, windows, found)
                else:
                    push(following, count, state, following[k, NODE], following[k, AFTER])
                    count += 1
            live, following = following, live
            keep_idle = True
            if count == 0 or exists_found(found, windows):
                break
            x = earliest(live, count, x, end, machine, events)
            if x == NEVER:
                break
            window_steps += count
            if over_budget(window_steps, found, mark, windows):
                break
        if over_budget(window_steps, found, mark, windows):
            abandon(found, mark)
            break
        if not exists_found(found, windows):
            for k in range(count):
                state = live[k, STATE]
                if machine.final[state] and reportable(state, live[k, NODE], nodes, runs, events, found.out):
                    nodes, found = emit(start, live[k, NODE], nodes, events, windows, found)
        steps += window_steps + 1
        window += 1
        found = close_window(start, nodes, windows, found)
        if call_done(found, windows, steps, call_steps):
            break
    return end_call(found, window, steps)


def any_match(events: Events, machine: Machine, runs: RunProgram, windows: Windows, found: Found) -> Arrays:
    """Skip-till-any-match over the windows of ``windows.starts[first:]``: every match starting at each first
    event, depth first by the next bound event in stream order (each match once)."""
    nodes = new_nodes(runs)
    width = widest(machine)
    stack = instances()
    popped = instances()
    steps = 0
    window = windows.first
    call_steps = begin_call(found)
    while window < windows.starts.shape[0]:
        start = windows.starts[window]
        end = events.window_end[start]
        mark = open_window(found)
        window_steps = 0
        push(popped, 0, 0, -1, start)
        if short(nodes.pool, 0, stack, 0, width):
            nodes, stack = make_room(nodes, 0, stack, 0, width)
        top, n = step(start, popped, 1, False, stack, 0, 0, nodes, machine, runs, events, found.out)
        while top > 0 and not exists_found(found, windows):
            top -= 1
            state = stack[top, STATE]
            node = stack[top, NODE]
            if machine.final[state] and reportable(state, node, nodes, runs, events, found.out):
                nodes, found = emit(start, node, nodes, events, windows, found)
            relevant = machine.relevant[state]
            push(popped, 0, state, node, stack[top, AFTER])
            x = next_event(relevant, stack[top, AFTER], end, events)
            while x != NEVER:
                window_steps += 1
                if short(nodes.pool, n, stack, top, width):
                    nodes, stack = make_room(nodes, n, stack, top, width)
                top, n = step(x, popped, 1, False, stack, top, n, nodes, machine, runs, events, found.out)
                x = next_event(relevant, x, end, events)
            if over_budget(window_steps, found, mark, windows):
                break
        if over_budget(window_steps, found, mark, windows):
            abandon(found, mark)
            break
        steps += window_steps + 1
        window += 1
        found = close_window(start, nodes, windows, found)
        if call_done(found, windows, steps, call_steps):
            break
    return end_call(found, window, steps)


def contiguous(events: Events, machine: Machine, runs: RunProgram, windows: Windows, found: Found) -> Arrays:
    """Strict / partition contiguity over the windows of ``windows.starts[first:]``: the runs whose events
    are ``start, successor[start], successor[successor[start]], …`` (``-1``: the next event cannot be
    bound).  A window begins with one instance, the start state before its first event."""
    nodes = new_nodes(runs)
    width = widest(machine)
    live = instances()
    following = instances()
    steps = 0
    window = windows.first
    call_steps = begin_call(found)
    while window < windows.starts.shape[0]:
        start = windows.starts[window]
        end = events.window_end[start]
        mark = open_window(found)
        window_steps = 0
        push(live, 0, 0, -1, start)
        count = 1
        n = 0
        x = start
        while True:
            if short(nodes.pool, n, following, 0, count * width):
                nodes, following = make_room(nodes, n, following, 0, count * width)
            count, n = step(x, live, count, False, following, 0, n, nodes, machine, runs, events, found.out)
            live, following = following, live
            if count == 0:
                break
            for k in range(count):
                state = live[k, STATE]
                if machine.final[state] and reportable(state, live[k, NODE], nodes, runs, events, found.out):
                    nodes, found = emit(start, live[k, NODE], nodes, events, windows, found)
            if exists_found(found, windows):
                break
            x = events.successor[x]
            if x < 0 or x > end:
                break
            window_steps += count
            if over_budget(window_steps, found, mark, windows):
                break
        if over_budget(window_steps, found, mark, windows):
            abandon(found, mark)
            break
        steps += window_steps + 1
        window += 1
        found = close_window(start, nodes, windows, found)
        if call_done(found, windows, steps, call_steps):
            break
    return end_call(found, window, steps)


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
    docstring).  Node 0 of each window's pool is the execution tree's root (variable -1).  ``pending`` holds
    the instances still to run forward (the tree's frontier, Ω), ``backtracked`` those the current round
    backtracks for the next one, each resuming after its ``AFTER`` event."""
    nodes = new_nodes(runs)
    width = widest(machine)
    pending = instances()
    backtracked = instances()
    live = instances()
    following = instances()
    results = np.empty(16, dtype=np.int64)
    steps = 0
    window = windows.first
    call_steps = begin_call(found)
    while window < windows.starts.shape[0]:
        start = windows.starts[window]
        end = events.window_end[start]
        mark = open_window(found)
        window_steps = 0
        bind(nodes, 0, start - 1, -1, -1, 0, -1, runs, events)
        push(live, 0, 0, 0, start)
        if short(nodes.pool, 1, pending, 0, width):
            nodes, pending = make_room(nodes, 1, pending, 0, width)
        npending, n = step(start, live, 1, False, pending, 0, 1, nodes, machine, runs, events, found.out)
        nresults = 0
        first_round = True
        while npending > 0 and window_steps <= windows.abort_steps:
            nbacktracked = 0
            nbatches = 1 if first_round else npending
            for batch in range(nbatches):
                if first_round:  # the root's children came from one event: one forward pass for all
                    count = npending
                    if count > live.shape[0]:
                        live = grow(live, count)
                    for k in range(count):
                        push(live, k, pending[k, STATE], pending[k, NODE], pending[k, AFTER])
                else:
                    count = 1
                    push(live, 0, pending[batch, STATE], pending[batch, NODE], pending[batch, AFTER])
                i = live[0, AFTER]
                while count > 0:
                    x = earliest(live, count, i, end, machine, events)
                    if x == NEVER:
                        break
                    window_steps += count
                    if over_budget(window_steps, found, mark, windows):
                        break
                    if short(nodes.pool, n, following, 0, count * width):
                        nodes, following = make_room(nodes, n, following, 0, count * width)
                    count, n = step(x, live, count, True, following, 0, n, nodes, machine, runs, events, found.out)
                    live, following = following, live
                    i = x
                if over_budget(window_steps, found, mark, windows):
                    break
                pool = nodes.pool
                for k in range(count):
                    state = live[k, STATE]
                    node = live[k, NODE]
                    if machine.final[state] and reportable(state, node, nodes, runs, events, found.out):
                        results = grow(results, nresults + 1)
                        results[nresults] = node
                        nresults += 1
                        continue
                    parent = pool[node, PARENT]
                    if parent != 0 and pool[parent, KIDS] == 1:  # backtrack the last transition (Lemma 6.1)
                        if nbacktracked >= backtracked.shape[0]:
                            backtracked = grow(backtracked, nbacktracked + 1)
                        push(backtracked, nbacktracked, pool[node, SRC], parent, pool[node, POS])
                        nbacktracked += 1
                    pool[parent, KIDS] -= 1
            first_round = False
            pending, backtracked = backtracked, pending
            npending = nbacktracked
        if over_budget(window_steps, found, mark, windows):
            abandon(found, mark)
            break
        for a in range(nresults):
            seen = False
            for b in range(a):
                if same_chain(nodes.pool, results[a], results[b]):
                    seen = True
                    break
            if not seen:
                nodes, found = emit(start, results[a], nodes, events, windows, found)
        steps += window_steps + 1
        window += 1
        found = close_window(start, nodes, windows, found)
        if call_done(found, windows, steps, call_steps):
            break
    return end_call(found, window, steps)
