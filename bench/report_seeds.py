"""The report's sections on the seeds' protocols, our figures beside the published ones.

Baltus 2021, ch. 5: random SEQ queries on BPI 2012 (Tables 5.1/5.2, :func:`section_bpi`), word streams
(Tables 5.3–5.6, :func:`section_words`), build throughput against N with local against Spark
(Table 5.4, :func:`section_scaling`), accuracy against the configured fpq (§4.4, :func:`section_accuracy`);
Cadonna 2013: the exact engine's strategies, two-phase and prefilter switches (§5.4) and runtime against
the maximal match-window size (§4.7.4, Table 4.1, :func:`section_engine`).  The figures come from the
protocols' records (:mod:`bench.protocols`), the seeds' from :mod:`bench.seeds`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench import seeds
from bench.protocols_baltus import OPERATOR_FORMS
from bench.report_format import Plots, fmt, missing_note, s_to_ms, table


def _bpi_rows(d: dict[str, Any], seed_cols: Sequence[seeds.SeedTable]) -> list[list[Any]]:
    rows = []
    for length, s in d["by_length"].items():
        a, v, e = s["approximate"], s["verified"], s["exact"]
        row = [int(length), a["mean_ms"], a["p50_ms"], a["p95_ms"], v["mean_ms"], v["p50_ms"], v["p95_ms"],
               e["mean_ms"], e["p50_ms"], e["p95_ms"], s.get("exact_over_approximate"),
               s.get("exact_over_verified")]
        for t in seed_cols:
            row += [s_to_ms(t.column("Approach 1").get(int(length))),
                    s_to_ms(t.column("Mavroudopoulos et al. (exact)").get(int(length)))]
        rows.append(row)
    return rows



def section_bpi(record: dict[str, Any] | None, plots: Plots) -> str:
    note = missing_note(record, "seeds_baltus_bpi")
    if note:
        return note
    r = record["results"]
    seed_tables = (seeds.BALTUS_T51, seeds.BALTUS_T52)
    parts = [
        f"Protocol ({seeds.BALTUS_T51.reference}; {seeds.BALTUS_T52.reference}): per query length 2–8, "
        f"random `SEQ(A1, …, AL)` with types drawn uniformly from the log's types, `WITHIN {r['window']}`, "
        f"`STRATEGY {r['strategy']}`, `RETURN matches`. Every query is answered approximately; the first few "
        "per length (column *n* of verified/exact) also verified and exactly, through the service's answer "
        f"function on a Parquet event store. Index: the project's defaults (C = {r['options']['leaf_size']}, "
        f"fpq = {r['options']['fpq']:g}). Latencies in ms; the seeds' Approach 1 is their approximate "
        "answer, Mavroudopoulos et al. the exact system they compare with (BPI 2020 = Table 5.1, 36,796 "
        "events; BPI 2017 = Table 5.2, 1,202,267 events; their times converted to ms).",
    ]
    header = ("L", "approx mean", "p50", "p95", "verified mean", "p50", "p95", "exact mean", "p50", "p95",
              "exact / approx", "exact / verified", "T5.1 approx", "T5.1 exact", "T5.2 approx", "T5.2 exact")
    for name, d in r["datasets"].items():
        checked = [s["verified"]["n"] for s in d["by_length"].values()]
        asked = [s["approximate"]["n"] for s in d["by_length"].values()]
        parts.append(f"**{name}** — {d['events']:,} events, {d['types']} types; tree built in "
                     f"{d['build_s']:.2f} s ({d['index']['nodes']:,} nodes, m = {d['index']['m']}, "
                     f"k = {d['index']['k']}); {min(asked, default=0)} approximate and "
                     f"{min(checked, default=0)} verified/exact queries per length.")
        parts.append(table(header, _bpi_rows(d, seed_tables)))
        o = d["overall"]
        parts.append(f"All lengths: approximate mean {fmt(o['approximate']['mean_ms'])} ms, verified "
                     f"{fmt(o['verified']['mean_ms'])} ms, exact {fmt(o['exact']['mean_ms'])} ms; on the "
                     "queries run in all three modes exact/approximate = "
                     f"{fmt(o.get('exact_over_approximate'))}×, exact/verified = "
                     f"{fmt(o.get('exact_over_verified'))}×; verification read "
                     f"{fmt(100 * (o.get('scanned_share') or 0))} % of the events on average.")
    parts.append(_plot_bpi(r, plots))
    return "\n\n".join(parts)


def _plot_bpi(r: dict[str, Any], plots: Plots) -> str:
    fig, ax = plots.figure(8, 4.5)
    styles = {"approximate": "o-", "verified": "s-", "exact": "^-"}
    for name, d in r["datasets"].items():
        lengths = [int(x) for x in d["by_length"]]
        for mode, style in styles.items():
            ys = [d["by_length"][str(L)][mode]["mean_ms"] for L in lengths]
            if any(y is not None for y in ys):
                ax.plot(lengths, [y if y is not None else float("nan") for y in ys], style,
                        label=f"ours {mode}, {name}")
    for t, style in ((seeds.BALTUS_T51, ":"), (seeds.BALTUS_T52, "--")):
        for col, marker in (("Approach 1", "x"), ("Mavroudopoulos et al. (exact)", "+")):
            values = t.column(col)
            ax.plot(list(values), [float(v) * 1000 for v in values.values()], style, marker=marker,
                    color="grey", label=f"{t.key} {col}")
    ax.set_yscale("log")
    ax.set_xlabel("query length")
    ax.set_ylabel("mean latency per query (ms, log)")
    ax.legend(fontsize=6, ncol=2)
    return plots.save(fig, "baltus_bpi_latency",
                      "latency against query length, ours and Baltus Tables 5.1/5.2")


def section_words(record: dict[str, Any] | None, plots: Plots) -> str:
    note = missing_note(record, "seeds_baltus_words")
    if note:
        return note
    r = record["results"]
    ds = r["datasets"]
    o = r["options"]
    parts = [
        f"Protocol ({seeds.BALTUS_T53.reference} to {seeds.BALTUS_T56.reference}): word streams — the Brown "
        "corpus (one event per token) and a larger replay of it — stand in for the thesis' concatenated "
        f"Gutenberg books. The tree is built at the thesis' settings (C = {o['leaf_size']}, fpq = "
        f"{o['fpq']:g}, s = {o['query_length']}, M = {o['memory_bytes'] / 2**30:g} GB). Queries: the four "
        "operator forms with A, B, C drawn from random events of the stream (so frequent words are drawn "
        "often, as in the thesis), no window, all matches; every query approximate, the first few also "
        "verified and exact.",
        "**Datasets** (Table 5.3):",
        table(("dataset", "events", "distinct types", "source"),
              [(n, d["events"], d["distinct"], "ours") for n, d in ds.items()]
              + [(*row, "Baltus Table 5.3") for row in seeds.BALTUS_T53.rows]),
        "**Construction time** (Table 5.4; ours: mean of the timed builds, in-process builder, sizing "
        "included):",
        table(("dataset", "events", "build s", "events/s", "index bytes", "store bytes",
               "of which seek files", "source"),
              [(n, d["events"], d["build_s_mean"], d["build_events_per_s"], d["index_bytes"],
                d["store_bytes"], d.get("seek_bytes"), f"ours ({len(d['build_s_runs'])} builds)")
               for n, d in ds.items()]
              + [(name, events, secs, round(events / secs), None, None, None, "Baltus Table 5.4")
                 for (name, events, _), (_, secs) in zip(seeds.BALTUS_T53.rows, seeds.BALTUS_T54.rows,
                                                          strict=True)]),
    ]
    for strategy, seed_table in (("strict_contiguity", seeds.BALTUS_T55), ("skip_till_next_match",
                                                                          seeds.BALTUS_T56)):
        header = ["query"]
        for n in ds:
            header += [f"{n} approx", f"{n} verified", f"{n} exact"]
        header += ["D1", "D2", "D3", "D4"]
        rows = []
        for form in OPERATOR_FORMS:
            row: list[Any] = [form]
            for d in ds.values():
                cell = d["cells"][f"{strategy}|{form}"]
                row += [cell["approximate"]["mean_ms"], cell["verified"]["mean_ms"], cell["exact"]["mean_ms"]]
            seed_row = dict((rw[0], rw[1:]) for rw in seed_table.rows)[form]
            row += [float(v) * 1000 for v in seed_row]
            rows.append(row)
        parts.append(f"**{strategy}** ({seed_table.reference}), mean ms per query; D1–D4 are the thesis' "
                     "approximate times:")
        parts.append(table(header, rows))
    parts.append("Our strict contiguity is the definition's (the matched events are exactly all events "
                 "between the first and the last); the thesis used a relaxed form (§5.1.1 says its "
                 "results 'differ greatly' from the original definition), so under strict contiguity our "
                 "random word triples rarely match at all.")
    parts.append(_plot_words(r, plots))
    return "\n\n".join(parts)


def _plot_words(r: dict[str, Any], plots: Plots) -> str:
    import numpy as np

    fig, plt_axes = plots.figure(11, 4, ncols=2)
    names = list(r["datasets"])
    panels = (("strict_contiguity", seeds.BALTUS_T55), ("skip_till_next_match", seeds.BALTUS_T56))
    for ax, (strategy, seed_table) in zip(plt_axes, panels, strict=True):
        x = np.arange(len(OPERATOR_FORMS))
        width = 0.8 / (len(names) + 2)
        for i, n in enumerate(names):
            ys = [r["datasets"][n]["cells"][f"{strategy}|{f}"]["approximate"]["mean_ms"] or 0
                  for f in OPERATOR_FORMS]
            ax.bar(x + i * width, ys, width, label=f"ours approx, {n}")
        seed_rows = dict((rw[0], rw[1:]) for rw in seed_table.rows)
        for j, col in enumerate(("D1", "D3")):
            idx = seed_table.columns.index(col) - 1
            ax.bar(x + (len(names) + j) * width, [float(seed_rows[f][idx]) * 1000 for f in OPERATOR_FORMS],
                   width, label=f"Baltus {col}", hatch="//", alpha=0.6)
        ax.set_xticks(x + width, [f.replace("SEQ", "") for f in OPERATOR_FORMS], fontsize=7)
        ax.set_yscale("log")
        ax.set_title(strategy, fontsize=9)
        ax.set_ylabel("mean ms per query (log)")
        ax.legend(fontsize=6)
    return plots.save(fig, "baltus_words_operators", "operator forms, ours and Baltus Tables 5.5/5.6")


def spark_comparison(spark: dict[str, Any] | None) -> str:
    """The Spark build against the in-process one, its scaling with cores and its memory on an input ten
    times larger, from :mod:`bench.spark`'s record."""
    note = missing_note(spark, "spark")
    if note:
        return f"**Local vs Spark, end to end** (`python -m bench spark`): {note}"
    r = spark["results"]
    if "time" not in r:
        return "**Local vs Spark, end to end** (`python -m bench spark`): _an older record; rerun it._"
    return "\n\n".join([_spark_time(r), _spark_scaling(r["scaling"]), _spark_memory(r["memory"]),
                         r.get("notes") or ""]).rstrip()


