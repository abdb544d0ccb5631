"""A store that lives with a stream: small appends over HTTP, questions asked along, background upkeep.

``python -m bench live [--quick]``.  A real ``seqsketch serve`` (gunicorn and its job runner, which merges
parts, retires and folds in the background) on loopback; synthetic events of 20 Zipf-distributed types, a
``case`` of 2,000 and an ``amount``.

* **The bar.**  A dataset of 200,000 events gets 2,000 appends of 10 events over HTTP (1 % more events).  Three
  questions — per case, unpartitioned, with a condition — are asked on it right after the appends and again
  after a minute of background work, and on a fresh build of the same 220,000 events; answers are checked equal
  first, then the medians compared.  Append latency: p50 over all, the median of the first and of the last 200.
* **Throughput.**  300 batches of 1,000 events appended one after another over HTTP, after 10 untimed ones
  (the server's processes warm up): events per second.
* **A day.**  A day of event time (1M events; 100K quick) fed in batches of 10 to 1,000 events, as fast as the
  server takes them, into two datasets at once: one keeps everything, one keeps 6 hours (retention).  Two SDK
  streams follow a watch on the first, each dropped and resumed from its cursor every few seconds.  At three
  moments the questions are asked on the live dataset and on a fresh build of the same events (answers equal,
  time ratio); the parts, the disk use of both datasets (all files, and the parts the live snapshot names:
  replaced parts stay two minutes for readers, a large share of a feed this fast) and the decayed summary's
  size are recorded along the way.  At the end every stream's matches are checked against an exact query:
  none lost, none repeated.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

TYPES = [f"T{i:02d}" for i in range(20)]
CASES = 2000
START_US = 1_700_000_000_000_000
QUESTIONS = {
    "per_case": "PATTERN SEQ(T03 a, T07 b, T11 c) PARTITION BY case WITHIN 1 day",
    "unpartitioned": "PATTERN SEQ(T12 a, T16 b) WITHIN 20 events",
    "condition": "PATTERN SEQ(T05 a, T09 b) WHERE a.amount < 50 AND b.amount > a.amount PARTITION BY case WITHIN 1 day",
}
WATCHED = "PATTERN SEQ(T01 a, T02 b) PARTITION BY case WITHIN 1 hour"


class Feed:
    """Events in time order: Zipf-distributed types, a case and an amount each, ``step_us`` apart."""

    def __init__(self, step_us: int, seed: int = 7) -> None:
        self.rng = np.random.default_rng(seed)
        weights = 1.0 / np.arange(1, len(TYPES) + 1) ** 0.8
        self.p = weights / weights.sum()
        self.step_us = step_us
        self.next_us = START_US
        self.rows: list[dict[str, Any]] = []  # every event fed, for the fresh builds

    def take(self, n: int) -> list[dict[str, Any]]:
        types = self.rng.choice(len(TYPES), size=n, p=self.p)
        cases = self.rng.integers(0, CASES, size=n)
        amounts = self.rng.integers(0, 1000, size=n)
        out = []
        for t, c, a in zip(types.tolist(), cases.tolist(), amounts.tolist(), strict=True):
            out.append({"type": TYPES[t], "ts": self.next_us / 1e6, "case": f"c{c}", "amount": a})
            self.next_us += self.step_us
        self.rows += out
        return out


def _table(rows: list[dict[str, Any]]) -> Any:
    import pyarrow as pa

    from exact.events import TS_TYPE

    ts = pa.array([round(r["ts"] * 1e6) for r in rows], pa.int64()).cast(TS_TYPE)
    attrs = pa.StructArray.from_arrays([pa.array([r["case"] for r in rows]), pa.array([r["amount"] for r in rows])],
                                       names=["case", "amount"])
    return pa.table({"seq": pa.array(np.arange(len(rows)), pa.int64()), "ts": ts,
                     "type": [r["type"] for r in rows], "attrs": attrs})


def _answer_key(answer: dict[str, Any]) -> tuple:
    return answer.get("count"), tuple((m["start_seq"], m["end_seq"]) for m in answer.get("matches", [])[:2000])


def _ask(ask: Any, name: str, repeat: int) -> dict[str, tuple[tuple, float]]:
    """Each question's answer (its key) and median wall time (ms) over ``repeat`` askings."""
    out = {}
    for label, query in QUESTIONS.items():
        times, key = [], None
        for _ in range(repeat):
            started = time.perf_counter()
            answer = ask(name, query)
            times.append(1000 * (time.perf_counter() - started))
            key = _answer_key(answer)
        out[label] = (key, statistics.median(times))
    return out


def _compare(live: dict[str, tuple[tuple, float]], fresh: dict[str, tuple[tuple, float]]) -> dict[str, Any]:
    for label in QUESTIONS:
        if live[label][0] != fresh[label][0]:
            raise AssertionError(f"{label}: the live dataset answers {live[label][0][0]} matches, a fresh build "
                                 f"{fresh[label][0][0]}")
    return {label: {"live_ms": round(live[label][1], 2), "fresh_ms": round(fresh[label][1], 2),
                    "ratio": round(live[label][1] / fresh[label][1], 2), "count": live[label][0][0]}
            for label in QUESTIONS}


