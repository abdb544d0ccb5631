"""Orchestration: the one place that combines the event store, the index and the exact engine.

The CLI and the HTTP routes call these functions and only serialise what they return.
"""

from __future__ import annotations

import os
import shutil
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from exact.errors import InputError, NotFound, QueryLimitError, QuerySemanticError, SeqsketchError

# --- datasets, appends and builds (used by the HTTP service) -----------------------------------------------


def dataset_exists(home: Path, name: str) -> bool:
    """True when dataset ``name`` has a committed event store under ``home``."""
    from exact.store import MANIFEST, check_dataset_name, dataset_dir, store_dir

    return (store_dir(dataset_dir(check_dataset_name(name), home)) / MANIFEST).is_file()


def dataset_info(home: Path, name: str) -> dict[str, Any]:
    """The ``info`` object of a dataset (CONTRACT §4): :func:`sketch.dataset.dataset_info`."""
    from sketch.dataset import dataset_info as info

    return info(home, name)


def build_from_inputs(home: Path, name: str, inputs: Sequence[str | Path], *, fmt: str = "auto",
                      type_field: str = "type", time_field: str = "ts", replace: bool = False,
                      leaf_size: int | None = None, fpq: float | None = None, memory: int | None = None,
                      progress: Any = None, engine: str = "local",
                      job_progress: Any = None) -> dict[str, Any]:
    """Ingest ``inputs`` into a new dataset ``name`` under ``home`` (``seqsketch build``, and the body of a
    build job); nothing is left behind on failure.

    ``engine="spark"`` runs the Spark job (:mod:`sketch.spark_job`), which reports ``job_progress(fraction,
    message)`` instead of per-batch reading ``progress``.

    Returns the ``build`` summary: the ``info`` object plus ``seconds`` and ``timings`` (ingest, index).
    ``progress`` (an :data:`exact.ingest.Progress`) hears of every batch read.
    """
    import time

    from exact.ingest import IngestOptions, ingest
    from exact.store import EventStore, check_dataset_name, staged_dataset, store_dir
    from sketch.build import DEFAULT_OPTIONS, BuildOptions
    from sketch.dataset import build_index_into

    check_dataset_name(name)
    if engine == "spark":
        from sketch.spark_job import build_dataset_spark

        return build_dataset_spark(home, name, inputs, fmt=fmt, type_field=type_field, time_field=time_field,
                                   leaf_size=leaf_size, fpq=fpq, memory=memory, replace_existing=replace,
                                   **({"progress": job_progress} if job_progress else {}))
    options = BuildOptions(leaf_size=leaf_size or DEFAULT_OPTIONS.leaf_size, fpq=fpq or DEFAULT_OPTIONS.fpq,
                           memory_bytes=memory)
    started = time.perf_counter()
    with staged_dataset(name, home, replace=replace) as stage:
        table = ingest(inputs, IngestOptions(fmt=fmt, type_field=type_field, time_field=time_field),
                       progress=progress)
        ingested = time.perf_counter()
        # The index is built here, inside the staged directory, so that it is published with the events:
        # the store's first manifest names it.  A refused --memory budget fails the build before any write.
        extra = build_index_into(stage, table, options)
        index_done = time.perf_counter()
        EventStore.create(store_dir(stage), table, extra=extra)
        del table
        stored = time.perf_counter()
    info = dataset_info(home, name)
    return {**info, "seconds": round(time.perf_counter() - started, 3),
            "timings": {"ingest": round(ingested - started + stored - index_done, 3),
                        "index": round(index_done - ingested, 3)}}


def list_datasets(home: Path) -> list[dict[str, Any]]:
    """``info`` of every dataset under ``home``, by name."""
    from exact.store import dataset_names

    return [dataset_info(home, name) for name in dataset_names(home)]


