"""Query latency by answer mode, side by side: approximate, verified and exact on the same queries.

``python -m bench query [--quick]``.  Datasets: BPI Challenge 2012 (262,200 events) and a replay of it with
shifted time and case ids (≥ 5,000,000 events; 1,000,000 with ``--quick``), each stored as a real dataset
(Parquet event store + Bloom tree, local builder, default sizing: C = 256, fpq = 1e-3); and the rare queries
again on a replay four times as long, to show how verification's gain grows with the stream.

Queries (Baltus 2021, §5.1/§5.2): random ``SEQ`` of each length 2–8 with types drawn from the log and a
``WITHIN`` (1 h or 1 day); the same as ``RETURN exists``; "rare" ones — one of the log's three rarest types,
then types among its eight rarest, within 10 min or 1 h (their candidates cover a sliver of the stream); and
the four operator forms of Tables 5.5/5.6 under strict contiguity and skip-till-next-match.

Per query (each latency the median of up to five runs within a second, at least one): approximate
latency cold (as the first query after a process loaded the index version: the
load prepares the version's units — timed apart as ``prepare_ms`` — and no probe answer is known yet)
and warm (the same query again on the index the service keeps per version, its probe answers remembered
from every query before), verified and exact
latency with their ratios, events scanned / total, and whether verified equals exact.  Exact is the
service's exact mode (the reference: the engine over the whole stream, no index, reading only the events of
types some variable can bind); beside it a *pruned scan*: the same read answered through
:func:`exact.engine.evaluate` (match objects one by one) — its answer must equal exact's too.  Accuracy: the
approximate answers against a perfect (false-positive-free) leaf index over the same units — a candidate
interval the perfect index does not produce, or ``exists: true`` where it says false, is a false positive.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from exact.engine import answer, evaluate, match_ts
from exact.query.ast import Query
from exact.query.language import parse
from sketch.answer.event_sources import StoreSource, needed_columns, read_types
from sketch.answer.modes import answer_indexed
from sketch.build import BuildOptions
from sketch.dataset import Dataset
from sketch.evaluate import PerfectIndex, TreeIndex, approximate

REPLAY_EVENTS = 5_000_000
FORMS = ("SEQ({a}, {b}, {c})", "SEQ({a}, OR({b}, {c}))", "SEQ({a}, AND({b}, {c}))", "SEQ({a}, NOT({b}), {c})")


def pruned_scan(query: Query, source: StoreSource) -> dict[str, Any]:
    """The exact engine over the whole stream, reading only the events verification would read from a
    candidate spanning it: every event under the contiguity strategies, else the types some positive or
    negated variable can bind.  No index is used."""
    frame, _ = source.read_frame([(0, source.events_total - 1)], needed_columns(query), read_types(query))
    matches = evaluate(query, frame, type_counts=source.type_counts())
    return answer(query, matches, match_ts(frame, matches))


def _quoted(t: str) -> str:
    return "'" + t.replace("\\", "\\\\").replace("'", "\\'") + "'"


def queries(types: list[str], counts: dict[str, int], rng: random.Random, per_length: int,
            forms: int, lengths: range = range(2, 9)) -> list[tuple[str, str]]:
    """(kind, text) pairs of the protocol (see the module docstring)."""
    out = []
    by_count = sorted(types, key=lambda t: counts[t])
    rarest, rare = by_count[:3], by_count[:8]
    for length in lengths:
        for _ in range(per_length):
            window = rng.choice(("1 h", "1 day"))
            seq = ", ".join(_quoted(rng.choice(types)) for _ in range(length))
            out.append(("seq", f"PATTERN SEQ({seq}) WITHIN {window}"))
            out.append(("exists", f"PATTERN SEQ({seq}) WITHIN {window} RETURN exists"))
            tail = ", ".join(_quoted(rng.choice(rare)) for _ in range(length - 1))
            out.append(("rare", f"PATTERN SEQ({_quoted(rng.choice(rarest))}, {tail}) "
                                f"WITHIN {rng.choice(('10 min', '1 h'))}"))
    for form in FORMS:
        for strategy in ("strict_contiguity", "skip_till_next_match"):
            for _ in range(forms):
                a, b, c = (_quoted(rng.choice(types)) for _ in range(3))
                out.append(("form", f"PATTERN {form.format(a=a, b=b, c=c)} WITHIN 1 h STRATEGY {strategy}"))
    return out


def _timed(fn: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    value = fn()
    return value, (time.perf_counter() - t0) * 1000.0


def _timed_cpu(fn: Any) -> tuple[Any, float, float]:
    """The value, wall ms and CPU ms of this process (the machine is shared: CPU time is what the work
    itself costs, wall time includes waiting for a core)."""
    c0, t0 = time.process_time(), time.perf_counter()
    value = fn()
    return value, (time.perf_counter() - t0) * 1000.0, (time.process_time() - c0) * 1000.0


#: Each latency is the median of up to this many runs, as many as fit in the budget (at least one).
SAMPLES, SAMPLE_BUDGET_MS = 5, 1000.0


def _median_of(fn: Any, *, timed: bool = False) -> tuple[Any, float, float]:
    """The value of ``fn`` and the median wall and CPU ms of up to :data:`SAMPLES` runs (fewer when they
    exceed :data:`SAMPLE_BUDGET_MS` together).  A single run on a shared machine is at the mercy of whatever
    else runs then; a cheap query's median is not.  With ``timed``, ``fn`` returns (value, wall, cpu) itself
    (for work it must not count)."""
    walls: list[float] = []
    cpus: list[float] = []
    value = None
    while len(walls) < SAMPLES and (not walls or sum(walls) < SAMPLE_BUDGET_MS):
        value, wall, cpu = fn() if timed else _timed_cpu(fn)
        walls.append(wall)
        cpus.append(cpu)
    return value, statistics.median(walls), statistics.median(cpus)


def measure(name: str, stream: pa.Table, per_length: int, forms: int, seed: int,
            lengths: range = range(2, 9), kinds: frozenset[str] | None = None) -> dict[str, Any]:
    """Build ``stream`` as a dataset and run the query protocol on it in all three modes (only the queries
    of ``kinds`` unless None)."""
    with tempfile.TemporaryDirectory(prefix="seqsketch-bench-query-") as tmp:
        home = Path(tmp)
        (dataset, build_ms) = _timed(lambda: Dataset.build(home, name, stream, BuildOptions()))
        snap = dataset.snapshot()
        tree = snap.tree
        source = StoreSource(dataset.store, snap.store)
        counts = dict(snap.store.type_counts)
        types = sorted(counts)
        warm = TreeIndex(tree)
        perfect = PerfectIndex(warm.units, stream.column("seq").to_numpy(), stream.column("type"))
        rows = []
        for kind, text in queries(types, counts, random.Random(seed), per_length, forms, lengths):
            if kinds is not None and kind not in kinds:
                continue
            q = parse(text)
            prepares: list[float] = []

            def cold(q=q, prepares=prepares) -> tuple[dict[str, Any], float, float]:
                # as a process that just loaded the version (the load prepares it), no probe answer known
                tree.drop_cached()
                prepares.append(_timed(lambda: TreeIndex.prepare(tree))[1])
                c0, t0 = time.process_time(), time.perf_counter()
                body = answer_indexed(q, tree, source, mode="approximate")
                return body, (time.perf_counter() - t0) * 1000.0, (time.process_time() - c0) * 1000.0

            approx_body, approx_cold, approx_cold_cpu = _median_of(cold, timed=True)
            prepare_ms = statistics.median(prepares)
            # warm: the service's steady state, its index of this version shared by every query so far
            _, approx_warm, approx_warm_cpu = _median_of(
                lambda q=q: answer_indexed(q, tree, source, mode="approximate"))
            approx = approximate(q, warm, type_counts=counts)
            verified, verified_ms, verified_cpu = _median_of(
                lambda q=q: answer_indexed(q, tree, source, mode="verified"))
            exact, exact_ms, exact_cpu = _median_of(lambda q=q: answer_indexed(q, tree, source, mode="exact"))
            scan, scan_ms, _ = _median_of(lambda q=q: pruned_scan(q, source))
            truth = approximate(q, perfect)
            true_ivs = {(iv["start_seq"], iv["end_seq"]) for iv in truth.intervals()}
            ivs = [(iv["start_seq"], iv["end_seq"]) for iv in approx.intervals()]
            rows.append({
                "kind": kind, "query": text,
                "approximate_ms_cold": round(approx_cold, 3), "approximate_ms_warm": round(approx_warm, 3),
                "prepare_ms": round(prepare_ms, 3),
                "verified_ms": round(verified_ms, 3), "exact_ms": round(exact_ms, 3),
                "exact_over_verified": round(exact_ms / verified_ms, 2),
                "pruned_scan_ms": round(scan_ms, 3),
                "pruned_scan_over_verified": round(scan_ms / verified_ms, 2),
                "pruned_scan_equals_exact": all(scan.get(k) == exact.get(k)
                                                for k in ("exists", "count", "matches")),
                "cpu_ms": {"approximate_cold": round(approx_cold_cpu, 3),
                           "approximate_warm": round(approx_warm_cpu, 3),
                           "verified": round(verified_cpu, 3), "exact": round(exact_cpu, 3)},
                "exact_over_verified_cpu": round(exact_cpu / max(verified_cpu, 1e-3), 2),
                "candidate_intervals": len(ivs), "coverage": approx.coverage() / stream.num_rows,
                "events_scanned": verified["stats"]["events_scanned"], "events_total": stream.num_rows,
                "nodes_probed": approx_body["stats"]["nodes_probed"],
                "count": exact["count"], "verified_equals_exact": all(
                    verified.get(k) == exact.get(k) for k in ("exists", "count", "matches", "intervals")),
                "false_intervals": sum(iv not in true_ivs for iv in ivs),
                "false_exists": bool(approx.exists and not truth.exists),
                "expected_false_positive_rate": approx.expected_false_positive_rate,
            })
        return {"dataset": name, "events": stream.num_rows, "build_ms": round(build_ms, 1),
                "index": {k: tree.info()[k] for k in ("leaf_size", "m", "k", "levels", "nodes", "top_nodes",
                                                      "bytes", "fpq", "expected_fpq")},
                "summary": summarise(rows), "queries": rows}


def _p(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 3) if values else None


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Percentiles side by side, the speed-up of verification, and the measured false-positive rate."""
    def col(key: str, where=lambda r: True) -> list[float]:
        return [r[key] for r in rows if where(r)]

    exists = [r for r in rows if r["kind"] == "exists"]
    few = [r for r in rows if r["candidate_intervals"] <= 100]
    thin = [r for r in rows if r["coverage"] < 0.01]
    ivs = sum(r["candidate_intervals"] for r in rows)
    said_yes = sum(r["candidate_intervals"] > 0 for r in rows)
    def cpu(mode: str, where=lambda r: True) -> list[float]:
        return [r["cpu_ms"][mode] for r in rows if where(r)]

    modes = ("approximate_cold", "approximate_warm", "verified", "exact")
    return {
        "queries": len(rows),
        "cpu_p50_ms": {m: _p(cpu(m), 50) for m in modes},
        "cpu_p90_ms": {m: _p(cpu(m), 90) for m in modes},
        "cpu_approximate_p50_ms_exists": {m: _p(cpu(m, lambda r: r["kind"] == "exists"), 50)
                                          for m in modes[:2]},
        "cpu_approximate_p50_ms_le_100_intervals": {
            m: _p(cpu(m, lambda r: r["candidate_intervals"] <= 100), 50) for m in modes[:2]},
        "exact_over_verified_cpu_median": round(statistics.median(col("exact_over_verified_cpu")), 2),
        "exact_over_verified_cpu_coverage_lt_1pct": {
            "median": (round(statistics.median([r["exact_over_verified_cpu"] for r in thin]), 1)
                       if thin else None),
            "min": round(min(r["exact_over_verified_cpu"] for r in thin), 1) if thin else None},
        "verified_equals_exact": all(r["verified_equals_exact"] for r in rows),
        "pruned_scan_equals_exact": all(r["pruned_scan_equals_exact"] for r in rows),
        "prepare_ms_p50": _p(col("prepare_ms"), 50),
        "p50_ms": {"approximate_cold": _p(col("approximate_ms_cold"), 50),
                   "approximate_warm": _p(col("approximate_ms_warm"), 50),
                   "verified": _p(col("verified_ms"), 50), "exact": _p(col("exact_ms"), 50)},
        "p90_ms": {"approximate_cold": _p(col("approximate_ms_cold"), 90),
                   "approximate_warm": _p(col("approximate_ms_warm"), 90),
                   "verified": _p(col("verified_ms"), 90), "exact": _p(col("exact_ms"), 90)},
        "approximate_p50_ms_exists": {"cold": _p([r["approximate_ms_cold"] for r in exists], 50),
                                      "warm": _p([r["approximate_ms_warm"] for r in exists], 50)},
        "approximate_p50_ms_le_100_intervals": {"cold": _p([r["approximate_ms_cold"] for r in few], 50),
                                                "warm": _p([r["approximate_ms_warm"] for r in few], 50),
                                                "queries": len(few)},
        "exact_over_verified_median": round(statistics.median(col("exact_over_verified")), 2),
        "exact_over_verified_coverage_lt_1pct": {
            "queries": len(thin),
            "median": round(statistics.median([r["exact_over_verified"] for r in thin]), 1) if thin else None,
            "min": round(min(r["exact_over_verified"] for r in thin), 1) if thin else None,
            "max": round(max(r["exact_over_verified"] for r in thin), 1) if thin else None},
        "pruned_scan_over_verified_coverage_lt_1pct": {
            "median": (round(statistics.median([r["pruned_scan_over_verified"] for r in thin]), 1)
                       if thin else None),
            "min": round(min(r["pruned_scan_over_verified"] for r in thin), 1) if thin else None},
        "pruned_scan_p50_ms": _p(col("pruned_scan_ms"), 50),
        "scanned_over_total_median": round(statistics.median(
            [r["events_scanned"] / r["events_total"] for r in rows]), 5),
        "false_positive_rate": {"intervals": (sum(r["false_intervals"] for r in rows) / ivs) if ivs else 0.0,
                                "candidate_intervals": ivs,
                                "exists": sum(r["false_exists"] for r in rows) / max(said_yes, 1),
                                "expected_mean": statistics.fmean(col("expected_false_positive_rate"))},
    }


