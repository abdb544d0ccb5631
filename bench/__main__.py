"""The benchmark command: ``python -m bench NAME [--quick]`` · ``python -m bench --list``.

A benchmark is any module ``bench/NAME.py`` with ``run(quick: bool) -> dict`` (:mod:`bench.registry`).  Its
result is written, with when and where it ran, to ``bench/results/NAME.json`` (replaced atomically) and
printed; ``all`` and ``report`` run the suite (:mod:`bench.suite`).
"""

from __future__ import annotations

import argparse
import json
import sys

from bench.registry import RESULTS, available, run_benchmark


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
