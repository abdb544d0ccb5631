"""The streams of one standing query share one follower in the process: each takes its own history, then
the follower's live matches — every match once, in order, as a fresh exact query says — whether it joined
first or late, with the follower keeping many matches or (kept to one) too few for a late stream, which then
goes on on its own and joins again."""

from __future__ import annotations

import json
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


def lag_the_shared_follower(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the shared follower's thread (only it) take 0.4 s over each match it finds."""
    real = follower.follow

    def lagging(*args: Any, **kwargs: Any) -> Any:
        for event in real(*args, **kwargs):
            if threading.current_thread().name.startswith("seqsketch-watch-") and \
                    event[0] is follower.StreamEvent.MATCH:
                time.sleep(0.4)
            yield event

    monkeypatch.setattr(follower, "follow", lagging)


def test_a_stream_that_joins_a_follower_still_behind_it_repeats_nothing(built: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The shared follower may be behind the place where a stream joins it (the stream caught up on its own,
    faster): the matches it then brings, up to that place, were sent already and are passed over — in every
    batch the stream takes, not only the first."""
    home = built
    lag_the_shared_follower(monkeypatch)
    history = certain(home)
    first = Reader(home, Cursor.start())  # (it keeps the follower, which is then up to date)
    first.wait_for(len(history))
    days = ["2011-03-01", "2011-04-01", "2011-05-01"]
    for i, day in enumerate(days):
        service.append_records(home, "running", new_case(f"lag{i}", day))
    reader = Reader(home, Cursor.start())  # it catches up past the lagging follower, then joins it
    expected = certain(home)
    reader.wait_for(len(expected))
    time.sleep(2.0)  # the follower catches up and offers what the reader already had
    for r in (first, reader):
        r.close()
    assert [key(m) for m in reader.matches] == expected


def test_a_served_stream_that_joins_a_follower_still_behind_it_repeats_nothing(
        built: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same on the event loop, as ``seqsketch serve`` writes a stream (:mod:`api.server.streams`): the
    stream catches up on its own, joins the lagging follower, and sends each match once.  The stream is
    written to a connection that keeps what it is sent."""
    import asyncio

    from api.server.streams import Streams, _Open, _Writer
    from api.streaming import StreamSpec

    home = built
    lag_the_shared_follower(monkeypatch)

    class Kept:
        """Where the stream's text goes."""

        def __init__(self) -> None:
            self.text: list[str] = []

        async def send(self, text: str) -> None:
            self.text.append(text)

    def writer(conn: Kept, gone: asyncio.Future[Any]) -> asyncio.Future[Any]:
        spec = StreamSpec(home, "running", {"id": "w", "query": QUERY}, Cursor.start(), None, lambda: None)
        return asyncio.ensure_future(_Writer(conn, _Open(spec), gone, 15.0).run())  # type: ignore[arg-type]

    async def sent_all(conn: Kept, count: int) -> None:
        deadline = time.monotonic() + 30
        while sum("event: match\n" in t for t in conn.text) < count and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        first, late = Kept(), Kept()
        gone = loop.create_future()
        history = len(certain(home))
        running = [writer(first, gone)]  # (it keeps the follower, which is then up to date)
        await sent_all(first, history)
        for i, day in enumerate(["2011-03-01", "2011-04-01", "2011-05-01"]):
            await asyncio.to_thread(service.append_records, home, "running", new_case(f"lag{i}", day))
        running.append(writer(late, gone))  # it catches up past the lagging follower, then joins it
        await sent_all(late, history + 3)
        await asyncio.sleep(3.0)  # the follower catches up and offers the new matches again
        gone.set_result(None)
        await asyncio.gather(*running)
        return late.text

    assert Streams  # (the class that makes these writers under `seqsketch serve`)
    text = asyncio.run(main())
    sent = [json.loads(t.split("data: ", 1)[1].split("\n", 1)[0]) for t in text if "event: match\n" in t]
    assert [key(m) for m in sent] == certain(home)
