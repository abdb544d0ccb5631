"""Matches as columns, and the parts of a docs/contract.md §3 answer made from them.

A :class:`MatchTable` holds what an evaluation found: for the matches it kept, the seq of each one's first
and last event and its bindings as rows ``(variable, seq)`` (offsets per match, rows in stream order);
beside them the number of all matches and their merged spans when the evaluation counted them (an
evaluation that stopped once the first ``limit`` matches in answer order were certain has neither).  Python
objects per match are made only for the matches an answer shows.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from exact.arrays import distinct_ints, run_positions
from exact.engine.answer_columns import FrameTimes, SeqTimes, cases_of, intervals_arrow, matches_arrow, python_values
from exact.events import micros
from exact.frame import EventFrame
from exact.query.ast import Query, Return
from exact.query.normalize import normalize

_I64 = np.int64


class Match(NamedTuple):
    """One match: first and last seq, and per positive variable (pattern order) its seqs in stream order.

    An OR position appears under the name of the alternative that bound it; negated variables never appear.
    Matches order by their fields in turn (answer order).
    """

    start_seq: int
    end_seq: int
    bindings: tuple[tuple[str, tuple[int, ...]], ...]

    def bindings_dict(self) -> dict[str, list[int]]:
        return {name: list(seqs) for name, seqs in self.bindings}


def _empty() -> np.ndarray:
    return np.zeros(0, dtype=_I64)


@dataclass
class MatchTable:
    """Matches found by one evaluation (see the module docstring)."""

    names: tuple[str, ...]
    start: np.ndarray = field(default_factory=_empty)
    end: np.ndarray = field(default_factory=_empty)
    off: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=_I64))
    var: np.ndarray = field(default_factory=_empty)
    seq: np.ndarray = field(default_factory=_empty)
    #: all matches (None: the search stopped before it knew)
    count: int | None = 0
    #: merged spans of all matches (None: not computed)
    spans: np.ndarray | None = field(default_factory=lambda: np.zeros((0, 2), dtype=_I64))
    #: did the evaluation look at every possible first event?
    complete: bool = True
    #: a match was found (set when the search stopped at the first one, keeping nothing)
    found_one: bool = False
    #: per row, where its event lies in ``rows_in`` (the seq column of the frame the evaluation read), so
    #: that an answer finds the events' ts without searching for their seqs; None where not known
    rows_at: np.ndarray | None = field(default=None, compare=False)
    rows_in: np.ndarray | None = field(default=None, compare=False)

    def __len__(self) -> int:
        return len(self.start)

    @property
    def exists(self) -> bool:
        return self.found_one or bool(self.count) or len(self.start) > 0

    def matches(self, limit: int | None = None) -> list[Match]:
        """The kept matches as :class:`Match` values, in answer order (the first ``limit``), made from the
        columns in one pass (as :meth:`match_dicts`)."""
        order = self.answer_order(limit)
        lengths = np.diff(self.off)[order]
        rows = run_positions(self.off[:-1][order], lengths)
        owner = np.repeat(np.arange(len(order), dtype=_I64), lengths)
        var = self.var[rows]
        by = np.lexsort((var, owner))
        owner, var, seqs = owner[by], var[by], self.seq[rows][by].tolist()
        new = np.ones(len(owner), dtype=bool)
        new[1:] = (owner[1:] != owner[:-1]) | (var[1:] != var[:-1])
        first = np.flatnonzero(new)
        cuts = first.tolist() + [len(owner)]
        per: list[list[tuple[str, tuple[int, ...]]]] = [[] for _ in range(len(order))]
        names = self.names
        for g, (m, v) in enumerate(zip(owner[first].tolist(), var[first].tolist(), strict=True)):
            per[m].append((names[v], tuple(seqs[cuts[g]:cuts[g + 1]])))
        return list(map(Match, self.start[order].tolist(), self.end[order].tolist(), map(tuple, per)))

    def _made(self, k: int) -> Match:
        per: dict[int, list[int]] = {}
        lo, hi = int(self.off[k]), int(self.off[k + 1])
        for v, q in zip(self.var[lo:hi].tolist(), self.seq[lo:hi].tolist(), strict=True):
            per.setdefault(v, []).append(q)
        return Match(int(self.start[k]), int(self.end[k]),
                     tuple((self.names[v], tuple(per[v])) for v in sorted(per)))

    def answer_order(self, limit: int | None = None) -> np.ndarray:
        """The kept matches' indices in answer order — by first and last seq, then bindings — the first
        ``limit``.  Bindings are compared (as :class:`Match` values) only among matches that tie on both
        seqs."""
        n = len(self.start)
        want = n if limit is None else min(limit, n)
        if n < 2 or bool((self.start[1:] > self.start[:-1]).all()):  # one match per start, in order already
            return np.arange(want, dtype=_I64)
        order = np.lexsort((self.end, self.start))
        if n < 2:
            return order[:want]
        s_sorted, e_sorted = self.start[order], self.end[order]
        tie = np.zeros(n, dtype=bool)
        tie[1:] = (s_sorted[1:] == s_sorted[:-1]) & (e_sorted[1:] == e_sorted[:-1])
        cut = want
        while cut < n and tie[cut]:  # a tie group is made whole before cutting
            cut += 1
        if not tie[1:cut].any():
            return order[:want]
        head = order[:cut].tolist()
        run_start = np.flatnonzero(~tie[:cut])
        bounds = np.append(run_start, cut).tolist()
        out: list[int] = []
        for a, b in zip(bounds, bounds[1:], strict=False):
            group = head[a:b]
            if len(group) > 1:
                group = sorted(group, key=self._made)
            out.extend(group)
        return np.asarray(out[:want], dtype=_I64)

    def match_dicts(self, order: np.ndarray, text: Mapping[int, str]) -> list[dict[str, Any]]:
        """The matches ``order`` as docs/contract.md §3 objects (``text``: seq → ISO time of their ends), made
        from the columns in one pass: rows grouped by match and variable, lists cut from one list."""
        lengths = np.diff(self.off)[order]
        rows = run_positions(self.off[:-1][order], lengths)
        starts, ends = self.start[order].tolist(), self.end[order].tolist()
        k = int(lengths[0]) if len(lengths) else 0
        if k and bool((lengths == k).all()):
            grid = self.var[rows].reshape(-1, k)
            if bool((grid == grid[0]).all()) and len(set(grid[0].tolist())) == k:
                # every match binds the same variables once each (a SEQ of single variables): by columns
                bound = [self.names[v] for v in grid[0].tolist()]
                values = self.seq[rows].reshape(-1, k, 1)
                columns = [values[:, j].tolist() for j in range(k)]  # each binding a one-seq list already
                bindings = [dict(zip(bound, row, strict=False)) for row in zip(*columns, strict=False)]  # (all k long)
                return [{"start_seq": a, "end_seq": b, "start_ts": text[a], "end_ts": text[b], "bindings": m}
                        for a, b, m in zip(starts, ends, bindings, strict=True)]
        owner = np.repeat(np.arange(len(order), dtype=_I64), lengths)
        var = self.var[rows]
        by = np.lexsort((var, owner))  # stable: each variable's seqs stay in stream order
        owner, var, seqs = owner[by], var[by], self.seq[rows][by].tolist()
        new = np.ones(len(owner), dtype=bool)
        new[1:] = (owner[1:] != owner[:-1]) | (var[1:] != var[:-1])
        first = np.flatnonzero(new)
        cuts = first.tolist() + [len(owner)]
        out = [{"start_seq": a, "end_seq": b, "start_ts": text[a], "end_ts": text[b], "bindings": {}}
               for a, b in zip(starts, ends, strict=True)]
        names = self.names
        for g, (m, v) in enumerate(zip(owner[first].tolist(), var[first].tolist(), strict=True)):
            out[m]["bindings"][names[v]] = seqs[cuts[g]:cuts[g + 1]]
        return out

    def take(self, keep: np.ndarray) -> MatchTable:
        """The kept matches where ``keep`` (bool per match) is true; count and spans not carried."""
        idx = np.flatnonzero(keep)
        lengths = np.diff(self.off)[idx]
        rows = run_positions(self.off[:-1][idx], lengths)
        off = np.zeros(len(idx) + 1, dtype=_I64)
        off[1:] = np.cumsum(lengths)
        return MatchTable(self.names, self.start[idx], self.end[idx], off, self.var[rows], self.seq[rows],
                          count=None, spans=None, complete=self.complete,
                          rows_at=None if self.rows_at is None else self.rows_at[rows], rows_in=self.rows_in)


@contextlib.contextmanager
def without_collector() -> Iterator[None]:
    """Pause the cyclic garbage collector while many small acyclic objects (an answer's match dicts) are
    made: it would otherwise walk the growing answer again and again (a fifth of a large answer's time)
    and find nothing to free.  Left as it was found when the caller had it off."""
    was_on = gc.isenabled()
    if was_on:
        gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def merge_spans(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The union of the spans ``[start, end]`` as disjoint, sorted intervals (an ``(k, 2)`` array)."""
    if not len(start):
        return np.zeros((0, 2), dtype=_I64)
    if bool((start[1:] >= start[:-1]).all()):  # in order of starts already (the ends' order within a tie
        s, e = start, end                       # does not change the union)
    else:
        order = np.argsort(start, kind="stable")
        s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(s)) - 1
    return np.stack([s[first], reach[last]], axis=1).astype(_I64)


def merge_intervals(matches: Iterable[Match]) -> list[tuple[int, int]]:
    """The union of the matches' [start_seq, end_seq] as disjoint intervals (overlapping ones merged)."""
    ms = list(matches)
    spans = merge_spans(np.asarray([m.start_seq for m in ms], dtype=_I64),
                        np.asarray([m.end_seq for m in ms], dtype=_I64))
    return [(int(a), int(b)) for a, b in spans.tolist()]


# ------------------------------------------------------------------------------------------------ answers


def iso_ts(micros: int) -> str:
    """UTC microseconds → ISO 8601 with microseconds and offset, as in docs/contract.md §3."""
    return (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=int(micros))).isoformat(
        timespec="microseconds")


