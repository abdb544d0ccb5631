"""Throughput of the exact engine on the real BPI Challenge 2012 log (262,200 events, 24 types).

    python -m bench.exact [--repeat 3] [--json] [--quick]      (or: python -m bench exact [--quick])

Workloads (each under the options that apply: two-phase on/off, prefilter on/off):

* ``seq3``      a selective three-type SEQ, once per strategy;
* ``contig``    the first three steps of each case under partition contiguity (strict contiguity on the
                first two steps, which follow each other in the stream);
* ``case+``     ``PARTITION BY case`` with a Kleene variable;
* ``chemo``     a Chemo-like event-set pattern ``SEQ({c, p+, d}, b)`` per case (Cadonna's P1 shape);
* ``not``       accepted applications not declined within 30 days (a trailing NOT per case).

Events/s = events of the stream / CPU seconds of one ``evaluate`` call on one core (best of ``--repeat``),
so that the figure does not depend on other load on the machine; wall seconds are reported beside it.
With the prefilter off every event enters the Python loops and each window reads every event it spans,
so those rows run on the first ``--prefix`` events only (their events/s is comparable, their totals not).
The stream is read once through ``exact.ingest``; reading is not part of the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa

from bench.corpora import BPIC, DEFAULT_DATA
from bench.timing import threads_set
from exact.engine import evaluate
from exact.query.ast import Query, Strategy
from exact.query.language import parse

DATA = DEFAULT_DATA / BPIC

SEQ3 = "PATTERN SEQ(A_ACCEPTED a, O_SENT_BACK b, A_ACTIVATED c) WITHIN 1 hour"
CASE_KLEENE = ("PATTERN SEQ(A_SUBMITTED a, 'W_Completeren aanvraag'+ w, A_ACCEPTED b) PARTITION BY case "
               "WITHIN 30 days")
CONTIG_PART = ("PATTERN SEQ(A_SUBMITTED a, A_PARTLYSUBMITTED b, A_PREACCEPTED c) PARTITION BY case "
               "WITHIN 1 day STRATEGY partition_contiguity")
CONTIG_STRICT = "PATTERN SEQ(A_SUBMITTED a, A_PARTLYSUBMITTED b) WITHIN 1 day STRATEGY strict_contiguity"
NEGATION = ("PATTERN SEQ(A_SUBMITTED a, A_ACCEPTED b, NOT(A_DECLINED x)) PARTITION BY case "
            "WITHIN 30 days")
CHEMO = ("PATTERN SEQ({O_CREATED c, O_SENT+ p, A_ACCEPTED d}, O_SENT_BACK b) PARTITION BY case "
         "WITHIN 30 days")


@dataclass(frozen=True)
class Row:
    workload: str
    strategy: str
    two_phase: bool
    prefilter: bool
    events: int
    matches: int
    cpu_s: float
    wall_s: float

    @property
    def events_per_s(self) -> float:
        return self.events / self.cpu_s if self.cpu_s > 0 else float("inf")


def load_stream(path: Path = DATA) -> tuple[pa.Table, dict[str, int]]:
    from exact.ingest import ingest

    table = ingest([path])
    counts = Counter(table.column("type").to_pylist())
    return table, dict(counts)


def with_strategy(query: Query, strategy: Strategy) -> Query:
    return Query(query.pattern, query.where, query.partition_by, query.within, query.between, strategy,
                 query.returns)


def measure(name: str, query: Query, table: pa.Table, counts: dict[str, int], *, two_phase: bool,
            prefilter: bool, repeat: int) -> Row:
    best_cpu, best_wall, matches = float("inf"), float("inf"), 0
    for _ in range(repeat):
        c0, w0 = time.process_time(), time.perf_counter()
        result = evaluate(query, table, two_phase=two_phase, prefilter=prefilter, type_counts=counts)
        best_cpu = min(best_cpu, time.process_time() - c0)
        best_wall = min(best_wall, time.perf_counter() - w0)
        matches = len(result)
    return Row(name, query.strategy.value, two_phase, prefilter, table.num_rows, matches, best_cpu, best_wall)


def measure_all(repeat: int = 3, prefix: int = 20_000, quick: bool = False) -> list[Row]:
    table, counts = load_stream()
    head = table.slice(0, prefix)
    head_counts = dict(Counter(head.column("type").to_pylist()))
    rows: list[Row] = []
    seq3 = parse(SEQ3)
    for strategy in Strategy:
        q = with_strategy(seq3, strategy)
        options = [(True, True)] if strategy in (Strategy.STRICT_CONTIGUITY, Strategy.PARTITION_CONTIGUITY) \
            else [(True, True), (False, True)]
        for tp, pf in options:
            rows.append(measure("seq3", q, table, counts, two_phase=tp, prefilter=pf, repeat=repeat))
    for text in (CONTIG_STRICT, CONTIG_PART):
        rows.append(measure("contig", parse(text), table, counts, two_phase=True, prefilter=True,
                            repeat=repeat))
    for name, text in (("case+", CASE_KLEENE), ("chemo", CHEMO), ("not", NEGATION)):
        q = parse(text)
        strategies = [Strategy.SKIP_TILL_NEXT_MATCH] if quick else [
            Strategy.SKIP_TILL_NEXT_MATCH, Strategy.ROBUST_SKIP_TILL_NEXT_MATCH]
        for strategy in strategies:
            qs = with_strategy(q, strategy)
            for tp in (True, False):
                rows.append(measure(name, qs, table, counts, two_phase=tp, prefilter=True, repeat=repeat))
    if not quick:
        for name, text in (("seq3", SEQ3), ("case+", CASE_KLEENE)):
            q = parse(text)
            for tp in (True, False):
                for pf in (True, False):
                    rows.append(measure(f"{name}[:{prefix}]", q, head, head_counts, two_phase=tp,
                                        prefilter=pf, repeat=1))
    return rows


def row_json(r: Row) -> dict:
    return {**asdict(r), "events_per_s": round(r.events_per_s)}


def run(quick: bool = False) -> dict:
    """The benchmark registry's entry point (``python -m bench exact``): every row as JSON, plus the
    side-by-side ratios of each switch (two-phase on/off, prefilter on/off) per workload and strategy."""
    with threads_set(1):  # events per CPU second of one core (docs/operations.md: a query's threads)
        rows = measure_all(repeat=1 if quick else 3, quick=quick)
    by_key = {(r.workload, r.strategy, r.two_phase, r.prefilter): r for r in rows}
    ratios = []
    for (w, s, tp, pf), r in by_key.items():
        if tp and (w, s, False, pf) in by_key:
            ratios.append({"workload": w, "strategy": s, "switch": "two_phase", "prefilter": pf,
                           "on_over_off": round(r.events_per_s / by_key[(w, s, False, pf)].events_per_s, 3)})
        if pf and (w, s, tp, False) in by_key:
            ratios.append({"workload": w, "strategy": s, "switch": "prefilter", "two_phase": tp,
                           "on_over_off": round(r.events_per_s / by_key[(w, s, tp, False)].events_per_s, 3)})
    return {"events": rows[0].events if rows else 0, "rows": [row_json(r) for r in rows], "ratios": ratios,
            "goals": goals_of(rows)}


#: The engine's throughput goals, in events per CPU second over the whole stream under skip-till-next-match:
#: (workload, what it stands for, target).
GOALS = (("seq3", "selective SEQ", 20_000_000),
         ("case+", "partitioned SEQ with a Kleene variable", 5_000_000))


def goals_of(rows: list[Row]) -> list[dict]:
    out = []
    for workload, label, target in GOALS:
        measured = [round(r.events_per_s) for r in rows
                    if r.workload == workload and r.strategy == Strategy.SKIP_TILL_NEXT_MATCH.value]
        out.append({"workload": workload, "label": label, "target": target, "measured": measured,
                    "met": bool(measured) and all(m >= target for m in measured)})
    return out


def table_text(rows: list[Row]) -> str:
    header = ("workload", "strategy", "2-phase", "prefilter", "events", "matches", "cpu s", "wall s",
              "events/s")
    lines = [header] + [(r.workload, r.strategy, "on" if r.two_phase else "off",
                         "on" if r.prefilter else "off", f"{r.events:,}", f"{r.matches:,}",
                         f"{r.cpu_s:.3f}", f"{r.wall_s:.3f}", f"{r.events_per_s:,.0f}") for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.exact", description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs (default 3)")
    parser.add_argument("--prefix", type=int, default=20_000,
                        help="events for the prefilter-off comparison (default 20000)")
    parser.add_argument("--quick", action="store_true", help="fewer rows (STNM only, no prefilter-off)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    if not DATA.is_file():
        print(f"bench.exact: {DATA} not found", file=sys.stderr)
        return 1
    with threads_set(1):
        rows = measure_all(args.repeat, args.prefix, args.quick)
    if args.json:
        print(json.dumps([row_json(r) for r in rows], indent=2))
    else:
        print(table_text(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
