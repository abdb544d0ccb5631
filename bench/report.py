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
        if name == "load" and "servers" in (rec.get("results") or {}):
            parts.append(head + "\n\n" + section_load(rec["results"]))
            continue
        if name == "exact" and "rows" in (rec.get("results") or {}):
            parts.append(head + "\n\n" + section_exact(rec["results"]))
            continue
        if name == "acer" and "rows" in (rec.get("results") or {}):
            parts.append(head + "\n\n" + section_acer(rec["results"]))
            continue
        if name == "acer_scale" and "rows" in (rec.get("results") or {}):
            parts.append(head + "\n\n" + section_acer_scale(rec["results"]))
            continue
        if name == "columns" and "rows" in (rec.get("results") or {}):
            parts.append(head + "\n\n" + section_columns(rec["results"]))
            continue
        if name == "watch" and "rows" in (rec.get("results") or {}):
            parts.append(head + "\n\n" + section_watch(rec["results"]))
            continue
        if name == "hold" and "rows" in (rec.get("results") or {}):
            parts.append(head + "\n\n" + section_hold(rec["results"]))
            continue
        if name == "live" and "bar" in (rec.get("results") or {}):
            parts.append(head + "\n\n" + section_live(rec["results"]))
            continue
        if name == "analytics" and "rows" in (rec.get("results") or {}):
            parts.append(head + "\n\n" + section_analytics(rec["results"]))
            continue
        if name == "footprint" and "bpi_default" in (rec.get("results") or {}):
            parts.append(head + "\n\n" + section_footprint(rec["results"]))
            continue
        leaves = flatten(rec["results"])
        shown = leaves[:limit]
        parts.append(head + "\n\n" + table(("figure", "value"), shown)
                     + (f"\n\n… {len(leaves) - limit} more in the JSON." if len(leaves) > limit else ""))
    return "\n\n".join(parts)


def section_peers(record: dict[str, Any] | None) -> str:
    """``python -m bench peers``: seqsketch's exact and verified answers beside DuckDB's, same events."""
    note = missing_note(record, "peers")
    if note or record is None:
        return note or ""
    r = record["results"]
    intro = (f"`python -m bench peers` ({'quick' if record.get('quick') else 'full'} run at "
             f"{record.get('ran_at', '–')}). Each question asked of seqsketch (in process, the dataset built "
             "with the defaults and a partition index on `case`) and of DuckDB (in memory, the same events "
             "loaded into a table before any timing; skip-till-next-match chains as ASOF joins). The answers "
             "are checked equal first; then the three run interleaved, "
             f"{r.get('rounds')} rounds, and the table gives medians in ms. A ratio below 1 means seqsketch "
             "answered faster. *Exact* is the engine over the whole stream read from the store (only the "
             "types the query names); *verified* asks the index first and runs the engine on the candidates.")
    threads = next((x["threads"] for x in r["rows"] if "threads" in x), None)
    if threads is not None:
        intro += (f" Both modes also ran on one thread (`SEQSKETCH_QUERY_THREADS=1`); *1 → {threads} threads* is "
                  "the one-thread time over the default's (the machine's cores), exact / verified.")
    rows = [(f"{x['dataset']} ({x['events']:,})", x["question"], f"`{x['query']}`", x["answer"],
             x["exact_ms"], x["verified_ms"], x["duckdb_ms"], x["exact_over_duckdb"],
             x["verified_over_duckdb"], x["verified_scanned"],
             f"{fmt(x.get('exact_threads_speedup'))} / {fmt(x.get('verified_threads_speedup'))}")
            for x in r["rows"]]
    worst = (f"Worst ratio to DuckDB: exact {fmt(r.get('exact_worst_ratio'))}, verified "
             f"{fmt(r.get('verified_worst_ratio'))}.")
    frequent = r.get("frequent_per_case") or {}
    if frequent:
        worst += " Worst over the frequent per-case questions (the two counts and the 4-element SEQ): " + "; ".join(
            f"{label} exact {fmt(x['exact_worst_ratio'])}, verified {fmt(x['verified_worst_ratio'])}"
            for label, x in frequent.items()) + "."
    return intro + "\n\n" + table(
        ("dataset (events)", "question", "query", "answer size", "exact ms", "verified ms", "DuckDB ms",
         "exact / DuckDB", "verified / DuckDB", "events verified read",
         f"1 → {threads or '–'} threads"), rows) + "\n\n" + worst


