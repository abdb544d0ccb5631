"""The benchmark registry: ``python -m bench NAME [--quick]`` · ``python -m bench --list``.

A benchmark is any module ``bench/NAME.py`` with ``run(quick: bool) -> dict``.  Its result is written, with
when and where it ran, to ``bench/results/NAME.json`` (replaced atomically) and printed.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import platform
import sys
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description="run a seqsketch benchmark")
    parser.add_argument("name", nargs="?", help="benchmark module under bench/")
    parser.add_argument("--quick", action="store_true", help="a smaller, faster run (for a smoke check)")
    parser.add_argument("--list", action="store_true", help="list the benchmarks")
    parser.add_argument("--reuse-registered", action="store_true",
                        help="with all: run only the seed protocols, reporting the other benchmarks' records")
    args = parser.parse_args(argv)
    if args.list or not args.name:
        print("\n".join(available()))
        return 0
    if args.name == "report":  # docs/BENCHMARKS.md again from the records in bench/results (bench/report.py)
        from bench.suite import main_report

        return main_report(args.quick, argv if argv is not None else sys.argv[1:])
    if args.name == "all":  # every benchmark, the seed protocols, then docs/BENCHMARKS.md (bench/suite.py)
        from bench.suite import main_all

        return main_all(args.quick, argv if argv is not None else sys.argv[1:],
                        reuse_registered=args.reuse_registered)
    record = run_benchmark(args.name, args.quick)
    print(json.dumps(record, indent=2))
    print(f"bench: wrote {RESULTS / (args.name + '.json')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
