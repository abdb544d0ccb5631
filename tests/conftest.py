"""Shared fixtures (the real data directory, a throw-away SEQSKETCH_HOME, the SparkSession) and the Hypothesis
profiles, registered once here and chosen by the ``HYPOTHESIS_PROFILE`` environment variable:

* ``ci`` (the default): 100 examples for a test that says nothing, and as many as a test asks for through
  :func:`tests.generators.scaled` — the counts CI has always run;
* ``quick``: a tenth of those, for iterating locally (``HYPOTHESIS_PROFILE=quick pytest tests/exact``);
* ``thorough``: five times as many, for a change to the engine or the index before it is merged.

Every profile has no deadline (a shared CI machine's timings say nothing about correctness; a test that
means to bound time says so itself, as the parser's fuzz test does) and suppresses the too-slow health check
(the property tests draw whole streams and queries).  A test whose function-scoped fixtures are meant to be
shared by its examples says so itself (``scaled(n, HealthCheck.function_scoped_fixture)``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.generators import CI_EXAMPLES
from tests.objectstore import Seaweed, apply_env, restore_env
from tests.postgres import postgres_url  # noqa: F401 - a fixture for every test module

settings.register_profile("ci", max_examples=CI_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("quick", settings.get_profile("ci"), max_examples=CI_EXAMPLES // 10)
settings.register_profile("thorough", settings.get_profile("ci"), max_examples=CI_EXAMPLES * 5)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


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


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seaweed]:
    """A real S3-compatible server (SeaweedFS) on loopback for the whole run, with the environment pointing at
    it (credentials, endpoint) while it runs; a test may stop and start it, and leaves it running."""
    server = Seaweed(tmp_path_factory.mktemp("seaweed"))
    server.start()
    before = apply_env(server.env)
    try:
        yield server
    finally:
        restore_env(before)
        server.stop()
