"""Queries: the three modes of docs/contract.md §3 on a dataset, under the caller's limits, and the query log.

``exact`` runs the exact engine over the whole stream; ``approximate`` and ``verified`` answer from the
Bloom-filter index (:func:`indexed_query`).  :func:`limited_query` is what the CLI calls: it applies the
time, match and scan limits and adds the bound events a caller asked for.  :func:`logged_query` is what a
server calls: the same under the server's :class:`QueryLimits`, with every query — answered or refused —
written to the catalog's query log.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import pyarrow as pa

from api.service.datasets import dataset_exists, warm_up_appends
from api.service.limits import call_with_timeout
from api.service.summaries import summarised_answer
from exact.arrays import distinct_ints
from exact.engine import Budget, answer, evaluate_table, warm_up
from exact.engine.answer_columns import bound_columns_of
from exact.engine.matchtable import match_times
from exact.errors import NotFound, QueryLimitError, QuerySemanticError, QuerySyntaxError, SeqsketchError
from exact.events import ATTRS, iso_of_micros, to_records
from exact.query.ast import Query
from exact.query.language import attribute_kinds, check_kinds, load, parse, to_json
from exact.store import EventStore, check_dataset_name, dataset_dir, store_dir
from exact.store.fetch import location_of
from exact.store.objects import fetch_counts
from exact.store.packing import warm_up as warm_up_packing
from sketch.answer.cases import case_lookup
from sketch.answer.event_sources import StoreSource, TableSource, needed_columns
from sketch.answer.modes import answer_indexed, decided_body, exact_body
from sketch.answer.retired import history_from, with_history
from sketch.dataset import INDEX_KEY, Dataset, require_index

if TYPE_CHECKING:
    from api.catalog import Catalog

#: An answer of docs/contract.md §3 (``dataset``, ``index_version``, ``exists``, ``count``, ``matches`` or
#: ``intervals``, ``truncated``, ``stats`` …; which fields depends on the mode and the query's RETURN).
QueryAnswer: TypeAlias = dict[str, Any]
#: A query as a caller may give it: text, JSON text, the JSON form, or parsed.
QueryInput: TypeAlias = str | Mapping[str, Any] | Query

QUERY_MODES = ("approximate", "verified", "exact")
#: How long past its limit a query that cannot look at its clock (a long read) runs before it is stopped.
_GRACE_MS = 500


@functools.cache
def prepare_queries() -> None:
    """Load what every query needs once per process — the parser's LALR tables, and (in the background)
    the engine's compiled kernels — so that a server's first query is not charged for them (nor refused by
    its time limit for them)."""
    parse("PATTERN SEQ(A a)")
    threading.Thread(target=_warm_up, name="seqsketch-warm-up", daemon=True).start()


def _warm_up() -> None:
    warm_up()
    warm_up_packing()
    warm_up_appends()


def run_query(home: Path, name: str, query: QueryInput, *, mode: str = "verified",
              limit: int | None = None, granularity: int | None = None,
              budget: Budget | None = None, columnar: bool = False) -> QueryAnswer:
    """Answer ``query`` (text, JSON text, the JSON form or a parsed query) on dataset ``name``.

    ``granularity`` is the tree level approximate intervals are resolved at (default: leaves); ``budget``
    the time the engine may take (it reads its clock between slices of its work); ``columnar``: the rows
    (matches, cases or intervals) as one Arrow table under ``rows`` (docs/contract.md §3.6) instead of lists.
    """
    if mode not in QUERY_MODES:
        raise QuerySemanticError(f"unknown mode {mode!r}; choose one of {', '.join(QUERY_MODES)}",
                                 where="mode")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise QuerySemanticError(f"limit must be an integer ≥ 1, got {limit!r}", where="limit")
    if _summarises(query):  # (funnel, next, durations, counts BY: made from every match, docs/contract.md §3.7)
        return summarised_answer(
            home, name, _checked_against(home, name, query), mode=mode, budget=budget,
            ask=lambda q, m, b: run_query(home, name, q, mode=m, columnar=True, budget=b),
            describe=lambda m: answer_head(home, name, m),
            bind=lambda rows, var, attr: bound_columns(home, name, rows, [var], [] if attr == "type" else [attr]))
    if location_of(dataset_dir(check_dataset_name(name), home)) is None:
        return _run_query(home, name, query, mode=mode, limit=limit, granularity=granularity, budget=budget,
                          columnar=columnar)
    with fetch_counts() as fetched:  # a dataset on object storage: what answering it fetched
        answer = _run_query(home, name, query, mode=mode, limit=limit, granularity=granularity, budget=budget,
                            columnar=columnar)
    if isinstance(answer.get("stats"), dict):
        answer["stats"].update(fetched_bytes=fetched["fetched_bytes"], fetches=fetched["fetches"],
                               cache_hits=fetched["cache_hits"])
    return answer


def _summarises(query: QueryInput) -> bool:
    """Does ``query`` ask for a summary of its matches (docs/contract.md §3.7)?  Its JSON form is not parsed to tell."""
    if isinstance(query, Query):
        return query.summarised
    if isinstance(query, str):
        return parsed_query(query).summarised
    return query.get("returns") in ("funnel", "next", "durations") or query.get("group_by") is not None


def _checked_against(home: Path, name: str, query: QueryInput) -> Query:
    """``query`` parsed and checked against dataset ``name``'s attributes (a missing one is refused)."""
    parsed = parsed_query(query)
    if not dataset_exists(home, check_dataset_name(name)):
        raise NotFound(f"dataset {name!r} does not exist", where=name)
    attrs = Dataset.open(home, name).store.snapshot().attrs
    if parsed.group_by is not None and parsed.group_by.attr not in attrs:  # (refused where BY stands)
        kinds = attribute_kinds(attrs)
        if isinstance(query, Query):
            check_kinds(parsed, kinds)
        else:
            load(query if isinstance(query, str) else dict(query), kinds)
    check_attribute_kinds(query, parsed, attrs)
    return parsed