def run(quick: bool = False) -> dict[str, Any]:
    from bench.corpora import Corpora

    corpora = Corpora()
    bpic = corpora.bpic()
    out = {"bpic2012": measure("bpic2012", bpic, per_length=1 if quick else 2, forms=1, seed=2012)}
    replay_events = 1_000_000 if quick else REPLAY_EVENTS
    replay = corpora.bpic_events(replay_events)
    # every exact answer reads the whole replay: lengths 2, 5 and 8 keep the run short
    out[f"bpic2012_replay_{replay.num_rows}"] = measure("replay", replay, per_length=1 if quick else 3,
                                                        forms=0, seed=5, lengths=range(2, 9, 3))
    del replay
    # How the gain of verification grows with the stream: the same rare queries (the same seed) on a
    # replay four times as long; the others would only repeat the dense scans above at four times the cost.
    larger = corpora.bpic_events(4 * replay_events)
    out[f"bpic2012_replay_{larger.num_rows}_rare"] = measure(
        "replay", larger, per_length=1 if quick else 3, forms=0, seed=5, lengths=range(2, 9, 3),
        kinds=frozenset({"rare"}))
    return out


if __name__ == "__main__":
    import json

    print(json.dumps(run(quick=True)["bpic2012"]["summary"], indent=2))
