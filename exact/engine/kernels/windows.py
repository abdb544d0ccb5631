"""A kernel call's windows: their set-up and tear-down, what a window reports, and its undoing.

Every strategy runs the same frame around its own search (:mod:`exact.engine.kernels.strategies`)::

    nodes = new_nodes(runs); steps = 0; si = windows.first; call0 = begin_call(found)
    while si < len(windows.starts):
        s = windows.starts[si]; mark = open_window(found)
        … the strategy's search from s, reporting with emit() …
        if over_budget(window_steps, found, mark, windows): abandon(found, mark); break
        steps += window_steps + 1; si += 1
        found = close_window(s, nodes, windows, found)
        if call_done(found, windows, steps, call0): break
    return end_call(found, si, steps)

What a kernel keeps depends on ``windows.mode``: ``EXISTS`` stops at the first match, ``COUNT`` counts,
``SPANS`` also merges match spans into intervals as it goes (matches come in order of their first event),
``MATCHES`` also keeps the bindings of whole windows while fewer than ``keep`` matches are kept.  A call
returns after the window in which its work passes ``max_steps`` — the caller reads its clock and calls again
from ``out[NEXT]`` — and abandons a window whose own work passes ``abort_steps``, undoing what that window
reported (``out[ABORTED]``), so that no single window holds a query past its time limit.

Plain functions: :mod:`exact.engine.kernels.factory` compiles them into the kernels.
"""

from __future__ import annotations

import numpy as np

from exact.engine.kernels.layout import (
    ABORTED,
    DONE_FOUND,
    EXISTS,
    FOUND,
    INTERVALS,
    KEPT,
    MATCHES,
    NEXT,
    NODE_FIELDS,
    PARENT,
    POS,
    ROWS,
    SPANS,
    STEPS,
    VAR,
    WINDOW_NOTED,
    Arrays,
    Events,
    Found,
    Mark,
    Nodes,
    RunProgram,
    Windows,
)
from exact.engine.kernels.values import grow


def new_nodes(runs: RunProgram) -> Nodes:
    """A call's empty working memory (grown as needed), with run rows as wide as ``runs`` needs."""
    return Nodes(np.empty((64, NODE_FIELDS), dtype=np.int64),
                 np.zeros((64, runs.int_row.shape[1]), dtype=runs.int_row.dtype),
                 np.zeros((64, runs.float_row.shape[1]), dtype=np.float64),
                 np.empty((16, 2), dtype=np.int64))


def begin_call(found: Found) -> int:
    """A call begins: no window abandoned yet; returns the work done before it."""
    found.out[ABORTED] = 0
    return int(found.out[STEPS])


def open_window(found: Found) -> Mark:
    """A window begins: what its undo needs (:func:`abandon`), and its list of noted matches emptied."""
    out = found.out
    last = found.intervals[out[INTERVALS] - 1, 1] if out[INTERVALS] > 0 else -1
    out[WINDOW_NOTED] = 0
    return Mark(out[FOUND], out[INTERVALS], out[KEPT], out[ROWS], last, out[STEPS])


def over_budget(window_steps: int, found: Found, mark: Mark, windows: Windows) -> bool:
    """Has the window's work — its steps and the copying out of its reports — passed ``abort_steps``?"""
    return bool(window_steps + found.out[STEPS] - mark.steps > windows.abort_steps)


def abandon(found: Found, mark: Mark) -> None:
    """Undo what the window begun at ``mark`` reported, and tell the caller (``out[ABORTED]``)."""
    out = found.out
    out[FOUND] = mark.found
    out[INTERVALS] = mark.intervals
    out[KEPT] = mark.kept
    out[ROWS] = mark.rows
    if mark.intervals > 0:
        found.intervals[mark.intervals - 1, 1] = mark.last_end
    out[ABORTED] = 1


def exists_found(found: Found, windows: Windows) -> bool:
    """Is the question only whether a match exists, and has one been found?"""
    return windows.mode == EXISTS and found.out[FOUND] > 0


