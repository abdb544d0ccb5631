"""Exact verification of candidate intervals, and the three answer modes of docs/contract.md §3.

:func:`verify` runs the exact engine (:func:`exact.engine.evaluate`) on the candidate regions of an
:class:`~sketch.evaluate.Approximation` only, and reports exactly the matches the engine reports on the whole
stream (guarantee 1, *verified = exact*).  Why that holds:

* Every exact match starts in a candidate start unit and ends by its reach (the approximation is a necessary
  condition on type occurrence, and Bloom filters have no false negatives).  A region passes the engine
  ``starts=(start_lo, start_hi)``, so matches are reported once per region; regions never share a start.
* The strategy must see everything it looks at.  For matches starting in a region the engine gets the events
  up to the region's reach: the skip-till-next automaton decides from the events up to the match's end and,
  for a trailing Kleene variable, from the events that could extend it — which would make a longer match,
  so they lie within the reach too; robust skip-till-next-match compares with other matches from the same
  start (also within the reach); a trailing NOT looks up to the window's end after the start (the read end
  covers it).  Widening a region's ``starts`` over units that start no candidate reports nothing extra:
  any match found there would be a match of the positive pattern in the whole stream and so a candidate.
* Events of types no positive or negated variable can bind are ignored by every automaton transition and by
  negation (the engine's own prefilter drops them), so only units that may hold a relevant type are read and
  only rows of relevant types (and of their variables' own attribute conditions) are handed on.  Under the
  contiguity strategies such an event ends a run; a read of the store leaves it out all the same, because
  its seqs are positions and the engine sees the gap (``EventFrame.sparse``).  Under ``partition_contiguity``
  with ``PARTITION BY``, where a left-out event's partition decides, each event read is told the seq of its
  next one in its partition (``EventFrame.partition_next``) where a run can follow that link: to a later
  event read of its partition within the window, the partition values of the events between are read too.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from exact.engine import (
    Budget,
    Match,
    MatchTable,
    evaluate_table,
)
from exact.engine.answer_columns import SeqTimes
from exact.engine.matchtable import combined, match_times
from exact.engine.ordering import partition_links
from exact.events import ATTRS
from exact.frame import EventFrame
from exact.prefilter import variable_masks
from exact.query.ast import Query, Return, Strategy, WithinEvents, WithinTime
from exact.query.normalize import Plan, normalize
from exact.store.manifest import SeqRanges
from exact.store.rowfilter import RowFilter, row_filter
from sketch.answer.anchors import Anchored, anchored_ranges
from sketch.answer.cause import Read
from sketch.answer.event_sources import EventSource, StoreSource, int_column, needed_columns, read_types
from sketch.evaluate import (
    Approximation,
    Region,
)

if TYPE_CHECKING:
    pass

_I64 = np.int64




@dataclass(frozen=True)
class Verification:
    """Exact matches of the candidate regions — what the query's RETURN keeps of them — with the rows read
    (decoded, whole row groups) to find them and the rows handed to the exact engine (in candidate units,
    of relevant types), and those rows themselves."""

    found: MatchTable
    events_scanned: int
    regions: int
    ts_of: SeqTimes
    events_checked: int = 0
    #: the events handed to the engine, kept for explaining an empty answer (:mod:`sketch.answer.cause`)
    read: Read | None = None
    #: the seq ranges read when they are narrower than the candidate intervals (an anchored read,
    #: :mod:`sketch.answer.anchors`): what an explain judges a relaxed query's matches within
    spans: np.ndarray | None = None

    @property
    def matches(self) -> list[Match]:
        return self.found.matches()


def needs_links(query: Query, types: frozenset[str] | None, keep: RowFilter | None) -> bool:
    """Does a read for ``query`` that keeps ``types`` and ``keep``'s rows need each event's next in its
    partition (:attr:`EventFrame.partition_next`)?  Under ``partition_contiguity`` with ``PARTITION BY``,
    when the read leaves events out."""
    return (query.strategy == Strategy.PARTITION_CONTIGUITY and bool(query.partition_by)
            and (types is not None or keep is not None))


def links_of(source: EventSource, ranges: SeqRanges, plan: Plan, table: pa.Table | EventFrame
           ) -> tuple[np.ndarray, int]:
    """The seq of each event of ``table`` (read from ``ranges``)'s next event in its partition among every
    event of ``ranges``, and the rows read to know it: from the seek files' codes where they tell, only the
    links a run can follow (from an event that may go on to a later one of its partition that may follow it,
    within a window: the rows between them); else every row's partition values from a read of the events."""
    query = plan.query
    frame = table if isinstance(table, EventFrame) else EventFrame.build(table)
    seqs = frame.seq
    goes_on, follows = _run_links(plan, frame)
    horizon = np.full(len(seqs), -1, dtype=_I64)  # (below its seq: no run goes on from it)
    horizon[goes_on] = _horizon(query, source, seqs[goes_on], frame.ts_at(np.flatnonzero(goes_on)))
    told = source.partition_next(ranges, query.partition_by, seqs, horizon, follows)
    if told is not None:
        return told
    full, decoded = source.read_frame(ranges, ["seq", "ts", "type"] + [f"{ATTRS}.{a}" for a in query.partition_by])
    return partition_links(full, query.partition_by, seqs), decoded


