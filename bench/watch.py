"""Standing queries under load: how long after an append is acknowledged its matches reach every open stream.

``python -m bench watch [--quick]``.  A real ``seqsketch serve`` (gunicorn, one worker, a request thread per
stream) on loopback; one watch of ``SEQ(OPEN a, CLOSE b) PARTITION BY case WITHIN 50 EVENTS`` made before the
writer starts (``from: now``); ``streams`` clients follow it with the SDK (``client.watch``), each on a thread;
a writer appends batches over HTTP at ``rate`` events per second for ``seconds`` seconds — mostly noise, and
a few OPEN/CLOSE pairs per batch, each a match.  A match becomes certain with the batch holding the 50th event
from its first one; its latency is the time from that batch's acknowledgement to the match's arrival on a
stream.  Afterwards every stream's matches are checked against a fresh exact query over everything (the
matches whose windows closed): none lost, none repeated.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

QUERY = "PATTERN SEQ(OPEN a, CLOSE b) PARTITION BY case WITHIN 50 events"
WINDOW = 50


def _initial(events: int) -> Any:
    from exact.reference import stream_table

    return stream_table([{"ts": i * 1000, "type": "NOISE", "case": f"n{i % 97}"} for i in range(events)])


def measure(streams: int, rate: int, seconds: float, batch: int = 1000, pairs: int = 5) -> dict[str, Any]:
    from api import service
    from api.client import Client
    from bench.load import served
    from sketch.build import BuildOptions
    from sketch.dataset import Dataset

    with tempfile.TemporaryDirectory(prefix="seqsketch-watch-") as tmp:
        home = Path(tmp)
        first = 10_000
        Dataset.build(home, "live", _initial(first), BuildOptions())
        with served(home, server="gunicorn", workers=1, threads=streams + 8,
                    env={"SEQSKETCH_QUERY_TIMEOUT_MS": "60000"}) as url:
            client = Client(url, timeout=120)
            watch = client.create_watch("live", QUERY)
            received: list[list[tuple[int, float]]] = [[] for _ in range(streams)]
            watches = [client.watch("live", watch_id=watch["id"]) for _ in range(streams)]

            def follow(k: int) -> None:
                for match in watches[k]:
                    received[k].append((match["start_seq"], time.monotonic()))

            threads = [threading.Thread(target=follow, args=(k,), daemon=True) for k in range(streams)]
            for t in threads:
                t.start()
            time.sleep(1.0)  # every stream open and past the (empty) history
            acks: list[tuple[int, int, float]] = []  # (first seq, last seq, acknowledged at)
            append_ms: list[float] = []
            ts = first * 1000
            n = 0
            started = time.monotonic()
            period = batch / rate
            while time.monotonic() - started < seconds:
                due = started + n * period
                if time.monotonic() < due:
                    time.sleep(due - time.monotonic())
                events = []
                for i in range(batch):
                    ts += 1000
                    if i < 2 * pairs:  # an OPEN then a CLOSE of one fresh case: one match
                        kind = "OPEN" if i % 2 == 0 else "CLOSE"
                        case = f"c{n}-{i // 2}"
                    else:
                        kind, case = "NOISE", f"n{i % 97}"
                    events.append({"type": kind, "ts": ts, "case": case})
                asked = time.monotonic()
                done = client.append("live", events)
                acks.append((done["first_seq"], done["last_seq"], time.monotonic()))
                append_ms.append(1000 * (acks[-1][2] - asked))
                n += 1
            elapsed = time.monotonic() - started
            time.sleep(2.0)  # the last certain matches reach the streams
            for w in watches:
                w.close()
            for t in threads:
                t.join(timeout=10)
        snap_answer = service.run_query(home, "live", QUERY, mode="exact")
        total = snap_answer["count"]
        frontier = acks[-1][1] - WINDOW + 2 if acks else 0  # first events whose windows closed
        expected = sorted(m["start_seq"] for m in snap_answer["matches"] if m["start_seq"] < frontier)
    ack_last = np.asarray([a[1] for a in acks], dtype=np.int64)
    ack_time = np.asarray([a[2] for a in acks])
    latencies: list[float] = []
    lost = repeated = 0
    for got in received:
        starts = [s for s, _ in got]
        repeated += len(starts) - len(set(starts))
        lost += len(set(expected) - set(starts))
        for s, at in got:
            closing = int(np.searchsorted(ack_last, s + WINDOW - 1))  # the batch holding its 50th event
            if closing < len(ack_time):
                latencies.append(1000 * (at - ack_time[closing]))
    lat = np.asarray(latencies) if latencies else np.zeros(1)
    row = {"streams": streams, "rate_asked": rate, "events_appended": sum(b - a + 1 for a, b, _ in acks),
           "rate_achieved": round(sum(b - a + 1 for a, b, _ in acks) / elapsed), "seconds": round(elapsed, 1),
           "matches_certain": len(expected), "matches_in_history": total, "deliveries": len(latencies),
           "lost": lost, "repeated": repeated,
           "latency_p50_ms": round(float(np.percentile(lat, 50)), 1),
           "latency_p99_ms": round(float(np.percentile(lat, 99)), 1),
           "latency_max_ms": round(float(lat.max()), 1),
           "append_ms_median": round(statistics.median(append_ms), 1) if append_ms else None}
    print(f"{streams} streams, {row['rate_achieved']:,} events/s: p50 {row['latency_p50_ms']} ms, p99 "
          f"{row['latency_p99_ms']} ms, lost {lost}, repeated {repeated}", flush=True)
    return row


def run(quick: bool = False) -> dict[str, Any]:
    if quick:
        rows = [measure(10, 2_000, 8.0)]
    else:
        rows = [measure(10, 10_000, 20.0), measure(100, 10_000, 20.0)]
    return {"query": QUERY, "rows": rows}
