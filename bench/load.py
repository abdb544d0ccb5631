"""Load: concurrent queries while appends run, against a real ``seqsketch serve`` on loopback — on the
production server (gunicorn: request worker processes, a job runner) and on Werkzeug's development server (one
process), in the same run, one after the other, each on its own copy of the same dataset.

``python -m bench load`` (BPI 2012, 20 client threads; per server 25 s of queries alone, then 20 s of queries
while one writer appends) · ``--quick`` (4 threads, 5 s + 5 s, a synthetic stream).

Readers draw from a query mix — workload patterns in verified mode, a consistency probe in verified and
exact mode, dataset descriptions — through the SDK with retries off, so every failed request counts.  The
writer appends batches of a fixed shape: ``BATCH`` events, ``MARKS`` of them of type ``LOADMARK``, each with
a unique ``uid``.  So at every committed state with ``E0 + j·BATCH`` events the probe
``PATTERN LOADMARK m RETURN count`` must count exactly ``j·MARKS``: an answer whose ``events_total`` is not
such a total, or whose count does not fit it, saw a state no commit produced.  At the end the store must hold
every uid exactly once (no lost or duplicated events) and its index must equal a rebuild.

Figures: requests/s and p50/p95/p99 latency per request kind, side by side for the two phases (and their
ratio) and for the two servers (and theirs), appends/s, events appended, errors and consistency violations
(both must be 0).
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BATCH = 50
MARKS = 7
MARK_TYPE = "LOADMARK"
PROBE = f"PATTERN {MARK_TYPE} m RETURN count"


# --- the server ---------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def served(home: Path, *, timeout: float = 60.0, server: str = "gunicorn", workers: int | None = None,
           threads: int | None = None, env: dict[str, str] | None = None, port: int | None = None) -> Iterator[str]:
    """A ``seqsketch serve`` subprocess on a loopback port (``port``, or a free one); yields its base URL;
    stopped on exit.

    ``server`` is ``gunicorn`` (the production server, ``workers`` request processes) or ``werkzeug`` (the
    development server, one process).  The server's log (any error's traceback) goes to ``home/server.log``:
    a pipe nobody reads would fill up and stall the server.
    """
    from api.client import Client, SeqsketchAPIError

    port = port or free_port()
    env = {**os.environ, "SEQSKETCH_HOME": str(home), "SEQSKETCH_QUERY_TIMEOUT_MS": "60000", **(env or {})}
    command = [sys.executable, "-m", "api.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
               "--server", server]
    if workers:
        command += ["--workers", str(workers)]
    if threads:
        command += ["--threads", str(threads)]
    log = open(home / "server.log", "ab")  # noqa: SIM115 - closed in the finally below
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the server exited: {server_log(home)[-2000:]}")
            try:
                Client(url, retries=0, timeout=2).health()
                break
            except SeqsketchAPIError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the server did not answer in time") from None
                time.sleep(0.1)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def server_log(home: Path) -> str:
    path = home / "server.log"
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


# --- the dataset --------------------------------------------------------------------------------------------


def synthetic_input(path: Path, events: int, types: int = 20, seed: int = 1) -> Path:
    """A JSON Lines stream of ``events`` events over ``types`` types with a ``case`` attribute, one per s."""
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as out:
        for i in range(events):
            out.write(json.dumps({"type": f"T{min(int(rng.expovariate(0.25)), types - 1)}",
                                  "ts": 1_600_000_000 + i, "case": rng.randrange(500)}) + "\n")
    return path


def build(home: Path, name: str, inputs: list[Path]) -> dict[str, Any]:
    from api.service import build_from_inputs as build_dataset

    return build_dataset(home, name, [str(p) for p in inputs])


# --- the run ------------------------------------------------------------------------------------------------


@dataclass
class Tally:
    """What the threads of one phase observed."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    appended_batches: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, kind: str, seconds: float) -> None:
        with self.lock:
            self.latencies[kind].append(seconds)

    def error(self, text: str) -> None:
        with self.lock:
            self.errors.append(text)

    def violation(self, text: str) -> None:
        with self.lock:
            self.violations.append(text)


@dataclass(frozen=True)
class Baseline:
    """The dataset's state before the writer starts: events and LOADMARK count."""

    events: int
    marks: int