def iso_ts_many(micros: np.ndarray | Sequence[int]) -> list[str]:
    """:func:`iso_ts` of many values at once (same text)."""
    stamps = np.asarray(micros, dtype=np.int64).astype("datetime64[us]")
    return [text + "+00:00" for text in np.datetime_as_string(stamps, unit="us").tolist()]


def answer(query: Query, found: MatchTable | Sequence[Match],
           ts_of: Mapping[int, int] | Callable[[int], int], *, limit: int | None = None,
           case_of: Callable[[np.ndarray], pa.Array] | None = None, columnar: bool = False) -> dict[str, Any]:
    """The query-dependent parts of a docs/contract.md §3 answer: ``strategy``, ``exists``, ``count`` (None when
    the search stopped at ``limit``), ``truncated``, and by ``RETURN`` the ``matches`` (the first ``limit``
    in answer order), ``intervals`` or ``cases`` (the first ``limit``, with ``case_count``).  ``ts_of`` maps
    a seq to its UTC microseconds (a :class:`SeqTimes` looks many up at once); ``case_of`` gives the case
    of each of an array of first seqs (needed for ``RETURN cases``, and adds each match's ``case``).

    ``columnar``: the rows (matches, cases or intervals) come as one Arrow table under ``rows``
    (:mod:`exact.engine.answer_columns`) instead of JSON objects."""
    table = found if isinstance(found, MatchTable) else _ListTable(sorted(found))
    times = _times(ts_of)
    # RETURN exists asks only the yes/no: the search stops at the first match, so the count is not known
    count = (None if table.exists else 0) if query.returns == Return.EXISTS else table.count
    out: dict[str, Any] = {"strategy": query.strategy.value, "exists": table.exists, "count": count}
    if query.returns == Return.CASES:
        return _cases_answer(out, table, times, limit, case_of, columnar)
    shown: list[Match] = []
    shown_ends = np.zeros((0, 2), dtype=_I64)
    spans: np.ndarray = np.zeros((0, 2), dtype=_I64)
    truncated = False
    order: np.ndarray | None = None  # a match table's matches to show, in answer order
    if query.returns == Return.MATCHES:
        if isinstance(table, MatchTable):
            order = table.answer_order(limit)
            shown_ends = np.stack([table.start[order], table.end[order]], axis=1)
        else:
            shown = table.matches(limit)
            shown_ends = np.asarray([(m.start_seq, m.end_seq) for m in shown], dtype=_I64).reshape(-1, 2)
        total = table.count if table.count is not None else len(table)
        truncated = not table.complete or len(shown_ends) < total
    if query.returns == Return.INTERVALS or (query.returns == Return.MATCHES and not columnar):
        if table.spans is not None:
            spans = table.spans
        else:  # the search stopped early (or was not asked for them): the spans of what it found
            spans = merge_spans(shown_ends[:, 0], shown_ends[:, 1])
    spans = np.asarray(spans, dtype=_I64).reshape(-1, 2)
    cases = case_of(shown_ends[:, 0]) if case_of is not None and (len(shown_ends) or columnar) else None
    if columnar:
        if query.returns == Return.MATCHES:
            if not isinstance(table, MatchTable):
                table = _as_table(tuple(v.name for v in normalize(query).positives), shown)
                order = np.arange(len(shown), dtype=_I64)
            assert order is not None
            kleene = frozenset(v.name for v in query.variables() if v.kleene)
            out["rows"] = matches_arrow(table, order, times, kleene, cases if case_of is not None else None)
        elif query.returns == Return.INTERVALS:
            out["rows"] = intervals_arrow(spans, times)
        out["truncated"] = truncated
        return out
    seqs = distinct_ints(np.concatenate([shown_ends.ravel(), spans.ravel()]))
    text = dict(zip(seqs.tolist(), iso_ts_many(times.many(seqs)), strict=True))
    if query.returns == Return.MATCHES:
        if isinstance(table, MatchTable) and order is not None:
            with without_collector():
                out["matches"] = table.match_dicts(order, text)
        else:
            out["matches"] = [
                {"start_seq": m.start_seq, "end_seq": m.end_seq, "start_ts": text[m.start_seq],
                 "end_ts": text[m.end_seq], "bindings": m.bindings_dict()} for m in shown]
        if cases is not None:
            for match, value in zip(out["matches"], python_values(cases), strict=True):
                match["case"] = value
    if query.returns in (Return.MATCHES, Return.INTERVALS):
        out["intervals"] = [{"start_seq": s, "end_seq": e, "start_ts": text[s], "end_ts": text[e]}
                            for s, e in spans.tolist()]
    out["truncated"] = truncated
    return out


