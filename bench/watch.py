"""Standing queries under load: how long after the append that makes a match certain it reaches every stream.

``python -m bench watch [--quick]``.  A real ``seqsketch serve`` on loopback; per configuration (10 or 100
streams, a 1-hour or a 30-day window) two watches made before the writer starts (``from: now``):

* ``SEQ(OPEN a, CLOSE b) PARTITION BY case WITHIN w`` — certain at its last event: its latency runs from the
  acknowledgement of the append holding the case's CLOSE to the match on a stream, whatever ``w``;
* ``SEQ(OPEN a, NOT(CLOSE b)) PARTITION BY case WITHIN w`` — a trailing NOT, certain only when its window
  closes: its latency runs from the append (or the watermark) that closes the window, and a delivery before
  that acknowledgement counts as early.

The streams follow the first watch with the SDK (``client.watch``), each on a thread; one more stream follows
the second.  A writer appends 1,000-event batches over HTTP at ``rate`` events per second, each batch one
minute of event time: mostly noise, a few cases opened, the cases opened one batch before closed, and a few
left open.  Along the way a stream is dropped and resumed from its last cursor every two seconds, and the
server is stopped and started again on the same port half-way (the SDK reconnects on its own); at the end a
watermark 30 days on closes every window.  Afterwards every stream's matches are checked against a fresh
exact query: none lost, none repeated.  Latency figures leave out the matches made certain while the server
was down.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

WINDOWS = {"1 hour": 3600, "30 days": 30 * 86400}
#: event time per batch (s): a 1-hour window closes 60 batches after it opens
BATCH_SECONDS = 60
START = 1_700_000_000  # epoch seconds of the first event


def _queries(window: str) -> tuple[str, str]:
    return (f"PATTERN SEQ(OPEN a, CLOSE b) PARTITION BY case WITHIN {window}",
            f"PATTERN SEQ(OPEN a, NOT(CLOSE b)) PARTITION BY case WITHIN {window}")


def _initial(events: int) -> Any:
    from exact.reference import stream_table

    step = BATCH_SECONDS * 1_000_000 // 1000
    return stream_table([{"ts": START * 1_000_000 + i * step, "type": "NOISE", "case": f"n{i % 97}"}
                         for i in range(events)])


class Follower:
    """One SDK stream of a watch on a thread: each match with when it arrived; ``resume`` drops the
    connection and opens a new one from the last cursor seen."""

    def __init__(self, client: Any, watch_id: str) -> None:
        self.client = client
        self.watch_id = watch_id
        self.got: list[tuple[dict[str, Any], float]] = []
        self.lock = threading.Lock()
        self.stream: Any = None
        self.thread: threading.Thread | None = None
        self.open(None)

    def open(self, cursor: str | None) -> None:
        self.stream = self.client.watch("live", watch_id=self.watch_id, cursor=cursor)
        stream = self.stream

        def run() -> None:
            try:
                for match in stream:
                    with self.lock:
                        self.got.append((match, time.monotonic()))
            except Exception:  # a stream closed while it waited
                pass

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def resume(self) -> None:
        """Drop the connection, wait until its reader has taken its last match, then resume from there."""
        old = self.stream
        old.close()
        if self.thread is not None:
            self.thread.join(timeout=10)
        self.open(old.cursor)

    def close(self) -> None:
        self.stream.close()
        if self.thread is not None:
            self.thread.join(timeout=10)


def measure(streams: int, window: str, rate: int, seconds: float, batch: int = 1000, opened: int = 5,
            left_open: int = 1) -> dict[str, Any]:
    from api import service
    from api.client import Client
    from bench.load import free_port, served
    from sketch.build import BuildOptions
    from sketch.dataset import Dataset

    seq_query, not_query = _queries(window)
    width = WINDOWS[window]
    with tempfile.TemporaryDirectory(prefix="seqsketch-watch-") as tmp:
        home = Path(tmp)
        first = 10_000
        Dataset.build(home, "live", _initial(first), BuildOptions())
        port = free_port()
        threads = streams + 16
        env = {"SEQSKETCH_QUERY_TIMEOUT_MS": "60000"}
        acks: list[tuple[int, int, int, float, float]] = []  # (first, last seq, last event µs, sent, acknowledged)
        append_ms: list[float] = []
        down: tuple[float, float] = (0.0, 0.0)
        ts = float(START + first * BATCH_SECONDS / 1000)
        case_ts: dict[str, float] = {}  # case → its OPEN's event time (s)
        state = {"n": 0}
        followers: list[Follower] = []

        def write(client: Client, until: float, period: float) -> None:
            nonlocal ts
            started = time.monotonic()
            k = 0
            while time.monotonic() < until:
                due = started + k * period
                if time.monotonic() < due:
                    time.sleep(due - time.monotonic())
                n = state["n"]
                events = []
                step = BATCH_SECONDS / batch
                for i in range(batch):
                    ts += step
                    if i < opened:  # open a case, closed in the next batch
                        kind, case = "OPEN", f"c{n}-{i}"
                        case_ts[case] = ts
                    elif i < 2 * opened and n > 0:
                        kind, case = "CLOSE", f"c{n - 1}-{i - opened}"
                    elif i < 2 * opened + left_open:  # opened and never closed: a trailing-NOT match
                        kind, case = "OPEN", f"u{n}-{i}"
                        case_ts[case] = ts
                    else:
                        kind, case = "NOISE", f"n{i % 97}"
                    events.append({"type": kind, "ts": round(ts, 6), "case": case})
                asked = time.monotonic()
                done = client.append("live", events)
                acks.append((done["first_seq"], done["last_seq"], round(ts * 1e6), asked, time.monotonic()))
                append_ms.append(1000 * (acks[-1][4] - asked))
                state["n"] += 1
                k += 1
                if k % max(1, int(2 / period)) == 0 and followers:  # a stream dropped and resumed
                    followers[(k // max(1, int(2 / period))) % len(followers)].resume()

        period = batch / rate
        started = time.monotonic()
        with served(home, server="gunicorn", workers=1, threads=threads, env=env, port=port) as url:
            client = Client(url, timeout=120, retries=6, backoff=0.25)
            seq_watch = client.create_watch("live", seq_query)
            not_watch = client.create_watch("live", not_query)
            followers = [Follower(client, seq_watch["id"]) for _ in range(streams)]
            not_follower = Follower(client, not_watch["id"])
            time.sleep(1.0)  # every stream open and past the (empty) history
            write(client, started + 1.0 + seconds / 2, period)
            down_from = time.monotonic()
        # stopped: started again on the same port; the streams reconnect from their cursors
        with served(home, server="gunicorn", workers=1, threads=threads, env=env, port=port) as url:
            down = (down_from, time.monotonic())
            client = Client(url, timeout=120, retries=6, backoff=0.25)
            write(client, time.monotonic() + seconds / 2, period)
            closing_sent = time.monotonic()
            closing = client.watermark("live", ts + width + 1)  # every window closes
            closed_at = time.monotonic()
            time.sleep(3.0)  # the last certain matches reach the streams
            for f in [*followers, not_follower]:
                f.close()
        elapsed = time.monotonic() - started
        exact_seq = service.run_query(home, "live", seq_query, mode="exact")["matches"]
        exact_not = service.run_query(home, "live", not_query, mode="exact")["matches"]
    from exact.events import parse_timestamp

    ack_last = np.asarray([a[1] for a in acks], dtype=np.int64)
    ack_ts = np.asarray([a[2] for a in acks], dtype=np.int64)
    sent_time = np.asarray([a[3] for a in acks])
    ack_time = np.asarray([a[4] for a in acks])

    def in_outage(at: float) -> bool:
        return down[0] - 1.0 <= at <= down[1] + 1.0

    lost = repeated = 0
    latencies: list[float] = []
    expected = {m["start_seq"] for m in exact_seq}
    for f in followers:
        starts = [m["start_seq"] for m, _ in f.got]
        repeated += len(starts) - len(set(starts))
        lost += len(expected - set(starts))
        for m, at in f.got:
            done = int(np.searchsorted(ack_last, m["end_seq"]))  # the append holding its last event
            if done < len(ack_time) and not in_outage(ack_time[done]):
                latencies.append(1000 * (at - ack_time[done]))
    # the trailing NOT: certain when an append with an event past its window's end, or the watermark, came
    not_lat: list[float] = []
    early = 0
    starts = [m["start_seq"] for m, _ in not_follower.got]
    not_repeated = len(starts) - len(set(starts))
    not_lost = len({m["start_seq"] for m in exact_not} - set(starts))
    for m, at in not_follower.got:
        deadline = parse_timestamp(m["start_ts"]) + width * 1_000_000
        closing_batch = int(np.searchsorted(ack_ts, deadline, "right"))  # the first batch ending past it
        closed_when = ack_time[closing_batch] if closing_batch < len(ack_time) else closed_at
        if at < (sent_time[closing_batch] if closing_batch < len(sent_time) else closing_sent):
            early += 1  # delivered before the append or watermark that closes its window was sent
        elif not in_outage(closed_when):
            not_lat.append(1000 * (at - closed_when))
    lat = np.asarray(latencies) if latencies else np.zeros(1)
    nlat = np.asarray(not_lat) if not_lat else np.zeros(1)
    row = {"streams": streams, "window": window, "rate_asked": rate,
           "events_appended": sum(a[1] - a[0] + 1 for a in acks),
           "rate_achieved": round(sum(a[1] - a[0] + 1 for a in acks) / elapsed), "seconds": round(elapsed, 1),
           "matches": len(expected), "deliveries": sum(len(f.got) for f in followers),
           "lost": lost, "repeated": repeated,
           "latency_p50_ms": round(float(np.percentile(lat, 50)), 1),
           "latency_p99_ms": round(float(np.percentile(lat, 99)), 1),
           "latency_max_ms": round(float(lat.max()), 1),
           "not_matches": len(exact_not), "not_lost": not_lost, "not_repeated": not_repeated, "not_early": early,
           "not_latency_p50_ms": round(float(np.percentile(nlat, 50)), 1),
           "not_latency_p99_ms": round(float(np.percentile(nlat, 99)), 1),
           "restart_s": round(down[1] - down[0], 1), "resumes": max(0, len(acks) // max(1, int(2 / period))),
           "watermark": closing.get("watermark"),
           "append_ms_median": round(statistics.median(append_ms), 1) if append_ms else None}
    print(f"{streams} streams, {window}: p50 {row['latency_p50_ms']} ms, p99 {row['latency_p99_ms']} ms, "
          f"lost {lost}, repeated {repeated}; trailing NOT p50 {row['not_latency_p50_ms']} ms, early {early}, "
          f"lost {not_lost}", flush=True)
    return row


def run(quick: bool = False) -> dict[str, Any]:
    if quick:
        rows = [measure(10, "1 hour", 2_000, 8.0)]
    else:
        rows = [measure(streams, window, 10_000, 20.0) for streams in (10, 100) for window in WINDOWS]
    return {"queries": [q for w in WINDOWS for q in _queries(w)], "rows": rows}
