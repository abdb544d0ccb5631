"""Time limits for work a caller waits on: a query under the server's (or the CLI's) wall-time budget.

The engine checks its :class:`~exact.budget.Budget` itself and stops in time; :func:`call_with_timeout` is
the backstop for work that does not (a long Arrow call, a read): the caller is answered at the limit and the
worker thread is stopped at its next Python instruction.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from exact.errors import QueryLimitError

T = TypeVar("T")


class _Abandoned(BaseException):
    """Raised inside a query's worker thread once its caller has stopped waiting for it (a BaseException, so
    that no ``except Exception`` on the way swallows it)."""


def _unraisable(previous: Callable[[Any], None]) -> Callable[[Any], None]:
    """``sys.unraisablehook`` that stays quiet about a stop swallowed by a destructor (it is raised again)."""

    def hook(unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, _Abandoned):
            previous(unraisable)

    hook.quiet_about_stops = True  # type: ignore[attr-defined]
    return hook


def call_with_timeout(fn: Callable[[], T], timeout_ms: int | None, what: str,
                      limit_ms: int | None = None) -> T:
    """``fn()``, or :class:`QueryLimitError` once ``timeout_ms`` pass.

    The work runs on a worker thread.  When the limit passes, the caller is answered at once and the worker
    is stopped: :class:`_Abandoned` is raised in it at its next Python instruction (a running numpy or Arrow
    call finishes first), again every 50 ms until it ends — an exception raised while the worker runs a
    destructor or a weak-reference callback is swallowed there — so an abandoned query does not keep a core
    busy until it would have ended.  The work it leaves behind is only its own (caches it was filling are
    filled atomically or under ``with``).  ``limit_ms`` is the limit the message names (default
    ``timeout_ms``: a caller may wait a little past the limit it states).
    """
    if not timeout_ms:
        return fn()
    box: dict[str, Any] = {}
    guard = threading.Lock()  # the worker is told to stop only while it holds no claim to have ended
    running = [True]

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as err:  # handed to the caller's thread
            box["error"] = err
        finally:
            while True:  # a stop arriving here is caught and the flag set again
                try:
                    with guard:
                        running[0] = False
                    break
                except _Abandoned:
                    continue

    def stop() -> None:
        while worker.is_alive():
            with guard:
                if not running[0]:
                    return
                _raise_in(worker, _Abandoned)  # alive and inside run(): the thread id is the worker's
            worker.join(0.05)

    worker = threading.Thread(target=run, name="seqsketch-query", daemon=True)
    worker.start()
    worker.join(timeout_ms / 1000.0)
    if worker.is_alive():
        if not getattr(sys.unraisablehook, "quiet_about_stops", False):
            sys.unraisablehook = _unraisable(sys.unraisablehook)
        threading.Thread(target=stop, name="seqsketch-query-stop", daemon=True).start()
        raise QueryLimitError(f"{what} took longer than the limit of {limit_ms or timeout_ms} ms; narrow it "
                              "(WITHIN, BETWEEN, PARTITION BY) or use mode 'approximate'")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _raise_in(thread: threading.Thread, error: type[BaseException]) -> None:
    """Have ``thread`` raise ``error`` at its next Python instruction (CPython's asynchronous exception)."""
    ident = thread.ident
    if ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(error))