def _gb(n: Any) -> float | None:
    return None if n is None else round(n / (1 << 30), 2)


def _spark_time(r: dict[str, Any]) -> str:
    rows = []
    for name, label in (("time", "BPI 2012 replay, 20 Parquet files"), ("bpic2012", "bpic2012.xes.gz")):
        x = r.get(name)
        if not x:
            continue
        local, spark = x["local"], x["spark"]
        rows.append((label, x["events"], local["seconds"], x["spark_seconds_without_start"],
                     spark["timings"]["spark_start"], x["spark_over_local"], x["same_digests"],
                     _gb(local["sum_of_peaks_bytes"]), _gb(spark["sum_of_peaks_bytes"])))
    stages = r["time"]["spark"]["timings"]
    stage_rows = [(k, v) for k, v in stages.items() if k not in ("ingest", "index")]
    return (f"**Local vs Spark, end to end** (`python -m bench spark`: `seqsketch build … --json` in a fresh "
            f"process each, one run; Spark on `local[2]`, {r.get('cores')} cores; load average "
            f"{r.get('load_average_at_start')} at the start). *Spark s* leaves out the session start "
            "(JVM and SparkContext, shown beside); memory is the sum of every process's peak resident set "
            "(`bench/memtree.py`):\n\n"
            + table(("input", "events", "local s", "Spark s", "session start s", "Spark / local",
                     "same index_digest (both trees)", "local peak GB", "Spark Σ peaks GB"), rows)
            + "\n\nThe Spark build's stages on the replay (`timings` of `build --json`, seconds):\n\n"
            + table(("stage", "seconds"), stage_rows))


