"""Generate ``docs/BENCHMARKS.md`` and its plots from the JSON records under ``bench/results/``.

The report's structure is fixed: every section is always written, in the same order, with a note when its
benchmark did not run or failed; only the figures change between runs.  Every table puts the seed's
published figure beside ours (:mod:`bench.seeds`), and the first section says where each was measured.
The sections on the seeds' protocols are :mod:`bench.report_seeds`; tables, numbers and plots
:mod:`bench.report_format`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import seeds
from bench.protocols import PROTOCOLS
from bench.report_format import Plots, flatten, fmt, load_results, missing_note, table
from bench.report_others import OWN_SECTIONS
from bench.report_seeds import section_accuracy, section_bpi, section_engine, section_scaling, section_words

SECTIONS = (
    "Where it ran",
    "Guarantees checked",
    "1. Random SEQ queries on BPI 2012 (Baltus Tables 5.1 and 5.2)",
    "2. Word streams: build time and operator forms (Baltus Tables 5.3 to 5.6)",
    "3. Build throughput and index size against N (local and Spark)",
    "4. Accuracy: false positives against the configured fpq, and recall",
    "5. The exact engine: strategies, two-phase, prefilter, window growth (Cadonna §4.7, §5.4)",
    "6. Query latency by answer mode: approximate, verified, exact",
    "7. Beside DuckDB: the same questions on the same events",
    "8. Other benchmarks",
)


# -------------------------------------------------------------------------------------------- sections


def section_records(records: dict[str, dict[str, Any]]) -> str:
    """Where every figure below comes from: each record, when it ran, how long, at which scale."""
    rows = []
    for name, rec in records.items():
        scale = (rec.get("scale") or {}).get("name") or ("quick" if rec.get("quick") else "full")
        state = "failed" if rec.get("error") else "ok"
        rows.append((f"`{name}.json`", rec.get("ran_at"), rec.get("seconds"), scale, state))
    if not rows:
        return "_No records._"
    return table(("record", "ran at (UTC)", "seconds", "scale", "state"), rows)


def section_machine(host: dict[str, Any], records: str) -> str:
    hws = [seeds.BALTUS_HW, seeds.CADONNA_HW, seeds.SASE_HW, seeds.LAZY_HW]
    software = (f"Python {host.get('python')}, {host.get('java') or 'no Java'}, Spark {host.get('spark')}, "
                f"pyarrow {host.get('pyarrow')}, numpy {host.get('numpy')}")
    rows = [
        ("CPU", host.get("cpu"), *(h.cpu for h in hws)),
        ("cores", host.get("cores"), *("" for _ in hws)),
        ("memory", f"{host.get('memory_gb')} GB", *(h.memory for h in hws)),
        ("system", host.get("system"), *(h.system for h in hws)),
        ("load average (1, 5, 15 min) when the report was written", host.get("load_average"),
         *("" for _ in hws)),
        ("software", software, *(h.software for h in hws)),
    ]
    text = table(("", "this machine (ours)", *(h.label for h in hws)), rows)
    return (text + "\n\nOur figures come from one process on this machine, shared with other work: query "
            "latencies and build times are wall time (`time.perf_counter`), exact-engine throughput is CPU "
            "time of the evaluating process; the seeds' from the papers as printed. Ratios between our own "
            "modes are the robust comparison; ratios to the seeds' figures compare different hardware, "
            "languages and data, and are given for orientation only.\n\nThe records behind this report:"
            "\n\n" + records)


def section_guarantees(records: dict[str, dict[str, Any]]) -> str:
    rows = []
    bpi = (records.get("seeds_baltus_bpi") or {}).get("results") or {}
    for name, d in (bpi.get("datasets") or {}).items():
        checked = sum((v.get("checked") or 0) for v in d["by_length"].values())
        rows.append((f"Baltus §5.1 protocol, {name}", checked, d["violations"]["verified_not_exact"],
                     d["violations"]["exact_matches_missed"]))
    words = (records.get("seeds_baltus_words") or {}).get("results") or {}
    for name, d in (words.get("datasets") or {}).items():
        checked = sum((v.get("checked") or 0) for v in d["cells"].values())
        rows.append((f"Baltus §5.2 protocol, {name}", checked, d["violations"]["verified_not_exact"],
                     d["violations"]["exact_matches_missed"]))
    acc = (records.get("seeds_accuracy") or {}).get("results") or {}
    for name, d in (acc.get("streams") or {}).items():
        for r in d["by_fpq"]:
            rows.append((f"accuracy, {name}, fpq {r['fpq']:g} ({r['exact_matches']:,} exact matches)",
                         r["queries"], None, r["exact_matches_missed"]))
    failed = [n for n in PROTOCOLS if (records.get(n) or {}).get("error")]
    text = ("Measured while benchmarking (docs/contract.md §3): *verified = exact* (same matches and bindings) and "
            "*no false negatives* (every exact match inside an approximate candidate interval). Any "
            "violation makes `python -m bench all` fail after writing its figures.\n\n")
    text += table(("where", "queries checked", "verified ≠ exact", "exact matches missed"), rows) if rows \
        else "_No protocol figures._"
    if failed:
        text += "\n\n**Failed protocols:** " + ", ".join(f"`{n}`" for n in failed)
    return text


def section_query(record: dict[str, Any] | None) -> str:
    note = missing_note(record, "query")
    if note:
        return f"**Query latency by mode** (`python -m bench query`): {note}"
    kind = "quick" if record.get("quick") else "full"
    parts = [f"`python -m bench query` ({kind} run at {record.get('ran_at', '–')}). Per query the median of "
             "up to five runs within a second. *Exact* is the service's exact mode, the reference: the "
             "engine over the whole stream with no index — it reads only the events of the types some "
             "variable can bind (from the seek files), so it is itself a pruned scan. *Pruned scan* is the "
             "same read answered through the engine's list-of-matches interface (`evaluate`, match objects "
             "one by one). An empty verified answer also carries `explain`, whose search for the cause costs "
             "up to twice the verification, at least 20 ms (exact mode does not explain). Approximate "
             "*cold* is the first query after a process loaded the index version, *warm* the same query "
             "again."]
    for name, d in record["results"].items():
        s = d["summary"]
        thin = s["exact_over_verified_coverage_lt_1pct"]
        pruned = s.get("pruned_scan_over_verified_coverage_lt_1pct") or {}
        fp = s["false_positive_rate"]
        parts.append(
            f"**{name}** — {d['events']:,} events, {s['queries']} queries; verified = exact on all: "
            f"{'yes' if s['verified_equals_exact'] else '**no**'}; pruned scan = exact: "
            f"{fmt(s.get('pruned_scan_equals_exact'))}.")
        parts.append(table(
            ("figure", "approximate cold", "approximate warm", "verified", "exact", "pruned scan"),
            [("p50 ms, all queries", s["p50_ms"]["approximate_cold"], s["p50_ms"]["approximate_warm"],
              s["p50_ms"]["verified"], s["p50_ms"]["exact"], s.get("pruned_scan_p50_ms")),
             ("p90 ms, all queries", s["p90_ms"]["approximate_cold"], s["p90_ms"]["approximate_warm"],
              s["p90_ms"]["verified"], s["p90_ms"]["exact"], None),
             ("p50 ms, `RETURN exists`", s["approximate_p50_ms_exists"]["cold"],
              s["approximate_p50_ms_exists"]["warm"], None, None, None),
             (f"p50 ms, ≤ 100 candidate intervals ({s['approximate_p50_ms_le_100_intervals']['queries']} "
              "queries)", s["approximate_p50_ms_le_100_intervals"]["cold"],
              s["approximate_p50_ms_le_100_intervals"]["warm"], None, None, None)]))
        parts.append(
            f"Candidates under 1 % of the stream ({thin['queries']} queries): exact / verified median "
            f"{fmt(thin['median'])}× (min {fmt(thin['min'])}×, max {fmt(thin.get('max'))}×); pruned scan / "
            f"verified median {fmt(pruned.get('median'))}× (min {fmt(pruned.get('min'))}×). All queries: "
            f"exact / verified median {fmt(s['exact_over_verified_median'])}×, events scanned / total median "
            f"{fmt(s['scanned_over_total_median'])}. False positives: {fmt(fp['intervals'])} of "
            f"{fp['candidate_intervals']:,} candidate intervals, {fmt(fp['exists'])} of `exists` answers "
            f"(expected rate, eq. 4.3, mean {fmt(fp['expected_mean'])}).")
        rows = [q for q in d["queries"] if q["coverage"] < 0.01]
        if rows:
            parts.append(table(
                ("query (candidates < 1 %)", "coverage", "approx warm ms", "verified ms", "exact ms",
                 "pruned scan ms", "exact / verified", "pruned / verified", "scanned"),
                [(f"`{q['query']}`", f"{q['coverage']:.2%}", q["approximate_ms_warm"], q["verified_ms"],
                  q["exact_ms"], q.get("pruned_scan_ms"), q["exact_over_verified"],
                  q.get("pruned_scan_over_verified"), q["events_scanned"]) for q in rows]))
    return "\n\n".join(parts)


def section_others(records: dict[str, dict[str, Any]], limit: int = 40) -> str:
    # the query benchmark has §6, the peers §7, the Spark comparison §3
    others = [n for n in records if n not in PROTOCOLS and n not in ("query", "peers", "spark")]
    if not others:
        return "_No other benchmark records in `bench/results/`._"
    parts = ["The registry's other benchmarks (`python -m bench NAME`), each owned by the module's author; "
             "their key figures as recorded (full records in `bench/results/NAME.json`)."]
    for name in others:
        rec = records[name]
        note = missing_note(rec, name)
        kind = "quick" if rec.get("quick") else "full"
        head = f"**{name}**" + (f" ({kind} run at {rec.get('ran_at', '–')}, {fmt(rec.get('seconds'))} s)"
                                if "seconds" in rec else "")
        if note:
            parts.append(f"{head}: {note}")
            continue
        section = OWN_SECTIONS.get(name)
        if section is not None and section[0] in (rec.get("results") or {}):
            parts.append(head + "\n\n" + section[1](rec["results"]))
            continue
        leaves = flatten(rec["results"])
        shown = leaves[:limit]
        parts.append(head + "\n\n" + table(("figure", "value"), shown)
                     + (f"\n\n… {len(leaves) - limit} more in the JSON." if len(leaves) > limit else ""))
    return "\n\n".join(parts)


def section_peers(record: dict[str, Any] | None) -> str:
    """``python -m bench peers``: seqsketch's exact and verified answers beside DuckDB's and ClickHouse's, same
    events."""
    note = missing_note(record, "peers")
    if note or record is None:
        return note or ""
    r = record["results"]
    intro = (f"`python -m bench peers` ({'quick' if record.get('quick') else 'full'} run at "
             f"{record.get('ran_at', '–')}). Each question asked of seqsketch (in process, the dataset built "
             "with the defaults and a partition index on `case`), of DuckDB (in memory, the same events "
             "loaded into a table before any timing) and of ClickHouse (in process through `chdb`, a MergeTree "
             "table; empty when chdb is not installed), skip-till-next-match chains as ASOF joins in both. The "
             "answers are checked equal first; then all run interleaved, "
             f"{r.get('rounds')} rounds, and the table gives medians in ms. A ratio below 1 means seqsketch "
             "answered faster. *Exact* is the engine over the whole stream read from the store (only the "
             "types the query names); *verified* asks the index first and runs the engine on the candidates.")
    threads = next((x["threads"] for x in r["rows"] if "threads" in x), None)
    if threads is not None:
        intro += (f" Both modes also ran on one thread (`SEQSKETCH_QUERY_THREADS=1`); *1 → {threads} threads* is "
                  "the one-thread time over the default's (the machine's cores), exact / verified.")
    rows = [(f"{x['dataset']} ({x['events']:,})", x["question"], f"`{x['query']}`", x["answer"],
             x["exact_ms"], x["verified_ms"], x["duckdb_ms"], x.get("clickhouse_ms", "–"), x["exact_over_duckdb"],
             x["verified_over_duckdb"], x.get("verified_over_fastest_peer", "–"), x.get("verified_over_exact", "–"),
             x["verified_scanned"],
             f"{fmt(x.get('exact_threads_speedup'))} / {fmt(x.get('verified_threads_speedup'))}")
            for x in r["rows"]]
    worst = (f"Worst ratio to DuckDB: exact {fmt(r.get('exact_worst_ratio'))}, verified "
             f"{fmt(r.get('verified_worst_ratio'))}; verified to the faster peer "
             f"{fmt(r.get('verified_worst_over_fastest_peer'))}, to exact {fmt(r.get('verified_worst_over_exact'))}.")
    frequent = r.get("frequent_per_case") or {}
    if frequent:
        worst += " Worst over the frequent per-case questions (the two counts and the 4-element SEQ): " + "; ".join(
            f"{label} exact {fmt(x['exact_worst_ratio'])}, verified {fmt(x['verified_worst_ratio'])}"
            for label, x in frequent.items()) + "."
    return intro + "\n\n" + table(
        ("dataset (events)", "question", "query", "answer size", "exact ms", "verified ms", "DuckDB ms",
         "ClickHouse ms", "exact / DuckDB", "verified / DuckDB", "verified / faster peer", "verified / exact",
         "events verified read",
         f"1 → {threads or '–'} threads"), rows) + "\n\n" + worst


def _shown_path(results: Path) -> str:
    """``results`` as the report names it: relative to the repository when it lies inside it."""
    repo = Path(__file__).resolve().parents[1]
    try:
        return str(results.resolve().relative_to(repo))
    except ValueError:
        return str(results)


def generate(results: Path, docs: Path, *, command: str, host: dict[str, Any], generated_at: str,
             errors: Sequence[str] = ()) -> Path:
    """Write ``docs/BENCHMARKS.md`` (and ``docs/bench/*.png``) from the records in ``results``."""
    records = load_results(results)
    plots = Plots(docs)
    bodies = [
        section_machine(host, section_records(records)),
        section_guarantees(records),
        section_bpi(records.get("seeds_baltus_bpi"), plots),
        section_words(records.get("seeds_baltus_words"), plots),
        section_scaling(records.get("seeds_build_scaling"), records.get("spark"), plots),
        section_accuracy(records.get("seeds_accuracy"), plots),
        section_engine(records.get("seeds_exact_engine"), plots),
        section_query(records.get("query")),
        section_peers(records.get("peers")),
        section_others(records),
    ]
    scales = {rec.get("scale", {}).get("name") for n, rec in records.items() if n in PROTOCOLS}
    where = _shown_path(results)
    head = [
        "# seqsketch benchmarks, side by side with the seeds",
        f"<!-- Generated by bench/report.py from {where}/*.json. Do not edit by hand: rerun the command "
        "below. -->",
        f"Generated {generated_at} by `{command}` "
        f"(scale: {', '.join(sorted(s for s in scales if s)) or '–'}; commit {host.get('commit') or '–'}). "
        "This file is generated and never edited by hand; every figure "
        f"comes from `{where}/*.json`, every seed figure from `bench/seeds.py` (transcribed from the "
        "papers, with their table and section). Random queries are drawn with fixed seeds, so a rerun asks "
        "the same questions.",
    ]
    if errors:
        head.append("**This run had failures:** " + "; ".join(f"`{e}`" for e in errors))
    text = "\n\n".join(head) + "\n\n" + "\n\n".join(
        f"## {title}\n\n{body}" for title, body in zip(SECTIONS, bodies, strict=True)) + "\n"
    docs.mkdir(parents=True, exist_ok=True)
    out = docs / "BENCHMARKS.md"
    tmp = docs / "BENCHMARKS.md.tmp"
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out)
    return out