def _run_links(plan: Plan, frame: EventFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per event of ``frame``: may a run go on from it (it may bind a positive variable some other binding
    may follow: a Kleene one, one of an event set, one before the last element), and may a run go on to it
    (it may bind one that may follow another).  By the variables' types and their own conditions: more
    events than bind, never fewer."""
    last = len(plan.elements) - 1
    masks = variable_masks(plan, frame)
    goes_on = np.zeros(len(frame), dtype=bool)
    follows = np.zeros(len(frame), dtype=bool)
    for v in plan.positives:
        free = v.kleene or len(plan.elements[v.element]) > 1
        if free or v.element < last:
            goes_on |= masks[v.name]
        if free or v.element > 0:
            follows |= masks[v.name]
    return goes_on, follows


def _horizon(query: Query, source: EventSource, seqs: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Per event (``seqs`` at times ``ts``), a seq no later event of a match holding it lies past: a window's
    length on (``WITHIN``), or none (the largest int64) without one."""
    within = query.within
    if isinstance(within, WithinEvents):
        return seqs + within.count
    if isinstance(within, WithinTime) and isinstance(source, StoreSource):
        ends: np.ndarray = source.store.seqs_within(ts, ts + within.micros, source.snapshot)[:, 1]
        return ends
    return np.full(len(seqs), np.iinfo(_I64).max, dtype=_I64)


def _region_ranges(approx: Approximation, regions: Sequence[Region]) -> list[list[tuple[int, int]]]:
    """Per region, the seq ranges of its units to read (consecutive units joined), clipped to its read
    end; computed for all regions together."""
    units = approx.units
    if not regions:
        return []
    idx = np.concatenate([r.units for r in regions]).astype(_I64)
    owner = np.repeat(np.arange(len(regions)), [len(r.units) for r in regions])
    if not len(idx):
        return [[] for _ in regions]
    new = np.ones(len(idx), dtype=bool)
    new[1:] = (np.diff(idx) != 1) | (np.diff(owner) != 0)
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(idx)) - 1
    read_end = np.asarray([r.read_end for r in regions], dtype=_I64)
    lo = units.lo_seq[idx[first]].astype(_I64)
    hi = np.minimum(units.hi_seq[idx[last]].astype(_I64), read_end[owner[first]])
    ok = lo <= hi
    out: list[list[tuple[int, int]]] = [[] for _ in regions]
    for r, a, b in zip(owner[first][ok].tolist(), lo[ok].tolist(), hi[ok].tolist(), strict=True):
        out[r].append((a, b))
    return out


#: Candidate regions closer than this many events are verified together (see Approximation.regions).
MERGE_GAP = 8192


