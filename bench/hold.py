"""The server holds: the API's latency while 200 watch streams are open and 16 clients send their bodies slowly.

``python -m bench hold [--quick]``.  A real ``seqsketch serve`` (2 workers x 4 threads, the asyncio front) on
loopback over BPI 2012.  First idle: ``/v1/health`` probed 200 times and a BPI query asked 15 times, one at a
time.  Then under load: 200 Server-Sent-Events streams open on a watch (raw sockets, read on threads), and
16 connections each sending a query's head and 4 bytes of its 100-byte body, then nothing (each is answered
``408`` after the body's idle time and sent again) — more slow clients than the server has threads, the
shape that took a thread-per-request server off the air — while health and the query are measured the same
way.  A closing check appends a case and counts the streams its match reached.  Figures: health p50/p99/max
and the query's median, idle and loaded, and their ratios.
"""

from __future__ import annotations

import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

QUERY = "PATTERN SEQ(O_SENT o, O_DECLINED d) PARTITION BY case WITHIN 30 days"
WATCHED = "PATTERN SEQ(A_SUBMITTED s, A_DECLINED d) PARTITION BY case WITHIN 30 days"


def _stream(port: int, path: str, got: list[bytes], stop: threading.Event) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())

    def read() -> None:
        buf = b""
        try:
            while not stop.is_set():
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
                got[0] = buf[-4096:] if len(buf) > 4096 else buf
        except OSError:
            pass

    threading.Thread(target=read, daemon=True).start()
    return s


def _slow(port: int, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
                s.sendall(b"POST /v1/datasets/bpi/query HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"qu")
                while not stop.is_set() and s.recv(4096):
                    pass
        except OSError:
            stop.wait(0.1)


def _measure(client: Any, health_n: int, query_n: int) -> dict[str, float]:
    health = []
    for _ in range(health_n):
        started = time.perf_counter()
        client.health()
        health.append(1000 * (time.perf_counter() - started))
        time.sleep(0.01)
    query = []
    for _ in range(query_n):
        started = time.perf_counter()
        client.query("bpi", QUERY)
        query.append(1000 * (time.perf_counter() - started))
    h = np.asarray(health)
    return {"health_p50_ms": round(float(np.percentile(h, 50)), 2),
            "health_p99_ms": round(float(np.percentile(h, 99)), 2), "health_max_ms": round(float(h.max()), 2),
            "query_median_ms": round(statistics.median(query), 2)}


def run(quick: bool = False) -> dict[str, Any]:
    from api import service
    from api.client import Client
    from bench.corpora import BPIC, DEFAULT_DATA
    from bench.load import served

    streams_n, slow_n = (50, 8) if quick else (200, 16)
    health_n, query_n = (60, 5) if quick else (200, 15)
    with tempfile.TemporaryDirectory(prefix="seqsketch-hold-") as tmp:
        home = Path(tmp)
        service.build_from_inputs(home, "bpi", [str(DEFAULT_DATA / BPIC)], engine="local")
        with served(home, workers=2, threads=4) as url:
            client = Client(url, timeout=60)
            client.query("bpi", QUERY)  # (the kernels loaded in every worker)
            client.query("bpi", QUERY)
            idle = _measure(client, health_n, query_n)
            watch = client.create_watch("bpi", WATCHED)
            port = int(url.rsplit(":", 1)[1])
            stop = threading.Event()
            boxes = [[b""] for _ in range(streams_n)]
            path = f"/v1/datasets/bpi/watches/{watch['id']}/stream"
            socks = [_stream(port, path, box, stop) for box in boxes]
            slow = [threading.Thread(target=_slow, args=(port, stop), daemon=True) for _ in range(slow_n)]
            for t in slow:
                t.start()
            deadline = time.monotonic() + 60
            while sum(b"event: progress" in b[0] or b"event: match" in b[0] for b in boxes) < streams_n \
                    and time.monotonic() < deadline:
                time.sleep(0.1)
            opened = sum(b"HTTP/1.1 200" in b[0] or b"event:" in b[0] for b in boxes)
            loaded = _measure(client, health_n, query_n)
            client.append("bpi", [{"type": "A_SUBMITTED", "ts": "2013-01-01T00:00:00Z", "case": "hold"},
                                  {"type": "A_DECLINED", "ts": "2013-01-01T01:00:00Z", "case": "hold"}])
            time.sleep(2.0)
            reached = sum(b'"case": "hold"' in b[0] for b in boxes)
            stop.set()
            for s in socks:
                s.close()
    row = {"streams": streams_n, "streams_open": opened, "slow_bodies": slow_n, "idle": idle, "loaded": loaded,
           "health_p99_loaded_over_idle": round(loaded["health_p99_ms"] / max(idle["health_p99_ms"], 0.01), 2),
           "query_loaded_over_idle": round(loaded["query_median_ms"] / idle["query_median_ms"], 2),
           "match_reached_streams": reached}
    print(f"{streams_n} streams + {slow_n} slow bodies: health p99 {loaded['health_p99_ms']} ms "
          f"(idle {idle['health_p99_ms']}), query {loaded['query_median_ms']} ms (idle "
          f"{idle['query_median_ms']}), the match reached {reached}/{streams_n} streams", flush=True)
    return {"query": QUERY, "watched": WATCHED, "rows": [row]}