def section_acer(r: dict[str, Any]) -> str:
    """``python -m bench acer``: attribute-range questions over frequent types beside DuckDB."""
    intro = (f"The ACER-like stream (bench/acer.py): {r['events']:,} events, 50 types with Zipf(1.3) "
             "frequencies, four uniform attributes; built locally in "
             f"{fmt(r.get('build_s'))} s (Parquet parts {r['store_bytes'] / 2**20:,.0f} MiB, seek files "
             f"{r.get('seek_bytes', 0) / 2**20:,.0f} MiB, index {r['index_bytes'] / 2**20:,.1f} MiB). "
             "Random questions of ACER's shapes under each strategy; "
             "verified = exact checked on each, and DuckDB's band self-join count on the skip-till-any-match "
             "ones. *Read* is `stats.events_scanned` of verified (rows looked at), *bound* the events whose "
             "type and single-variable conditions fit some variable. Medians in ms.")
    rows = [(x["strategy"], x["variables"], x["count"], x["verified_ms"], x["exact_ms"], x.get("duckdb_ms", "–"),
             x.get("verified_over_duckdb", "–"), x["verified_scanned"], x["bound"]) for x in r["rows"]]
    summary = (f"Verified p50 {fmt(r.get('verified_p50_ms'))} ms; verified / DuckDB: median "
               f"{fmt(r.get('verified_over_duckdb_median'))}, worst {fmt(r.get('verified_over_duckdb_worst'))}.")
    return intro + "\n\n" + table(("strategy", "variables", "count", "verified ms", "exact ms", "DuckDB ms",
                                    "verified / DuckDB", "read", "bound"), rows) + "\n\n" + summary


def section_acer_scale(r: dict[str, Any]) -> str:
    """``python -m bench acer_scale``: the ACER-like stream built on Spark, then its questions."""
    gib = 2**30
    intro = (f"The ACER-like stream at {r['events']:,} events (bench/acer_scale.py), written as 20 Parquet files and "
             f"built with `seqsketch build --engine spark` in {fmt(r.get('build_s'))} s; peak memory of the build's "
             f"process tree {r['build_peak_of_sum_bytes'] / gib:,.1f} GiB (sum of the processes' peaks "
             f"{r['build_sum_of_peaks_bytes'] / gib:,.1f} GiB). Parquet parts {r['store_bytes'] / gib:,.2f} GiB, seek "
             f"files {r['seek_bytes'] / gib:,.2f} GiB, trees {r['index_bytes'] / 2**20:,.0f} MiB "
             f"({100 * r['index_over_store']:.1f} % of the parts). The questions of `bench acer`; verified = exact "
             "checked on each; no DuckDB at this size. Medians in ms.")
    rows = [(x["strategy"], x["variables"], x["count"], x["verified_ms"], x["exact_ms"], x["verified_scanned"])
            for x in r["rows"]]
    summary = f"Verified p50 {fmt(r.get('verified_p50_ms'))} ms, exact p50 {fmt(r.get('exact_p50_ms'))} ms."
    return intro + "\n\n" + table(("strategy", "variables", "count", "verified ms", "exact ms", "read"), rows) \
        + "\n\n" + summary


