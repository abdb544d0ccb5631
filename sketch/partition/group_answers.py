"""Answers from the partition-clustered tree: the approximate and verified modes for per-group questions.

The planner (:func:`sketch.answer.modes.answer_indexed`) hands a query here when its ``PARTITION BY`` includes the
dataset's partition key (and it is not under strict contiguity, which is about the global stream): every
match then lies inside one group.  :class:`~sketch.partition.index.PartitionIndex` gives the candidate groups;
the events appended since the layout (the tail) add theirs.  Approximate answers name the candidate groups'
seq spans; verification reads those groups' events — each group's rows at once, from the seek files — and
runs the exact engine over them with the groups known by number (no key value is decoded), so the answer is
the exact engine's on the whole stream: a group left out holds no event of some positive position, so no
match; every event a match's strategy or negation looks at lies in its own group, which is read whole
(for the types any variable can bind, or every type under partition contiguity).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa

from exact.arrays import distinct_ints, sorted_ints
from exact.engine import Budget, answer, evaluate_table, iso_ts_many
from exact.engine.answer_columns import SeqTimes
from exact.engine.matchtable import MatchTable, combined, match_times, merge_spans
from exact.engine.parallel import each, query_threads
from exact.frame import EventFrame
from exact.query.ast import Query, Return, Strategy
from exact.query.normalize import Plan, normalize
from exact.store.grouping import Layout
from exact.store.rowfilter import RowFilter, row_filter
from sketch.answer.cases import case_lookup
from sketch.answer.cause import Read, why_empty
from sketch.partition.index import PartitionIndex, Tail, position_types, read_tail

_I64 = np.int64
#: Verification scans the whole stream's types in place rather than gathering the candidates' rows once
#: these are more than 1/this of the stream: so it never reads more than twice the candidates' events.
_GATHER_COST = 2
#: Candidates of at least this many events of the types read (counted in the layout) are read and evaluated
#: in chunks of groups, one per thread.  Below, a thread costs more than it saves: each chunk's read still
#: steps through every part its cases touch, and with evaluation linear the read is most of the work.  On two
#: threads against one, the 10M replay's candidates of 131K and 171K events took 1.2-1.3x as long, the 1.3M
#: replay's 406K events 1.1-1.3x, and the 10M replay's 3.1M events 0.88x.
MIN_PARALLEL_ROWS = 1_000_000
#: Cases rich in the types read hold more of them than the stream's share says: candidates are counted in
#: the layout unless the share times this many still falls short.
_SHARE_SLACK = 4
#: Verification reads the store as exact mode does — every event of the types read, found by type in the seek
#: files, with no candidate group's rows gathered — when the candidate groups hold more than this share of
#: those events.  Gathering a group's rows costs about three times reading them in place: on the 5M replay of
#: BPI 2012, candidates holding 78 % and 29 % of the events read took 1.7x and 1.4x the store's time, and
#: those holding 12 % and 7 % took 0.64x and 0.66x.
STORE_SHARE = 0.25


def served(query: Query, key: str | None) -> bool:
    """Can the partition index answer ``query``?  Its ``PARTITION BY`` names the key, so every match and
    every event a negation forbids lies in one group; strict contiguity is about the global stream."""
    return key is not None and key in query.partition_by and query.strategy != Strategy.STRICT_CONTIGUITY


def runs_of(seqs: np.ndarray) -> np.ndarray:
    """Sorted distinct seqs as inclusive runs of consecutive ones, an ``(n, 2)`` array (a read takes it
    as it is)."""
    if not len(seqs):
        return np.zeros((0, 2), dtype=_I64)
    breaks = np.flatnonzero(np.diff(seqs) != 1)
    lo = np.concatenate(([seqs[0]], seqs[breaks + 1]))
    hi = np.concatenate((seqs[breaks], [seqs[-1]]))
    return np.stack([lo, hi], axis=1).astype(_I64)


def tail_of(source: Any, layout: Layout) -> Tail | None:
    """The events appended after ``layout`` (None when there are none): their seq, type and key, read a
    part at a time and kept per part (parts never change; under a live feed each new part is read once, not
    by every question until the next fold)."""
    if source.events_total <= layout.events:
        return None
    columns = ["seq", "type", f"attrs.{layout.key}"]
    snap = source.snapshot
    pieces = []
    for part in snap.parts:
        if part.last_seq < layout.events:
            continue
        key = (str(source.store.root), part.file, layout.key)
        with _TAIL_LOCK:
            piece = _TAIL_PARTS.get(key)
            if piece is not None:
                _TAIL_PARTS.move_to_end(key)
        if piece is None:
            piece = source.store.read_table(part.first_seq, part.last_seq, columns, snapshot=snap)
            with _TAIL_LOCK:
                _TAIL_PARTS[key] = piece
                while len(_TAIL_PARTS) > _TAIL_PARTS_KEPT:
                    _TAIL_PARTS.popitem(last=False)
        if part.first_seq < layout.events:
            piece = piece.slice(layout.events - part.first_seq)
        pieces.append(piece)
    table = pa.concat_tables(pieces, promote_options="permissive") if len(pieces) > 1 else pieces[0]
    return read_tail(layout, table)


#: the tail columns of the parts read lately, by (store, part file, key): the parts after a layout
_TAIL_PARTS: OrderedDict[tuple[str, str, str], pa.Table] = OrderedDict()
_TAIL_PARTS_KEPT = 256
_TAIL_LOCK = threading.Lock()


def group_numbers(layout: Layout, tail: Tail | None, seqs: np.ndarray) -> np.ndarray:
    """The group number of each event (``seqs``: sorted), layout and tail alike (-1: no key)."""
    if not len(seqs) or int(seqs[-1]) < layout.events:  # (no event of the tail: one gather)
        numbers: np.ndarray = layout.group_of[seqs].astype(_I64, copy=False)
        return numbers
    out = np.full(len(seqs), -1, dtype=_I64)
    old = seqs < layout.events
    out[old] = layout.group_of[seqs[old]]
    if tail is not None and (~old).any():
        out[~old] = tail.group[np.searchsorted(tail.seq, seqs[~old])]
    return out


def keyed_frame(source: Any, layout: Layout, tail: Tail | None,
                ranges: Sequence[tuple[int, int]] | np.ndarray, columns: list[str],
                types: frozenset[str] | None, keep: RowFilter | None = None) -> tuple[EventFrame, int]:
    """The events in ``ranges`` as the engine's frame, knowing the key by group numbers; the key's values
    are not read unless a condition names it.  ``keep``: the read's row filter (:mod:`exact.store.rowfilter`)."""
    frame, scanned = source.read_frame(ranges, columns, types, keep)
    return frame.with_keys(layout.key, group_numbers(layout, tail, frame.seq)), scanned