def _spark_scaling(s: dict[str, Any]) -> str:
    rows = [(stage, v["1_core"], v["2_cores"], v["where"]) for stage, v in s["stages"].items()]
    rows.append(("total, session start excluded", s["seconds_without_start"]["1_core"],
                 s["seconds_without_start"]["2_cores"], f"speedup {fmt(s['speedup_without_start'])}"))
    runs = s.get("every_run_without_start") or {}
    every = "; ".join(f"{k.replace('_', ' ')}: {', '.join(fmt(v) for v in vs)} s" for k, vs in runs.items())
    return (f"**Scaling with executor cores** ({fmt(s['events'])} events, the same input on `local[1]` and "
            f"`local[2]`, the better of {s.get('runs', 1)} runs each ({every}); CPU seconds of all processes "
            f"{fmt(s['cpu_seconds']['1_core'])} and {fmt(s['cpu_seconds']['2_cores'])}):\n\n"
            + table(("stage", "1 core s", "2 cores s", "runs in"), rows)
            + "\n\n" + _model_text(s["model"]))


def _model_text(m: dict[str, Any]) -> str:
    predicted = ", ".join(f"N = {n}: {fmt(v)} s" for n, v in m["predicted_seconds"].items())
    return (
        "*A model of a build on N executor cores*, from the one-core build: T(N) ≈ start + serial + fixed + "
        f"work / N, with start = {fmt(m['start'])} s (the JVM and SparkContext), serial = "
        f"{fmt(m['serial'])} s (the driver's stages: window plan, sizing, Alg. 2 over the leaves, "
        f"publishing, the partition build), work = {fmt(m['work'])} s (the seconds the tasks spent in their "
        "Python bodies — reading, sorting, writing — which N cores share) and fixed = "
        f"{fmt(m['fixed'])} s (the rest of the task stages, which cores do not shorten: job and task "
        f"overheads, the first job's start of the Python workers). So {predicted} (measured on 2 cores: "
        f"{fmt(m.get('measured_2_cores'))} s) — as long as the shared storage keeps up (the tasks read the "
        "inputs, write and read the staging, about 100 bytes an event, and write the store) and there are at "
        "least N windows and input pieces. The serial part grows with the events (the partition build and "
        "Alg. 2 run over all of them in the driver), the fixed part with the number of tasks; past a few "
        "executors they dominate a build of this size, and a build ten times larger shifts the balance back "
        "to the tasks (the 50M-event figures below).")


