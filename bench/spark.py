"""The Spark build past one machine's comfort: its time against the in-process build, how it scales with
cores, and its memory on an input ten times larger than the in-process build can hold.

Every build here runs as a user runs it — ``seqsketch build … --json`` in a fresh process (so each Spark
build starts its own JVM) — under :func:`bench.memtree.measure`, which samples the process tree's memory
and CPU from ``/proc``.  Inputs are BPI 2012 replayed with shifted time and case ids, written as Parquet copy
by copy (:func:`bench.corpora.write_replay_parquet`: each copy in the log's trace order, so the build has
to sort) under a temporary directory that is removed afterwards.

* ``time`` — the 5.2M-event replay (20 files) built in-process and on Spark (``local[2]``), one run each:
  seconds, the Spark stages (``timings`` of ``build --json``), Spark / local with the session start
  excluded, peak memory of both, and both trees' digests compared.
* ``scaling`` — the same input on Spark with 1 and 2 executor cores (``local[1]``, ``local[2]``), the
  better of two runs each: which stages run in tasks and shrink with cores, which are serial in the
  driver, and the model of a build on N executors fitted to them (:func:`scaling_model`).
* ``memory`` — the 50M-event replay (191 copies, 20 files) on Spark: the sum of every process's peak
  resident memory (``VmHWM``) and the largest sum at one moment, per process; and the in-process build of
  the same input, which refuses before reading (:mod:`api.service.build_memory`).
* ``bpic2012`` — the real log, one gzipped XES file (a single reading task): the job's fixed costs.

``python -m bench spark [--quick]`` (quick: 1M events for ``time`` and ``scaling``, 5M for ``memory``).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.corpora import BPIC, DEFAULT_DATA, write_replay_parquet
from bench.memtree import measure

REPO = Path(__file__).resolve().parents[1]
REPLAY_FILES = 20
#: Stages that run in tasks (scale with executors) and in the driver alone (serial), as ``timings`` names
#: them.
PARALLEL_STAGES = ("read", "write", "leaves")
SERIAL_STAGES = ("plan", "size", "merge", "publish", "partition")


def cli_build(home: Path, name: str, inputs: Sequence[Path], engine: str,
              env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``seqsketch build NAME INPUTS --engine ENGINE --json`` in a fresh process, measured: the summary (or
    the error line), the process tree's memory and CPU."""
    environment = {**os.environ, "PYTHONPATH": str(REPO), "SEQSKETCH_HOME": str(home), **(env or {})}
    out, err = home / f"{name}.out", home / f"{name}.err"
    command = [sys.executable, "-m", "api.cli", "build", name, *map(str, inputs), "--engine", engine,
               "--json"]
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        figures = measure(command, env=environment, cwd=home, stdout=stdout, stderr=stderr)
    processes = [{"command": p["command"], "peak_bytes": p["peak_bytes"], "cpu_seconds": p["cpu_seconds"]}
                 for p in figures["processes"] if p["peak_bytes"] > 32 << 20]
    result = {"returncode": figures["returncode"], "wall_seconds": figures["seconds"],
              "sum_of_peaks_bytes": figures["sum_of_peaks_bytes"],
              "peak_of_sum_bytes": figures["peak_of_sum_bytes"], "cpu_seconds": figures["cpu_seconds"],
              "processes": processes}
    if figures["returncode"] == 0:
        summary = json.loads(out.read_text())
        result.update(seconds=summary["seconds"], timings=summary["timings"], events=summary["events"],
                      index_digest=summary["index"]["index_digest"],
                      partition_digest=(summary["index"].get("partition") or {}).get("index_digest"))
    else:
        result["error"] = err.read_text(errors="replace").strip().splitlines()[-1:]
    shutil.rmtree(home / "datasets" / name, ignore_errors=True)
    return result


def spark_seconds(build: Mapping[str, Any]) -> float:
    """A Spark build's seconds without the session start (JVM, SparkContext)."""
    return round(build["seconds"] - build["timings"]["spark_start"], 3)


def compare(home: Path, inputs: Sequence[Path], master: str) -> dict[str, Any]:
    """The in-process build and the Spark build of ``inputs``, one run each, checked equal."""
    local = cli_build(home, "local", inputs, "local")
    spark = cli_build(home, "spark", inputs, "spark", {"SPARK_MASTER": master})
    for build in (local, spark):
        if build["returncode"]:
            raise RuntimeError(f"a build failed: {build.get('error')}")
    digests = [(b["index_digest"], b["partition_digest"]) for b in (local, spark)]
    if digests[0] != digests[1]:
        raise AssertionError("the Spark build's trees differ from the in-process build's")
    return {"events": local["events"], "inputs": len(inputs), "same_digests": True, "local": local,
            "spark": spark, "spark_seconds_without_start": spark_seconds(spark),
            "spark_over_local": round(spark_seconds(spark) / local["seconds"], 2)}