class _Lookup:
    """A seq → ts lookup one at a time, read as a :class:`SeqTimes`."""

    def __init__(self, lookup: Callable[[int], int]) -> None:
        self._lookup = lookup

    def many(self, seqs: np.ndarray) -> np.ndarray:
        return np.fromiter((self._lookup(s) for s in np.asarray(seqs).tolist()), dtype=_I64, count=len(seqs))


def _times(ts_of: Mapping[int, int] | Callable[[int], int]) -> Any:
    if isinstance(ts_of, SeqTimes):
        return ts_of
    return _Lookup(ts_of.__getitem__ if isinstance(ts_of, Mapping) else ts_of)


def _cases_answer(out: dict[str, Any], table: Any, times: Any, limit: int | None,
                  case_of: Callable[[np.ndarray], pa.Array] | None, columnar: bool) -> dict[str, Any]:
    """``RETURN cases``: the cases holding a match in the order of their first matches, the first ``limit``."""
    if isinstance(table, MatchTable):
        order = table.answer_order(None)
        starts, ends = table.start[order], table.end[order]
    else:
        shown = table.matches(None)
        starts = np.asarray([m.start_seq for m in shown], dtype=_I64)
        ends = np.asarray([m.end_seq for m in shown], dtype=_I64)
    if len(starts) and case_of is None:
        raise ValueError("RETURN cases needs the case of each match")
    keys = case_of(starts) if case_of is not None else pa.array([], pa.null())
    every = cases_of(starts, ends, keys)
    cases = every.head(limit)
    out["case_count"] = len(every) if table.complete else None
    if columnar:
        out["rows"] = cases.arrow(times)
    else:
        # (each case's two times formatted in place: a table of distinct seqs to look them up in cost more)
        with without_collector():
            out["cases"] = [{"case": value, "matches": n, "start_seq": a, "end_seq": b, "start_ts": a_ts,
                             "end_ts": b_ts}
                            for value, n, a, b, a_ts, b_ts in zip(
                                python_values(cases.value), cases.matches.tolist(), cases.start.tolist(),
                                cases.end.tolist(), iso_ts_many(times.many(cases.start)),
                                iso_ts_many(times.many(cases.end)), strict=True)]
    out["truncated"] = not table.complete or len(cases) < len(every)
    return out


