"""The Flask app the API tests drive through ``app.test_client()``: how one is made on a test's home, a
build waited for, an error answer checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flask import Flask
from flask.testing import FlaskClient

from api.app import create_app
from api.state import service_state

OFF_MACHINE = {"REMOTE_ADDR": "10.20.30.40"}


def make_app(home: Path, shared_data: Path, **config: Any) -> Flask:
    (home / "inputs").mkdir(exist_ok=True)
    return create_app({
        "SEQSKETCH_HOME": str(home),
        "DATABASE_URL": f"sqlite:///{(home / 'catalog.db').as_posix()}",
        "INPUT_ROOTS": [str(shared_data), str(home / "inputs")],
        **config,
    })


def build(app: Flask, client: FlaskClient, name: str, inputs: list[str], **options: Any) -> dict[str, Any]:
    """Start a build, wait for its worker, return the finished job."""
    response = client.post(f"/v1/datasets/{name}/builds", json={"inputs": inputs, **options})
    assert response.status_code == 202, response.json
    job_id = response.json["job_id"]
    assert response.headers["Location"] == f"/v1/jobs/{job_id}"
    jobs = service_state(app).jobs
    assert jobs is not None
    jobs.wait(job_id, timeout=120)
    return client.get(f"/v1/jobs/{job_id}").json


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.get_data(as_text=True)
    body = response.json
    assert set(body) == {"error"} and body["error"]["code"] == code and body["error"]["message"]
    return body["error"]

