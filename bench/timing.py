"""Small measuring helpers shared by the seed protocols: wall time of one call, summaries, ratios."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    """``fn()`` and its wall time in seconds (``perf_counter``)."""
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started


def median_ms(fn: Callable[[], Any], rounds: int, digits: int | None = 3) -> float:
    """The median wall time of ``rounds`` calls of ``fn`` in milliseconds, rounded to ``digits`` (None: not)."""
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    median = float(np.median(times)) * 1000
    return median if digits is None else round(median, digits)


def summary_ms(seconds: Sequence[float]) -> dict[str, Any]:
    """Mean, p50 and p95 in milliseconds, with the sample size (None when there is no sample)."""
    if not len(seconds):
        return {"n": 0, "mean_ms": None, "p50_ms": None, "p95_ms": None}
    ms = np.asarray(seconds, dtype=float) * 1000.0
    p50, p95 = np.percentile(ms, [50, 95])
    return {"n": int(ms.size), "mean_ms": round(float(ms.mean()), 3), "p50_ms": round(float(p50), 3),
            "p95_ms": round(float(p95), 3)}


def ratio(numerator: float | None, denominator: float | None, digits: int = 1) -> float | None:
    """``numerator / denominator`` rounded, or None when either is missing or the denominator is zero."""
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return round(numerator / denominator, digits)


class RecallError(AssertionError):
    """An exact match outside every approximate candidate interval, or a verified answer different from the
    exact one: a broken guarantee (docs/contract.md §3), never a figure to report quietly."""


@contextlib.contextmanager
def threads_set(n: int) -> Iterator[None]:
    """Queries run with ``SEQSKETCH_QUERY_THREADS=n`` inside."""
    before = os.environ.get("SEQSKETCH_QUERY_THREADS")
    os.environ["SEQSKETCH_QUERY_THREADS"] = str(n)
    try:
        yield
    finally:
        if before is None:
            del os.environ["SEQSKETCH_QUERY_THREADS"]
        else:
            os.environ["SEQSKETCH_QUERY_THREADS"] = before