def _run_query(home: Path, name: str, query: QueryInput, *, mode: str, limit: int | None,
               granularity: int | None, budget: Budget | None, columnar: bool) -> QueryAnswer:
    if mode != "exact":
        return indexed_query(home, name, query, mode=mode, limit=limit, granularity=granularity,
                             budget=budget, columnar=columnar)
    parsed = parsed_query(query)
    if not dataset_exists(home, name):
        raise NotFound(f"dataset {name!r} does not exist", where=name)
    dataset = Dataset.open(home, name)
    snap = dataset.store.snapshot()
    check_attribute_kinds(query, parsed, snap.attrs)
    decided = decided_body(parsed, "exact", snap.type_counts, snap.events, columnar, snap.attr_types())
    if decided is not None:  # the type counts answer it: no layout or part is opened
        return {"dataset": name, "index_version": None, **with_history(decided, parsed, snap, None, "exact")}
    partition = dataset.partition(snap)
    body = exact_body(parsed, StoreSource(dataset.store, snap), limit=limit, partition=partition,
                      budget=budget, columnar=columnar)
    return {"dataset": name, "index_version": None, **with_history(body, parsed, snap, None, "exact")}


def answer_head(home: Path, name: str, mode: str) -> dict[str, Any]:
    """What an answer of dataset ``name`` in ``mode`` (verified or exact) says of the dataset — ``dataset``,
    ``index_version``, ``mode`` and ``stats`` with ``events_total`` (and ``history_from`` once trimmed) —
    from the snapshot the answer reads, refused as the answer would be (no dataset; verified, no index)."""
    if not dataset_exists(home, check_dataset_name(name)):
        raise NotFound(f"dataset {name!r} does not exist", where=name)
    dataset = Dataset.open(home, name)
    if mode == "exact":
        snap, version = dataset.store.snapshot(), None
    else:
        whole = dataset.snapshot()
        require_index(whole, name)
        snap, version = whole.store, whole.index_version
    stats: dict[str, Any] = {"events_total": int(snap.events)}
    start = history_from(snap)
    if start is not None:
        stats["history_from"] = start
    return {"dataset": name, "index_version": version, "mode": mode, "stats": stats}


