"""The answer modes of docs/contract.md §3: which path answers a query, and the answer bodies.

:func:`answer_indexed` assembles the docs/contract.md §3 answer body of ``approximate``, ``verified`` and ``exact``
modes from a tree and an event source; the service adds the dataset's name and index version.

:func:`decided_body` answers from the dataset's type counts alone, before any file is opened;
:func:`exact_body` is the ``exact`` mode, the engine over the whole stream.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from exact.engine import (
    Budget,
    MatchTable,
    absent_types,
    answer,
    evaluate_table,
    iso_ts_many,
)
from exact.engine.matchtable import match_times
from exact.engine.ordering import partition_links
from exact.engine.parallel import query_threads
from exact.events import ATTRS
from exact.frame import EventFrame
from exact.query.ast import Query, Return
from exact.query.normalize import Plan, normalize
from exact.store.rowfilter import row_filter
from sketch.answer.cases import case_lookup
from sketch.answer.cause import why_empty
from sketch.answer.event_sources import EventSource, StoreSource, needed_columns, read_types
from sketch.answer.verify import links_of, needs_links, verify
from sketch.evaluate import (
    Approximation,
    TreeIndex,
    approximate,
    approximate_exists,
    tree_narrows,
    whole_stream,
)
from sketch.partition.group_answers import columns_without_key, keyed_frame, partition_body, served, tail_of
from sketch.partition.index import PartitionIndex

if TYPE_CHECKING:
    from sketch.tree.nodes import TreeNodes

_I64 = np.int64
MODES = ("approximate", "verified", "exact")
#: a pattern whose types (positive and negated) hold at most this many events of the stream is verified by
#: reading them in place, without the tree (unpartitioned; the partition index decides by its own counts)
FEW_EVENTS = 4096
#: ... in a stream of at least this many events (the tree's walk grows with the stream: in a short one it
#: costs next to nothing, and the read in place saves nothing)
FEW_EVENTS_OF = 1 << 16


def _events_of_types(query: Query, plan: Plan, source: EventSource, counts: Mapping[str, int] | None) -> int | None:
    """How many events of the stream a read for ``query`` keeps by type (None: every type, or not known)."""
    if counts is None:
        return None
    types = read_types(query, plan, positional=source.positional)
    return None if types is None else sum(counts.get(t, 0) for t in types)


def approximate_body(approx: Approximation, *, events_total: int) -> dict[str, Any]:
    """The docs/contract.md §3 body of an approximate answer: ``exists``, ``intervals`` with their ``level``, the
    expected false-positive rate, and ``explain`` when nothing can match."""
    units = approx.units
    found = approx.intervals()
    starts = units.index_of_seq(np.asarray([iv["start_seq"] for iv in found], dtype=_I64))
    ends = units.index_of_seq(np.asarray([iv["end_seq"] for iv in found], dtype=_I64))
    start_ts, end_ts = iso_ts_many(units.lo_ts[starts]), iso_ts_many(units.hi_ts[ends])
    intervals = [{"start_seq": iv["start_seq"], "end_seq": iv["end_seq"], "start_ts": a, "end_ts": b,
                  "level": iv["level"]} for iv, a, b in zip(found, start_ts, end_ts, strict=True)]
    body: dict[str, Any] = {"strategy": approx.query.strategy.value, "exists": approx.exists,
                            "intervals": intervals,
                            "expected_false_positive_rate": approx.expected_false_positive_rate,
                            "truncated": False}
    if approx.explain is not None:
        body["explain"] = approx.explain
    return body


def answer_indexed(query: Query, tree: TreeNodes | None, source: EventSource, *, mode: str = "verified",
                   limit: int | None = None, granularity: int = 0, partition: PartitionIndex | None = None,
                   budget: Budget | None = None, columnar: bool = False) -> dict[str, Any]:
    """The docs/contract.md §3 answer (without ``dataset`` and ``index_version``) of ``query`` in ``mode``.

    ``approximate``: from the tree alone.  ``verified``: approximate, then :func:`verify` on the candidates.
    ``exact``: the exact engine over the whole stream (``tree`` unused; may be None).  A query partitioned
    on ``partition``'s key is answered from the partition-clustered tree (:mod:`sketch.partition.group_answers`):
    the planner's choice, reported as ``stats.index`` (``partition`` or ``stream``).  ``columnar``: the
    answer's rows as one Arrow table under ``rows`` (see :func:`exact.engine.answer`).
    """
    if mode not in MODES:
        from exact.errors import QuerySemanticError

        raise QuerySemanticError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}", where="mode")
    started = time.perf_counter()
    if mode == "exact":
        return exact_body(query, source, limit=limit, partition=partition, budget=budget, columnar=columnar)
    plan = normalize(query)
    if partition is not None and served(query, partition.key) and granularity == 0:
        # (a coarser granularity asks for the stream tree's levels)
        return partition_body(query, plan, partition, source, mode=mode, limit=limit,
                              columns=needed_columns(query), types=read_types(query, plan), budget=budget,
                              columnar=columnar)
    stats: dict[str, Any] = {"index": "stream", "approximate_ms": 0.0, "verify_ms": 0.0, "total_ms": 0.0,
                             "nodes_probed": 0, "candidate_intervals": 0, "events_scanned": 0,
                             "events_total": source.events_total, "threads": query_threads()}

    assert tree is not None  # (only the exact mode goes without a tree)
    index = TreeIndex.shared(tree, granularity)
    probed = index.probes()
    counts = source.type_counts()
    held = _events_of_types(query, plan, source, counts) if mode == "verified" else None
    few = held is not None and held <= FEW_EVENTS and source.events_total >= FEW_EVENTS_OF
    if few:
        # So few events can bind that reading them in place (the seek files' rows by type) costs less than
        # walking the tree to narrow them: on BPI 2012, 814 events took 1.85 ms by the tree, 1.44 ms read.
        approx = whole_stream(query, index)
        stats["index"] = "store"
        stats["plan"] = (f"the pattern's types hold {held:,} events in all (at most {FEW_EVENTS:,}): reading them "
                         "in place costs less than the tree's walk, so the store is read as in exact mode")
    elif mode == "verified" and counts is not None and not tree_narrows(query, index, counts):
        # The pattern's types occur throughout: the tree would rule out next to nothing, so the store is
        # read as in exact mode (through its row filter and value indexes) without the tree's walk.
        approx = whole_stream(query, index)
        stats["index"] = "store"
        stats["plan"] = ("the pattern's rarest position may occur near most of the tree's leaves (its types occur "
                         "throughout): the tree would rule out next to nothing, so the store is read as in exact "
                         "mode")
    elif mode == "approximate" and query.returns == Return.EXISTS:
        # Only the yes/no is asked: stop at the first prefix of the stream with a candidate.
        approx = approximate_exists(query, index, type_counts=source.type_counts())
    else:
        approx = approximate(query, index, type_counts=source.type_counts())
    stats["approximate_ms"] = _ms(started)
    stats["nodes_probed"] = index.probes() - probed
    stats["candidate_intervals"] = approx.interval_count()
    if mode == "approximate":
        body = approximate_body(approx, events_total=source.events_total)
        if query.returns == Return.EXISTS:
            del body["intervals"]  # as the other modes answer RETURN exists: the yes/no, no places
        stats["total_ms"] = _ms(started)
        return {"mode": mode, **body, "stats": stats}

    verifying = time.perf_counter()
    result = verify(approx, source, budget=budget, limit=limit)
    stats["verify_ms"] = _ms(verifying)
    stats["events_scanned"] = result.events_scanned
    body = answer(query, result.found, result.ts_of, limit=limit, case_of=case_lookup(query, source, partition),
                  columnar=columnar)
    if not result.found.exists:
        where = (f"the pattern's types hold {held:,} events in all, read in place without the tree, and none "
                 "of them makes an exact match: " if few else
                 f"the tree rules out no part of the stream (its types occur throughout), and its "
                 f"{approx.coverage():,} events hold no exact match: " if stats["index"] == "store" else
                 f"{stats['candidate_intervals']} candidate interval(s) of {approx.coverage():,} events hold no "
                 "exact match: ")
        body["explain"] = approx.explain if approx.explain is not None else (
            where + why_empty(query, result.read,
                              spans=approx.interval_bounds() if result.spans is None else result.spans,
                                        type_counts=source.type_counts(), budget=budget,
                                        spent_ms=stats["verify_ms"]))
    stats["total_ms"] = _ms(started)
    return {"mode": mode, **body, "stats": stats}


def decided_body(query: Query, mode: str, type_counts: Mapping[str, int], events_total: int,
                 columnar: bool = False, attrs: Mapping[str, pa.DataType] | None = None) -> dict[str, Any] | None:
    """The answer (without ``dataset`` and ``index_version``) when the dataset's type counts decide it — a
    position of the pattern needs types no event has — made before any index or store file is opened; None
    when they do not decide it.  ``stats.index`` is ``statistics`` (``null`` in exact mode)."""
    started = time.perf_counter()
    plan = normalize(query)
    if not absent_types(plan, type_counts):
        return None
    positions: dict[int, set[str]] = {}
    for v in plan.positives:
        positions.setdefault(v.group, set()).update(v.types or ())
    label = next((" | ".join(sorted(types)) for types in positions.values()
                  if types and not any(type_counts.get(t, 0) for t in types)), None)
    if label is None:  # (a position whose conditions admit no type at all: the index path explains it)
        return None
    body: dict[str, Any] = {"mode": mode}
    if mode == "approximate":
        body.update(strategy=query.strategy.value, exists=False, expected_false_positive_rate=0.0,
                    truncated=False)
        if query.returns != Return.EXISTS:
            body["intervals"] = []
    else:
        none = MatchTable(tuple(v.name for v in plan.positives))
        cases = case_lookup(query, _Typed(attrs or {}))
        body.update(answer(query, none, {}, columnar=columnar, case_of=cases))
    if mode != "exact":  # (exact answers do not explain)
        body["explain"] = f"{label} never occurs in the history"
    body["stats"] = {"index": None if mode == "exact" else "statistics", "approximate_ms": 0.0,
                     "verify_ms": 0.0, "total_ms": _ms(started), "nodes_probed": 0, "candidate_intervals": 0,
                     "events_scanned": 0, "events_total": events_total,
                     "threads": query_threads()}
    return body


class _Typed:
    """A source that knows only the attributes' types (the case column of an answer decided without a read)."""

    def __init__(self, attrs: Mapping[str, pa.DataType]) -> None:
        self.snapshot = self
        self._attrs = dict(attrs)

    def attr_types(self) -> dict[str, pa.DataType]:
        return self._attrs


