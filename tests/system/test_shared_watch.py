"""The streams of one standing query share one follower in the process: each takes its own history, then
the follower's live matches — every match once, in order, as a fresh exact query says — whether it joined
first or late, with the follower keeping many matches or (kept to one) too few for a late stream, which then
goes on on its own and joins again."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

import api.service.follower as follower
from api import service
from sketch.answer.standing import Cursor
from tests.helpers import wait_for_length
from tests.system.test_watches import QUERY, certain, key, new_case


class Reader:
    def __init__(self, home: Path, cursor: Cursor) -> None:
        self.stop = threading.Event()
        self.matches: list[dict[str, Any]] = []
        self.cursors: list[str] = []
        self.thread = threading.Thread(target=self._run, args=(home, cursor), daemon=True)
        self.thread.start()

    def _run(self, home: Path, cursor: Cursor) -> None:
        for kind, after, data in follower.shared_follow(home, "running", QUERY, cursor, stop=self.stop, poll=0.02):
            if kind is follower.StreamEvent.MATCH:
                assert data is not None
                self.matches.append(data)
                self.cursors.append(after.text())

    def wait_for(self, count: int, timeout: float = 20.0) -> None:
        wait_for_length(self.matches, count, timeout, poll=0.02)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


@pytest.fixture
def built(home: Path, shared_data: Path) -> Path:
    service.build_from_inputs(home, "running", [str(shared_data / "running-example.xes")], engine="local")
    return home


@pytest.mark.parametrize("keep", [follower.SHARED_KEEP, 1])
def test_streams_of_one_query_share_a_follower(built: Path, monkeypatch: pytest.MonkeyPatch, keep: int) -> None:
    monkeypatch.setattr(follower, "SHARED_KEEP", keep)
    home = built
    history = certain(home)
    first = [Reader(home, Cursor.start()) for _ in range(3)]
    for r in first:
        r.wait_for(len(history))
    assert len(follower.hubs_of(home)) == 1  # one follower for the three
    days = ["2011-03-01", "2011-04-01", "2011-05-01", "2011-06-01"]
    for i, day in enumerate(days[:2]):
        service.append_records(home, "running", new_case(f"a{i}", day))
    for r in first:
        r.wait_for(len(history) + 2)  # each new case's match, certain with its last event
    late = Reader(home, Cursor.start())  # joins after the follower moved on: its history, then the follower's
    late.wait_for(len(history) + 2)
    for i, day in enumerate(days[2:], start=2):
        service.append_records(home, "running", new_case(f"a{i}", day))
    expected = certain(home)
    assert len(expected) == len(history) + 4
    for r in [*first, late]:
        r.wait_for(len(expected))
    time.sleep(0.3)
    for r in [*first, late]:
        r.close()
        assert [key(m) for m in r.matches] == expected
        assert r.cursors == sorted(r.cursors, key=lambda c: Cursor.parse(c).order())
    deadline = time.monotonic() + 5
    mine = follower.hubs_of(home)  # (not other tests' servers)
    while any(h.readers for h in mine) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert all(h.readers == 0 for h in mine)