def section_columns(r: dict[str, Any]) -> str:
    """``python -m bench columns``: listing matches and cases through the SDK, beside pm4py."""
    intro = ("The per-case question of bench/columns.py on a replay of BPI 2012, through the SDK against a real "
             "`seqsketch serve` on loopback, beside pm4py's `filter_eventually_follows_relation` on the same "
             "events as a DataFrame (answers checked equal first: the same cases, counts summing to the "
             f"matches). Medians of {r.get('rounds')} interleaved rounds, in ms.")
    rows = [(f"{x['events']:,}", x["matches"], x["cases"], x["count_ms"], x["matches_json_ms"],
             x["matches_arrow_ms"], x["matches_pandas_ms"], x["cases_json_ms"], x["cases_arrow_ms"],
             x["pm4py_ms"], x["matches_arrow_over_count"], x["cases_arrow_over_pm4py"]) for x in r["rows"]]
    return intro + "\n\n" + table(
        ("events", "matches", "cases", "RETURN count", "matches JSON", "matches Arrow", "matches pandas",
         "cases JSON", "cases Arrow", "pm4py", "Arrow / count", "cases Arrow / pm4py"), rows)


def section_watch(r: dict[str, Any]) -> str:
    """``python -m bench watch``: standing queries under appends, from the append that makes a match certain
    to its delivery."""
    rows_in = r["rows"]
    if rows_in and "window" not in rows_in[0]:  # (a record from before matches were delivered when certain)
        rows = [(x["streams"], f"{x['rate_asked']:,}", f"{x['rate_achieved']:,}", x["matches_certain"],
                 x["deliveries"], x["latency_p50_ms"], x["latency_p99_ms"], x["latency_max_ms"], x["lost"],
                 x["repeated"], x.get("append_ms_median", "–")) for x in rows_in]
        return ("One watch followed by N SDK clients; latency from the append that closes a match's window.\n\n"
                + table(("streams", "events/s asked", "events/s appended", "matches", "deliveries", "p50 ms",
                         "p99 ms", "max ms", "lost", "repeated", "append ms (median)"), rows))
    intro = ("Two watches per configuration on a real `seqsketch serve` while a writer appends 1,000-event batches "
             "(a minute of event time each) over HTTP: `SEQ(OPEN, CLOSE)` followed by N SDK clients, its latency "
             "from the acknowledgement of the append holding the CLOSE (it completes the match) to the match on a "
             "stream, whatever the window; `SEQ(OPEN, NOT(CLOSE))`, a trailing NOT, followed by one more, its "
             "latency from the append or watermark that closes the window (`early`: delivered before that was "
             "sent). A stream is dropped and resumed every 2 s and the server restarted half-way; lost and "
             "repeated are counted against a fresh exact query.")
    rows = [(x["streams"], x["window"], f"{x['rate_achieved']:,}", x["matches"], x["latency_p50_ms"],
             x["latency_p99_ms"], x["latency_max_ms"], x["lost"], x["repeated"], x["not_matches"],
             x["not_latency_p50_ms"], x["not_latency_p99_ms"], x["not_early"], x["not_lost"], x["not_repeated"],
             x["resumes"], x["restart_s"]) for x in rows_in]
    return intro + "\n\n" + table(
        ("streams", "window", "events/s", "matches", "p50 ms", "p99 ms", "max ms", "lost", "repeated",
         "NOT matches", "NOT p50 ms", "NOT p99 ms", "early", "NOT lost", "NOT repeated", "resumes",
         "restart s"), rows)


def section_hold(r: dict[str, Any]) -> str:
    """``python -m bench hold``: the API's latency with open streams and slow bodies."""
    intro = (f"A real `seqsketch serve` (2 workers x 4 threads) over BPI 2012: `/v1/health` and `{r.get('query')}` "
             "measured idle, then with N watch streams open and M clients holding half-sent bodies.")
    rows = [(x["streams"], x["streams_open"], x["slow_bodies"], x["idle"]["health_p50_ms"],
             x["idle"]["health_p99_ms"], x["loaded"]["health_p50_ms"], x["loaded"]["health_p99_ms"],
             x["loaded"]["health_max_ms"], x["idle"]["query_median_ms"], x["loaded"]["query_median_ms"],
             x["query_loaded_over_idle"], x["match_reached_streams"]) for x in r["rows"]]
    return intro + "\n\n" + table(
        ("streams", "open", "slow bodies", "health p50 idle", "health p99 idle", "health p50 loaded",
         "health p99 loaded", "health max loaded", "query idle ms", "query loaded ms", "query loaded/idle",
         "streams the match reached"), rows)