def scaling_model(one: Mapping[str, Any], two: Mapping[str, Any]) -> dict[str, Any]:
    """``T(N) = start + serial + fixed + work / N`` from the build on one core: ``work`` the seconds its
    tasks spent in their Python bodies (reading, sorting, writing: what N cores share), ``fixed`` the rest
    of the task stages (job and task overheads, the first job's start of the Python workers), ``serial``
    the driver's stages; the build on two cores checks the prediction."""
    t = one["timings"]
    work = t.get("read_in_python_tasks", 0.0) + t.get("write_in_python_tasks", 0.0)
    fixed = max(0.0, sum(t.get(k, 0.0) for k in PARALLEL_STAGES) - work)
    serial = sum(t.get(k, 0.0) for k in SERIAL_STAGES)
    start = t["spark_start"]
    predicted = {n: round(start + serial + fixed + work / n, 1) for n in (1, 2, 4, 8, 16)}
    return {"start": round(start, 2), "serial": round(serial, 2), "fixed": round(fixed, 2),
            "work": round(work, 2), "predicted_seconds": predicted, "measured_2_cores": two["seconds"]}


def scaling(home: Path, inputs: Sequence[Path], runs: int = 2) -> dict[str, Any]:
    """The same input on 1 and 2 executor cores, the better of ``runs`` runs each (the machine is shared:
    other work takes cores away from one run or another)."""
    builds: dict[int, dict[str, Any]] = {}
    for cores in (1, 2):
        tries = [cli_build(home, f"cores{cores}", inputs, "spark", {"SPARK_MASTER": f"local[{cores}]"})
                 for _ in range(runs)]
        for b in tries:
            if b["returncode"]:
                raise RuntimeError(f"a build failed: {b.get('error')}")
        builds[cores] = min(tries, key=spark_seconds)
        builds[cores]["runs_without_start"] = [spark_seconds(b) for b in tries]
    one, two = builds[1], builds[2]
    rows = {}
    for stage in ("spark_start", *PARALLEL_STAGES, *SERIAL_STAGES):
        a, b = one["timings"].get(stage, 0.0), two["timings"].get(stage, 0.0)
        rows[stage] = {"1_core": a, "2_cores": b, "where": "tasks" if stage in PARALLEL_STAGES else
                       "driver (session)" if stage == "spark_start" else "driver"}
    return {"events": one["events"], "runs": runs, "stages": rows,
            "seconds": {"1_core": one["seconds"], "2_cores": two["seconds"]},
            "seconds_without_start": {"1_core": spark_seconds(one), "2_cores": spark_seconds(two)},
            "every_run_without_start": {"1_core": one["runs_without_start"],
                                        "2_cores": two["runs_without_start"]},
            "speedup_without_start": round(spark_seconds(one) / spark_seconds(two), 2),
            "cpu_seconds": {"1_core": one["cpu_seconds"], "2_cores": two["cpu_seconds"]},
            "timings": {"1_core": one["timings"], "2_cores": two["timings"]},
            "model": scaling_model(one, two)}


def memory(home: Path, inputs: Sequence[Path]) -> dict[str, Any]:
    spark = cli_build(home, "large", inputs, "spark", {"SPARK_MASTER": "local[2]"})
    local = cli_build(home, "large-local", inputs, "local")
    return {"events": spark.get("events"), "input_files": len(inputs),
            "input_bytes": sum(p.stat().st_size for p in inputs), "spark": spark,
            "local": {k: local[k] for k in ("returncode", "wall_seconds", "sum_of_peaks_bytes", "error")
                      if k in local}}


def run(quick: bool = False) -> dict[str, Any]:
    from exact.ingest import read_inputs

    work = Path(tempfile.mkdtemp(prefix="seqsketch-bench-spark-"))
    try:
        home = work / "home"
        home.mkdir()
        results: dict[str, Any] = {"cores": os.cpu_count(), "load_average_at_start": _load()}
        raw = read_inputs([DEFAULT_DATA / BPIC])
        replay = write_replay_parquet(raw, 1_000_000 if quick else 5_000_000, work / "replay", REPLAY_FILES)
        results["time"] = compare(home, replay, "local[2]")
        results["scaling"] = scaling(home, replay)
        shutil.rmtree(work / "replay", ignore_errors=True)
        large = write_replay_parquet(raw, 5_000_000 if quick else 50_000_000, work / "large", REPLAY_FILES)
        del raw
        results["memory"] = memory(home, large)
        shutil.rmtree(work / "large", ignore_errors=True)
        results["bpic2012"] = compare(home, [DEFAULT_DATA / BPIC], "local[2]")
        results["load_average_at_end"] = _load()
        results["notes"] = NOTES
        return results
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _load() -> list[float]:
    """The machine's 1/5/15-minute load averages: on a shared machine the figures mean little without them."""
    return [round(x, 2) for x in os.getloadavg()]


NOTES = (
    "Each build is one run in a fresh process on a machine shared with other work (see the load averages). "
    "read, write and leaves run as Spark tasks and scale with executor cores; the session start, the "
    "window plan, sizing, the Alg. 2 merge, publishing and the partition build are serial in the driver. "
    "No event passes through the JVM: tasks exchange data through the staging directory and the store."
)


def main() -> None:
    started = time.perf_counter()
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
    print(f"{time.perf_counter() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