def _as_table(names: tuple[str, ...], matches: Sequence[Match]) -> MatchTable:
    """Matches given as values, as a table (their order kept)."""
    index = {n: i for i, n in enumerate(names)}
    var = [index[n] for m in matches for n, seqs in m.bindings for _ in seqs]
    seq = [s for m in matches for _, seqs in m.bindings for s in seqs]
    lengths = [sum(len(seqs) for _, seqs in m.bindings) for m in matches]
    off = np.zeros(len(matches) + 1, dtype=_I64)
    off[1:] = np.cumsum(lengths)
    return MatchTable(names, np.asarray([m.start_seq for m in matches], dtype=_I64),
                      np.asarray([m.end_seq for m in matches], dtype=_I64), off,
                      np.asarray(var, dtype=_I64), np.asarray(seq, dtype=_I64), count=len(matches))


class _ListTable:
    """A sorted list of matches, read as :func:`answer` reads a :class:`MatchTable`."""

    def __init__(self, matches: list[Match]) -> None:
        self._matches = matches
        self.count: int | None = len(matches)
        self.exists = bool(matches)
        self.complete = True
        self.spans = merge_spans(np.asarray([m.start_seq for m in matches], dtype=_I64),
                                 np.asarray([m.end_seq for m in matches], dtype=_I64))

    def __len__(self) -> int:
        return len(self._matches)

    def matches(self, limit: int | None = None) -> list[Match]:
        return self._matches if limit is None else self._matches[:limit]


