"""The Flask app's deletes, build jobs across restarts, configuration from the environment, and the time and
scan limits — on real files, a real SQLite catalog and the real running-example log."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from api import service
from api.app import create_app
from api.state import service_state
from tests.api.flaskapp import assert_error, build, make_app

# --- delete -------------------------------------------------------------------------------------------------


def test_delete_removes_events_and_index_but_keeps_history(app: Flask, client: FlaskClient, running: str,
                                                           home: Path) -> None:
    assert client.delete(f"/v1/datasets/{running}").json == {"deleted": running}
    assert not (home / "datasets" / running).exists()
    assert not [p for p in (home / "datasets").iterdir() if p.name.startswith(".trash")]
    assert_error(client.get(f"/v1/datasets/{running}"), 404, "not_found")
    assert_error(client.delete(f"/v1/datasets/{running}"), 404, "not_found")
    catalog = service_state(app).catalog
    assert catalog.get_dataset(running)["state"] == "deleted"
    assert catalog.list_datasets() == []


def test_jobs_left_running_by_a_stopped_runner_are_marked_failed(home: Path, shared_data: Path) -> None:
    app = make_app(home, shared_data)
    service_state(app).jobs.shutdown()  # type: ignore[union-attr]
    catalog = service_state(app).catalog
    job = catalog.create_job("orphan", ["running-example.xes"], {}, building=True)
    catalog.update_job(job["id"], state="running", runner="gone-1-deadbeef")  # its runner holds no lock
    restarted = make_app(home, shared_data)
    again = restarted.test_client().get(f"/v1/jobs/{job['id']}").json
    assert again["state"] == "failed" and again["error"]["code"] == "interrupted"
    assert "stopped" in again["error"]["message"]
    assert restarted.test_client().get("/v1/datasets/orphan").json["state"] == "failed"
    service_state(restarted).jobs.shutdown()  # type: ignore[union-attr]


def test_a_running_runners_jobs_are_left_alone(home: Path, shared_data: Path) -> None:
    """A second runner starting (another app, another process) settles only jobs whose runner is gone."""
    app = make_app(home, shared_data)
    first = service_state(app).jobs
    catalog = service_state(app).catalog
    job = catalog.create_job("busy", ["running-example.xes"], {})
    catalog.update_job(job["id"], state="running", runner=first.id)  # type: ignore[union-attr]
    second = make_app(home, shared_data)
    assert catalog.get_job(job["id"])["state"] == "running"
    first.shutdown()  # type: ignore[union-attr]
    service_state(second).jobs.recover()  # type: ignore[union-attr]
    assert catalog.get_job(job["id"])["state"] == "failed"
    service_state(second).jobs.shutdown()  # type: ignore[union-attr]


def test_a_restart_records_a_build_that_had_published(home: Path, shared_data: Path) -> None:
    """A runner stopped between a build's publish and recording it: the next runner finds the dataset
    written after the job started and records the job succeeded; a job whose dataset is older, or absent,
    failed."""
    from api.catalog import utcnow
    from api.service import build_from_inputs as build_dataset

    log = str(shared_data / "running-example.xes")
    app = make_app(home, shared_data)
    service_state(app).jobs.shutdown()  # type: ignore[union-attr]
    catalog = service_state(app).catalog
    build_dataset(home, "older", [log])  # exists before its (replacing) job starts, which then dies
    jobs = {}
    for name in ("published", "older", "absent"):
        jobs[name] = catalog.create_job(name, ["running-example.xes"], {"replace": True})["id"]
        catalog.update_job(jobs[name], state="running", started=utcnow())
    build_dataset(home, "published", [log])  # the build that published, its job not yet recorded

    restarted = make_app(home, shared_data)
    client = restarted.test_client()
    states = {name: client.get(f"/v1/jobs/{job}").json for name, job in jobs.items()}
    assert states["published"]["state"] == "succeeded"
    assert states["published"]["result"]["events"] == client.get("/v1/datasets/published").json["events"] > 0
    versions = service_state(restarted).catalog.index_versions("published")
    assert [v["number"] for v in versions] == [1]
    for name in ("older", "absent"):
        assert states[name]["state"] == "failed" and states[name]["error"]["code"] == "interrupted"
    service_state(restarted).jobs.shutdown()  # type: ignore[union-attr]


def test_an_app_without_a_runner_only_queues(home: Path, shared_data: Path) -> None:
    """``JOB_RUNNER = "external"`` (what seqsketch serve's request workers use): a build request is a queued
    row, run by whichever runner claims it — here one started afterwards, as a test starts one."""
    from api.jobs import JobRunner

    app = make_app(home, shared_data, JOB_RUNNER="external")
    state = service_state(app)
    assert state.jobs is None
    client = app.test_client()
    response = client.post("/v1/datasets/later/builds", json={"inputs": ["running-example.xes"]})
    assert response.status_code == 202
    job_id = response.json["job_id"]
    queued = client.get(f"/v1/jobs/{job_id}").json
    assert queued["state"] == "queued" and "job runner" in queued["message"]
    assert client.get("/v1/datasets/later").json["state"] == "building"
    again = client.post("/v1/datasets/later/builds", json={"inputs": ["running-example.xes"]})
    assert_error(again, 409, "conflict")
    runner = JobRunner(state.catalog, home).start()
    try:
        done = runner.wait(job_id, timeout=120)
    finally:
        runner.shutdown()
    assert done["state"] == "succeeded" and done["runner"] == runner.id
    assert client.get("/v1/datasets/later").json["events"] == 42
    state.catalog.dispose()


def test_environment_configures_the_app(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEQSKETCH_MAX_APPEND_BYTES", "1234")
    monkeypatch.setenv("SEQSKETCH_INPUT_ROOTS", os.pathsep.join(["/nonexistent/a", str(home)]))
    app = create_app({"SEQSKETCH_HOME": str(home)})
    assert app.config["MAX_APPEND_BYTES"] == 1234
    assert service_state(app).input_roots == [Path("/nonexistent/a"), home]
    assert (home / "catalog.db").is_file()
    service_state(app).jobs.shutdown()  # type: ignore[union-attr]


def test_call_with_timeout_answers_on_time() -> None:
    import time

    from exact.errors import QueryLimitError

    started = time.perf_counter()
    with pytest.raises(QueryLimitError, match="longer than the limit of 50 ms"):
        service.call_with_timeout(lambda: time.sleep(2), 50, "the query")
    assert time.perf_counter() - started < 1.5
    assert service.call_with_timeout(lambda: 7, 1000, "x") == 7
    with pytest.raises(ZeroDivisionError):  # the worker's own error reaches the caller
        service.call_with_timeout(lambda: 1 / 0, 1000, "x")


class _SlowToDelete:
    def __del__(self) -> None:  # an exception raised in here is swallowed by the interpreter
        import time

        end = time.monotonic() + 0.0005
        while time.monotonic() < end:
            pass


@pytest.mark.parametrize("in_destructors", [False, True])
def test_work_past_the_time_limit_is_stopped(in_destructors: bool) -> None:
    """The worker of a refused query stops within moments, not when its work would have ended (a minute) —
    also when it spends half its time in destructors, where a stop is swallowed (one stop alone would miss
    about every other time)."""
    import threading
    import time

    from exact.errors import QueryLimitError

    steps, workers, finished = [0], [], []

    def busy() -> None:  # pure Python, as the engine's loops are
        workers.append(threading.current_thread())
        end = time.monotonic() + 60
        while time.monotonic() < end:
            steps[0] += 1
            if in_destructors:
                _SlowToDelete()  # 0.5 ms in its __del__, then 0.5 ms here
                pause = time.monotonic() + 0.0005
                while time.monotonic() < pause:
                    steps[0] += 1
        finished.append(True)

    with pytest.raises(QueryLimitError):
        service.call_with_timeout(busy, 50, "the query")
    (worker,) = workers
    worker.join(10)
    assert not worker.is_alive() and not finished
    seen = steps[0]
    time.sleep(0.1)
    assert steps[0] == seen > 0


def test_scan_limit_refuses_exact_queries_over_it(home: Path, shared_data: Path) -> None:
    app = make_app(home, shared_data, QUERY_MAX_EVENTS=10)
    client = app.test_client()
    assert build(app, client, "running", ["running-example.xes"])["state"] == "succeeded"
    err = assert_error(client.post("/v1/datasets/running/query",
                                   json={"query": "PATTERN 'register request' r", "mode": "exact"}),
                       400, "query_limit")
    assert "42" in err["message"] and "10" in err["message"]
    logged = service_state(app).catalog.recent_queries("running")
    assert logged[0]["error_code"] == "query_limit" and logged[0]["mode"] == "exact"
    service_state(app).jobs.shutdown()  # type: ignore[union-attr]