def columns_without_key(query: Query, columns: list[str], key: str) -> list[str]:
    """The columns to read when the key is known by number: without ``attrs.<key>`` unless a condition
    (rather than only ``PARTITION BY``) names it."""
    named = {a for c in query.where for a in c.attributes()}
    return [c for c in columns if c != f"attrs.{key}" or key in named]


def partition_body(query: Query, plan: Plan, pindex: PartitionIndex, source: Any, *, mode: str,
                   limit: int | None, columns: list[str], types: frozenset[str] | None,
                   budget: Budget | None = None, columnar: bool = False) -> dict[str, Any]:
    """The docs/contract.md §3 answer body (without dataset and index version) of ``query`` in ``approximate`` or
    ``verified`` mode from the partition index."""
    started = time.perf_counter()
    layout = pindex.layout
    found = pindex.candidates(plan)
    tail = tail_of(source, layout)
    groups = found.groups
    if tail is not None:
        typed = position_types(plan)
        extra = tail.groups_with(typed, layout) if typed else np.unique(tail.group[tail.group >= 0])
        groups = np.union1d(groups, extra)
    stats: dict[str, Any] = {"index": "partition", "approximate_ms": 0.0, "verify_ms": 0.0, "total_ms": 0.0,
                             "nodes_probed": found.nodes_probed, "candidate_intervals": 0,
                             "candidate_groups": int(len(groups)), "events_scanned": 0,
                             "events_total": source.events_total, "threads": query_threads()}
    explain = None
    if not len(groups):
        explain = found.explain or f"no {layout.key} holds every type of the pattern"
    counted = candidate_share(layout, groups, types, source.type_counts()) if mode == "verified" else None
    share = None if counted is None else counted[0]
    threads = query_threads()
    if counted is not None and share is not None and share > STORE_SHARE and parallel(query, counted[1], threads,
                                                                               source.events_total):
        # the candidates' chunks run on several threads, which the store's read in place does not: on the 10M
        # replay, candidates of 3.1M events (76 %) took 0.64x the store's time on two
        stats["plan"] = (f"the {len(groups):,} candidate {layout.key}(s) hold {share:.0%} of the events of the "
                         f"pattern's types, {counted[1]:,} events: enough to be read and evaluated in chunks on "
                         f"{threads} threads, which the store's read in place is not")
        share = None
    if share is not None and share > STORE_SHARE:
        # (the candidates' spans are not needed: the store is read whole, one interval)
        stats["candidate_intervals"] = 1
        stats["approximate_ms"] = _ms(started)
        stats["index"] = "store"
        stats["plan"] = (f"the {len(groups):,} candidate {layout.key}(s) hold {share:.0%} of the events of the "
                         f"pattern's types: more than {STORE_SHARE:.0%}, so the store is read as in exact mode")
        return _store_body(query, layout, tail, source, columns_without_key(query, columns, layout.key), types,
                           row_filter(plan), groups, stats, limit=limit, budget=budget, columnar=columnar,
                           explain=explain, pindex=pindex, started=started)
    spans = _group_spans(layout, tail, groups)
    stats["candidate_intervals"] = len(spans)
    stats["approximate_ms"] = _ms(started)
    if mode == "approximate":
        ts = source.ts_of(np.asarray([s for span in spans for s in span], dtype=_I64)) if spans else []
        texts = iso_ts_many(ts) if len(ts) else []
        body: dict[str, Any] = {"strategy": query.strategy.value, "exists": bool(len(groups))}
        if query.returns != Return.EXISTS:
            body["intervals"] = [{"start_seq": a, "end_seq": b, "start_ts": texts[2 * i],
                                  "end_ts": texts[2 * i + 1], "level": 0} for i, (a, b) in enumerate(spans)]
        body.update(expected_false_positive_rate=0.0, truncated=False)
        if explain:
            body["explain"] = explain
        stats["total_ms"] = _ms(started)
        return {"mode": mode, **body, "stats": stats}
    verifying = time.perf_counter()
    columns = columns_without_key(query, columns, layout.key)
    keep = row_filter(plan)

    groups_read = GroupRead(query, layout, tail, source, columns, types, keep)
    if share is not None and "plan" not in stats:
        stats["plan"] = (f"the {len(groups):,} candidate {layout.key}(s) hold {share:.0%} of the events of the "
                         f"pattern's types: at most {STORE_SHARE:.0%}, so theirs are read")
    chunks = in_chunks(groups_read, groups, limit=limit, budget=budget, columnar=columnar)

    def read(keep: RowFilter | None) -> tuple[EventFrame, int]:
        rows = chunks.rows
        if not groups_read.gathered(len(rows)):
            # the candidates hold much of the stream: scanning every event's type in place costs less than
            # gathering theirs; the events of other groups are dropped by their group number
            whole = [(0, source.events_total - 1)]
            frame, scanned = keyed_frame(source, layout, tail, whole, columns, types, keep)
            return frame.take(np.isin(frame.keys[layout.key], groups)), scanned
        return keyed_frame(source, layout, tail, runs_of(rows), columns, types, keep)

    frame: EventFrame | None = None
    if chunks.found is not None:
        table, times, scanned = chunks.found
        read_ms = 0.0
    else:
        read_at = time.monotonic()
        frame, scanned = read(keep)
        read_ms = (time.monotonic() - read_at) * 1000.0
        table = evaluate_table(query, frame, limit=limit, budget=budget, type_counts=source.type_counts(),
                               spans=not columnar)
        times = match_times(frame, table)
    stats["verify_ms"] = _ms(verifying)
    stats["events_scanned"] = scanned
    body = answer(query, table, times, limit=limit, case_of=case_lookup(query, source, pindex),
                  columnar=columnar)
    if not body["exists"]:
        if frame is None:  # (read in chunks: the explain searches the candidates read as one)
            read_at = time.monotonic()
            frame, _ = read(keep)
            read_ms = (time.monotonic() - read_at) * 1000.0
        body["explain"] = explain or (
            f"{len(groups):,} {layout.key}(s) hold every type of the pattern, but none of them holds a "
            "match: " + why_empty(query, _read_for_explain(frame, types, keep, scanned, read, read_ms),
                                  spans=None, group_key=layout.key,
                                  type_counts=source.type_counts(), budget=budget,
                                  spent_ms=stats["verify_ms"]))
    stats["total_ms"] = _ms(started)
    return {"mode": mode, **body, "stats": stats}