def _disk(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _parts(home: Path, name: str) -> int:
    from exact.store import EventStore, dataset_dir, store_dir

    return len(EventStore.open(store_dir(dataset_dir(name, home))).snapshot().parts)


def _http_ask(client: Any) -> Any:
    return lambda name, query: client.query(name, query, limit=2000).raw


def bar(home: Path, quick: bool) -> dict[str, Any]:
    """200K events, 2,000 appends of 10 over HTTP; the questions right after and after a minute, against a
    fresh build of the same events."""
    from api.client import Client
    from bench.load import served
    from sketch.dataset import Dataset

    base, appends, size = (20_000, 200, 10) if quick else (200_000, 2000, 10)
    feed = Feed(step_us=50_000_000)
    Dataset.build(home, "bar", _table(feed.take(base)))
    latencies = []
    with served(home, server="gunicorn", workers=2) as url:
        client = Client(url, timeout=120)
        ask = _http_ask(client)
        before = _ask(ask, "bar", 7)
        for _ in range(appends):
            batch = feed.take(size)
            started = time.perf_counter()
            client.append("bar", batch)
            latencies.append(1000 * (time.perf_counter() - started))
        parts_after = _parts(home, "bar")
        right_after = _ask(ask, "bar", 7)
        Dataset.build(home, "fresh", _table(feed.rows))
        fresh = _ask(ask, "fresh", 7)
        time.sleep(10 if quick else 60)
        later = _ask(ask, "bar", 7)
        parts_later = _parts(home, "bar")
        fresh_again = _ask(ask, "fresh", 7)
    first, last = statistics.median(latencies[:200]), statistics.median(latencies[-200:])
    return {
        "events_before": base, "appends": appends, "events_per_append": size, "events_after": len(feed.rows),
        "append_p50_ms": round(statistics.median(latencies), 2),
        "append_p99_ms": round(float(np.percentile(latencies, 99)), 2),
        "append_first200_median_ms": round(first, 2), "append_last200_median_ms": round(last, 2),
        "last200_over_first200": round(last / first, 2),
        "questions_before_appends_ms": {k: round(v[1], 2) for k, v in before.items()},
        "right_after": _compare(right_after, fresh), "parts_right_after": parts_after,
        "after_idle_s": 10 if quick else 60, "after_idle": _compare(later, fresh_again),
        "parts_after_idle": parts_later,
    }


def throughput(home: Path, quick: bool) -> dict[str, Any]:
    """Batches of 1,000 events over HTTP, one after another, once the server is warm (a few batches first,
    untimed: its processes load what appends need as they start): events per second, and each batch's
    latency."""
    from api.client import Client
    from bench.load import served
    from sketch.dataset import Dataset

    feed = Feed(step_us=1_000_000, seed=3)
    Dataset.build(home, "feed", _table(feed.take(10_000)))
    warm, batches = (5, 30) if quick else (10, 300)
    bodies = [feed.take(1000) for _ in range(warm + batches)]
    latencies = []
    with served(home, server="gunicorn", workers=2) as url:
        client = Client(url, timeout=120)
        for body in bodies[:warm]:
            client.append("feed", body)
        started = time.perf_counter()
        for body in bodies[warm:]:
            sent = time.perf_counter()
            client.append("feed", body)
            latencies.append(1000 * (time.perf_counter() - sent))
        elapsed = time.perf_counter() - started
        parts = _parts(home, "feed")
    return {"batches": batches, "warm_up_batches": warm, "events_per_batch": 1000, "seconds": round(elapsed, 2),
            "events_per_second": round(batches * 1000 / elapsed),
            "batch_p50_ms": round(statistics.median(latencies), 2),
            "batch_p99_ms": round(float(np.percentile(latencies, 99)), 2), "parts_after": parts}


class Stream:
    """An SDK stream of a watch on a thread, resumed from its cursor on demand."""

    def __init__(self, client: Any, name: str, watch_id: str) -> None:
        self.client, self.name, self.watch_id = client, name, watch_id
        self.got: list[tuple[int, int]] = []
        self.watch: Any = None
        self.thread: threading.Thread | None = None
        self.open(None)

    def open(self, cursor: str | None) -> None:
        self.watch = self.client.watch(self.name, watch_id=self.watch_id, cursor=cursor)
        watch = self.watch

        def run() -> None:
            try:
                for match in watch:
                    self.got.append((match["start_seq"], match["end_seq"]))
            except Exception:  # (closed while it waited)
                pass

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def resume(self) -> None:
        old = self.watch
        old.close()
        if self.thread is not None:
            self.thread.join(timeout=10)
        self.open(old.cursor)

    def close(self) -> None:
        self.watch.close()
        if self.thread is not None:
            self.thread.join(timeout=10)


def day(home: Path, quick: bool) -> dict[str, Any]:
    """A day of event time fed in batches of 10..1,000 into a dataset that keeps everything and one that
    keeps 6 hours, with watches open and questions compared to fresh builds along the way."""
    from api import service
    from api.client import Client
    from bench.load import served
    from exact.store import dataset_dir
    from sketch.dataset import Dataset

    total = 100_000 if quick else 1_000_000
    feed = Feed(step_us=86_400_000_000 // total, seed=11)
    first = feed.take(1000)
    Dataset.build(home, "day", _table(first))
    Dataset.build(home, "kept", _table(first))
    rng = np.random.default_rng(5)
    checkpoints = {total // 3, 2 * total // 3, total}
    timeline: list[dict[str, Any]] = []
    comparisons: list[dict[str, Any]] = []
    latencies: list[tuple[int, float]] = []
    with served(home, server="gunicorn", workers=2) as url:
        client = Client(url, timeout=120)
        client.retain("kept", "6 hours")
        watch = client.create_watch("day", WATCHED, start="start")
        streams = [Stream(client, "day", watch["id"]) for _ in range(2)]
        fed, last_resume, last_sample = len(first), time.monotonic(), 0
        started = time.monotonic()
        while fed < total:
            n = int(min(total - fed, rng.integers(10, 1001)))
            batch = feed.take(n)
            t0 = time.perf_counter()
            client.append("day", batch)
            latencies.append((fed, 1000 * (time.perf_counter() - t0)))
            client.append("kept", batch)
            fed += n
            if time.monotonic() - last_resume > 3.0:
                streams[int(fed) % 2].resume()
                last_resume = time.monotonic()
            if fed - last_sample >= total // 10 or fed >= total:
                last_sample = fed
                recent = [ms for _, ms in latencies[-200:]]
                kept_info, all_info = client.info("kept"), client.info("day")
                timeline.append({
                    "events": fed, "seconds": round(time.monotonic() - started, 1),
                    "append_p50_ms_recent": round(statistics.median(recent), 2),
                    "parts_all": _parts(home, "day"), "parts_retained": _parts(home, "kept"),
                    "disk_bytes_all": _disk(dataset_dir("day", home)),
                    "disk_bytes_retained": _disk(dataset_dir("kept", home)),
                    # the parts the current snapshot names (the disk also holds, for two minutes, the parts merges
                    # and retirements replaced: readers of older snapshots may still read them)
                    "store_bytes_all": all_info["store_bytes"], "store_bytes_retained": kept_info["store_bytes"],
                    "retained_from": kept_info.get("retained_from"),
                    "decayed_bytes": (kept_info.get("decayed") or {}).get("bytes", 0),
                    "decayed_units": (kept_info.get("decayed") or {}).get("units", 0)})
            if any(fed >= c > fed - n for c in checkpoints):
                fresh_home = home / f"fresh-{fed}"
                Dataset.build(fresh_home, "day", _table(feed.rows))
                live = _ask(lambda name, q, h=home: service.run_query(h, name, q, limit=2000), "day", 5)
                fresh = _ask(lambda name, q, h=fresh_home: service.run_query(h, name, q, limit=2000), "day", 5)
                comparisons.append({"events": fed, **_compare(live, fresh)})
        elapsed = time.monotonic() - started
        client.watermark("day", feed.next_us / 1e6 + 2 * 3600)  # every window closes
        time.sleep(3.0)
        for s in streams:
            s.close()
    exact = service.run_query(home, "day", WATCHED, mode="exact")["matches"]
    expected = [(m["start_seq"], m["end_seq"]) for m in exact]
    lost = repeated = 0
    for s in streams:
        lost += len(set(expected) - set(s.got))
        repeated += len(s.got) - len(set(s.got))
    return {
        "events": fed, "seconds": round(elapsed, 1), "events_per_second": round((fed - len(first)) / elapsed),
        "retention": "6 hours", "timeline": timeline, "compared_to_fresh_builds": comparisons,
        "watch": {"query": WATCHED, "streams": len(streams), "matches": len(expected), "lost": lost,
                  "repeated": repeated},
        "append_p50_ms": round(statistics.median([ms for _, ms in latencies]), 2),
    }


def run(quick: bool = False) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="seqsketch-live-") as tmp:
        root = Path(tmp)
        homes = {k: root / k for k in ("bar", "throughput", "day")}
        for h in homes.values():
            h.mkdir()
        result = {"bar": bar(homes["bar"], quick), "throughput": throughput(homes["throughput"], quick),
                  "day": day(homes["day"], quick)}
    if result["day"]["watch"]["lost"] or result["day"]["watch"]["repeated"]:
        raise AssertionError(f"the watch lost or repeated matches: {result['day']['watch']}")
    return result