def full_scan(home: Path, name: str, query: QueryInput,
              limit: int | None = None) -> QueryAnswer:
    """``query`` answered by the exact engine over every event of the stream, read whole from the store's
    Parquet parts (the columns it needs) — no index, no layout, no pruning of the read by type: the plain
    scan the index and the exact mode's read are measured against (``seqsketch demo``)."""
    started = time.perf_counter()
    parsed = parsed_query(query)
    store = EventStore.open(store_dir(dataset_dir(check_dataset_name(name), home)))
    snap = store.snapshot()
    columns = [c for c in needed_columns(parsed) if not c.startswith("attrs.") or snap.attrs]
    table = store.read_table(snapshot=snap, columns=columns, type_dictionary=True)
    found = evaluate_table(parsed, table, limit=limit)
    body = answer(parsed, found, match_times(table, found), limit=limit,
                  case_of=case_lookup(parsed, TableSource(table)))
    return {**body, "stats": {"total_ms": round((time.perf_counter() - started) * 1000.0, 3),
                              "events_scanned": table.num_rows}}


def parsed_query(query: QueryInput) -> Query:
    if isinstance(query, Query):
        return query
    if isinstance(query, str):
        return _parsed_text(query)
    return _parsed(dict(query))


@functools.lru_cache(maxsize=512)
def _parsed_text(text: str) -> Query:
    """A query text parsed and checked, remembered: a service or a notebook asks the same questions again,
    and parsing one with many conditions costs milliseconds (a :class:`Query` is immutable; a text that is
    refused raises again, nothing is remembered of it)."""
    _check_unicode(text)
    return _parsed(text)