def exact_body(query: Query, source: EventSource, *, limit: int | None = None,
               partition: PartitionIndex | None = None, budget: Budget | None = None,
               columnar: bool = False) -> dict[str, Any]:
    """The ``exact`` answer: the engine over every event of the stream, no index.  Only the columns the
    query needs are read, and only the events a variable can bind by type and its own conditions (from the
    seek files, in place; and under ``partition_contiguity`` the partition values of the events between two
    of them a run may join); a query partitioned on the store's partition key gets the groups from its
    layout by number instead of decoding the key's values."""
    started = time.perf_counter()
    stats: dict[str, Any] = {"index": None, "approximate_ms": 0.0, "verify_ms": 0.0, "total_ms": 0.0,
                             "nodes_probed": 0, "candidate_intervals": 0, "events_scanned": 0,
                             "events_total": source.events_total, "threads": query_threads()}
    plan = normalize(query)
    whole = [(0, source.events_total - 1)] if source.events_total else []
    if query.between is not None and isinstance(source, StoreSource):
        lo, hi = source.seq_span(query.between.start, query.between.end)  # only these take part
        whole = [(lo, hi)] if lo <= hi else []
    columns = needed_columns(query)
    types = read_types(query, plan, positional=source.positional)
    keep = row_filter(plan, positional=source.positional)
    if absent_types(plan, source.type_counts()):
        frame: EventFrame | pa.Table = EventFrame.build(source.read_ranges([], ["seq", "ts", "type"])[0])
        scanned = 0
    elif partition is not None and partition.key in query.partition_by and isinstance(source, StoreSource):
        layout = partition.layout
        tail = tail_of(source, layout)
        frame, scanned = keyed_frame(source, layout, tail, whole,
                                     columns_without_key(query, columns, layout.key), types, keep)
        if needs_links(query, types, keep) and len(frame):  # (the key known by group numbers, unread)
            named = ["seq", "ts", "type"] + [f"{ATTRS}.{a}" for a in query.partition_by if a != layout.key]
            full, decoded = keyed_frame(source, layout, tail, whole, named, None)
            frame.partition_next = partition_links(full, query.partition_by, frame.seq)
            scanned += decoded
    elif hasattr(source, "read_frame"):
        frame, scanned = source.read_frame(whole, columns, types, keep)
        if needs_links(query, types, keep) and len(frame):
            frame.partition_next, decoded = links_of(source, whole, plan, frame)
            scanned += decoded
    else:
        frame = source.read_all(columns)
        scanned = len(frame)
    table = evaluate_table(query, frame, limit=limit, budget=budget, type_counts=source.type_counts(),
                           spans=not columnar)
    stats["events_scanned"] = scanned
    body = answer(query, table, match_times(frame, table), limit=limit,
                  case_of=case_lookup(query, source, partition), columnar=columnar)
    stats["verify_ms"] = _ms(started)
    stats["total_ms"] = stats["verify_ms"]
    return {"mode": "exact", **body, "stats": stats}


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000.0, 3)
