"""The Spark job's edge: the SparkSession it runs in, and Spark's failures turned into one clear error.

:func:`spark_session` is the only place a session is made (for :func:`sketch.spark.job.main`, or a caller
that passes none).  :func:`session_config` keeps a small job cheap, timestamps and names exact, and sizes
the driver from the input (:func:`memory_plan`).  On a cluster (any master but ``local…``) the session ships
the project's own code to the executors as it starts (:func:`ship_code`: a zip of the ``exact`` and
``sketch`` packages, ``SparkContext.addPyFile``), so the workers need Python with the project's
dependencies (pyarrow, numpy, mmh3, bitarray; pandas for PySpark's Arrow functions) but not seqsketch
itself.  :func:`spark_errors` turns a Py4J or PySpark exception into a
:class:`~exact.errors.SeqsketchError` naming the stage that failed — never a Py4J trace.
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


#: The driver JVM's heap: what Spark needs plus room for the windows' answers (their leaves' pairs and
#: bits, ~40 bytes an event at most), within these bounds.  Events never pass through it.
DRIVER_MEMORY_MIN = 1 << 30
DRIVER_MEMORY_MAX = 4 << 30


def memory_plan(events: int | None) -> dict[str, str]:
    """Memory settings for a build of about ``events`` events (None: unknown).

    The JVMs hold no events: the tasks' Python workers read, merge and write them, one chunk or one window
    (≤ 2^20 events) each, and data moves through the staging directory, not a shuffle.  So the driver's
    heap grows only with the answers it collects, and an executor's JVM keeps Spark's default (1g; a
    cluster's workers must offer that much per core).  ``SEQSKETCH_SPARK_DRIVER_MEMORY`` and
    ``SEQSKETCH_SPARK_EXECUTOR_MEMORY`` override either.
    """
    need = DRIVER_MEMORY_MIN if events is None else DRIVER_MEMORY_MIN + 40 * events
    driver = min(DRIVER_MEMORY_MAX, max(DRIVER_MEMORY_MIN, need))
    plan = {"spark.driver.memory": os.environ.get("SEQSKETCH_SPARK_DRIVER_MEMORY") or f"{driver >> 20}m"}
    if os.environ.get("SEQSKETCH_SPARK_EXECUTOR_MEMORY"):
        plan["spark.executor.memory"] = os.environ["SEQSKETCH_SPARK_EXECUTOR_MEMORY"]
    return plan


def session_config(master: str | None = None, events: int | None = None) -> dict[str, str]:
    """Settings that make a small job cheap (no UI, few shuffle partitions) and keep ts and names exact."""
    master = master or os.environ.get("SPARK_MASTER") or DEFAULT_MASTER
    cores = os.cpu_count() or 2
    return {
        "spark.master": master,
        "spark.app.name": "seqsketch-build",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # The job shuffles nothing (its data moves through the staging directory); the little SQL it runs
        # (createDataFrame of the windows' pairs) needs no more partitions than cores.
        "spark.sql.shuffle.partitions": str(max(2, 2 * cores)),
        "spark.sql.session.timeZone": "UTC",
        # Attribute names such as ``Case`` and ``case`` are different attributes.
        "spark.sql.caseSensitive": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "65536",
        # The Python workers must import this package's dependencies: use the interpreter that runs the
        # driver unless PYSPARK_PYTHON names the workers' own.
        "spark.pyspark.python": os.environ.get("PYSPARK_PYTHON") or sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        **memory_plan(events),
        **java_options(),
    }


#: The driver JVM's flags: its work is scheduling, not data (no event passes through it), so a JIT that
#: compiles quickly (C1 only) and the serial collector for its small heap halve the CPU it burns and its
#: start (5.2M events on 2 cores: 14.6 → 7.4 CPU seconds, start 8.0 → 4.5 s).
DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def java_options() -> dict[str, str]:
    """``spark.driver.extraJavaOptions``: :data:`DRIVER_JAVA_OPTIONS`, or ``SEQSKETCH_SPARK_JAVA_OPTIONS``
    (set it empty to keep Spark's own)."""
    flags = os.environ.get("SEQSKETCH_SPARK_JAVA_OPTIONS", DRIVER_JAVA_OPTIONS).strip()
    return {"spark.driver.extraJavaOptions": flags} if flags else {}


def spark_session(master: str | None = None, *, events: int | None = None) -> Any:
    """A SparkSession for ``master`` (default ``$SPARK_MASTER``, else ``local[*]``) sized for about
    ``events`` events: the job's only edge.  On a cluster it ships the project's code (:func:`ship_code`)."""
    from pyspark.sql import SparkSession

    # PySpark picks the workers' interpreter from the environment when the context starts.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")  # what pyspark.pandas (assertions) asks for
    config = session_config(master, events)
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
    # (PySpark types ``master`` as optional; a context that started has one, it refuses to start without)
    if not spark.sparkContext.master.startswith("local"):  # type: ignore[union-attr]
        ship_code(spark)
    return spark


#: The project's packages the executors import (``sketch`` and what it imports: ``exact``; never ``api``).
SHIPPED_PACKAGES = ("exact", "sketch")


def code_zip(folder: Path) -> Path:
    """A zip of :data:`SHIPPED_PACKAGES` as this process imports them (sources and data files, no caches),
    importable from ``sys.path``."""
    import importlib
    import zipfile

    path = folder / "seqsketch-code.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in SHIPPED_PACKAGES:
            root = Path(importlib.import_module(name).__file__).parent  # type: ignore[arg-type]
            for file in sorted(root.rglob("*")):
                if file.is_file() and "__pycache__" not in file.parts and file.suffix not in (".pyc", ".nbi",
                                                                                            ".nbc"):
                    archive.write(file, f"{name}/{file.relative_to(root)}")
    return path


def ship_code(spark: Any) -> Path:
    """Send the project's code to the executors (``addPyFile`` of :func:`code_zip`): tasks started after
    this import ``exact`` and ``sketch`` from the zip, ahead of anything installed on the workers."""
    import atexit
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="seqsketch-code-"))
    atexit.register(shutil.rmtree, folder, True)  # Spark serves the file from here while the session lives
    path = code_zip(folder)
    spark.sparkContext.addPyFile(str(path))
    return path


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