def _process(command: str) -> str:
    """What a process of a Spark build is, from its command."""
    if "SparkSubmit" in command:
        return "driver JVM (local mode: also the executor's)"
    if "pyspark.daemon" in command:
        return "Python worker (pyspark.daemon)"
    if "api.cli" in command or "seqsketch" in command:
        return "driver Python (seqsketch build)"
    return command


def _spark_memory(m: dict[str, Any]) -> str:
    spark, local = m["spark"], m["local"]
    rows = [(_process(p["command"]), _gb(p["peak_bytes"]), p["cpu_seconds"])
            for p in spark.get("processes", [])]
    refused = (local.get("error") or [""])[0] if local.get("returncode") else "built"
    start = spark.get("timings", {}).get("spark_start")
    return (f"**Memory past one machine** ({fmt(m['events'])} events, {m['input_files']} Parquet files of "
            f"{_gb(m['input_bytes'])} GB; one run). The Spark build (`local[2]`) took "
            f"{fmt(spark.get('seconds'))} s (session start {fmt(start)} s); the sum of its processes' peaks "
            f"was **{_gb(spark['sum_of_peaks_bytes'])} GB** (the most "
            f"held at one moment: {_gb(spark['peak_of_sum_bytes'])} GB), per process:\n\n"
            + table(("process", "peak GB", "CPU s"), rows)
            + f"\n\nThe in-process build of the same input is refused before it reads anything, in "
            f"{fmt(local.get('wall_seconds'))} s with a peak of {_gb(local.get('sum_of_peaks_bytes'))} GB: "
            f"`{refused}`")