def candidate_share(layout: Layout, groups: np.ndarray, types: frozenset[str] | None,
                    counts: dict[str, int] | None) -> tuple[float, int] | None:
    """The share of the stream's events of ``types`` that the candidate ``groups`` hold, and how many they
    are, by the layout's counts (a group of the tail holds none of them there: the tail is small beside the
    layout); None when every type is read or the stream's counts are unknown."""
    if types is None or not counts:
        return None
    wanted = sum(counts.get(t, 0) for t in types)
    if not wanted or not len(groups):
        return 0.0, 0
    held = layout.count_of_types(groups[groups < layout.groups], types)
    return held / wanted, held


def parallel(query: Query, rows: int, threads: int, events_total: int) -> bool:
    """Are candidates of ``rows`` events (of the types read) read and evaluated in chunks, one per thread, as
    :func:`in_chunks` decides: two chunks or more of :data:`MIN_PARALLEL_ROWS`, gathered?"""
    return (threads > 1 and query.returns != Return.EXISTS and rows // max(MIN_PARALLEL_ROWS, 1) >= 2
            and rows * _GATHER_COST <= events_total)


def _store_body(query: Query, layout: Layout, tail: Tail | None, source: Any, columns: list[str],
                types: frozenset[str] | None, keep: RowFilter | None, groups: np.ndarray,
                stats: dict[str, Any], *, limit: int | None, budget: Budget | None, columnar: bool,
                explain: str | None, pindex: PartitionIndex, started: float) -> dict[str, Any]:
    """The verified answer read as exact mode reads it: every event of the types read within BETWEEN, found
    by type in the seek files, grouped by the layout's numbers — the engine over them is the exact answer."""
    verifying = time.perf_counter()
    whole = [(0, source.events_total - 1)] if source.events_total else []
    if query.between is not None and hasattr(source, "seq_span"):
        lo, hi = source.seq_span(query.between.start, query.between.end)
        whole = [(lo, hi)] if lo <= hi else []

    def read(keep: RowFilter | None) -> tuple[EventFrame, int]:
        return keyed_frame(source, layout, tail, whole, columns, types, keep)

    read_at = time.monotonic()
    frame, scanned = read(keep)
    read_ms = (time.monotonic() - read_at) * 1000.0
    candidates = in_groups(frame, layout.key, groups)
    table = evaluate_table(query, candidates, limit=limit, budget=budget, type_counts=source.type_counts(),
                           spans=not columnar)
    stats["verify_ms"] = _ms(verifying)
    stats["events_scanned"] = scanned
    body = answer(query, table, match_times(candidates, table), limit=limit,
                  case_of=case_lookup(query, source, pindex), columnar=columnar)
    if not body["exists"]:
        body["explain"] = explain or (
            f"{len(groups):,} {layout.key}(s) hold every type of the pattern, but none of them holds a "
            "match: " + why_empty(query, _read_for_explain(frame, types, keep, scanned, read, read_ms),
                                  spans=None, group_key=layout.key, type_counts=source.type_counts(),
                                  budget=budget, spent_ms=stats["verify_ms"]))
    stats["total_ms"] = _ms(started)
    return {"mode": "verified", **body, "stats": stats}