# ------------------------------------------------------------------------------------------- times


def match_times(events: pa.Table | EventFrame, table: MatchTable) -> SeqTimes:
    """The ts of every event ``table`` names — its matches' first, last and bound events and its spans' ends —
    found in the seq-sorted ``events`` (for :func:`answer`): a frame's own columns, else looked up."""
    if isinstance(events, EventFrame):  # (read without its ts: they are decoded for the events asked for)
        return SeqTimes(events.seq, events.ts) if events.ts_decoded else FrameTimes(events.seq, events.ts_at)
    spans = [table.spans.ravel()] if table.spans is not None else []
    wanted = distinct_ints(np.concatenate([table.start, table.end, table.seq, *spans]).astype(_I64))
    if not len(wanted) or len(events) == 0:
        return SeqTimes.empty()
    return SeqTimes(wanted, _table_ts(events, wanted))


def match_ts(events: pa.Table | EventFrame, matches: Sequence[Match] | MatchTable,
             wanted_seqs: np.ndarray | None = None) -> dict[int, int]:
    """seq → ts (UTC microseconds) of the first and last events of ``matches`` (for :func:`answer`),
    found in the seq-sorted ``events`` chunk by chunk: a full scan's columns are never converted whole."""
    if wanted_seqs is not None:
        wanted_list = wanted_seqs.tolist()
    elif isinstance(matches, MatchTable):
        spans = [matches.spans.ravel()] if matches.spans is not None else []
        wanted_arr = distinct_ints(np.concatenate([matches.start, matches.end, *spans]))
        wanted_list = wanted_arr.tolist()
    else:
        if not matches:
            return {}
        wanted_list = sorted({s for m in matches for s in (m.start_seq, m.end_seq)})
    if not wanted_list or len(events) == 0:
        return {}
    wanted = np.asarray(wanted_list, dtype=np.int64)
    if isinstance(events, EventFrame):
        return dict(zip(wanted_list, events.ts[events.seq.searchsorted(wanted)].tolist(), strict=True))
    return dict(zip(wanted_list, _table_ts(events, wanted).tolist(), strict=True))


