"""Shared fixtures: the real data directory and a throw-away SEQSKETCH_HOME."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The read-only real data directory: $SEQSKETCH_SHARED_DATA, or shared/data beside the repository
    (or beside the one it was cloned from)."""
    from api.service import shared_data_dirs

    candidates = shared_data_dirs()
    for path in candidates:
        if (path / "running-example.xes").is_file():
            return path
    pytest.fail(f"real data not found at {', '.join(map(str, candidates))}: put shared/ beside the "
                "repository or set SEQSKETCH_SHARED_DATA")


@pytest.fixture(scope="session", autouse=True)
def jobs_on_a_thread() -> Iterator[None]:
    """Tests run no job-runner process: an app made by a test runs queued builds on a thread of its own
    (``JOB_RUNNER = "thread"``), which ``state.jobs`` names.  ``seqsketch serve`` ignores this and starts
    its runner process; tests of the runner say what they need."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SEQSKETCH_JOB_RUNNER", "thread")
        yield


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh, empty SEQSKETCH_HOME for one test."""
    path = tmp_path / "seqsketch-home"
    path.mkdir()
    monkeypatch.setenv("SEQSKETCH_HOME", str(path))
    return path


@pytest.fixture(scope="session")
def spark():
    """The one local SparkSession of the test run: local[2], few shuffle partitions, no UI.

    Shuffle partitions are not coalesced, so that small test streams still spread over several partitions.
    """
    from sketch.spark.job import spark_session

    session = spark_session("local[2]")
    session.conf.set("spark.sql.shuffle.partitions", "4")
    session.conf.set("spark.sql.adaptive.coalescePartitions.enabled", "false")
    yield session
    session.stop()