def section_live(r: dict[str, Any]) -> str:
    """``python -m bench live``: a store fed by small appends, against fresh builds of the same events."""
    bar, day = r["bar"], r["day"]
    rows = [(when, *row) for when, moment in (("right after", bar["right_after"]),
                                               (f"after {bar['after_idle_s']} s", bar["after_idle"]))
            for row in [(k, v["count"], v["live_ms"], v["fresh_ms"], v["ratio"]) for k, v in moment.items()]]
    out = [f"{bar['events_before']:,} events, then {bar['appends']:,} appends of {bar['events_per_append']} over HTTP "
           f"(append p50 {bar['append_p50_ms']} ms, p99 {bar['append_p99_ms']} ms; median of the last 200 over the "
           f"first 200: {bar['last200_over_first200']}; parts {bar['parts_right_after']} right after, "
           f"{bar['parts_after_idle']} later). Questions against a fresh build of the same events, answers equal:",
           table(("when", "question", "matches", "live ms", "fresh ms", "live/fresh"), rows),
           f"Batches of 1,000 over HTTP: {r['throughput']['events_per_second']:,} events/s.",
           f"A day: {day['events']:,} events in batches of 10–1,000 into a dataset keeping all and one keeping "
           f"{day['retention']} ({day['events_per_second']:,} events/s for both; append p50 "
           f"{day['append_p50_ms']} ms); "
           f"a watch followed by {day['watch']['streams']} resumed streams: {day['watch']['matches']:,} matches, "
           f"{day['watch']['lost']} lost, {day['watch']['repeated']} repeated.",
           table(("events", "append p50 ms", "parts (all)", "parts (kept)", "disk MB (all)", "disk MB (kept)",
                  "live parts MB (all)", "live parts MB (kept)", "retained from", "decayed units", "decayed bytes"),
                 [(t["events"], t["append_p50_ms_recent"], t["parts_all"], t["parts_retained"],
                   round(t["disk_bytes_all"] / 1e6, 1), round(t["disk_bytes_retained"] / 1e6, 1),
                   round(t.get("store_bytes_all", 0) / 1e6, 1), round(t.get("store_bytes_retained", 0) / 1e6, 1),
                   t["retained_from"], t["decayed_units"], t["decayed_bytes"]) for t in day["timeline"]]),
           table(("events", "question", "live ms", "fresh ms", "live/fresh"),
                 [(c["events"], k, v["live_ms"], v["fresh_ms"], v["ratio"]) for c in day["compared_to_fresh_builds"]
                  for k, v in c.items() if isinstance(v, dict)])]
    return "\n\n".join(out)


def section_footprint(r: dict[str, Any]) -> str:
    """What a build takes on disk, by structure, beside its Parquet parts (``bench/footprint.py``)."""
    rows = []
    for key, label in (("bpi", "BPI 2012"), ("acer", f"ACER-like {fmt(r.get('acer_events'))}")):
        for budget in ("default", "tight"):
            built = r.get(f"{key}_{budget}")
            if not built:
                continue
            st = built["footprint"]["structures"]

            def ratio(*names: str, st: dict[str, Any] = st) -> float:
                return round(sum(st.get(n, {}).get("ratio", 0.0) for n in names), 3)

            served = list(built["served"].values())
            rows.append((label, "default" if budget == "default" else r.get("tight_budget"),
                         round(st["parts"]["bytes"] / 1e6, 2), built["footprint"]["ratio"],
                         ratio("types", "times", "rows_by_type", "seek_headers"), ratio("values"),
                         ratio("value_indexes"), ratio("tree", "partition_tree", "layout", "decayed"),
                         f"{served.count('indexed')} / {served.count('values')} / {served.count('not served')}"))
    text = table(("dataset", "budget", "Parquet parts MB", "whole / parts", "types, times, rows by type",
                  "attribute values", "value indexes", "trees and layout", "attrs indexed / values / not served"),
                 rows)
    if r.get("tight_over_default_median") is not None:
        text += (f"\n\nACER-like questions under the tight budget, answers equal: median "
                 f"{fmt(r['tight_over_default_median'])}x the default build's latency over "
                 f"{len(r.get('questions') or [])} questions.")
    return text