def delete_dataset(home: Path, name: str) -> None:
    """Remove a dataset's directory (events and index).

    The directory is first renamed out of the way — one atomic step after which readers no longer find the
    dataset — and only then removed, so a crash midway leaves a hidden remnant, never half a dataset.
    """
    from exact.store import check_dataset_name, dataset_dir

    path = dataset_dir(check_dataset_name(name), home)
    if not path.is_dir():
        raise NotFound(f"dataset {name!r} does not exist", where=name)
    trash = path.parent / f".trash-{name}-{uuid.uuid4().hex[:8]}"
    os.replace(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def records_for_append(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """API event records (``type``, ``ts``, ``attrs`` and/or further top-level fields) as stream records.

    ``ts`` is ISO-8601 text (naive = UTC) or epoch seconds, as in the readers; it becomes UTC microseconds.
    An attribute given both at top level and under ``attrs`` with different values is an error.
    """
    from exact.events import parse_timestamp

    out: list[dict[str, Any]] = []
    for i, rec in enumerate(records):
        where = f"record {i}"
        try:
            ts = parse_timestamp(rec.get("ts"))
        except ValueError as err:
            raise InputError(f"field 'ts': {err}", where=where) from None
        attrs = dict(rec.get("attrs") or {})
        for key, value in rec.items():
            if key in ("type", "ts", "attrs"):
                continue
            if key in attrs and attrs[key] != value:
                raise InputError(f"attribute {key!r} given twice with different values", where=where)
            attrs[key] = value
        out.append({"type": rec["type"], "ts": ts, "attrs": attrs})
    return out


def append_records(home: Path, name: str, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Append API records to dataset ``name``, all or nothing; the index covering them is published with
    them.  Returns ``{appended, first_seq, last_seq}``."""
    from exact.events import records_to_table

    if not dataset_exists(home, name):
        raise NotFound(f"dataset {name!r} does not exist", where=name)
    table = records_to_table(records_for_append(records), first_seq=None, where="events")
    before, after = _append_table(home, name, table)
    return {"appended": after - before, "first_seq": before, "last_seq": after - 1}


def _append_table(home: Path, name: str, table: Any) -> tuple[int, int]:
    """Append through the dataset (store + index together) when the index layer exists, else the store."""
    from exact.store import EventStore, dataset_dir, store_dir

    try:
        from sketch.dataset import Dataset
    except ImportError:
        Dataset = None  # noqa: N806 - the index layer is optional for a store-only dataset
    if Dataset is not None:
        dataset = Dataset.open(home, name)
        before = _events_of(dataset.snapshot())
        dataset.append(table)
        return before, _events_of(dataset.snapshot())
    store = EventStore.open(store_dir(dataset_dir(name, home)))
    before = store.snapshot().events
    return before, store.append(table).events


def _events_of(snapshot: Any) -> int:
    """Events of a dataset snapshot: a store snapshot, or a (store snapshot, tree) pair."""
    if hasattr(snapshot, "events"):
        return int(snapshot.events)
    for part in snapshot if isinstance(snapshot, tuple) else ():
        if hasattr(part, "events"):
            return int(part.events)
    store = getattr(snapshot, "store", None)
    if store is not None and hasattr(store, "events"):
        return int(store.events)
    raise TypeError(f"cannot tell the number of events of {type(snapshot).__name__}")


#: Build options of the API and the keyword of the build function that takes each.
BUILD_OPTIONS = {"format": "fmt", "type_field": "type_field", "time_field": "time_field", "engine": "engine",
                 "leaf_size": "leaf_size", "fpq": "fpq", "memory": "memory", "replace": "replace"}


def build_dataset(home: Path, name: str, inputs: Sequence[Path], options: Mapping[str, Any], *,
                  progress: Callable[..., None] | None = None) -> dict[str, Any]:
    """Run the offline build of ``seqsketch build`` for dataset ``name`` (a background job's body).

    Returns the build summary (``info`` + ``seconds`` + ``timings``).  An option the build cannot honour is
    an error, never silently dropped.
    """
    import inspect

    build = build_from_inputs

    accepted = inspect.signature(build).parameters
    kwargs: dict[str, Any] = {}
    for option, value in options.items():
        keyword = BUILD_OPTIONS.get(option)
        if option == "engine" and "engine" not in accepted:
            # As `seqsketch build`: a build without a choice of engines builds in-process.
            if progress is not None and value != "local":
                progress(0.0, f"the {value} engine is not available; building locally")
            continue
        if keyword is None or keyword not in accepted:
            raise InputError(f"build option {option!r} is not supported by this server", where=option)
        kwargs[keyword] = value
    if progress is not None:
        progress(0.0, "reading inputs")
        if "progress" in accepted:
            kwargs["progress"] = _reading_progress(inputs, progress)
        if "job_progress" in accepted:  # the Spark job reports its stages itself: (fraction, message)
            kwargs["job_progress"] = progress
    return build(home, name, [str(p) for p in inputs], **kwargs)


def _reading_progress(inputs: Sequence[Path], progress: Callable[..., None]) -> Callable[[Path, int], None]:
    """Adapt the reader's reports (file, events read so far) to a job's fraction and message.

    Reading is counted as the first 80% of a build, shared among the inputs by their size on disk (the
    event count of a file is unknown until it has been read); indexing and storing make up the rest.
    """
    sizes = [max(Path(p).stat().st_size, 1) for p in inputs]
    total = float(sum(sizes))
    before = {Path(p).resolve(): sum(sizes[:i]) for i, p in reversed(list(enumerate(inputs)))}

    def report(path: Path, events: int) -> None:
        done = before.get(Path(path).resolve(), 0) / total
        progress(0.8 * done, f"reading {Path(path).name}: {events:,} events")

    return report


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


def call_with_timeout(fn: Callable[[], Any], timeout_ms: int | None, what: str) -> Any:
    """``fn()``, or :class:`QueryLimitError` once ``timeout_ms`` pass.

    The work runs on a worker thread.  When the limit passes, the caller is answered at once and the worker
    is stopped: :class:`_Abandoned` is raised in it at its next Python instruction (a running numpy or Arrow
    call finishes first), again every 50 ms until it ends — an exception raised while the worker runs a
    destructor or a weak-reference callback is swallowed there — so an abandoned query does not keep a core
    busy until it would have ended.  The work it leaves behind is only its own (caches it was filling are
    filled atomically or under ``with``).
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
        import sys

        if not getattr(sys.unraisablehook, "quiet_about_stops", False):
            sys.unraisablehook = _unraisable(sys.unraisablehook)
        threading.Thread(target=stop, name="seqsketch-query-stop", daemon=True).start()
        raise QueryLimitError(f"{what} took longer than the server's limit of {timeout_ms} ms; narrow it "
                              "(WITHIN, BETWEEN, PARTITION BY) or use mode 'approximate'")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _raise_in(thread: threading.Thread, error: type[BaseException]) -> None:
    """Have ``thread`` raise ``error`` at its next Python instruction (CPython's asynchronous exception)."""
    import ctypes

    ident = thread.ident
    if ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(error))


def bound_events(home: Path, name: str, matches: Sequence[Mapping[str, Any]]) -> list[list[dict[str, Any]]]:
    """For each match, its bound events (``seq``, ``ts`` ISO, ``type``, ``attrs``) in stream order."""
    from exact.events import iso_of_micros, to_records
    from exact.store import EventStore, dataset_dir, store_dir

    store = EventStore.open(store_dir(dataset_dir(name, home)))
    snap = store.snapshot()
    out: list[list[dict[str, Any]]] = []
    for match in matches:
        seqs = sorted({s for seq_list in match.get("bindings", {}).values() for s in seq_list})
        if not seqs:
            out.append([])
            continue
        wanted = set(seqs)
        rows = to_records(store.read_table(seqs[0], seqs[-1], snapshot=snap))
        events = []
        for row in rows:
            if row["seq"] in wanted:
                ts = row["ts"]
                events.append({"seq": row["seq"], "ts": iso_of_micros(ts) if isinstance(ts, int) else str(ts),
                               "type": row["type"], "attrs": row.get("attrs", {})})
        out.append(events)
    return out


def limited_query(home: Path, name: str, query: str | Mapping[str, Any], *, mode: str = "verified",
                  limit: int | None = None, granularity: int | None = None, include_events: bool = False,
                  max_matches: int | None = None, timeout_ms: int | None = None,
                  max_events: int | None = None) -> dict[str, Any]:
    """:func:`run_query` under the server's per-query limits.

    ``max_matches`` caps the matches returned (the answer says ``truncated``); ``timeout_ms`` bounds the
    wall time and ``max_events`` the events a query may scan (both refuse with ``query_limit``).
    """
    import inspect

    effective = limit if max_matches is None else (max_matches if limit is None else min(limit, max_matches))
    runner = _query_runner()
    params = inspect.signature(runner).parameters
    open_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    extra: dict[str, Any] = {}
    if granularity is not None and mode == "approximate":  # only approximate answers have a granularity
        if not (open_kwargs or "granularity" in params):
            raise QuerySemanticError("'granularity' is not supported by this server", where="granularity")
        extra["granularity"] = granularity
    if max_events and (open_kwargs or "max_events" in params):
        extra["max_events"] = max_events  # the engine stops early; otherwise it is checked afterwards
    if max_events and mode == "exact":
        _refuse_exact_scan_over(home, name, max_events)

    def answer() -> dict[str, Any]:
        return runner(home, name, query, mode=mode, limit=effective, **extra)

    result = call_with_timeout(answer, timeout_ms, "the query")
    if max_events and (result.get("stats") or {}).get("events_scanned", 0) > max_events:
        raise QueryLimitError(f"the query scanned {result['stats']['events_scanned']:,} events, over the "
                              f"server's limit of {max_events:,}")
    if include_events and result.get("matches"):
        for match, events in zip(result["matches"], bound_events(home, name, result["matches"]), strict=True):
            match["events"] = events
    return result


def _refuse_exact_scan_over(home: Path, name: str, max_events: int) -> None:
    """Exact mode reads the whole stream: refuse it before any work when that is over the scan limit."""
    from exact.store import EventStore, dataset_dir, store_dir

    if not dataset_exists(home, name):
        return  # the query itself reports the missing dataset
    events = EventStore.open(store_dir(dataset_dir(name, home))).snapshot().events
    if events > max_events:
        raise QueryLimitError(f"mode 'exact' scans all {events:,} events of {name!r}, over the server's "
                              f"limit of {max_events:,}; use mode 'verified'", where="mode")


def prepare_queries() -> None:
    """Load what every query needs once per process — the query modules and the parser's LALR tables
    (about 0.1–0.3 s) — so that a server's first query is not charged for them (nor refused by its time
    limit for them)."""
    import exact.engine  # noqa: F401
    import sketch.dataset  # noqa: F401
    import sketch.verify  # noqa: F401
    from exact.language import parse

    parse("PATTERN SEQ(A a)")


def _query_runner() -> Callable[..., dict[str, Any]]:
    """This module's ``run_query`` (the query orchestration), looked up when a query arrives."""
    runner = globals().get("run_query")
    if runner is None:
        raise QueryEngineMissing("this server cannot answer queries: no query engine is installed")
    return runner


class QueryEngineMissing(SeqsketchError):
    code = "not_implemented"
    http_status = 501


# --- queries -----------------------------------------------------------------------------------------------

QUERY_MODES = ("approximate", "verified", "exact")


def run_query(home: Path, name: str, query: str | Mapping[str, Any], *, mode: str = "verified",
              limit: int | None = None, granularity: int | None = None) -> dict[str, Any]:
    """Answer ``query`` (text, JSON text or the JSON form) on dataset ``name`` (CONTRACT §3).

    ``exact`` runs the exact engine over the whole stream (reading only the columns the query needs);
    ``approximate`` and ``verified`` answer from the Bloom-filter index (:func:`indexed_query`);
    ``granularity`` is the tree level approximate intervals are resolved at (default: leaves).
    """
    import time

    from exact.ast import BUILTIN_FIELDS, Field
    from exact.engine import answer, evaluate, match_ts
    from exact.language import load
    from exact.store import EventStore, check_dataset_name, dataset_dir, store_dir

    started = time.perf_counter()
    if mode not in QUERY_MODES:
        raise QuerySemanticError(f"unknown mode {mode!r}; choose one of {', '.join(QUERY_MODES)}",
                                 where="mode")
    if limit is not None and limit < 0:
        raise QuerySemanticError("limit must not be negative", where="limit")
    parsed = load(query if isinstance(query, str) else dict(query))
    if mode != "exact":
        return indexed_query(home, name, parsed, mode=mode, limit=limit, granularity=granularity)
    root = store_dir(dataset_dir(check_dataset_name(name), home))
    if not (root / "manifest.json").is_file():
        raise NotFound(f"dataset {name!r} does not exist", where=name)
    store = EventStore.open(root)
    snap = store.snapshot()
    # attributes are read only when a condition or the partition names one
    attrs_used = bool(parsed.partition_by) or any(
        o.attr not in BUILTIN_FIELDS for c in parsed.where for o in (c.left, c.right) if isinstance(o, Field))
    table = store.read_table(snapshot=snap, columns=None if attrs_used else ["seq", "ts", "type"],
                             type_dictionary=True)
    verify_started = time.perf_counter()
    matches = evaluate(parsed, table, type_counts=snap.type_counts)
    verify_ms = (time.perf_counter() - verify_started) * 1000
    out: dict[str, Any] = {"dataset": name, "index_version": None, "mode": mode}
    out.update(answer(parsed, matches, match_ts(table, matches), limit=limit))
    out["stats"] = {"approximate_ms": 0.0, "verify_ms": round(verify_ms, 3),
                    "total_ms": round((time.perf_counter() - started) * 1000, 3), "nodes_probed": 0,
                    "candidate_intervals": 0, "events_scanned": table.num_rows,
                    "events_total": snap.events}
    return out


def indexed_query(home: Path, name: str, query: Any, *, mode: str = "verified", limit: int | None = None,
                  granularity: int | None = None) -> dict[str, Any]:
    """The ``approximate`` and ``verified`` modes of CONTRACT §3 on dataset ``name``'s index snapshot.

    ``query`` is a parsed :class:`~exact.ast.Query` or any form :func:`exact.language.load` accepts.  The
    store snapshot and the tree come from one manifest, so the answer sees the events the index covers.
    """
    from exact.ast import Query
    from exact.language import load
    from exact.store import check_dataset_name
    from sketch.dataset import Dataset, require_index
    from sketch.verify import StoreSource, answer_indexed

    if granularity is not None and (isinstance(granularity, bool) or not isinstance(granularity, int)
                                    or granularity < 0):
        raise QuerySemanticError(f"granularity must be a tree level (an integer ≥ 0, 0 = leaves), got "
                                 f"{granularity!r}", where="granularity")
    parsed = query if isinstance(query, Query) else load(query if isinstance(query, str) else dict(query))
    if not dataset_exists(home, check_dataset_name(name)):
        raise NotFound(f"dataset {name!r} does not exist", where=name)
    dataset = Dataset.open(home, name)
    snap = dataset.snapshot()
    tree = require_index(snap, name)
    body = answer_indexed(parsed, tree, StoreSource(dataset.store, snap.store), mode=mode, limit=limit,
                          granularity=granularity or 0)
    return {"dataset": name, "index_version": snap.index_version, **body}
