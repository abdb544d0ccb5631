"""The Spark job's edge: the SparkSession it runs in, and Spark's failures turned into one clear error.

:func:`spark_session` is the only place a session is made (for :func:`sketch.spark_job.main`, or a caller
that passes none); :func:`session_config` keeps a small job cheap and timestamps and names exact.
:func:`spark_errors` turns a Py4J or PySpark exception into a :class:`~exact.errors.SeqsketchError` naming
the stage that failed — never a Py4J trace.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from exact.errors import SeqsketchError

DEFAULT_MASTER = "local[*]"


def session_config(master: str | None = None) -> dict[str, str]:
    """Settings that make a small job cheap (no UI, few shuffle partitions) and keep ts and names exact."""
    master = master or os.environ.get("SPARK_MASTER") or DEFAULT_MASTER
    cores = os.cpu_count() or 2
    return {
        "spark.master": master,
        "spark.app.name": "seqsketch-build",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(max(2, 2 * cores)),
        "spark.sql.session.timeZone": "UTC",
        # Attribute names such as ``Case`` and ``case`` are different attributes.
        "spark.sql.caseSensitive": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "65536",
        # The Python workers must import this package: use the interpreter that runs the driver.
        "spark.pyspark.python": os.environ.get("PYSPARK_PYTHON") or sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.driver.memory": os.environ.get("SEQSKETCH_SPARK_DRIVER_MEMORY", "4g"),
    }


def spark_session(master: str | None = None) -> Any:
    """A SparkSession for ``master`` (default ``$SPARK_MASTER``, else ``local[*]``): the job's only edge."""
    from pyspark.sql import SparkSession

    # PySpark picks the workers' interpreter from the environment when the context starts.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")  # what pyspark.pandas (assertions) asks for
    config = session_config(master)
    if not (master or os.environ.get("SPARK_MASTER")) and "PYSPARK_GATEWAY_PORT" in os.environ:
        del config["spark.master"]  # under spark-submit, its --master decides
    builder = SparkSession.builder
    for key, value in config.items():
        builder = builder.config(key, value)
    log = jvm_log_path()
    try:
        with _stderr_to(log):  # the JVM keeps the descriptor it starts with: its chatter goes to the log
            spark = builder.getOrCreate()
    except Exception as err:  # the JVM did not start (no Java, no memory, a bad setting): say where to look
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise SeqsketchError(f"Spark did not start: {first}; the JVM's messages are in {log}",
                             where="spark") from err
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def jvm_log_path() -> Path:
    """Where the Spark JVM's own messages go: ``$SEQSKETCH_SPARK_LOG``, else ``seqsketch-spark.log`` in the
    temporary directory."""
    import tempfile

    return Path(os.environ.get("SEQSKETCH_SPARK_LOG") or Path(tempfile.gettempdir()) / "seqsketch-spark.log")


@contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Point file descriptor 2 at ``path`` (appended) for the block.

    The JVM that PySpark launches inherits the process's descriptor 2 and writes to it from its first moment
    — the launcher's incubator-module note, log4j's default-profile and log-level notices, Hadoop's
    NativeCodeLoader warning — before any log setting of ours could apply.  Launched while descriptor 2 is the
    log file, it keeps writing there for its life; the Python side gets its descriptor 2 back at once.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(target, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(target)


@contextmanager
def spark_errors(stage: list[str]) -> Iterator[None]:
    """Turn a failure inside Spark (a Py4J or PySpark exception) into one clear SeqsketchError line."""
    try:
        yield
    except SeqsketchError:
        raise
    except Exception as err:
        module = type(err).__module__ or ""
        if not (module.startswith("pyspark") or module.startswith("py4j")):
            raise
        raise SeqsketchError(f"the Spark job failed while {stage[0]}: {_summary(err)}",
                             where="spark") from None


def _summary(err: BaseException) -> str:
    """The informative last line of a Spark/Py4J error (the Python exception of a task, or the JVM's)."""
    text = str(err).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for line in reversed(lines):
        if not line.startswith(("at ", "File ", "^", "...", "JVM stacktrace")):
            return line[:500]
    return type(err).__name__