#: the events of the candidate groups are taken out of a read of the store when they are at most this share
#: of it (a take of every column costs about what the engine's first passes over the events it saves cost)
TAKE_SHARE = 0.5


def in_groups(frame: EventFrame, key: str, groups: np.ndarray) -> EventFrame:
    """``frame`` (the store's events of the types read, with their group numbers under ``key``) with only
    the events of ``groups`` (sorted), when they are at most :data:`TAKE_SHARE` of it: no other group holds
    a match (a group that is not a candidate lacks a type of the pattern), so the engine need not pass them."""
    numbers = frame.keys[key]
    if not len(numbers) or not len(groups):
        return frame
    wanted = np.zeros(max(int(groups[-1]), int(numbers.max())) + 2, dtype=bool)
    wanted[groups] = True
    keep = wanted[numbers]  # (no key: -1, the last entry, never wanted)
    return frame.take(keep) if np.count_nonzero(keep) <= TAKE_SHARE * len(keep) else frame


@dataclass(frozen=True)
class GroupRead:
    """How the events of chosen groups are found and read for ``query``: the layout's rows of ``types``
    (None: every type) and the tail's, within BETWEEN, read with the row filter ``keep``."""

    query: Query
    layout: Layout
    tail: Tail | None
    source: Any
    columns: list[str]
    types: frozenset[str] | None
    keep: RowFilter | None

    def rows_of(self, chosen: np.ndarray) -> np.ndarray:
        """The events of the groups ``chosen`` (sorted seqs): their layout rows and their tail rows (only of
        the types that matter), within BETWEEN."""
        layout, tail, types = self.layout, self.tail, self.types
        old = chosen[chosen < layout.groups]
        rows = layout.rows(old) if types is None else layout.rows_of_types(old, types)
        if tail is not None:
            in_tail = np.isin(tail.group, chosen)
            if types is not None:
                in_tail &= np.isin(tail.codes, [i for i, t in enumerate(tail.types) if t in types])
            rows = np.concatenate([rows, tail.seq[in_tail]])
        rows = sorted_ints(rows)
        between = self.query.between
        if between is not None and hasattr(self.source, "seq_span"):
            # only events within BETWEEN take part: the seqs of its time range (ts never decreases along seq)
            lo, hi = self.source.seq_span(between.start, between.end)
            rows = rows[(rows >= lo) & (rows <= hi)]
        return rows

    def gathered(self, rows: int) -> bool:
        """Is gathering this many rows cheaper than scanning every event's type in place?"""
        return self.types is None or rows * _GATHER_COST <= self.source.events_total