def check_probe(answer: dict[str, Any], base: Baseline, tally: Tally, committed: Callable[[], int]) -> None:
    """The probe's count must be that of the committed state its ``events_total`` names."""
    total = (answer.get("stats") or {}).get("events_total")
    count = answer.get("count")
    if total is None or count is None:
        tally.violation(f"probe answer without events_total or count: {sorted(answer)}")
        return
    batches, rest = divmod(total - base.events, BATCH)
    if rest or batches < 0 or batches > committed():
        tally.violation(f"events_total {total} is no committed state (base {base.events}, batch {BATCH})")
    elif count != base.marks + batches * MARKS:
        tally.violation(f"count {count} at events_total {total}; expected {base.marks + batches * MARKS}")


def reader(url: str, name: str, queries: list[str], base: Baseline, tally: Tally, stop: threading.Event,
           committed: Callable[[], int], seed: int) -> None:
    from api.client import Client, SeqsketchAPIError

    client = Client(url, retries=0, timeout=120)
    rng = random.Random(seed)
    while not stop.is_set():
        roll = rng.random()
        started = time.perf_counter()
        try:
            if roll < 0.25:
                kind = "probe_verified"
                check_probe(client.query(name, PROBE, mode="verified").raw, base, tally, committed)
            elif roll < 0.30:
                kind = "probe_exact"
                check_probe(client.query(name, PROBE, mode="exact").raw, base, tally, committed)
            elif roll < 0.40:
                kind = "info"
                events = client.info(name)["events"]
                if (events - base.events) % BATCH or events < base.events:
                    tally.violation(f"info says {events} events: no committed state")
            else:
                kind = "query_verified"
                client.query(name, rng.choice(queries), mode="verified", limit=100)
        except SeqsketchAPIError as err:
            tally.error(f"{type(err).__name__}: {err}")
            continue
        tally.record(kind, time.perf_counter() - started)


def writer(url: str, name: str, start_ts: int, tally: Tally, stop: threading.Event,
           on_commit: Callable[[int], None], uid_start: int) -> None:
    from api.client import Client, SeqsketchAPIError

    client = Client(url, retries=0, timeout=120)
    batch = 0
    while not stop.is_set():
        first = uid_start + batch * BATCH
        events = [{"type": MARK_TYPE if i < MARKS else f"W{i % 5}", "ts": (start_ts + first + i) / 1.0,
                   "uid": first + i} for i in range(BATCH)]
        on_commit(batch + 1)  # announced before the call: a reader may see the commit before we return
        started = time.perf_counter()
        try:
            result = client.append(name, events)
        except SeqsketchAPIError as err:
            tally.error(f"append: {type(err).__name__}: {err}")
            on_commit(batch)
            break
        tally.record("append", time.perf_counter() - started)
        if result.get("appended") != BATCH:
            tally.violation(f"append answered {result}")
        batch += 1
        with tally.lock:
            tally.appended_batches = batch


def phase(url: str, name: str, queries: list[str], *, threads: int, seconds: float, append: bool,
          base: Baseline, start_ts: int, uid_start: int) -> Tally:
    tally = Tally()
    stop = threading.Event()
    announced = [0]
    lock = threading.Lock()

    def on_commit(batches: int) -> None:
        with lock:
            announced[0] = batches

    def committed() -> int:
        with lock:
            return announced[0]

    workers = [threading.Thread(target=reader, args=(url, name, queries, base, tally, stop, committed, i),
                                daemon=True) for i in range(threads)]
    if append:
        workers.append(threading.Thread(target=writer, args=(url, name, start_ts, tally, stop, on_commit,
                                                             uid_start), daemon=True))
    started = time.perf_counter()
    for w in workers:
        w.start()
    time.sleep(seconds)
    stop.set()
    for w in workers:
        w.join(timeout=180)
    tally.latencies["_wall"] = [time.perf_counter() - started]
    return tally


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def summary(tally: Tally) -> dict[str, Any]:
    wall = tally.latencies["_wall"][0]
    kinds = {}
    for kind, values in sorted(tally.latencies.items()):
        if kind == "_wall" or not values:
            continue
        kinds[kind] = {"requests": len(values), "per_s": round(len(values) / wall, 2),
                       "p50_ms": round(1000 * statistics.median(values), 2),
                       "p95_ms": round(1000 * percentile(values, 0.95), 2),
                       "p99_ms": round(1000 * percentile(values, 0.99), 2)}
    queries = sum(len(v) for k, v in tally.latencies.items() if k not in ("_wall", "append"))
    return {"seconds": round(wall, 2), "requests_per_s": round(queries / wall, 2), "kinds": kinds,
            "appended_events": tally.appended_batches * BATCH, "errors": len(tally.errors),
            "violations": len(tally.violations), "error_samples": tally.errors[:5],
            "violation_samples": tally.violations[:5]}