def _parsed(query: str | dict[str, Any]) -> Query:
    parsed = load(query)
    try:  # the JSON form may escape a lone surrogate into a name or a literal
        json.dumps(to_json(parsed), ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise QuerySyntaxError("the query holds invalid Unicode (a lone surrogate) in a name or a literal",
                               where="query") from None
    return parsed


def check_attribute_kinds(given: str | Mapping[str, Any] | Query, parsed: Query,
                           attr_types: Mapping[str, str]) -> None:
    """Refuse a comparison the dataset's attribute types make hold for no event (a string attribute with a
    number, a numeric one with a string), positioned in the query as given: text by line and column, the
    JSON form by path.  The query is read again with the kinds only when the check on its tree refuses it."""
    if not parsed.where or not attr_types:
        return
    kinds = attribute_kinds(attr_types)
    if isinstance(given, Query):
        check_kinds(given, kinds)
        return
    try:
        check_kinds(parsed, kinds)  # on the tree: no second parse for a query that passes
    except QuerySemanticError:
        load(given if isinstance(given, str) else dict(given), kinds)  # the same refusal, positioned
        raise


def _check_unicode(text: str) -> None:
    """Query text holds valid Unicode (a command line may carry bytes that are not UTF-8: they arrive as
    lone surrogates); the error points at the first bad character."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        before = text[:err.start]
        line = before.count("\n") + 1
        column = err.start - (before.rfind("\n") + 1) + 1
        raise QuerySyntaxError("the query holds invalid Unicode (bytes that are not UTF-8, or a lone "
                               "surrogate)", line=line, column=column) from None


def indexed_query(home: Path, name: str, query: QueryInput, *, mode: str = "verified",
                  limit: int | None = None, granularity: int | None = None,
                  budget: Budget | None = None, columnar: bool = False) -> QueryAnswer:
    """The ``approximate`` and ``verified`` modes of docs/contract.md §3 on dataset ``name``'s index snapshot.

    The store snapshot and the tree come from one manifest, so the answer sees the events the index covers.
    """
    if granularity is not None and (isinstance(granularity, bool) or not isinstance(granularity, int)
                                    or granularity < 0):
        raise QuerySemanticError(f"granularity must be a tree level (an integer ≥ 0, 0 = leaves), got "
                                 f"{granularity!r}", where="granularity")
    parsed = parsed_query(query)
    if not dataset_exists(home, check_dataset_name(name)):
        raise NotFound(f"dataset {name!r} does not exist", where=name)
    dataset = Dataset.open(home, name)
    stored = dataset.store.snapshot()
    check_attribute_kinds(query, parsed, stored.attrs)
    decided = decided_body(parsed, mode, stored.type_counts, stored.events, columnar, stored.attr_types())
    if decided is not None:  # the type counts answer it: no index, layout or part is opened
        version = ((stored.extra or {}).get(INDEX_KEY) or {}).get("version")
        if version is None:
            raise NotFound(f"dataset {name!r} has no index; rebuild it with `seqsketch build`", where=name)
        summary = dataset.decayed(stored) if mode == "approximate" else None
        return {"dataset": name, "index_version": version, **with_history(decided, parsed, stored, summary, mode)}
    snap = dataset.snapshot()
    tree = require_index(snap, name)
    body = answer_indexed(parsed, tree, StoreSource(dataset.store, snap.store), mode=mode, limit=limit,
                          granularity=granularity or 0, partition=dataset.partition(snap.store),
                          budget=budget, columnar=columnar)
    summary = dataset.decayed(snap.store) if mode == "approximate" else None
    return {"dataset": name, "index_version": snap.index_version,
            **with_history(body, parsed, snap.store, summary, mode)}


def limited_query(home: Path, name: str, query: str | Mapping[str, Any], *, mode: str = "verified",
                  limit: int | None = None, granularity: int | None = None, include_events: bool = False,
                  max_matches: int | None = None, timeout_ms: int | None = None,
                  max_events: int | None = None, columnar: bool = False,
                  density: int | None = None) -> QueryAnswer:
    """:func:`run_query` under per-query limits.

    ``max_matches`` caps the matches returned (the answer says ``truncated``); ``timeout_ms`` bounds the
    wall time and ``max_events`` the events a query may scan (both refuse with ``query_limit``).
    ``include_events`` adds each match's bound events (as ``events``, or as columns when ``columnar``).
    ``density`` (a number of bins) adds ``match_density``: where *all* matches lie, not only those listed —
    their first events counted over the dataset's time range cut into that many equal spans (verified and
    exact modes; it costs an evaluation that lists every match, in columns, within the same time limit; a
    summary's answer, docs/contract.md §3.7, has none).
    """
    effective = limit if max_matches is None else (max_matches if limit is None else min(limit, max_matches))
    if max_events and mode == "exact":
        _refuse_exact_scan_over(home, name, query, max_events)

    budget = Budget.of_ms(timeout_ms)

    def run() -> QueryAnswer:
        return run_query(home, name, query, mode=mode, limit=effective,
                         granularity=granularity if mode == "approximate" else None, budget=budget,
                         columnar=columnar)

    # the engine stops itself at the limit; the thread is the backstop for work that cannot look at a clock
    result = call_with_timeout(run, timeout_ms and timeout_ms + _GRACE_MS, "the query", limit_ms=timeout_ms)
    if max_events and (result.get("stats") or {}).get("events_scanned", 0) > max_events:
        raise QueryLimitError(f"the query scanned {result['stats']['events_scanned']:,} events, over the "
                              f"server's limit of {max_events:,}")
    if density and mode != "approximate" and result.get("exists") and not _summarises(query):
        result["match_density"] = call_with_timeout(
            lambda: match_density(home, name, query, mode=mode, bins=density, budget=budget),
            timeout_ms and timeout_ms + _GRACE_MS, "the query", limit_ms=timeout_ms)
    if include_events and isinstance(result.get("rows"), pa.Table) and result["rows"].num_rows \
            and "start_seq" in result["rows"].column_names and any(
                c.endswith(".seq") for c in result["rows"].column_names):
        result["rows"] = bound_columns(home, name, result["rows"])
    if include_events and result.get("matches"):
        for match, events in zip(result["matches"], bound_events(home, name, result["matches"]), strict=True):
            match["events"] = events
    return result


def match_density(home: Path, name: str, query: QueryInput, *, mode: str, bins: int,
                  budget: Budget | None = None) -> dict[str, Any]:
    """Where every match of ``query`` lies: its first events counted over the dataset's ``[start_ts,
    end_ts]`` cut into ``bins`` equal spans (as :func:`api.service.datasets.event_density` cuts the events)."""
    import dataclasses

    from exact.events import iso_of_micros
    from exact.query.ast import Return

    if isinstance(bins, bool) or not isinstance(bins, int) or not 1 <= bins <= MAX_DENSITY_BINS:
        raise QuerySemanticError(f"density must be a number of bins from 1 to {MAX_DENSITY_BINS}, got {bins!r}",
                                 where="density")
    # (a summary's matches lie where its query's do)
    parsed = dataclasses.replace(parsed_query(query), returns=Return.MATCHES, group_by=None, top=None,
                                 following=None, following_within=None)
    every = run_query(home, name, parsed, mode=mode, columnar=True, budget=budget)
    snap = EventStore.open(store_dir(dataset_dir(name, home))).snapshot()
    first, last = snap.first_ts, snap.last_ts
    rows = every.get("rows")
    starts = rows.column("start_ts").cast(pa.int64()).to_numpy() if isinstance(rows, pa.Table) and rows.num_rows \
        else np.zeros(0, dtype=np.int64)
    if first is None or last is None:
        return {"start_ts": None, "end_ts": None, "bins": 0, "counts": []}
    index = np.minimum(((starts - first) / float(last - first + 1) * bins).astype(np.int64), bins - 1)
    return {"start_ts": iso_of_micros(first), "end_ts": iso_of_micros(last), "bins": bins,
            "counts": np.bincount(index, minlength=bins).tolist(), "matches": int(len(starts))}


#: the most bins a match density may ask for
MAX_DENSITY_BINS = 4000


def _refuse_exact_scan_over(home: Path, name: str, query: QueryInput, max_events: int) -> None:
    """Exact mode reads the whole stream: refuse it before any work when that is over the scan limit — unless
    the dataset's type counts decide the answer, which then reads nothing."""
    if not dataset_exists(home, name):
        return  # the query itself reports the missing dataset
    snap = EventStore.open(store_dir(dataset_dir(check_dataset_name(name), home))).snapshot()
    events = snap.events
    if events > max_events and decided_body(parsed_query(query), "exact", snap.type_counts, events) is None:
        raise QueryLimitError(f"mode 'exact' scans all {events:,} events of {name!r}, over the server's "
                              f"limit of {max_events:,}; use mode 'verified'", where="mode")


