"""Standing queries: a query's matches delivered once each, in answer order, as soon as they are certain.

A match is **certain** when its window has closed: no event still to come can take part in it or change it
(docs/semantics.md, "Standing queries").  Events arrive in ``ts`` order (docs/contract.md §1.3), so the
window of a first event ``s`` has closed once an event with ``ts > ts(s) + d`` is stored (``WITHIN d``), or
the ``n``-th event from ``s`` (``WITHIN n EVENTS``).  The **frontier** is the first seq whose window is still
open: every first event before it has all its matches decided, whatever is appended later — so a standing
query needs ``WITHIN``.

Matches are delivered by first event, in answer order; a :class:`Cursor` ``s:k`` says "every match whose
first event is before ``s`` has been delivered, and the first ``k`` of those starting at ``s``".  Resuming
from a cursor gives the rest, none twice and none lost: the matches of a first event behind the frontier
never change.  The history and the live stream are the same walk — starts in chunks, each evaluated by the
exact engine over the events its windows can reach, so memory is bounded by a chunk and the window, not by
the history, and a match that spans the history/live boundary is found once, when its window closes.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from exact.engine import answer, evaluate_table
from exact.engine.matchtable import match_times
from exact.errors import QuerySemanticError
from exact.query.ast import Query, Return, WithinEvents, WithinTime
from exact.query.language import to_json
from exact.store import EventStore, Snapshot
from sketch.answer.cases import case_lookup
from sketch.answer.sources import StoreSource, TableSource, needed_columns

#: first events evaluated together (the read is this many events plus the window's reach)
CHUNK = 1 << 16

_CURSOR = re.compile(r"(\d{1,19}):(\d{1,19})")


@dataclass(frozen=True, order=True)
class Cursor:
    """A position in a standing query's matches (see the module docstring)."""

    start: int
    skip: int = 0

    def text(self) -> str:
        return f"{self.start}:{self.skip}"

    @classmethod
    def parse(cls, text: str, where: str = "cursor") -> Cursor:
        found = _CURSOR.fullmatch(text.strip())
        if not found:
            raise QuerySemanticError(f"{where} {text!r} is not a cursor: expected FIRST_SEQ:DELIVERED, e.g. '1200:0' "
                                     "(the id of the last event a stream sent)", where=where)
        return cls(int(found.group(1)), int(found.group(2)))


def check_standing(query: Query) -> Query:
    """``query`` as a standing query keeps it (its matches, whatever its RETURN); a query without ``WITHIN``
    is refused: its windows never close, so no match would ever be certain."""
    if query.within is None:
        raise QuerySemanticError("a standing query needs WITHIN: a match is delivered once its window has "
                                 "closed, and without WITHIN no window ever does", where="query")
    return dataclasses.replace(query, returns=Return.MATCHES)


class Standing:
    """One standing query on one store (see the module docstring)."""

    def __init__(self, store: EventStore, query: Query) -> None:
        self.store = store
        self.query = check_standing(query)
        self.columns = needed_columns(self.query)
        self.text = json.dumps(to_json(self.query), sort_keys=True)

    def frontier(self, snap: Snapshot) -> int:
        """The first seq whose window is still open in ``snap`` (every first event before it is decided);
        found once per snapshot among the streams of this query in this process."""
        key = ("frontier", str(self.store.root), snap.parts[0].file if snap.parts else "", self.text,
               snap.version, snap.events)
        return _shared(key, functools.partial(self._frontier, snap))

    def _frontier(self, snap: Snapshot) -> int:
        within = self.query.within
        if not snap.events:
            return 0
        if isinstance(within, WithinEvents):
            return max(0, snap.events - within.count + 1)
        assert isinstance(within, WithinTime) and snap.last_ts is not None
        lo, _ = StoreSource(self.store, snap).seq_span(snap.last_ts - within.micros, snap.last_ts)
        return lo

    def _reach(self, source: StoreSource, first: int, last: int) -> tuple[int, int]:
        """The seqs the windows of first events ``first … last`` can look at (and a window before them, for a
        leading negation)."""
        within = self.query.within
        if isinstance(within, WithinEvents):
            return max(0, first - within.count + 1), min(source.events_total - 1, last + within.count - 1)
        assert isinstance(within, WithinTime)
        ts = source.ts_of(np.asarray([first, last], dtype=np.int64)).tolist()
        lo, _ = source.seq_span(ts[0] - within.micros, ts[0])
        _, hi = source.seq_span(ts[1], ts[1] + within.micros)
        return min(lo, first), max(hi, last)

    def matches(self, snap: Snapshot, cursor: Cursor, upto: int) -> Iterator[tuple[Cursor, dict[str, Any]]]:
        """The matches whose first events lie in ``[cursor, upto)`` (``upto`` at most the frontier), after
        ``cursor``, in answer order — each with the cursor just after it — as the JSON answer's objects."""
        source = StoreSource(self.store, snap)
        first = cursor.start
        while first < upto:
            last = min(upto, first + CHUNK) - 1
            key = (str(self.store.root), snap.parts[0].file if snap.parts else "", self.text, first, last)
            for after, match in _shared(key, functools.partial(self._chunk, source, snap, first, last)):
                if after <= cursor:
                    continue  # delivered before
                yield after, match
            first = last + 1

    def _chunk(self, source: StoreSource, snap: Snapshot, first: int, last: int) -> list[tuple[Cursor, Any]]:
        """The matches of first events ``first … last`` (all behind the frontier), each with its cursor."""
        lo, hi = self._reach(source, first, last)
        table = self.store.read_table(lo, hi, self.columns, snapshot=snap, type_dictionary=True)
        found = evaluate_table(self.query, table, starts=(first, last), type_counts=source.type_counts())
        body = answer(self.query, found, match_times(table, found), case_of=case_lookup(self.query,
                                                                                       TableSource(table)))
        out: list[tuple[Cursor, Any]] = []
        start, k = -1, 0
        for match in body["matches"]:
            k = k + 1 if match["start_seq"] == start else 1
            start = match["start_seq"]
            out.append((Cursor(start, k), match))
        return out


# The matches of a range of first events behind the frontier never change, nor a snapshot's frontier: the
# streams of one standing query (many clients of one watch, or of one query) compute each once and share it.
_SHARED: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_PENDING: dict[tuple[Any, ...], threading.Event] = {}
_LOCK = threading.Lock()
_T = TypeVar("_T")
#: ranges kept (the live ones are small: the events of one append)
_SHARED_MOST = 256


def _shared(key: tuple[Any, ...], compute: Callable[[], _T]) -> _T:
    """``compute()`` once per ``key`` among the threads of this process (others wait for it), kept a while."""
    with _LOCK:
        if key in _SHARED:
            _SHARED.move_to_end(key)
            kept: _T = _SHARED[key]
            return kept
        pending = _PENDING.get(key)
        owner = pending is None
        if owner:
            pending = _PENDING[key] = threading.Event()
    assert pending is not None
    if not owner:
        pending.wait()
        with _LOCK:
            done: _T | None = _SHARED.get(key)
        return done if done is not None else compute()  # (its owner failed: compute it here)
    try:
        value = compute()
        with _LOCK:
            _SHARED[key] = value
            while len(_SHARED) > _SHARED_MOST:
                _SHARED.popitem(last=False)
        return value
    finally:
        with _LOCK:
            _PENDING.pop(key, None)
        pending.set()