def section_scaling(record: dict[str, Any] | None, spark: dict[str, Any] | None, plots: Plots) -> str:
    note = missing_note(record, "seeds_build_scaling")
    if note:
        return note + "\n\n" + spark_comparison(spark)
    r = record["results"]
    o = r["options"]
    parts = [
        f"BPI 2012 prefixes and replays (each copy shifted past the previous one in time, case ids renamed), "
        f"built with the project's defaults (C = {o['leaf_size']}, fpq = {o['fpq']:g}) by the in-process "
        "builder (sizing from the measured profile + Alg. 1/2; best of 2 runs up to 1M events). The thesis "
        "builds at C = 100, fpq = 1e-4 (its Table 5.4, converted to events/s, is shown beside).",
        "Store bytes count the Parquet parts and their seek files (ts and type, fixed-width, for "
        "verification's reads in place); the seek files' share is shown beside.",
        table(("events", "build s", "events/s", "index bytes", "bytes/event", "store bytes",
               "of which seek files", "index / store", "levels", "nodes", "m", "k"),
              [(x["events"], x["build_seconds"], x["build_events_per_s"], x["index_bytes"],
                x["index_bytes_per_event"], x["store_bytes"], x.get("seek_bytes"), x["index_share_of_store"],
                x["levels"],
                x["nodes"], x["m"], x["k"]) for x in r["local"]]),
        table(("Baltus Table 5.4", "events", "seconds", "events/s"),
              [(name, events, secs, round(events / secs)) for (name, events, _), (_, secs)
               in zip(seeds.BALTUS_T53.rows, seeds.BALTUS_T54.rows, strict=True)]),
    ]
    parts.append(spark_comparison(spark))
    parts.append(_plot_scaling(r, spark, plots))
    return "\n\n".join(parts)


def _plot_scaling(r: dict[str, Any], spark: dict[str, Any] | None, plots: Plots) -> str:
    spark_results = (spark or {}).get("results") or {}
    spark_rows = [spark_results[k] for k in ("bpic2012", "time") if isinstance(spark_results.get(k), dict)
                  and "spark" in spark_results[k]]
    fig, ax = plots.figure(8, 4)
    xs = [x["events"] for x in r["local"]]
    ax.plot(xs, [x["build_events_per_s"] for x in r["local"]], "o-", label="ours, local build (events/s)")
    for x in spark_rows:
        ax.plot([x["events"]], [x["events"] / x["spark_seconds_without_start"]], "s", color="C1",
                label="ours, Spark end to end (session start excluded)")
        ax.plot([x["events"]], [x["events"] / x["local"]["seconds"]], "D", color="C2",
                label="ours, local end to end")
    ax.plot([e for _, e, _ in seeds.BALTUS_T53.rows],
            [e / s for (_, e, _), (_, s) in zip(seeds.BALTUS_T53.rows, seeds.BALTUS_T54.rows, strict=True)],
            "x", color="grey", label="Baltus Table 5.4")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("events N")
    ax.set_ylabel("events/s")
    ax2 = ax.twinx()
    ax2.plot(xs, [x["index_bytes"] for x in r["local"]], "--", color="C3", label="index bytes (right)")
    ax2.set_yscale("log")
    ax2.set_ylabel("index bytes")
    handles, labels = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    seen = dict(zip(labels + l2, handles + h2, strict=True))
    ax.legend(seen.values(), seen.keys(), fontsize=7, loc="lower left")
    return plots.save(fig, "build_scaling", "build throughput and index size against N")


