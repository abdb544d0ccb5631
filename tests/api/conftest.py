"""Fixtures of the API tests: an app on the test's home with its job runner, its test client, and the
running example built in it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from api.state import service_state
from tests.api.flaskapp import build, make_app


@pytest.fixture
def app(home: Path, shared_data: Path) -> Iterator[Flask]:
    app = make_app(home, shared_data)
    yield app
    state = service_state(app)
    assert state.jobs is not None
    state.jobs.shutdown()
    state.catalog.dispose()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture
def running(app: Flask, client: FlaskClient) -> str:
    job = build(app, client, "running", ["running-example.xes"], engine="local")
    assert job["state"] == "succeeded", job
    return "running"