# --- a server's queries: its limits and its query log -------------------------------------------------------


@dataclass(frozen=True)
class QueryLimits:
    """A server's limits on every query: matches returned (beyond them the answer is ``truncated``), wall
    time and events scanned (beyond them the query fails with ``query_limit``); ``None`` = no limit."""

    max_matches: int | None = None
    timeout_ms: int | None = None
    max_events: int | None = None


#: A server without limits.
NO_LIMITS = QueryLimits()


@dataclass(frozen=True)
class QueryRequest:
    """What a request asks of one query beside its text (docs/contract.md §3): the mode, how many matches and
    at what granularity, the bound events, its own time limit, the answer as columns (Arrow, NDJSON) and a
    density of candidate spans; and the name of the token that asks, for the query log."""

    mode: str = "verified"
    limit: int | None = None
    granularity: int | None = None
    include_events: bool = False
    timeout_ms: int | None = None
    columnar: bool = False
    density: int | None = None
    token: str | None = None


#: A request that asks for nothing but the defaults.
DEFAULT_REQUEST = QueryRequest()


def tighter_timeout(asked_ms: int | None, server_ms: int | None) -> int | None:
    """The tighter of a request's and the server's time limits (``None`` or 0: none)."""
    limits = [t for t in (asked_ms, server_ms) if t]
    return min(limits) if limits else None


def query_text(query: str | Mapping[str, Any]) -> str:
    """A query as the query log keeps it: its text, or its JSON form with sorted keys."""
    return query if isinstance(query, str) else json.dumps(query, sort_keys=True)