def section_analytics(r: dict[str, Any]) -> str:
    """The answers summarised from every match beside the engines that have them (``bench/analytics.py``)."""
    peers = ("chdb", "duckdb", "pm4py")
    rows = [(x["dataset"], x["question"], x["ours_ms"], x["count_ms"], x["over_count"],
             *(x.get(f"{p}_ms", "–") for p in peers), x["over_fastest_peer"],
             ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in x["equal"].items())) for x in r["rows"]]
    notes = [f"- {x['dataset']} {x['question']}: {x['notes']}" for x in r["rows"] if x.get("notes")]
    return (table(("dataset", "question", "seqsketch ms", "our RETURN count ms", "over count", "ClickHouse ms",
                   "DuckDB ms", "pm4py ms", "over the fastest peer", "equal"), rows)
            + ("\n\n" + "\n".join(notes) if notes else ""))


def section_exact(r: dict[str, Any]) -> str:
    """``python -m bench exact``: the compiled engine's throughput per workload and strategy."""
    rows = [(x["workload"], x["strategy"], "on" if x["two_phase"] else "off",
             "on" if x["prefilter"] else "off", x["events"], x["matches"], x["cpu_s"],
             x["events_per_s"]) for x in r["rows"]]
    goals = r.get("goals") or []
    said = " ".join(
        f"Goal of {fmt(g['target'])} events/s for the {g['label']} (`{g['workload']}`) under "
        f"skip-till-next-match: {'met' if g['met'] else 'not met'} "
        f"({', '.join(fmt(m) for m in g['measured'])})."
        for g in goals)
    return ("Events of the BPI 2012 stream per CPU second of one evaluation (best of the runs), per workload "
            "and strategy; rows marked `[:N]` run on the first N events only.\n\n"
            + table(("workload", "strategy", "two-phase", "prefilter", "events", "matches", "CPU s",
                     "events/s"), rows)
            + ("\n\n" + said if said else ""))


def section_load(r: dict[str, Any]) -> str:
    """``python -m bench load``: the production server (gunicorn) beside Werkzeug's, same load, same data."""
    servers = r["servers"]
    names = list(servers)
    seconds = r.get("seconds") or {}
    workers = servers[names[-1]].get("workers") or r.get("cores")
    intro = (f"`{r.get('dataset')}`, {r.get('threads')} client threads over loopback on {r.get('cores')} "
             f"cores, each server on its own copy of the dataset: {fmt(seconds.get('queries_alone'))} s of "
             f"queries alone, then {fmt(seconds.get('with_appends'))} s with one writer appending. gunicorn "
             f"runs {workers} request worker processes (gthread, 4 threads each), Werkzeug one process. "
             "Latencies are wall time per request as the client saw it.")
    rows = []
    for key, (a, b, ratio) in r["side_by_side"]["rows"].items():
        phase, _, rest = key.partition(".")
        label = ("queries alone" if phase == "queries_alone" else "with appends") + ": " + (
            "requests/s" if rest == "requests_per_s" else rest.replace(".", " ").replace("_ms", " ms"))
        rows.append((label, a, b, ratio))
    for name in ("errors", "violations"):
        rows.append((f"with appends: {name}", *(servers[n]["with_appends"][name] for n in names), ""))
    rows.append(("CPU seconds of the server's processes, both phases",
                 *(servers[n].get("server_cpu_s") for n in names), ""))
    rows.append(("machine load average (1 min) before, after",
                 *(", ".join(fmt(x) for x in (servers[n].get("load_average") or [None] * 6)[::3])
                   for n in names), ""))
    for name in ("lost", "duplicated", "index_equals_rebuild"):
        label = f"afterwards: {name.replace('_', ' ')}"
        rows.append((label, *(servers[n]["final"][name] for n in names), ""))
    return intro + "\n\n" + table(("figure", *names, "gunicorn / werkzeug"), rows)


# ---------------------------------------------------------------------------------------------- generate


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
