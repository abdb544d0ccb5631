"""A cold ``seqsketch query``: the wall time of a fresh process answering a small question, and its floors.

Figures (``python -m bench cli [--quick]``): BPI 2012 (the running example with ``--quick``) built into a
scratch home by the in-process builder; then, in rounds that take each command in turn (so a change in the
machine's load touches them alike), fresh processes of

- ``seqsketch query`` for a rare unpartitioned SEQ, a per-case ``RETURN count`` and an ``exists`` whose
  answer the index gives (verified mode, the default), and the same rare SEQ in exact mode;
- the floors under any of them: the interpreter alone, ``import numpy``, ``import numpy, pyarrow`` with the
  Parquet and compute modules the store reader needs, and ``import api.cli`` (every module a query loads
  before it parses its arguments).

Medians in ms, after one unmeasured round (disk cache, bytecode); the goal is 150 ms for a small query.  The
difference between a query and ``import api.cli`` is the query's own work, parsing and printing included.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.corpora import BPIC, DEFAULT_DATA

GOAL_MS = 150.0
REPO = Path(__file__).resolve().parents[1]

BPI_QUERIES = {
    "rare SEQ": "PATTERN SEQ('A_CANCELLED' a, 'A_ACTIVATED' b) WITHIN 1 h",
    "per-case count": "PATTERN SEQ('O_SENT' a, 'O_DECLINED' b) PARTITION BY case WITHIN 30 days RETURN count",
    "exists, absent type": "PATTERN SEQ('A_SUBMITTED' a, 'A_REOPENED' b) RETURN exists",
}
RUNNING_QUERIES = {
    "rare SEQ": "PATTERN SEQ('reject request' a, 'pay compensation' b)",
    "per-case count": "PATTERN SEQ('register request' a, decide b) PARTITION BY case RETURN count",
    "exists, absent type": "PATTERN SEQ('register request' a, 'no such step' b) RETURN exists",
}
FLOORS = {
    "python -c pass": "pass",
    "import numpy": "import numpy",
    "import numpy, pyarrow (+ parquet, compute)": "import numpy, pyarrow, pyarrow.parquet, pyarrow.compute",
    "import api.cli": "import api.cli",
}


def _wall_ms(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    elapsed = (time.perf_counter() - started) * 1000
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} … failed: {done.stderr.strip()[-500:]}")
    return elapsed


def run(quick: bool = False) -> dict[str, Any]:
    from api import service  # the build only; every measured process imports on its own

    rounds = 3 if quick else 9
    source, queries = ((DEFAULT_DATA / "running-example.xes", RUNNING_QUERIES) if quick
                       else (DEFAULT_DATA / BPIC, BPI_QUERIES))
    with tempfile.TemporaryDirectory(prefix="seqsketch-bench-cli-") as tmp:
        home = Path(tmp)
        service.build_from_inputs(home, "log", [str(source)], engine="local")
        env = {**os.environ, "SEQSKETCH_HOME": str(home)}
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # as on a user's machine: the warm-up round writes bytecode
        commands: dict[str, list[str]] = {
            f"query: {label}": [sys.executable, "-m", "api.cli", "query", "log", text]
            for label, text in queries.items()}
        commands["query --mode exact: rare SEQ"] = [sys.executable, "-m", "api.cli", "query", "log",
                                                   queries["rare SEQ"], "--mode", "exact"]
        commands.update({f"floor: {label}": [sys.executable, "-c", code] for label, code in FLOORS.items()})
        times: dict[str, list[float]] = {name: [] for name in commands}
        for r in range(rounds + 1):
            for name, argv in commands.items():
                ms = _wall_ms(argv, env)
                if r:  # the first round warms the disk cache and writes bytecode
                    times[name].append(ms)
    medians = {name: round(statistics.median(ms), 1) for name, ms in times.items()}
    query_ms = [ms for name, ms in medians.items() if name.startswith("query: ")]
    imports = medians["floor: import api.cli"]
    return {
        "dataset": source.name, "rounds": rounds, "median_ms": medians,
        "query_work_ms": {name.removeprefix("query: "): round(ms - imports, 1)
                          for name, ms in medians.items() if name.startswith("query")},
        "goal_ms": GOAL_MS, "goal_met": max(query_ms) <= GOAL_MS,
    }


if __name__ == "__main__":
    import json

    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