@dataclass
class Chunks:
    """The events of the groups asked for, found per chunk of groups; ``found``: the matches, their times
    and the rows looked at when the chunks were also read and evaluated (None: read them as one)."""

    parts: list[np.ndarray]
    found: tuple[MatchTable, SeqTimes, int] | None = None

    @cached_property
    def rows(self) -> np.ndarray:
        """All the chunks' events, sorted."""
        return self.parts[0] if len(self.parts) == 1 else sorted_ints(np.concatenate(self.parts))


def in_chunks(read: GroupRead, groups: np.ndarray, *, limit: int | None, budget: Budget | None,
              columnar: bool) -> Chunks:
    """Cases are independent: ``groups`` (sorted) in chunks of about equal size, each one's events found,
    read and evaluated on its own thread (the reads and kernels release the GIL), the matches joined
    (:func:`answer` puts them in answer order) — unless the question stops at its first match, is small
    (:data:`MIN_PARALLEL_ROWS`), or is best read by a scan of the whole stream (then only the events are
    found in chunks)."""
    query, threads = read.query, query_threads()
    counts = read.source.type_counts()
    parts = [groups]
    if threads > 1 and query.returns != Return.EXISTS:
        # the types' share of the stream: the groups' events times it tells, cheaply, candidates far too
        # small to chunk (counting their events of those types in the layout costs a read's tenth)
        share = 1.0 if read.types is None or not counts else (
            sum(counts.get(t, 0) for t in read.types) / max(sum(counts.values()), 1))
        parts = _group_chunks(read.layout, groups, read.types, threads, MIN_PARALLEL_ROWS, share)
    rows = each(read.rows_of, parts, threads)
    if len(parts) == 1 or not read.gathered(sum(len(r) for r in rows)):
        return Chunks(rows)

    def verified(rows: np.ndarray) -> tuple[MatchTable, SeqTimes, int]:
        frame, scanned = keyed_frame(read.source, read.layout, read.tail, runs_of(rows), read.columns,
                                     read.types, read.keep)
        table = evaluate_table(query, frame, limit=limit, budget=budget, type_counts=counts, spans=not columnar)
        return table, _times_named(frame, table), scanned

    found = each(verified, rows, threads)
    names = tuple(v.name for v in normalize(query).positives)
    return Chunks(rows, (combined(names, [f[0] for f in found]), SeqTimes.merged([f[1] for f in found]),
                         sum(f[2] for f in found)))


