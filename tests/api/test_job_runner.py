"""Build jobs run by the job-runner process, not by request workers: a queued job survives the request
worker that queued it and runs once; a runner killed mid-job leaves it failed (``interrupted``) for the next
runner to say so; ``seqsketch serve`` restarts a runner that dies.  Real processes, real SIGKILLs, a real
SQLite catalog.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from api.app import create_app
from api.catalog import open_catalog
from api.cli import main
from api.client import Client
from api.state import service_state
from bench.load import served, server_log

BIG = 40_000  # events: a build long enough (a few seconds) to be killed in the middle


def external_app(home: Path, **config: Any) -> Any:
    """A request worker as seqsketch serve runs it: it queues builds and runs none."""
    (home / "inputs").mkdir(parents=True, exist_ok=True)
    return create_app({"SEQSKETCH_HOME": str(home), "DATABASE_URL": f"sqlite:///{home / 'catalog.db'}",
                       "INPUT_ROOTS": [str(home / "inputs")], "JOB_RUNNER": "external", **config})


def big_input(home: Path) -> str:
    path = home / "inputs" / "big.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f'{{"type": "T{i % 17}", "ts": {1_600_000_000 + i}, "case": "{i % 97}"}}\n'
                            for i in range(BIG)))
    return "big.jsonl"


def runner_process(home: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "SEQSKETCH_HOME": str(home)}
    env.pop("SEQSKETCH_DATABASE_URL", None)
    log = open(home / "runner.log", "ab")  # noqa: SIM115 - the child holds it
    return subprocess.Popen([sys.executable, "-m", "api.cli", "jobs", "run"], env=env,
                            stdout=subprocess.DEVNULL, stderr=log)


def wait_state(catalog: Any, job_id: str, states: tuple[str, ...], timeout: float = 120.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = catalog.get_job(job_id)
        if job["state"] in states:
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} never reached {states}: {catalog.get_job(job_id)}")


def test_a_queued_job_outlives_its_request_worker_and_runs_once(home: Path, shared_data: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    app = external_app(home)
    (home / "inputs" / "running-example.xes").write_bytes((shared_data / "running-example.xes").read_bytes())
    response = app.test_client().post("/v1/datasets/kept/builds", json={"inputs": ["running-example.xes"]})
    assert response.status_code == 202
    job_id = response.json["job_id"]
    service_state(app).catalog.dispose()  # the request worker goes away (a restart, a crash)
    restarted = external_app(home)
    assert restarted.test_client().get(f"/v1/jobs/{job_id}").json["state"] == "queued"
    monkeypatch.setenv("SEQSKETCH_HOME", str(home))
    monkeypatch.delenv("SEQSKETCH_DATABASE_URL", raising=False)
    assert main(["jobs", "run", "--once"]) == 0  # a runner: claims what is queued, runs it, exits
    job = restarted.test_client().get(f"/v1/jobs/{job_id}").json
    assert job["state"] == "succeeded" and job["progress"] == 1.0 and job["runner"]
    assert restarted.test_client().get("/v1/datasets/kept").json["events"] == 42
    assert main(["jobs", "run", "--once"]) == 0  # nothing left: it is not run again
    assert restarted.test_client().get(f"/v1/jobs/{job_id}").json == job
    assert list((home / "runners").iterdir()) == []  # the runner let go of its lock
    service_state(restarted).catalog.dispose()


def test_a_runner_killed_mid_job_leaves_it_failed_on_the_next_start(home: Path) -> None:
    app = external_app(home)
    catalog = service_state(app).catalog
    spec = big_input(home)
    job_id = app.test_client().post("/v1/datasets/big/builds", json={"inputs": [spec]}).json["job_id"]
    first = runner_process(home)
    try:
        running = wait_state(catalog, job_id, ("running", "succeeded", "failed"))
        assert running["state"] == "running", (running, (home / "runner.log").read_text())
        time.sleep(0.3)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        first.kill()
        first.wait()
    assert catalog.get_job(job_id)["state"] in ("running", "succeeded")  # nobody has said otherwise yet
    again = runner_process(home)
    try:
        settled = wait_state(catalog, job_id, ("failed", "succeeded"), timeout=60)
        if settled["state"] == "failed":  # the kill came before the build published
            assert settled["error"]["code"] == "interrupted" and "stopped" in settled["error"]["message"]
            assert app.test_client().get("/v1/datasets/big").json["state"] == "failed"
            assert not [p for p in (home / "datasets").iterdir() if p.name.startswith(".staging")]
        retry = app.test_client().post("/v1/datasets/big/builds", json={"inputs": [spec], "replace": True})
        assert retry.status_code == 202, retry.json
        done = wait_state(catalog, retry.json["job_id"], ("succeeded", "failed"))
        assert done["state"] == "succeeded", done
        assert app.test_client().get("/v1/datasets/big").json["events"] == BIG
    finally:
        again.send_signal(signal.SIGTERM)
        again.wait(timeout=60)
    assert again.returncode == 0, (home / "runner.log").read_text()
    assert list((home / "runners").iterdir()) == []  # a runner that stops cleanly leaves no lock behind
    catalog.dispose()


def test_serve_restarts_a_runner_that_dies(tmp_path: Path) -> None:
    """``seqsketch serve`` (gunicorn): the runner is a separate process; killed while a build runs, it is
    started again, the job is failed as interrupted, and the next build runs in the new runner."""
    home = tmp_path / "home"
    home.mkdir()
    spec = big_input(home)
    with served(home, server="gunicorn", workers=1,
                env={"SEQSKETCH_INPUT_ROOTS": str(home / "inputs")}) as url:
        found = re.search(r"job runner pid (\d+)", server_log(home))
        assert found, server_log(home)
        pid = int(found.group(1))
        client = Client(url, retries=0, timeout=30)
        job = client.build("big", [spec], engine="local")
        for _ in range(600):
            if client.job(job["job_id"])["state"] != "queued":
                break
            time.sleep(0.05)
        # run by the runner process, not by a request worker
        assert client.job(job["job_id"])["runner"].split("-")[-2] == str(pid)
        os.kill(pid, signal.SIGKILL)
        settled = _wait_settled(client, job["job_id"])
        assert settled["state"] in ("failed", "succeeded"), settled
        if settled["state"] == "failed":
            assert settled["error"]["code"] == "interrupted"
        again = client.build("again", [spec], engine="local")
        done = _wait_settled(client, again["job_id"])
        assert done["state"] == "succeeded" and done["runner"].split("-")[-2] != str(pid)
        assert "starting another" in server_log(home)


def _wait_settled(client: Client, job_id: str, timeout: float = 120.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.job(job_id)
        if job["state"] in ("succeeded", "failed"):
            return job
        time.sleep(0.1)
    raise AssertionError(json.dumps(client.job(job_id)))


def test_two_runners_share_the_queue_without_running_a_job_twice(home: Path, shared_data: Path) -> None:
    from api.jobs import JobRunner

    app = external_app(home)
    catalog = service_state(app).catalog
    (home / "inputs" / "running-example.xes").write_bytes((shared_data / "running-example.xes").read_bytes())
    client = app.test_client()
    ids = [client.post(f"/v1/datasets/d{i}/builds", json={"inputs": ["running-example.xes"]}).json["job_id"]
           for i in range(6)]
    runners = [JobRunner(open_catalog(f"sqlite:///{home / 'catalog.db'}"), home).start() for _ in range(2)]
    try:
        jobs = [wait_state(catalog, job_id, ("succeeded", "failed")) for job_id in ids]
    finally:
        for runner in runners:
            runner.shutdown()
    assert all(job["state"] == "succeeded" for job in jobs)
    assert {job["runner"] for job in jobs} <= {r.id for r in runners}
    catalog.dispose()