def verify(approx: Approximation, source: EventSource, *, stop_at_first: bool = False,
           merge_gap: int = MERGE_GAP, budget: Budget | None = None, limit: int | None = None
           ) -> Verification:
    """Exact matches of ``approx.query`` on its candidate regions (see the module docstring).

    ``stop_at_first`` stops after the first region with a match (the matches are then a prefix).
    """
    query = approx.query
    plan = normalize(query)
    cols = needed_columns(query)
    contiguous = query.strategy in (Strategy.STRICT_CONTIGUITY, Strategy.PARTITION_CONTIGUITY)
    positional = source.positional
    keep_types = read_types(query, plan, positional=positional)
    keep = row_filter(plan, positional=positional)
    linking = needs_links(query, keep_types, keep)
    counts = source.type_counts()
    tables: list[MatchTable] = []
    pieces: list[tuple[pa.Table | EventFrame, tuple[int, int]]] = []
    read_pieces: list[tuple[SeqRanges, tuple[int, int]]] = []
    times: list[SeqTimes] = []
    scanned = checked = 0
    names = tuple(v.name for v in plan.positives)
    began = time.monotonic()
    reading = 0.0  # seconds spent reading (a read again for an explain costs about as much)

    def run(region: Region, table: pa.Table | EventFrame, ranges: SeqRanges,
            links: tuple[np.ndarray, np.ndarray] | None = None) -> MatchTable:
        if isinstance(table, pa.Table):  # (a read of the store: its seqs are positions)
            table = EventFrame.build(table)
            table.sparse = positional
        if links is not None:  # each event's next in its partition, from one read of every event's partition
            at, nxt = links
            table.partition_next = nxt[np.searchsorted(at, table.seq)]
        pieces.append((table, (region.start_lo, region.start_hi)))
        read_pieces.append((ranges, (region.start_lo, region.start_hi)))
        found = evaluate_table(query, table, type_counts=counts, starts=(region.start_lo, region.start_hi),
                               budget=budget, limit=limit)
        times.append(match_times(table, found))
        return found

    anchored: Anchored | None = None
    unanchored: SeqRanges = []  # (an anchored read's ranges without the anchoring)

    def read() -> Read:
        if keep is None:
            return Read(tuple(pieces), keep_types)

        def again(other: RowFilter | None) -> Read:
            # an anchored read is read again within the anchors' windows only while the relaxed query keeps
            # the anchor's clause (then every match of it still binds an anchor)
            whole = anchored is not None and (other is None or other.clauses[anchored.variable] != anchored.clause)
            return Read(tuple((source.read_frame(unanchored if whole else r, cols, keep_types, other)[0], starts)
                              for r, starts in read_pieces), keep_types, keep=other, positional=positional)

        read_ms = reading * 1000.0
        if anchored is not None:  # (a read again without the anchors costs about what the whole read would)
            read_ms *= max(1.0, anchored.unanchored_rows / max(scanned, 1))
        return Read(tuple(pieces), keep_types, lambda: again(None), scanned, keep, again, positional, read_ms)

    ranges: SeqRanges
    if not stop_at_first and not contiguous:
        # The automaton strategies in one engine call over all regions' rows: a run from a start in one
        # region cannot reach the next one's rows (that would be a match of the positive pattern ending
        # beyond the region's reach), so the unread gaps change nothing.
        ranges, n_regions, whole = approx.read_plan(merge_gap)
        # around the rarest variable's events only, when they are few (sketch.answer.anchors)
        anchored = anchored_ranges(query, plan, keep, source, ranges)
        if anchored is not None:
            unanchored, ranges = ranges, anchored.ranges
        frame, scanned = source.read_frame(ranges, cols, keep_types, keep)
        scanned += anchored.scanned if anchored is not None else 0
        reading = time.monotonic() - began
        found = run(whole, frame, ranges) if whole is not None else MatchTable(names)
        return Verification(found, scanned, n_regions, SeqTimes.merged(times), len(frame), read(),
                            None if anchored is None else np.asarray(anchored.ranges, dtype=_I64).reshape(-1, 2))

    regions = approx.regions(merge_gap)
    per_region = _region_ranges(approx, regions)
    # Regions have disjoint start ranges in stream order and the engine returns each one's matches sorted,
    # so their concatenation is sorted and free of duplicates.
    if stop_at_first:
        for region, ranges in zip(regions, per_region, strict=True):
            read_at = time.monotonic()
            table, decoded = source.read_ranges(ranges, cols, keep_types, keep)
            reading += time.monotonic() - read_at
            scanned += decoded
            checked += table.num_rows
            links = None
            if linking:
                seq = int_column(table, "seq")
                nxt, decoded = links_of(source, ranges, plan, table)
                links, scanned = (seq, nxt), scanned + decoded
            found = run(region, table, ranges, links)
            if found.exists:
                tables.append(found)
                break
    else:
        everything = [r for ranges in per_region for r in ranges]
        merged = _merge_ranges(everything)
        table, scanned = source.read_ranges(merged, cols, keep_types, keep)
        reading = time.monotonic() - began
        checked = table.num_rows
        # the contiguity strategies would read a gap between regions as adjacency: region by region
        seq = int_column(table, "seq")
        links = None
        if linking:
            nxt, decoded = links_of(source, merged, plan, table)
            links, scanned = (seq, nxt), scanned + decoded
        for region, ranges in zip(regions, per_region, strict=True):
            if not ranges:
                continue
            a, b = np.searchsorted(seq, [ranges[0][0], ranges[-1][1] + 1])
            piece = table.slice(int(a), int(b - a))
            if len(ranges) > 1:
                piece_seq = seq[a:b]
                lows = np.asarray([r[0] for r in ranges], dtype=_I64)
                highs = np.asarray([r[1] for r in ranges], dtype=_I64)
                k = np.searchsorted(lows, piece_seq, "right") - 1
                ok = (k >= 0) & (piece_seq <= highs[np.maximum(k, 0)])
                if not ok.all():
                    piece = piece.filter(pa.array(ok))
            tables.append(run(region, piece, ranges, links))
            if tables[-1].found_one:  # RETURN exists: the first match answers it
                break
            if limit is not None and query.returns == Return.MATCHES and (
                    not tables[-1].complete or sum(len(t) for t in tables) > limit):
                # more than ``limit`` matches, in regions of increasing starts: the first ``limit`` are certain
                out = combined(names, tables)
                out.count, out.spans, out.complete = None, None, False
                return Verification(out, scanned, len(regions), SeqTimes.merged(times), checked, read())
    return Verification(combined(names, tables), scanned, len(regions), SeqTimes.merged(times), checked, read())


def _merge_ranges(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(a, b) for a, b in out]


# ---------------------------------------------------------------------------------------------- answers
