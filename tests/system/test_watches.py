"""Standing queries end to end, on a real server on a loopback port with the SDK and the command line: the
history's matches, then the matches of events appended by HTTP and by the CLI, each once and as soon as it
is certain — at its last event for this query, at its window's close (by an event or a watermark) for a
trailing NOT — across a dropped connection resumed with Last-Event-ID and a server restart, compared with a
fresh exact query over everything."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from api import service
from api.cli import main
from api.client import BadRequestError, Client, ConflictError, NotFoundError, QueryError
from sketch.answer.standing import Cursor
from tests.helpers import serve, wait_for_length

QUERY = ("PATTERN SEQ('register request' r, 'pay compensation' p) PARTITION BY case WITHIN 10 days "
         "STRATEGY skip_till_any_match")
#: a request not decided within a day: certain only once the day is over
UNDECIDED = ("PATTERN SEQ('register request' r, NOT('pay compensation' p)) PARTITION BY case WITHIN 1 day "
             "STRATEGY skip_till_any_match")


def key(match: dict[str, Any]) -> tuple:
    return match["start_seq"], match["end_seq"], tuple(sorted((k, tuple(v)) for k, v in match["bindings"].items()))


def certain(home: Path) -> list[tuple]:
    """The matches of a fresh exact query of QUERY over everything, in the order they became certain: each
    at its last event (skip-till-any-match, no trailing NOT: nothing later changes a match), so by last
    event, then in answer order."""
    answer = service.run_query(home, "running", QUERY, mode="exact")
    return [key(m) for m in sorted(answer["matches"], key=lambda m: (m["end_seq"], m["start_seq"]))]


class Collector:
    """Reads a watch on a thread, keeping every match it yields."""

    def __init__(self, client: Client, watch_id: str, cursor: str | None = None) -> None:
        self.watch = client.watch("running", watch_id=watch_id, cursor=cursor)
        self.matches: list[dict[str, Any]] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        for match in self.watch:
            self.matches.append(match)

    def wait_for(self, count: int, timeout: float = 20.0) -> None:
        wait_for_length(self.matches, count, timeout)

    def stop(self) -> None:
        self.watch.close()
        self.thread.join(timeout=10)


def new_case(case: str, day: str) -> list[dict[str, Any]]:
    return [{"type": "register request", "ts": f"{day}T09:00:00Z", "case": case},
            {"type": "pay compensation", "ts": f"{day}T17:00:00Z", "case": case}]


@pytest.fixture
def built(home: Path, shared_data: Path) -> Path:
    service.build_from_inputs(home, "running", [str(shared_data / "running-example.xes")], engine="local")
    return home


def test_history_then_live_matches_once_each(built: Path, shared_data: Path, tmp_path: Path) -> None:
    home = built
    with serve(home, shared_data) as (url, _app):
        client = Client(url, timeout=30)
        with pytest.raises(QueryError, match="needs WITHIN"):
            client.create_watch("running", "PATTERN SEQ(A a, B b)")
        with pytest.raises(NotFoundError):
            client.create_watch("nope", QUERY)
        watch = client.create_watch("running", QUERY, start="start")
        assert watch["cursor"] == "@0:0" and client.watches("running")[0]["id"] == watch["id"]
        # a match that spans history and live: its first event stored before the stream opens, its last after
        client.append("running", new_case("span", "2011-02-10")[:1])
        history = certain(home)
        assert history, "the running example has matches"
        reader = Collector(client, watch["id"])
        reader.wait_for(len(history))
        deadline = time.monotonic() + 10
        while not reader.watch.history_done and time.monotonic() < deadline:
            time.sleep(0.05)
        assert reader.watch.history_done and [key(m) for m in reader.matches] == history
        # appended by HTTP: the spanning match's last event — certain at once, its window still open
        client.append("running", new_case("span", "2011-02-10")[1:])
        reader.wait_for(len(history) + 1)
        assert reader.matches[-1]["case"] == "span"
        # a new case: delivered with the append that completes it
        client.append("running", new_case("http-1", "2011-03-01"))
        reader.wait_for(len(history) + 2)
        assert reader.matches[-1]["case"] == "http-1"
        lines = tmp_path / "more.jsonl"
        lines.write_text("\n".join(json.dumps(e) for e in new_case("cli-1", "2011-05-01")) + "\n")
        assert main(["append", "running", str(lines), "--format", "jsonl"]) == 0
        expected = certain(home)
        assert len(expected) == len(history) + 3
        reader.wait_for(len(expected))  # (how fast: bench/watch.py)
        time.sleep(0.3)
        assert [key(m) for m in reader.matches] == expected
        assert [m["case"] for m in reader.matches[-3:]] == ["span", "http-1", "cli-1"]
        reader.stop()
        # dropped, then resumed from the id of the last match seen: the rest, none twice
        middle = Collector(client, watch["id"], cursor=reader.watch.cursor)
        client.append("running", new_case("http-2", "2011-07-01"))
        middle.wait_for(1)
        time.sleep(0.3)
        assert [key(m) for m in middle.matches] == certain(home)[len(expected):]
        last = middle.watch.cursor
        middle.stop()
        with pytest.raises(BadRequestError, match="not a cursor"):
            next(iter(client.watch("running", watch_id=watch["id"], cursor="x")))
    # a server restart: the watch is kept in the catalog, and its stream resumes from the cursor
    with serve(home, shared_data) as (url, _app):
        client = Client(url, timeout=30)
        assert [w["id"] for w in client.watches("running")] == [watch["id"]]
        client.append("running", new_case("http-3", "2011-09-01"))
        after = Collector(client, watch["id"], cursor=last)
        after.wait_for(1)
        time.sleep(0.3)
        assert [key(m) for m in after.matches] == certain(home)[len(expected) + 1:]
        assert [m["case"] for m in after.matches] == ["http-3"]
        after.stop()
        assert client.delete_watch("running", watch["id"]) == {"deleted": watch["id"]}
        with pytest.raises(NotFoundError):
            next(iter(client.watch("running", watch_id=watch["id"])))


def test_a_trailing_not_waits_for_its_window_closed_by_a_watermark(built: Path, shared_data: Path,
                                                                    tmp_path: Path) -> None:
    """A request with no payment within a day is certain only when the day is over: not at the request,
    not at a watermark a microsecond short of the day, but at the watermark that reaches it (or at a later
    event).  A watermark that goes back in time, and an event at or before the watermark, are refused."""
    home = built
    with serve(home, shared_data) as (url, _app):
        client = Client(url, timeout=30)
        watch = client.create_watch("running", UNDECIDED)
        reader = Collector(client, watch["id"])
        client.append("running", [{"type": "register request", "ts": "2011-03-01T09:00:00Z", "case": "w1"}])
        done = client.append("running", [], watermark="2011-03-02T08:59:59.999999Z")
        assert done["appended"] == 0 and done["watermark"] == "2011-03-02T08:59:59.999999+00:00"
        time.sleep(0.5)
        assert reader.matches == []  # its gap is still open: a payment may come
        client.watermark("running", "2011-03-02T09:00:00Z")
        reader.wait_for(1)
        assert reader.matches[0]["case"] == "w1" and reader.matches[0]["bindings"]["r"] == [done["first_seq"] - 1]
        with pytest.raises(ConflictError, match="event time never goes back"):
            client.watermark("running", "2011-03-02T08:00:00Z")
        with pytest.raises(ConflictError, match="not after the dataset's watermark"):
            client.append("running", [{"type": "pay compensation", "ts": "2011-03-02T09:00:00Z", "case": "w1"}])
        assert client.info("running")["watermark"] == "2011-03-02T09:00:00.000000+00:00"
        # a request paid within the day is never delivered; one left unpaid is, when a later event closes it
        client.append("running", new_case("paid", "2011-03-05"))
        client.append("running", [{"type": "register request", "ts": "2011-03-06T09:00:00Z", "case": "w2"}])
        assert main(["append", "running", "--watermark", "2011-03-07T10:00:00Z"]) == 0
        reader.wait_for(2)
        time.sleep(0.3)
        assert [m["case"] for m in reader.matches] == ["w1", "w2"]
        reader.stop()


def test_cli_watch_prints_the_history_and_stops(built: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``seqsketch watch --from start --json``: one JSON line per certain match; stopped by Ctrl-C."""
    import _thread

    timer = threading.Timer(3.0, _thread.interrupt_main)
    timer.start()
    try:
        assert main(["watch", "running", QUERY, "--from", "start", "--json"]) == 0
    finally:
        timer.cancel()
    out, err = capsys.readouterr()
    got = [json.loads(line) for line in out.splitlines()]
    assert [key(m) for m in got] == certain(built) and "history is done" in err
    assert all(m["cursor"] for m in got)
    assert main(["watch", "running", "PATTERN SEQ(A a, B b)"]) == 1
    assert "needs WITHIN" in capsys.readouterr().err