def _group_chunks(layout: Layout, groups: np.ndarray, types: frozenset[str] | None, parts: int, least: int,
                  share: float = 1.0) -> list[np.ndarray]:
    """``groups`` (sorted) in up to ``parts`` runs of about equal events of ``types`` (None: any), each of at
    least ``least`` such events (by the layout's counts; a group of the tail only counts one): one run when
    they hold fewer — at once when their events times ``share`` (those types' share of the stream) come to
    under a quarter of ``least``."""
    old = groups < layout.groups
    size = np.ones(len(groups), dtype=_I64)
    size[old] = layout.group_off[groups[old] + 1] - layout.group_off[groups[old]]
    if types is not None:
        if int(size.sum()) * share * _SHARE_SLACK < least:
            return [groups]
        size[old] = layout.sizes_of_types(groups[old], types)
    total = int(size.sum())
    parts = min(parts, total // max(least, 1))
    if parts <= 1:
        return [groups]
    piece = (np.cumsum(size) - size) * parts // total
    cuts = np.searchsorted(piece, np.arange(1, parts))
    return [chunk for chunk in np.split(groups, cuts) if len(chunk)]


def _times_named(frame: EventFrame, table: MatchTable) -> SeqTimes:
    """The ts of the events ``table`` names (its matches' first, last and bound events, its spans' ends),
    from ``frame``, which holds them."""
    spans = [table.spans.ravel()] if table.spans is not None else []
    wanted = distinct_ints(np.concatenate([table.start, table.end, table.seq, *spans]).astype(_I64))
    return SeqTimes(wanted, frame.ts_at(np.searchsorted(frame.seq, wanted)))


def _read_for_explain(frame: EventFrame, types: frozenset[str] | None, keep: RowFilter | None, scanned: int,
                      read: Callable[[RowFilter | None], tuple[EventFrame, int]], read_ms: float) -> Read:
    """What verification read, as an empty answer's explain searches it: the candidates again with a relaxed
    query's own row filter when it asks for more (the layout's reads take the filter of a non-positional
    read: see :func:`exact.store.rowfilter.row_filter`)."""
    if keep is None:
        return Read(((frame, None),), types, positional=False)

    def again(other: RowFilter | None) -> Read:
        return Read(((read(other)[0], None),), types, keep=other, positional=False)

    return Read(((frame, None),), types, lambda: again(None), scanned, keep, again, False, read_ms)


def _group_spans(layout: Layout, tail: Tail | None, groups: np.ndarray) -> list[tuple[int, int]]:
    """The candidate groups' [first seq, last seq], merged where they overlap."""
    if not len(groups):
        return []
    old = groups[groups < layout.groups]
    if len(old) > 1:  # in order of their first events, without a sort: the layout's order of them, masked
        asked = np.zeros(layout.groups, dtype=bool)
        asked[old] = True
        old = layout.by_first[asked[layout.by_first]]
    lo, hi = layout.spans[0][old], layout.spans[1][old]
    if tail is not None:
        in_tail = np.isin(tail.group, groups)
        if in_tail.any():
            g, seqs = tail.group[in_tail], tail.seq[in_tail]  # (seqs increase)
            named, first_at = np.unique(g, return_index=True)
            last_at = len(g) - 1 - np.unique(g[::-1], return_index=True)[1]
            first, last = seqs[first_at], seqs[last_at]
            # a layout group that goes on in the tail ends later; a group new in the tail is a span of its own
            order = np.argsort(old, kind="stable")  # (``old`` is in the order of the groups' first events)
            ranked = old[order]
            where = np.minimum(np.searchsorted(ranked, named), max(len(ranked) - 1, 0))
            known = (ranked[where] == named) if len(ranked) else np.zeros(len(named), dtype=bool)
            hi = hi.copy()
            np.maximum.at(hi, order[where[known]], last[known])
            lo = np.concatenate([lo, first[~known]])
            hi = np.concatenate([hi, last[~known]])
    return [(a, b) for a, b in merge_spans(lo, hi).tolist()]


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000.0, 3)
