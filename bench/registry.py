"""The benchmark registry: which benchmarks there are, and running one into its JSON record.

A benchmark is any module ``bench/NAME.py`` with ``run(quick: bool) -> dict``.  Its result is written, with
when and where it ran, to ``bench/results/NAME.json`` (replaced atomically).  ``python -m bench``
(:mod:`bench.__main__`) and ``python -m bench all`` (:mod:`bench.suite`) both run benchmarks through here.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import platform
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def available() -> list[str]:
    """Names of the benchmark modules (every module of this package that defines ``run``)."""
    names = []
    for info in pkgutil.iter_modules([str(Path(__file__).resolve().parent)]):
        if info.name.startswith("_"):
            continue
        if hasattr(importlib.import_module(f"bench.{info.name}"), "run"):
            names.append(info.name)
    return sorted(names)


def run_benchmark(name: str, quick: bool, results: Path = RESULTS) -> dict[str, Any]:
    # Import only the named module: one broken or slow-to-import sibling must not stop the others.
    path = Path(__file__).resolve().parent / f"{name}.py"
    module = importlib.import_module(f"bench.{name}") if path.is_file() and not name.startswith("_") else None
    if module is None or not hasattr(module, "run"):
        raise SystemExit(f"bench: no benchmark {name!r}; available: {', '.join(available()) or 'none'}")
    started = time.perf_counter()
    figures = module.run(quick=quick)
    record = {"benchmark": name, "quick": quick, "ran_at": datetime.now(UTC).isoformat(timespec="seconds"),
              "seconds": round(time.perf_counter() - started, 3), "machine": _machine(), "results": figures}
    results.mkdir(parents=True, exist_ok=True)
    tmp = results / f"{name}.json.tmp"
    tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, results / f"{name}.json")
    return record


def _machine() -> dict[str, Any]:
    return {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()}