def _table_ts(events: pa.Table, wanted: np.ndarray) -> np.ndarray:
    """The ts of the sorted seqs ``wanted`` in the seq-sorted ``events``, found chunk by chunk."""
    chunks = [c.to_numpy(zero_copy_only=False) for c in events.column("seq").chunks if len(c)]
    if len(chunks) == 1:
        positions = chunks[0].searchsorted(wanted)
    else:
        firsts = np.fromiter((c[0] for c in chunks), dtype=np.int64, count=len(chunks))
        offsets = np.cumsum([0] + [len(c) for c in chunks])
        which = firsts.searchsorted(wanted, "right") - 1
        positions = np.empty(len(wanted), dtype=np.int64)
        for k in np.unique(which).tolist():
            at = which == k
            positions[at] = offsets[k] + chunks[k].searchsorted(wanted[at])
    return _micros_at(events.column("ts"), positions)


def _micros_at(column: pa.ChunkedArray, positions: np.ndarray) -> np.ndarray:
    """The UTC microseconds of ``column`` at the sorted ``positions``, from the chunks holding them."""
    chunks = [c for c in column.chunks if len(c)]
    if len(chunks) == 1:
        at: np.ndarray = micros(chunks[0])[positions]
        return at
    offsets = np.cumsum([0] + [len(c) for c in chunks])
    which = offsets.searchsorted(positions, "right") - 1
    out = np.empty(len(positions), dtype=np.int64)
    for k in np.unique(which).tolist():
        at = which == k
        out[at] = micros(chunks[k])[positions[at] - offsets[k]]
    return out


def ts_lookup(events: pa.Table | Iterable[pa.RecordBatch]) -> dict[int, int]:
    """seq → ts (UTC microseconds) of a stream, for :func:`answer`."""
    frame = EventFrame.build(events)
    return dict(zip(frame.seq.tolist(), frame.ts.tolist(), strict=True))


def combined(names: tuple[str, ...], tables: Sequence[MatchTable]) -> MatchTable:
    """The matches of ``tables`` one after another as one table: of regions in stream order (their starts
    disjoint, increasing), or of parts of one run's windows in their order (:mod:`exact.engine.parallel`)."""
    if not tables:
        return MatchTable(names)
    if len(tables) == 1:
        return tables[0]
    if any(t.found_one for t in tables):
        return next(t for t in tables if t.found_one)
    offs, base = [], 0
    for t in tables:
        offs.append(t.off[:-1] + base)
        base += int(t.off[-1])
    out = MatchTable(names, np.concatenate([t.start for t in tables]),
                     np.concatenate([t.end for t in tables]),
                     np.concatenate(offs + [np.asarray([base], dtype=_I64)]),
                     np.concatenate([t.var for t in tables]), np.concatenate([t.seq for t in tables]))
    counts = [t.count for t in tables if t.count is not None]
    out.count = None if len(counts) < len(tables) else sum(counts)
    out.complete = all(t.complete for t in tables)
    spans = [t.spans for t in tables if t.spans is not None]
    out.spans = None if len(spans) < len(tables) else _merged(np.concatenate(spans))
    return out


def _merged(spans: np.ndarray) -> np.ndarray:
    return merge_spans(spans[:, 0], spans[:, 1]) if len(spans) else spans