def final_check(home: Path, name: str, base: Baseline, batches: int, uid_start: int) -> dict[str, Any]:
    """Every appended uid exactly once, contiguous seq, and the index equal to a rebuild."""
    import pyarrow.compute as pc

    from exact.store import EventStore, dataset_dir, store_dir
    from sketch import persist
    from sketch.dataset import Dataset
    from sketch.tree import BloomTree

    store = EventStore.open(store_dir(dataset_dir(name, home)))
    table = store.read_table()
    expected = base.events + batches * BATCH
    attrs = table.column("attrs").combine_chunks()
    uids = [u for u in attrs.field("uid").to_pylist() if u is not None] if "uid" in [
        attrs.type.field(i).name for i in range(attrs.type.num_fields)] else []
    wanted = set(range(uid_start, uid_start + batches * BATCH))
    snap = Dataset.open(home, name).snapshot()
    rebuilt = BloomTree(snap.tree.config)
    rebuilt.update(table.column("type"), table.column("ts"))
    # the tree file the version names holds the events it says (appends between checkpoints name the last)
    checkpoint = persist.load(dataset_dir(name, home) / snap.index.file)
    at_checkpoint = BloomTree(snap.tree.config)
    at_checkpoint.update(table.column("type").slice(0, snap.index.covered),
                         table.column("ts").slice(0, snap.index.covered))
    marks = int(pc.sum(pc.equal(table.column("type"), MARK_TYPE)).as_py() or 0)
    return {"events": table.num_rows, "expected_events": expected,
            "seq_contiguous": table.column("seq").to_pylist() == list(range(table.num_rows)),
            "lost": len(wanted - set(uids)), "duplicated": len(uids) - len(set(uids)),
            "marks": marks, "expected_marks": base.marks + batches * MARKS,
            "index_equals_rebuild": rebuilt.digest() == snap.tree.digest()
            and at_checkpoint.digest() == checkpoint.digest() == snap.index.index_digest}


def load_test(home: Path, name: str, queries: list[str], *, threads: int, baseline_s: float,
              append_s: float, server: str = "gunicorn", workers: int | None = None,
              server_threads: int | None = None) -> dict[str, Any]:
    """Both phases against a server on ``home`` (dataset ``name`` built already) and the final check."""
    from api.client import Client

    cpu_before, load_before = _children_cpu(), os.getloadavg()
    with served(home, server=server, workers=workers, threads=server_threads) as url:
        client = Client(url, retries=0)
        info = client.info(name)
        base = Baseline(events=info["events"], marks=int(info["types"].get(MARK_TYPE, 0)))
        from datetime import datetime

        start_ts = int(datetime.fromisoformat(info["end_ts"]).timestamp()) + 1
        uid_start = 10**9
        for text in [PROBE, *queries]:  # warm-up: parser tables and the index mapping, outside the timing
            client.query(name, text, mode="verified", limit=1)
        alone = phase(url, name, queries, threads=threads, seconds=baseline_s, append=False, base=base,
                      start_ts=start_ts, uid_start=uid_start) if baseline_s else None
        mixed = phase(url, name, queries, threads=threads, seconds=append_s, append=True, base=base,
                      start_ts=start_ts, uid_start=uid_start)
    # The server's processes (request workers, and the job runner, idle here) were waited for when it stopped:
    # their CPU time is this process's children's.
    server_cpu = round(_children_cpu() - cpu_before, 1)
    final = final_check(home, name, base, mixed.appended_batches, uid_start)
    out: dict[str, Any] = {"server": server, "workers": workers if server == "gunicorn" else 1,
                           "threads": threads, "with_appends": summary(mixed), "final": final,
                           "server_cpu_s": server_cpu,
                           "load_average": [round(x, 2) for x in (*load_before, *os.getloadavg())]}
    if alone is not None:
        out["queries_alone"] = summary(alone)
        out["side_by_side"] = side_by_side(out["queries_alone"], out["with_appends"])
    return out


