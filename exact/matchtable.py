"""Matches as columns, and the parts of a CONTRACT §3 answer made from them.

A :class:`MatchTable` holds what an evaluation found: for the matches it kept, the seq of each one's first
and last event and its bindings as rows ``(variable, seq)`` (offsets per match, rows in stream order);
beside them the number of all matches and their merged spans when the evaluation counted them (an
evaluation that stopped once the first ``limit`` matches in answer order were certain has neither).  Python
objects per match are made only for the matches an answer shows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

import numpy as np

from exact.ast import Query, Return

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

    def __len__(self) -> int:
        return len(self.start)

    @property
    def exists(self) -> bool:
        return bool(self.count) or len(self.start) > 0

    @classmethod
    def of_matches(cls, names: tuple[str, ...], matches: Sequence[Match], *, complete: bool = True,
                   count: int | None = None) -> MatchTable:
        """A table holding ``matches`` (sorted), with their count and spans when ``complete``."""
        index = {n: i for i, n in enumerate(names)}
        off = np.zeros(len(matches) + 1, dtype=_I64)
        var: list[int] = []
        seq: list[int] = []
        for k, m in enumerate(matches):
            rows = sorted((s, index[name]) for name, seqs in m.bindings for s in seqs)
            seq.extend(s for s, _ in rows)
            var.extend(v for _, v in rows)
            off[k + 1] = len(seq)
        start = np.fromiter((m.start_seq for m in matches), dtype=_I64, count=len(matches))
        end = np.fromiter((m.end_seq for m in matches), dtype=_I64, count=len(matches))
        table = cls(names, start, end, off, np.asarray(var, dtype=_I64), np.asarray(seq, dtype=_I64),
                    count=len(matches) if count is None else count, complete=complete)
        table.spans = merge_spans(start, end) if complete else None
        return table

    def matches(self, limit: int | None = None) -> list[Match]:
        """The kept matches as :class:`Match` values, in answer order (the first ``limit``)."""
        n = len(self.start)
        if n == 0:
            return []
        order = np.lexsort((self.end, self.start))
        names = self.names
        rows_var, rows_seq, off = self.var.tolist(), self.seq.tolist(), self.off.tolist()
        starts, ends = self.start.tolist(), self.end.tolist()

        def made(k: int) -> Match:
            per: dict[int, list[int]] = {}
            for r in range(off[k], off[k + 1]):
                per.setdefault(rows_var[r], []).append(rows_seq[r])
            return Match(starts[k], ends[k], tuple((names[v], tuple(per[v])) for v in sorted(per)))

        ordered = order.tolist()
        s_sorted, e_sorted = self.start[order], self.end[order]
        # ties of (start, end) are ordered by their bindings; a tie group is made whole before cutting
        tie = np.zeros(n, dtype=bool)
        tie[1:] = (s_sorted[1:] == s_sorted[:-1]) & (e_sorted[1:] == e_sorted[:-1])
        want = n if limit is None else min(limit, n)
        cut = want
        while cut < n and tie[cut]:
            cut += 1
        out = [made(k) for k in ordered[:cut]]
        if tie[1:cut].any():
            out.sort()
        return out[:want]

    def take(self, keep: np.ndarray) -> MatchTable:
        """The kept matches where ``keep`` (bool per match) is true; count and spans not carried."""
        idx = np.flatnonzero(keep)
        lengths = np.diff(self.off)[idx]
        rows = np.repeat(self.off[:-1][idx], lengths) + _ranks(lengths)
        off = np.zeros(len(idx) + 1, dtype=_I64)
        off[1:] = np.cumsum(lengths)
        return MatchTable(self.names, self.start[idx], self.end[idx], off, self.var[rows], self.seq[rows],
                          count=None, spans=None, complete=self.complete)


def _ranks(lengths: np.ndarray) -> np.ndarray:
    """0, 1, …, l-1 for each length l, concatenated."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=_I64)
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.arange(total, dtype=_I64) - starts


def merge_spans(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The union of the spans ``[start, end]`` as disjoint, sorted intervals (an ``(k, 2)`` array)."""
    if not len(start):
        return np.zeros((0, 2), dtype=_I64)
    order = np.lexsort((end, start))
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
    """UTC microseconds → ISO 8601 with microseconds and offset, as in CONTRACT §3."""
    return (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=int(micros))).isoformat(
        timespec="microseconds")


def iso_ts_many(micros: np.ndarray | Sequence[int]) -> list[str]:
    """:func:`iso_ts` of many values at once (same text)."""
    stamps = np.asarray(micros, dtype=np.int64).astype("datetime64[us]")
    return [text + "+00:00" for text in np.datetime_as_string(stamps, unit="us").tolist()]


def answer(query: Query, found: MatchTable | Sequence[Match],
           ts_of: Mapping[int, int] | Callable[[int], int], *, limit: int | None = None) -> dict[str, Any]:
    """The query-dependent parts of a CONTRACT §3 answer: ``strategy``, ``exists``, ``count`` (None when
    the search stopped at ``limit``), ``truncated``, and by ``RETURN`` the ``matches`` (the first ``limit``
    in answer order) and ``intervals``.  ``ts_of`` maps a seq to its UTC microseconds."""
    if not isinstance(found, MatchTable):
        found = _ListTable(sorted(found))
    lookup: Callable[[int], int] = ts_of.__getitem__ if isinstance(ts_of, Mapping) else ts_of
    out: dict[str, Any] = {"strategy": query.strategy.value, "exists": found.exists, "count": found.count}
    shown: list[Match] = []
    spans: list[tuple[int, int]] = []
    truncated = False
    if query.returns == Return.MATCHES:
        shown = found.matches(limit)
        total = found.count if found.count is not None else len(found)
        truncated = not found.complete or len(shown) < total
    if query.returns in (Return.MATCHES, Return.INTERVALS):
        if found.spans is not None:
            spans = [(int(a), int(b)) for a, b in found.spans.tolist()]
        else:  # the search stopped early: the spans of what it found
            spans = merge_intervals(shown)
    seqs = sorted({s for m in shown for s in (m.start_seq, m.end_seq)} | {s for span in spans for s in span})
    text = dict(zip(seqs, iso_ts_many([lookup(s) for s in seqs]), strict=True))
    if query.returns == Return.MATCHES:
        out["matches"] = [
            {"start_seq": m.start_seq, "end_seq": m.end_seq, "start_ts": text[m.start_seq],
             "end_ts": text[m.end_seq], "bindings": m.bindings_dict()} for m in shown]
    if query.returns in (Return.MATCHES, Return.INTERVALS):
        out["intervals"] = [{"start_seq": s, "end_seq": e, "start_ts": text[s], "end_ts": text[e]}
                            for s, e in spans]
    out["truncated"] = truncated
    return out


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
