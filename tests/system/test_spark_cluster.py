"""The Spark build on a real cluster: a standalone master and two workers started from the installed
pyspark on 127.0.0.1, and ``SPARK_MASTER=spark://… seqsketch build … --engine spark`` as a user runs it.

The workers run Python without the project: their interpreter (``PYSPARK_PYTHON``) is the test's own
started with ``-S`` and only the environment's site-packages on its path — no ``.pth`` file, so no
installed or editable seqsketch — and they import ``exact`` and ``sketch`` only from the zip the driver
ships as its session starts.  The inputs — the running example and a part of BPI 2012 as a CSV read in
pieces by several tasks — are built on the cluster and in-process; both trees' ``index_digest``, the stored
events and the answers to real questions must be equal.  The cluster is stopped whatever happens (a
fixture with ``finally``); its logs are kept in the test's temporary directory and shown on failure.

About 40 seconds on the shared 2-core machine (the master and two workers take ~18 s to start, the build
with its driver and executors ~20 s); it stays in the default run.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def workers_python(folder: Path) -> Path:
    """An interpreter for the workers that sees the environment's packages but not the project."""
    site = sysconfig.get_paths()["purelib"]
    script = folder / "python-without-seqsketch"
    script.write_text(f'#!/bin/sh\necho "$PYTHONPATH" >> {folder / "worker-paths.log"}\n'
                      f'PYTHONPATH="{site}${{PYTHONPATH:+:$PYTHONPATH}}" exec {sys.executable} -S "$@"\n')
    script.chmod(0o755)
    return script


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """A standalone master and two workers (one core, 1g each) on 127.0.0.1; stopped at the end."""
    folder = tmp_path_factory.mktemp("cluster")
    port, ui = free_port(), free_port()
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_MASTER")}
    base.update(SPARK_LOCAL_IP="127.0.0.1", SPARK_NO_DAEMONIZE="1")
    procs: list[subprocess.Popen] = []
    logs: list[Path] = []

    def start(name: str, args: list[str], env: dict) -> None:
        log = folder / f"{name}.log"
        logs.append(log)
        with open(log, "wb") as out:
            procs.append(subprocess.Popen([str(spark_class()), *args], env=env, stdout=out,
                                          stderr=subprocess.STDOUT, cwd=folder, start_new_session=True))

    try:
        start("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                         "--webui-port", str(ui)], base)
        url = f"spark://127.0.0.1:{port}"
        for i in range(2):
            env = {**base, "SPARK_WORKER_DIR": str(folder / f"worker-{i}"),
                   "SPARK_LOCAL_DIRS": str(folder / f"local-{i}")}
            start(f"worker-{i}", ["org.apache.spark.deploy.worker.Worker", url, "--cores", "1", "--memory",
                                  "1g", "--host", "127.0.0.1", "--webui-port", str(free_port())], env)
        deadline = time.monotonic() + 120
        alive = 0
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in procs):
                break
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as answer:
                    alive = json.load(answer).get("aliveworkers", 0)
            except OSError:
                alive = 0
            if alive == 2:
                break
            time.sleep(0.5)
        if alive != 2:
            pytest.fail("the cluster did not start:\n" + "\n".join(log.read_text(errors="replace")[-2000:]
                                                                   for log in logs))
        yield {"url": url, "folder": folder, "logs": logs}
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def bpic_part_as_csv(source: Path, path: Path, events: int) -> Path:
    """The first ``events`` events of BPI 2012 (input order) as a CSV with the attributes as columns."""
    from exact.readers import read_events

    table = next(read_events(source, "xes"))
    table = table.slice(0, events)
    attrs = table.column("attrs").combine_chunks()
    names = [attrs.type.field(i).name for i in range(attrs.type.num_fields)]
    columns = [attrs.field(i).to_pylist() for i in range(len(names))]
    ts = table.column("ts").to_pylist()
    types = table.column("type").to_pylist()
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["ts", "type", *names])
        for i in range(table.num_rows):
            w.writerow([ts[i].isoformat(), types[i], *("" if c[i] is None else c[i] for c in columns)])
    return path


QUESTIONS = [
    "PATTERN SEQ(A_SUBMITTED a, A_PARTLYSUBMITTED b, A_PREACCEPTED c) PARTITION BY case WITHIN 1 day",
    "PATTERN SEQ(O_SENT o1, O_SENT o2, O_DECLINED d) PARTITION BY case WITHIN 30 days",
    "PATTERN SEQ('register request' r, 'check ticket' c, decide d) PARTITION BY case",
    "PATTERN SEQ(W_Completeren_aanvraag w, A_ACCEPTED a) WITHIN 2 h RETURN count",
]


def test_cli_build_on_a_standalone_cluster_equals_local(cluster: dict, tmp_path: Path, home: Path,
                                                        shared_data: Path) -> None:
    from api.service import build_from_inputs, dataset_info, run_query
    from exact.store import EventStore, dataset_dir, store_dir

    csv_input = bpic_part_as_csv(shared_data / "bpic2012.xes.gz", tmp_path / "bpic-part.csv", 40_000)
    inputs = [str(shared_data / "running-example.xes"), str(csv_input)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SPARK_MASTER": cluster["url"], "SEQSKETCH_HOME": str(home),
           "PYSPARK_PYTHON": str(workers_python(cluster["folder"])), "SEQSKETCH_SPLIT_BYTES": str(1 << 20),
           "SEQSKETCH_SPARK_LOG": str(tmp_path / "driver-jvm.log")}
    started = time.monotonic()
    command = [sys.executable, "-m", "api.cli", "build", "clustered", *inputs, "--engine", "spark", "--json"]
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stderr[-3000:], [log.read_text(errors="replace")[-1500:]
                                                        for log in cluster["logs"]])
    summary = json.loads(done.stdout)
    print(f"cluster build: {time.monotonic() - started:.1f} s, timings {summary['timings']}")
    build_from_inputs(home, "local", inputs, engine="local")
    local = dataset_info(home, "local")
    assert summary["events"] == local["events"] == 40_042
    assert summary["index"]["index_digest"] == local["index"]["index_digest"]
    assert summary["index"]["partition"]["index_digest"] == local["index"]["partition"]["index_digest"]
    stores = [EventStore.open(store_dir(dataset_dir(n, home))).read_table() for n in ("clustered", "local")]
    assert stores[0].equals(stores[1])
    for question in QUESTIONS:
        answers = [run_query(home, n, question) for n in ("clustered", "local")]
        assert answers[0]["count"] == answers[1]["count"]
        assert answers[0].get("matches") == answers[1].get("matches")
    assert any(run_query(home, "clustered", q)["count"] for q in QUESTIONS)
    # no path the workers' Python saw holds the project's packages: they ran the code the driver shipped
    # (the environment's own packages may sit inside the checkout, as a .venv does)
    entries = [e for line in (cluster["folder"] / "worker-paths.log").read_text().splitlines()
               for e in line.split(":") if e]
    assert entries
    assert not [e for e in entries if Path(e).resolve() == ROOT.resolve() or (Path(e) / "sketch").is_dir()]
