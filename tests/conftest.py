"""Shared fixtures: the real data directory and a throw-away SEQSKETCH_HOME."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

#: The repository sits beside ``shared/`` (at /work/main, and in CI's fresh clone alike).
_SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The read-only real data directory: shared/data beside the repository, or $SEQSKETCH_SHARED_DATA."""
    path = Path(os.environ.get("SEQSKETCH_SHARED_DATA") or _SHARED_DATA)
    if not (path / "running-example.xes").is_file():
        pytest.fail(f"real data not found at {path}: put shared/ beside the repository "
                    "or set SEQSKETCH_SHARED_DATA")
    return path


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
    from sketch.spark_job import spark_session

    session = spark_session("local[2]")
    session.conf.set("spark.sql.shuffle.partitions", "4")
    session.conf.set("spark.sql.adaptive.coalescePartitions.enabled", "false")
    yield session
    session.stop()
