"""Helpers more than one test file uses: the stream tree of a drawn stream, where a match must lie in an
approximate answer, the app served on a loopback port, and a wait for a list that another thread fills."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sized
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from exact.engine import Match
from sketch.evaluate import Approximation
from sketch.tree import BloomTree, TreeConfig


def build_tree(rows: list[dict], leaf_size: int, tiny: bool) -> BloomTree:
    """The stream tree of drawn ``rows`` with leaves of ``leaf_size`` events: ``tiny`` filters (64 bits
    folded down to 8, one hash) err often; the others (256 bits, three hashes) seldom."""
    config = (TreeConfig(leaf_size=leaf_size, m=64, k=1, min_bits=8) if tiny
              else TreeConfig(leaf_size=leaf_size, m=256, k=3))
    tree = BloomTree(config)
    if rows:
        tree.update([r["type"] for r in rows], [r["ts"] for r in rows])
    return tree


def inside_candidate(approx: Approximation, match: Match) -> bool:
    """The match lies in the candidate span of the unit holding its first event."""
    spans = dict(zip(approx.starts.tolist(), approx.ends.tolist(), strict=True))
    unit = int(approx.units.index_of_seq(np.asarray([match.start_seq]))[0])
    return unit in spans and match.end_seq <= spans[unit]


@contextmanager
def serve(home: Path, shared_data: Path, **config: Any) -> Iterator[tuple[str, Any]]:
    """The app on 127.0.0.1, an OS-chosen port, in a background thread; yields (base URL, app)."""
    from werkzeug.serving import make_server  # the service's imports only for the tests that serve it

    from api.app import create_app
    from api.state import service_state

    (home / "inputs").mkdir(parents=True, exist_ok=True)
    app = create_app({"SEQSKETCH_HOME": str(home),
                      "DATABASE_URL": f"sqlite:///{(home / 'catalog.db').as_posix()}",
                      "INPUT_ROOTS": [str(shared_data), str(home / "inputs")], **config})
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="seqsketch-test-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", app
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
        state = service_state(app)
        state.jobs.shutdown()  # type: ignore[union-attr]
        state.catalog.dispose()


def wait_for_length(items: Sized, count: int, timeout: float = 20.0, poll: float = 0.05) -> None:
    """Wait until ``items`` (filled by another thread) holds at least ``count``; fail the test if it does not
    within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while len(items) < count and time.monotonic() < deadline:
        time.sleep(poll)
    assert len(items) >= count, (len(items), count)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def seqsketch_serve(home: Path, *, workers: int = 2, port: int | None = None, env: dict[str, str] | None = None,
                    timeout: float = 60.0) -> Iterator[tuple[str, Any]]:
    """A real ``seqsketch serve`` (gunicorn, the asyncio front) on a loopback port, its log in
    ``home/server.log``; yields (base URL, the process); stopped with SIGTERM on exit."""
    import os
    import signal
    import subprocess
    import sys

    from api.client import Client, SeqsketchAPIError

    port = port or free_port()
    environ = {**os.environ, "SEQSKETCH_HOME": str(home), **(env or {})}
    log = open(home / "server.log", "ab")  # noqa: SIM115 - closed below
    process = subprocess.Popen([sys.executable, "-m", "api.cli", "serve", "--host", "127.0.0.1", "--port",
                                str(port), "--workers", str(workers)], env=environ, stdout=subprocess.DEVNULL,
                               stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            assert process.poll() is None, (home / "server.log").read_text(errors="replace")[-3000:]
            try:
                Client(url, retries=0, timeout=2).health()
                break
            except SeqsketchAPIError:
                assert time.monotonic() < deadline, "the server did not answer in time"
                time.sleep(0.1)
        yield url, process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        log.close()