def _children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


def side_by_side(alone: dict[str, Any], mixed: dict[str, Any]) -> dict[str, Any]:
    """Query throughput and p95 without and with concurrent appends, and their ratio."""
    rows: dict[str, Any] = {"requests_per_s": [alone["requests_per_s"], mixed["requests_per_s"],
                                               _ratio(mixed["requests_per_s"], alone["requests_per_s"])]}
    for kind, figures in alone["kinds"].items():
        other = mixed["kinds"].get(kind)
        if other:
            rows[f"{kind}_p95_ms"] = [figures["p95_ms"], other["p95_ms"], _ratio(other["p95_ms"],
                                                                                 figures["p95_ms"])]
    return {"columns": ["queries alone", "with appends", "ratio"], "rows": rows}


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


#: The servers compared, in the order they run: the development server first, then the production one.
SERVERS = ("werkzeug", "gunicorn")


def servers_side_by_side(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Requests/s and p50/p99 per request kind, for each server, and gunicorn's over Werkzeug's."""
    a, b = (results[s] for s in SERVERS)
    rows: dict[str, Any] = {}
    for phase in ("queries_alone", "with_appends"):
        if phase not in a or phase not in b:
            continue
        x, y = a[phase], b[phase]
        rows[f"{phase}.requests_per_s"] = [x["requests_per_s"], y["requests_per_s"],
                                           _ratio(y["requests_per_s"], x["requests_per_s"])]
        for kind in sorted(set(x["kinds"]) & set(y["kinds"])):
            for q in ("p50_ms", "p99_ms"):
                rows[f"{phase}.{kind}.{q}"] = [x["kinds"][kind][q], y["kinds"][kind][q],
                                               _ratio(y["kinds"][kind][q], x["kinds"][kind][q])]
    return {"columns": [*SERVERS, "gunicorn / werkzeug"], "rows": rows}


def run(quick: bool) -> dict[str, Any]:
    import shutil

    threads, baseline_s, append_s = (4, 5.0, 5.0) if quick else (20, 25.0, 20.0)
    with tempfile.TemporaryDirectory(prefix="seqsketch-load-") as tmp:
        base = Path(tmp) / "base"
        base.mkdir()
        if quick:
            source = synthetic_input(Path(tmp) / "stream.jsonl", 20_000)
            queries = ["PATTERN SEQ(T0 a, T1 b) WITHIN 30 s", "PATTERN SEQ(T2 a, T3 b, T2 c) WITHIN 60 s",
                       "PATTERN SEQ(T5 a, T9 b) PARTITION BY case WITHIN 1 h RETURN count",
                       "PATTERN SEQ(T18 a, T19 b) RETURN exists"]
            dataset = "synthetic"
        else:
            from bench.corpora import BPIC, DEFAULT_DATA

            source = DEFAULT_DATA / BPIC
            queries = ["PATTERN SEQ(A_SUBMITTED a, A_DECLINED d) PARTITION BY case WITHIN 1 h",
                       "PATTERN SEQ(O_SELECTED o, O_CANCELLED c) PARTITION BY case WITHIN 30 days "
                       "RETURN count",
                       "PATTERN SEQ(A_ACCEPTED a, O_SENT_BACK s, A_ACTIVATED v) PARTITION BY case",
                       "PATTERN SEQ(W_Wijzigen_contractgegevens w, A_REGISTERED r) RETURN exists"]
            dataset = "bpic2012"
        build(base, dataset, [source])
        servers = {}
        for server in SERVERS:  # each on its copy of the dataset: the appends of one never reach the other
            home = Path(tmp) / server
            shutil.copytree(base, home)
            servers[server] = load_test(home, dataset, queries, threads=threads, baseline_s=baseline_s,
                                        append_s=append_s, server=server, workers=os.cpu_count() or 2)
        return {"dataset": dataset, "threads": threads, "cores": os.cpu_count(),
                "seconds": {"queries_alone": baseline_s, "with_appends": append_s},
                "servers": servers, "side_by_side": servers_side_by_side(servers)}


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