def section_accuracy(record: dict[str, Any] | None, plots: Plots) -> str:
    note = missing_note(record, "seeds_accuracy")
    if note:
        return note
    r = record["results"]
    parts = [
        "Per configured fpq (the sizing target for a query of s = 2 keys, Baltus §4.4): the per-filter rate "
        "the sizing chose and the measured rate of single-type probes on nodes that do not hold the type; "
        "then, for random `SEQ(A, B)` queries under skip-till-next, the start units the tree proposes that a "
        "perfect type index over the same units would not (unit rate), and the share of queries with any "
        "such false candidate beside the answers' own expected rate (eq. 4.3 over the top-level probes). "
        "Recall counts exact matches outside every candidate interval; it must be 1.0.",
    ]
    for name, d in r["streams"].items():
        parts.append(f"**{name}** ({d['events']:,} events, `WITHIN {d['window']}`):")
        parts.append(table(("fpq", "m", "k", "index bytes", "sized filter fp", "measured probe fp",
                            "eq. 4.1 from fills", "unit fp rate", "queries with false candidates",
                            "expected query rate", "unit rate ≤ fpq", "exact matches", "missed", "recall"),
                           [(x["fpq"], x["m"], x["k"], x["index_bytes"], x["sized_filter_fp"],
                             x["probe"]["rate"], x["probe"]["eq_4_1_predicted_rate"],
                             x["unit_false_positive_rate"],
                             f"{x['queries_with_false_candidates']} / {x['queries']}",
                             x["expected_query_rate_mean"], x["unit_false_positive_rate"] <= x["fpq"],
                             x["exact_matches"], x["exact_matches_missed"],
                             x["recall"]) for x in d["by_fpq"]]))
    parts.append(_plot_accuracy(r, plots))
    return "\n\n".join(parts)