def emit(s: int, node: int, nodes: Nodes, events: Events, windows: Windows, found: Found) -> tuple[Nodes, Found]:
    """Report the run ending at ``node`` (a chain of bindings) that started at event ``s``: count it, merge
    its span into the intervals, and (``MATCHES``, while fewer than ``keep`` are kept) note it for the
    window's end, where the first of the window's matches are copied out (:func:`flush`)."""
    out = found.out
    out[FOUND] += 1
    if windows.mode < SPANS:
        return nodes, found
    lo = events.seq[s]
    hi = events.seq[nodes.pool[node, POS]]
    iv = found.intervals
    k = out[INTERVALS]
    if k > 0 and lo <= iv[k - 1, 1]:
        if hi > iv[k - 1, 1]:
            iv[k - 1, 1] = hi
    else:
        if k >= iv.shape[0]:
            found = Found(out, grow(iv, k + 1), found.m_start, found.m_off, found.b_var, found.b_pos)
            iv = found.intervals
        iv[k, 0] = lo
        iv[k, 1] = hi
        out[INTERVALS] = k + 1
    if windows.mode == MATCHES and out[DONE_FOUND] < windows.keep:
        w = out[WINDOW_NOTED]
        if w >= nodes.noted.shape[0]:
            nodes = Nodes(nodes.pool, nodes.ri, nodes.rf, grow(nodes.noted, w + 1))
        noted = nodes.noted
        noted[w, 0] = node
        noted[w, 1] = hi
        out[WINDOW_NOTED] = w + 1
    return nodes, found


def flush(keep: int, s: int, nodes: Nodes, found: Found) -> Found:
    """At a window's end: copy out the bindings of its matches that can be among the first ``keep`` in
    answer order (start, end, bindings) — those with the smallest ends, ties at the cut included — so
    that what is kept stays bounded however many matches the window has."""
    out = found.out
    noted = nodes.noted
    pool = nodes.pool
    w = out[WINDOW_NOTED]
    need = keep - out[DONE_FOUND]
    if w == 0 or need <= 0:
        out[WINDOW_NOTED] = 0
        return found
    order = np.argsort(noted[:w, 1], kind="mergesort")
    take = w
    if need < w:
        cut_end = noted[order[need - 1], 1]
        take = need
        while take < w and noted[order[take], 1] == cut_end:
            take += 1
    rows = 0
    for i in range(take):
        nd = noted[order[i], 0]
        while nd >= 0:
            if pool[nd, VAR] >= 0:
                rows += 1
            nd = pool[nd, PARENT]
    m = out[KEPT]
    r = out[ROWS]
    if (m + take > found.m_start.shape[0] or m + take + 1 > found.m_off.shape[0]
            or r + rows > found.b_var.shape[0] or r + rows > found.b_pos.shape[0]):
        found = Found(out, found.intervals, grow(found.m_start, m + take), grow(found.m_off, m + take + 1),
                      grow(found.b_var, r + rows), grow(found.b_pos, r + rows))
    out[STEPS] += rows  # copying runs out is work too
    for i in range(take):
        node = noted[order[i], 0]
        n = 0
        nd = node
        while nd >= 0:
            if pool[nd, VAR] >= 0:
                n += 1
            nd = pool[nd, PARENT]
        nd = node
        j = r + n - 1
        while nd >= 0:  # newest first: filled from the back, so the rows are in stream order
            if pool[nd, VAR] >= 0:
                found.b_var[j] = pool[nd, VAR]
                found.b_pos[j] = pool[nd, POS]
                j -= 1
            nd = pool[nd, PARENT]
        found.m_start[m] = s
        found.m_off[m] = r
        found.m_off[m + 1] = r + n
        m += 1
        r += n
    out[KEPT] = m
    out[ROWS] = r
    out[WINDOW_NOTED] = 0
    return found


def close_window(s: int, nodes: Nodes, windows: Windows, found: Found) -> Found:
    """A window started at event ``s`` is done: its noted matches copied out (``MATCHES``), its reports
    counted among the finished windows'."""
    if windows.mode == MATCHES:
        found = flush(windows.keep, s, nodes, found)
    found.out[DONE_FOUND] = found.out[FOUND]
    return found


def call_done(found: Found, windows: Windows, steps: int, call0: int) -> bool:
    """Must the call return after this window: a match found for ``EXISTS``, or its work past
    ``max_steps``?"""
    return exists_found(found, windows) or steps + found.out[STEPS] - call0 >= windows.max_steps


def end_call(found: Found, si: int, steps: int) -> Arrays:
    """A call ends before window ``si``: where the next call goes on, and the work done; ``found``'s arrays
    as a plain tuple (the caller makes them a :class:`Found` again).  A named tuple is returned to Python
    through its constructor, which is Python code: an exception raised in the thread there (a query
    stopped at its time limit) would strike in the middle of the return; a plain tuple is built in C."""
    found.out[NEXT] = si
    found.out[STEPS] += steps
    return found.out, found.intervals, found.m_start, found.m_off, found.b_var, found.b_pos
