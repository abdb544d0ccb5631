"""``python -m bench all [--quick]``: every benchmark, then the report.

Runs every registered benchmark module (``bench/NAME.py`` with ``run(quick)``, see :mod:`bench.registry`)
and every seed protocol (:data:`bench.protocols.PROTOCOLS`), writes each one's JSON record to
``bench/results/`` (``bench/results/quick/`` with ``--quick``), and generates ``docs/BENCHMARKS.md`` with
its plots under ``docs/bench/`` (:mod:`bench.report`).  A failing benchmark is recorded in its JSON and in
the report, and makes the command exit non-zero; a broken guarantee (:class:`bench.timing.RecallError`)
does too, after its figures are written, so the evidence is kept.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import machine
from bench.corpora import DEFAULT_DATA, Corpora
from bench.protocols import PROTOCOLS, SCALES, Scale, run_protocol
from bench.registry import available, run_benchmark

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
DOCS = REPO / "docs"


def write_record(results: Path, name: str, record: dict[str, Any]) -> Path:
    """``record`` as ``results/NAME.json``, replaced atomically."""
    results.mkdir(parents=True, exist_ok=True)
    path = results / f"{name}.json"
    tmp = results / f"{name}.json.tmp"
    tmp.write_text(json.dumps(record, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def _record(name: str, scale: Scale, started: float, figures: dict[str, Any] | None,
            error: str | None, host: dict[str, Any]) -> dict[str, Any]:
    record: dict[str, Any] = {"benchmark": name, "quick": scale.name != "full", "scale": scale.to_json(),
                              "ran_at": datetime.now(UTC).isoformat(timespec="seconds"),
                              "seconds": round(time.perf_counter() - started, 3), "machine": host,
                              "results": figures}
    if error:
        record["error"] = error
    return record


def run_protocols(scale: Scale, corpora: Corpora, results: Path, names: Sequence[str] | None = None,
                  host: dict[str, Any] | None = None) -> list[str]:
    """Run the seed protocols (all, or ``names``); returns the errors (empty when every one passed)."""
    from bench.timing import RecallError

    host = host or machine.describe(REPO)
    errors = []
    for name in names or list(PROTOCOLS):
        started = time.perf_counter()
        print(f"bench: {name} ({scale.name}) …", file=sys.stderr, flush=True)
        figures, error = None, None
        try:
            figures = run_protocol(name, scale, corpora)
        except RecallError as err:
            error = f"RecallError: {err}"
        except Exception as err:
            error = f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=6)}"
        write_record(results, name, _record(name, scale, started, figures, error, host))
        print(f"bench: {name} done in {time.perf_counter() - started:.1f} s"
              + (f" — FAILED: {error.splitlines()[0]}" if error else ""), file=sys.stderr, flush=True)
        if error:
            errors.append(f"{name}: {error.splitlines()[0]}")
    return errors


def run_registered(quick: bool, results: Path) -> list[str]:
    """Run every module of the registry (the other benchmarks); returns the errors."""
    errors = []
    for name in available():
        started = time.perf_counter()
        print(f"bench: {name} …", file=sys.stderr, flush=True)
        try:
            run_benchmark(name, quick, results)
        except BaseException as err:  # SystemExit from a module is a failure of that module only
            if isinstance(err, KeyboardInterrupt):
                raise
            message = f"{type(err).__name__}: {err}"
            errors.append(f"{name}: {message}")
            write_record(results, name, {"benchmark": name, "quick": quick, "error": message,
                                         "ran_at": datetime.now(UTC).isoformat(timespec="seconds"),
                                         "seconds": round(time.perf_counter() - started, 3), "results": None})
        print(f"bench: {name} done in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return errors


def run_all(scale: Scale, *, results: Path = RESULTS, docs: Path = DOCS, data: Path = DEFAULT_DATA,
            registered: bool = True, protocols: Sequence[str] | None = None,
            command: str = "python -m bench all") -> tuple[Path, list[str]]:
    """Everything, then the report; returns the report's path and the errors."""
    from bench.report import generate

    host = machine.describe(REPO)
    corpora = Corpora(data, bpic_limit=scale.bpic_limit, brown_limit=scale.brown_limit)
    errors = run_registered(scale.name != "full", results) if registered else []
    errors += run_protocols(scale, corpora, results, protocols, host)
    report = generate(results, docs, command=command, host=host,
                      generated_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), errors=errors)
    return report, errors


def main_all(quick: bool, argv: Sequence[str] | None = None, *, reuse_registered: bool = False) -> int:
    """The ``all`` sub-command of ``python -m bench``.

    ``reuse_registered``: run only the seed protocols and report the registry's benchmarks from the records
    their own runs left in the results directory (each shows when it ran) — for a machine too busy to
    rerun everything in one sitting.
    """
    scale = SCALES["quick" if quick else "full"]
    command = "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:])
    # A quick run's records go beside, never over, the full run's.
    report, errors = run_all(scale, command=command, results=RESULTS / "quick" if quick else RESULTS,
                             registered=not reuse_registered)
    print(f"bench: wrote {report}", file=sys.stderr)
    for line in errors:
        print(f"bench: FAILED {line}", file=sys.stderr)
    return 1 if errors else 0


def main_report(quick: bool, argv: Sequence[str] | None = None) -> int:
    """``python -m bench report [--quick]``: regenerate the report from the records already written."""
    from bench.report import generate

    command = "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:])
    report = generate(RESULTS / "quick" if quick else RESULTS, DOCS, command=command,
                      host=machine.describe(REPO),
                      generated_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"))
    print(f"bench: wrote {report}", file=sys.stderr)
    return 0