def test_a_stream_far_behind_is_told_so(built: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before catching up on more first events than one chunk, a stream says how far behind it is; then the
    history's matches, then that the history is done."""
    import api.service.follower as follower

    monkeypatch.setattr(follower, "CHUNK", 4)
    stop = threading.Event()
    events = []
    for kind, _cursor, data in service.follow(built, "running", QUERY, Cursor.start(), stop=stop):
        events.append((kind, data))
        if kind == "progress":
            break
    assert events[0][0] == "behind" and events[0][1]["behind_events"] > 4
    assert [key(d) for k, d in events if k == "match"] == certain(built)


def test_a_watch_on_a_dataset_built_anew_while_the_server_was_down_ends(built: Path, shared_data: Path) -> None:
    """Its cursor means other events in the new store (whose lineage differs): the stream says so and ends,
    instead of resuming in the new numbering; a watch made on the new store follows it."""
    home = built
    with serve(home, shared_data) as (url, _app):
        client = Client(url, timeout=30)
        old = client.create_watch("running", QUERY, start="start")
        first = client.watch("running", watch_id=old["id"])
        assert next(iter(first)) is not None  # the history's matches flow
        first.close()
    service.build_from_inputs(home, "running", [str(shared_data / "running-example.xes")],
                              service.BuildRequest(replace=True), engine="local")
    with serve(home, shared_data) as (url, _app):
        client = Client(url, timeout=30)
        stale = Collector(client, old["id"])
        stale.thread.join(timeout=20)
        assert not stale.thread.is_alive(), "the stream of a watch on the old store did not end"
        assert stale.matches == []
        assert stale.watch.end_reason is not None and "rebuilt" in stale.watch.end_reason
        fresh = client.create_watch("running", QUERY, start="start")
        assert "lineage" not in fresh  # (kept by the service, not shown)
        stream = client.watch("running", watch_id=fresh["id"])
        got = next(iter(stream))
        stream.close()
        assert key(got) == certain(home)[0]


def test_a_cursor_behind_the_retired_history_goes_on_from_the_retained_events(tmp_path: Path) -> None:
    """A stream whose cursor lies before what retention kept says so once (``retired``, with the cursor it
    goes on from), then delivers exactly the matches of the retained events — over HTTP and the SDK too."""
    from exact.query.language import parse
    from exact.reference import reference_matches, stream_table
    from exact.store.retention import Retention
    from sketch.dataset import Dataset

    rows = [{"seq": i, "ts": 1_000_000 * i, "type": "ABC"[i % 3 if i % 7 else 2]} for i in range(120)]
    home = tmp_path / "home"
    Dataset.build(home, "live", stream_table(rows[:40]))
    dataset = Dataset.open(home, "live")
    for lo in range(40, 120, 10):
        dataset.append(stream_table(rows[lo:lo + 10]).drop_columns(["seq"]))
    dataset.retain(Retention(events=45))
    while dataset.retire() is not None:
        pass
    kept = dataset.store.snapshot().retained_from
    assert 0 < kept <= 120 - 45
    query = "PATTERN SEQ(A a, B b) WITHIN 3 events"
    expected = sorted(((m.start_seq, m.end_seq) for m in reference_matches(
        parse(query), stream_table(rows[kept:]))), key=lambda m: (m[1], m[0]))
    stop = threading.Event()
    told, got = [], []
    for kind, cursor, data in service.follow(home, "live", query, Cursor.start(), stop=stop):
        if kind == "retired":
            told.append((data, cursor.text()))
        elif kind == "match":
            got.append((data["start_seq"], data["end_seq"]))
        elif kind == "progress":
            break
    assert len(told) == 1 and told[0][0]["retained_from"] == kept and told[0][0]["cursor"] == told[0][1]
    assert "retired" in told[0][0]["reason"] and "{" not in told[0][0]["reason"]
    assert got == expected and got
    with serve(home, tmp_path) as (url, _app):
        client = Client(url, timeout=30)
        watch = client.watch("live", query, start="start")
        seen = []
        for match in watch:
            seen.append((match["start_seq"], match["end_seq"]))
            if len(seen) == len(expected):
                break
        watch.close()
        assert seen == expected and [r["retained_from"] for r in watch.retired] == [kept]
