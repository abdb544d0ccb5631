"""A query's windows on several cores: the kernels' windows split into parts, each part on its own thread.

The kernels evaluate one window per first event, each window on its own (its runs, its matches), and report
them in the order of the windows (:mod:`exact.engine.kernels`).  So the windows split into contiguous parts
anywhere, the parts run at once — the compiled kernels release the GIL — and the parts' matches, joined in
the parts' order, are the matches of one run over all the windows: the same rows, counts and spans.  Parts
are of about equal work, measured as the events their windows span.

Only the automaton strategies' windows split (a contiguity window follows one chain of successors, too little
work to share), and only when every window runs: a question that stops early (``RETURN exists``, the first ``limit``
matches of ``RETURN matches``) runs in one part, as does a call of little work, where a thread costs more
than it saves.  A part that fails (the time limit, an error) stops the others at their next slice.

The vectorised steps split too, above a hundred thousand items: the chain of bisections of a SEQ with a Kleene
element (:mod:`exact.engine.chain`) follows pieces of its starts at once, and the windows' ends are searched
in pieces (:func:`searched`) — NumPy releases the GIL in its sorts and searches — unless they are dense enough
to be found by one linear merge instead.

``SEQSKETCH_QUERY_THREADS`` says how many threads one query may use: default the machine's cores;
``seqsketch serve`` with several gunicorn workers sets 1 unless it is set (the workers already share the
cores between requests).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import Any, Literal, TypeVar

import numpy as np

#: A call splits only with at least this many windows spanning at least this many events in all (a window's
#: work grows with the events it spans; below these a thread costs more than it saves).
MIN_PARALLEL_WINDOWS = 64
MIN_PARALLEL_WORK = 20_000
#: How long the thread that waits for the parts sleeps between looks: it must run Python code now and then,
#: so that a query stopped at its time limit (an exception raised in that thread) stops its parts too.
_POLL_S = 0.05

T = TypeVar("T")
R = TypeVar("R")


class Cancelled(Exception):  # noqa: N818 - a signal between the threads of one query, never shown to a user
    """Raised in a part when another part of the same query failed."""


def query_threads() -> int:
    """How many threads one query may use: ``SEQSKETCH_QUERY_THREADS`` (a whole number of at least 1), else
    the machine's cores."""
    given = os.environ.get("SEQSKETCH_QUERY_THREADS", "").strip()
    if given:
        try:
            value = int(given)
        except ValueError:
            raise ValueError(f"SEQSKETCH_QUERY_THREADS={given!r} is not a whole number") from None
        if value < 1:
            raise ValueError(f"SEQSKETCH_QUERY_THREADS={given!r}: a query needs at least 1 thread")
        return value
    return max(1, os.cpu_count() or 1)


def split_windows(starts: np.ndarray, window_end: np.ndarray, parts: int) -> list[np.ndarray]:
    """``starts`` (the windows' first events, in the order they run) as up to ``parts`` contiguous pieces of
    about equal work: the events from each first event to its window's last (``window_end``)."""
    if parts <= 1 or len(starts) < MIN_PARALLEL_WINDOWS:
        return [starts]
    work = np.cumsum(window_end[starts] - starts + 1, dtype=np.float64)
    if work[-1] < MIN_PARALLEL_WORK:
        return [starts]
    cuts = np.searchsorted(work, work[-1] * np.arange(1, parts) / parts)
    edges = np.unique(np.concatenate([[0], cuts, [len(starts)]]))
    return [starts[a:b] for a, b in zip(edges[:-1], edges[1:], strict=True) if b > a]


def each(work: Callable[[T], R], items: Sequence[T], threads: int) -> list[R]:
    """``work`` of every item, the results in the items' order: on up to ``threads`` threads at once (for
    NumPy work, which releases the GIL; short, so not cancelled)."""
    if threads <= 1 or len(items) <= 1:
        return [work(x) for x in items]
    with ThreadPoolExecutor(min(threads, len(items)), thread_name_prefix="seqsketch-query-piece") as pool:
        return list(pool.map(work, items))


def pieces(n: int, parts: int) -> list[tuple[int, int]]:
    """``range(n)`` as up to ``parts`` contiguous ``(start, stop)`` pieces of about equal size."""
    cuts = np.linspace(0, n, max(1, parts) + 1).astype(np.int64).tolist()
    return [(a, b) for a, b in zip(cuts, cuts[1:], strict=False) if b > a] or [(0, n)]


#: A bisection of many values splits across threads only with at least this many (below, a thread costs more).
MIN_PARALLEL_SEARCHES = 100_000
#: Ascending values are merged with the array they are searched in when there is one per this many entries
#: (a merge steps over every entry; a bisection costs about log2 of them per value).
MERGE_SPARSITY = 16


@functools.cache
def _merge_compiled() -> Callable[..., None]:
    """:func:`_merge_search` compiled (cached on disk) on first use."""
    import numba

    compiled: Callable[..., None] = numba.njit(cache=True, nogil=True)(_merge_search)
    return compiled


def _merge_search(array: Any, values: Any, right: bool, out: Any) -> None:
    """``out[i]`` = where ``values[i]`` goes in the sorted ``array`` (after its equals when ``right``), for
    ascending ``values``: one pass over both."""
    j = 0
    n = len(array)
    for i in range(len(values)):
        x = values[i]
        if right:
            while j < n and array[j] <= x:
                j += 1
        else:
            while j < n and array[j] < x:
                j += 1
        out[i] = j


def searched(array: np.ndarray, values: np.ndarray, side: Literal["left", "right"], threads: int) -> np.ndarray:
    """``array.searchsorted(values, side)``: values in ascending order, at least one per
    :data:`MERGE_SPARSITY` entries of ``array``, in one merge of the two (linear); else the values in pieces
    on up to ``threads`` threads when many."""
    if (len(values) * MERGE_SPARSITY >= len(array) and len(values) > 1 and array.dtype == values.dtype == np.int64
            and bool((values[1:] >= values[:-1]).all())):
        out = np.empty(len(values), dtype=np.int64)
        _merge_compiled()(array, values, side == "right", out)
        return out
    if threads <= 1 or len(values) < MIN_PARALLEL_SEARCHES:
        return array.searchsorted(values, side)
    found = each(lambda ab: array.searchsorted(values[ab[0]:ab[1]], side), pieces(len(values), threads), threads)
    return np.concatenate(found)


def run_parts(work: Callable[[np.ndarray, threading.Event], T], parts: Sequence[np.ndarray]) -> list[T]:
    """``work(part, cancel)`` for every part at once, the results in the parts' order.  ``work`` looks at
    ``cancel`` between slices and raises :class:`Cancelled` once it is set; it is set when a part fails or
    the calling thread is interrupted, and the first failure is raised here."""
    cancel = threading.Event()
    pool = ThreadPoolExecutor(len(parts), thread_name_prefix="seqsketch-query-part")
    futures: list[Future[T]] = []
    try:
        futures = [pool.submit(work, part, cancel) for part in parts]
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=_POLL_S, return_when=FIRST_EXCEPTION)
            if any(f.exception() is not None for f in done):
                errors = [e for f in futures if f.done() and (e := f.exception()) is not None]
                raise next((e for e in errors if not isinstance(e, Cancelled)), errors[0])
        return [f.result() for f in futures]
    finally:
        if any(not f.done() for f in futures):
            cancel.set()
        pool.shutdown(wait=False, cancel_futures=True)
