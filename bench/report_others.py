"""The sections of docs/BENCHMARKS.md that the registry's other benchmarks own: each turns its record's
``results`` into a table (:data:`OWN_SECTIONS`, by benchmark, with the key its record must hold)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.report_format import fmt, table


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


def section_siesta(r: dict[str, Any]) -> str:
    """``python -m bench siesta``: SIESTA-like long per-case patterns beside ClickHouse's ``sequenceMatch``."""
    rows = [(x["steps"], x["pattern"], x["cases"], x["verified_ms"], x.get("json_ms", "—"), x["exact_ms"],
             x["clickhouse_ms"], x["verified_over_clickhouse"], x.get("json_over_clickhouse", "—"),
             x["verified_over_exact"], x["index"], "yes" if x["equal"] else "NO")
            for x in r["rows"]]
    json_part = (f"; as the JSON answer's objects, median {fmt(r['json_median_over_clickhouse'])}, worst "
                 f"{fmt(r['json_worst_over_clickhouse'])}" if "json_median_over_clickhouse" in r else "")
    return (f"50 per-case patterns of 2–15 frequent BPI 2012 activities, `RETURN cases`: the cases equal "
            f"everywhere: {'yes' if r['all_equal'] else 'NO'}; seqsketch (verified, the cases as Arrow) over "
            f"ClickHouse, median {fmt(r['median_over_clickhouse'])}, worst {fmt(r['worst_over_clickhouse'])}"
            f"{json_part}; verified over exact, worst {fmt(r['worst_verified_over_exact'])}.\n\n"
            + table(("steps", "pattern", "cases", "verified ms (Arrow)", "verified ms (JSON)", "exact ms",
                     "ClickHouse ms", "Arrow over ClickHouse", "JSON over ClickHouse", "over exact", "index",
                     "equal"), rows))


#: benchmark → (a key its results must hold, the section made of them)
OWN_SECTIONS: dict[str, tuple[str, Callable[[dict[str, Any]], str]]] = {
    "load": ("servers", section_load), "exact": ("rows", section_exact), "acer": ("rows", section_acer),
    "acer_scale": ("rows", section_acer_scale), "columns": ("rows", section_columns),
    "watch": ("rows", section_watch), "hold": ("rows", section_hold), "live": ("bar", section_live),
    "analytics": ("rows", section_analytics), "footprint": ("bpi_default", section_footprint),
    "siesta": ("rows", section_siesta),
}