def _plot_accuracy(r: dict[str, Any], plots: Plots) -> str:
    fig, ax = plots.figure(6, 4.5)
    for i, (name, d) in enumerate(r["streams"].items()):
        fpq = [x["fpq"] for x in d["by_fpq"]]
        ax.plot(fpq, [max(x["probe"]["rate"], 1e-7) for x in d["by_fpq"]], "o-", color=f"C{i}",
                label=f"{name}: measured probe fp")
        ax.plot(fpq, [x["sized_filter_fp"] for x in d["by_fpq"]], "x:", color=f"C{i}",
                label=f"{name}: sized filter fp")
        ax.plot(fpq, [max(x["unit_false_positive_rate"], 1e-7) for x in d["by_fpq"]], "s--", color=f"C{i}",
                label=f"{name}: unit fp rate")
    lo = min(min(x["fpq"] for x in d["by_fpq"]) for d in r["streams"].values())
    ax.plot([lo, 1e-2], [lo, 1e-2], "-", color="grey", label="configured fpq (y = x)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("configured fpq")
    ax.set_ylabel("rate (log; 1e-7 = none seen)")
    ax.legend(fontsize=6)
    return plots.save(fig, "accuracy", "measured false-positive rates against the configured fpq")


def section_engine(record: dict[str, Any] | None, plots: Plots) -> str:
    note = missing_note(record, "seeds_exact_engine")
    if note:
        return note
    r = record["results"]
    strategies = list(next(iter(r["strategies"].values())))
    parts = [
        f"**Throughput per strategy** on BPI 2012 ({r['events']:,} events, in memory, one process; "
        "two-phase and prefilter on, rarest-first type counts given), events/s from the CPU seconds of one "
        "`evaluate` call (`bench.exact.measure`, so other load on the machine does not count), and matches:",
        table(("pattern", *strategies),
              [(label, *(_rate(cells[s]) for s in strategies)) for label, cells in r["strategies"].items()]),
        "Seeds (no absolute events/s survive for the SES experiments; these are the only ones printed): "
        + " ".join(f"{c.claim} ({c.reference}; {c.hardware.cpu}, {c.hardware.software})."
                   for c in seeds.claims("throughput")),
    ]
    sw = r["switches"]
    names = list(next(iter(sw["fixed"].values())))
    parts.append(f"**Two-phase (match windows, Cadonna Alg. 3) and prefilter switches** on the first "
                 f"{sw['events']:,} events (baselines are slow by design), skip-till-next; events/s and "
                 "speed-up over the baseline (both off); the answers are checked equal across switches:")
    parts.append(table(("pattern", *names),
                       [(label, *(f"{fmt(c[n]['events_per_s'])} ({fmt(c[n]['speedup'])}×)" for n in names))
                        for label, c in sw["fixed"].items()]))
    rows = []
    for shape in ("P_seq", "P_set"):
        for k, c in sw[shape].items():
            rows.append((f"{shape}, k = {k}", *(f"{fmt(c[n]['events_per_s'])} ({fmt(c[n]['speedup'])}×)"
                                                 for n in names)))
    parts.append("Cadonna §5.4.2's shapes: `P_seq = SEQ(v1, …, vk)` and `P_set = {v1, …, vk}`, random "
                 "distinct types, `PARTITION BY case WITHIN 10 d` (mean over the random patterns):")
    parts.append(table(("pattern", *names), rows))
    parts.append("Seeds: " + " ".join(f"{c.claim} ({c.reference})" for c in seeds.claims("two-phase")))
    win = r["window"]
    t41 = seeds.CADONNA_T41
    parts.append(f"**Runtime against the maximal match-window size |Ŵ|** ({t41.reference} protocol): the "
                 "events of a pattern's types are copied 0…n more times right after themselves and the "
                 f"stream is trimmed back to its length (first {win['events']:,} events of BPI 2012); |Ŵ| = "
                 f"the most events of one case within the window ({win['window']}). A level over the time "
                 "cap ends a pattern's series. The growth exponent fits time ∝ |Ŵ|^e (1 = linear).")
    for name, p in win["patterns"].items():
        g = p.get("growth") or {}
        parts.append(f"{name}: `{p['query']}` — growth exponent {fmt(g.get('exponent'))}")
    copies = sorted({row["copies"] for p in win["patterns"].values() for row in p["rows"]}
                    | {row[0] for row in t41.rows})
    header = ["copies", "Onco |Ŵ| (T4.1)", "NYSE |Ŵ| (T4.1)"]
    for name in win["patterns"]:
        header += [f"{name} |Ŵ|", f"{name} CPU s"]
    seed_rows = {row[0]: row for row in t41.rows}
    rows = []
    for c in copies:
        row: list[Any] = [c, seed_rows.get(c, (None,) * 5)[2], seed_rows.get(c, (None,) * 5)[4]]
        for p in win["patterns"].values():
            hit = next((x for x in p["rows"] if x["copies"] == c), None)
            row += [hit["max_window"] if hit else None, hit["seconds"] if hit else None]
        rows.append(row)
    parts.append(table(header, rows))
    parts.append("Seeds: " + " ".join(f"{c.claim} ({c.reference})" for c in seeds.claims("window")))
    parts.append(_plot_window(win, plots))
    return "\n\n".join(parts)


def _rate(cell: dict[str, Any]) -> str:
    if "skipped" in cell:
        return f"skipped: {cell['skipped']}"
    return f"{fmt(cell['events_per_s'])} ({fmt(cell['matches'])})"


def _plot_window(win: dict[str, Any], plots: Plots) -> str:
    fig, ax = plots.figure(7, 4)
    for name, p in win["patterns"].items():
        ax.plot([x["max_window"] for x in p["rows"]], [x["seconds"] for x in p["rows"]], "o-", label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("maximal match-window size |Ŵ| (events)")
    ax.set_ylabel("runtime (CPU s)")
    ax.legend(fontsize=7)
    return plots.save(fig, "window_growth", "exact-engine runtime against |Ŵ| (Cadonna Table 4.1 protocol)")