def logged_query(catalog: Catalog, home: Path, name: str, query: str | Mapping[str, Any],
                 asked: QueryRequest = DEFAULT_REQUEST, limits: QueryLimits = NO_LIMITS) -> QueryAnswer:
    """:func:`limited_query` as ``asked``, under the server's ``limits`` (and the request's ``timeout_ms``
    when tighter), written to the catalog's query log with its time, counts and error code — or
    ``internal`` for a fault — and the name of the token that asked."""
    started = time.perf_counter()
    error_code: str | None = None
    answer: QueryAnswer = {}
    try:
        if not dataset_exists(home, name):
            raise NotFound(f"dataset {name!r} does not exist", where=name)
        answer = limited_query(
            home, name, query, mode=asked.mode, limit=asked.limit, granularity=asked.granularity,
            include_events=asked.include_events, max_matches=limits.max_matches,
            timeout_ms=tighter_timeout(asked.timeout_ms, limits.timeout_ms), max_events=limits.max_events,
            columnar=asked.columnar, density=asked.density)
        return answer
    except SeqsketchError as err:
        error_code = err.code
        raise
    except Exception:
        error_code = "internal"
        raise
    finally:
        stats = answer.get("stats") or {}
        catalog.log_query(
            dataset=name, mode=asked.mode, query=query_text(query), ms=(time.perf_counter() - started) * 1000.0,
            count=answer.get("count"), candidate_intervals=stats.get("candidate_intervals"),
            events_scanned=stats.get("events_scanned"), truncated=bool(answer.get("truncated")),
            error_code=error_code, token=asked.token)


#: One bound event of a match: ``seq``, ``ts`` (ISO-8601), ``type`` and ``attrs``.
BoundEvent: TypeAlias = dict[str, Any]


def bound_events(home: Path, name: str, matches: Sequence[Mapping[str, Any]]) -> list[list[BoundEvent]]:
    """For each match, its bound events (``seq``, ``ts`` ISO, ``type``, ``attrs``) in stream order.

    Only the bound events are read — every match's together, in one pass over the store — not the events
    between a match's first and last: a per-case match can span tens of thousands of other cases' events."""
    per_match = [sorted({s for seq_list in match.get("bindings", {}).values() for s in seq_list})
                 for match in matches]
    wanted = distinct_ints(np.fromiter((s for seqs in per_match for s in seqs), dtype=np.int64))
    by_seq: dict[int, BoundEvent] = {}
    if len(wanted):
        cut = np.flatnonzero(np.diff(wanted) != 1) + 1  # runs of consecutive seqs, as inclusive ranges
        starts, ends = wanted[np.r_[0, cut]], wanted[np.r_[cut - 1, len(wanted) - 1]]
        store = EventStore.open(store_dir(dataset_dir(name, home)))
        table, _ = store.read_ranges(list(zip(starts.tolist(), ends.tolist(), strict=True)),
                                     snapshot=store.snapshot())
        for row in to_records(table):
            seq, ts = row["seq"], row["ts"]
            iso = iso_of_micros(ts) if isinstance(ts, int) else str(ts)
            by_seq[seq] = {"seq": seq, "ts": iso, "type": row["type"], "attrs": row.get("attrs", {})}
    return [[by_seq[s] for s in seqs if s in by_seq] for seqs in per_match]


def bound_columns(home: Path, name: str, rows: pa.Table, variables: Sequence[str] | None = None,
                  attributes: Sequence[str] | None = None) -> pa.Table:
    """A matches table with its bound events' ``<var>.type`` and ``<var>.attrs.<attribute>`` columns (docs/contract.md
    §3.6): every bound event of every match read together, in one pass over the store — of ``variables``
    only, and only ``attributes``, where given (a grouping field reads one variable's one attribute, without
    the type, from the seek files where they hold its values; an empty list: the type alone)."""
    if variables is None:
        variables = [c[:-len(".seq")] for c in rows.column_names if c.endswith(".seq")]
    seqs = [rows.column(f"{v}.seq").combine_chunks() for v in variables]
    flat = [s.flatten() if pa.types.is_list(s.type) else s for s in seqs]
    wanted = distinct_ints(np.concatenate([f.drop_null().to_numpy(zero_copy_only=False) for f in flat] or
                                          [np.zeros(0, dtype=np.int64)]).astype(np.int64))
    if not len(wanted):
        return rows
    from sketch.partition.group_answers import runs_of

    store = EventStore.open(store_dir(dataset_dir(name, home)))
    snap = store.snapshot()
    columns = None if attributes is None else ["seq"] + ([] if attributes else ["type"]) + [
        f"{ATTRS}.{a}" for a in attributes if a in snap.attrs]
    events, _ = store.read_ranges(runs_of(wanted), columns=columns, snapshot=snap)
    # (a field asked for by name: the events' types are not taken)
    return bound_columns_of(rows, variables, events, types=not attributes)
