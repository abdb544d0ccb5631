"""Baltus 2021, ch. 5, run on this project with real data: the Bloom-filter tree's protocols.

* :func:`baltus_bpi` — §5.1 (Tables 5.1/5.2): random SEQ queries of length 2–8 under skip-till-next on BPI
  2012 and a replay of it the size of BPI 2017; approximate, verified and exact latency side by side.
* :func:`baltus_words` — §5.2 (Tables 5.3–5.6): word streams (Brown and a larger replay of it); build time
  at the thesis' settings; the four operator forms under strict contiguity and skip-till-next.
* :func:`build_scaling` — build throughput and index size against N (Spark: :mod:`bench.spark`).
* :func:`accuracy` — false positives against the configured fpq (§4.4); recall, which must be 1.0.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.corpora import Corpora, replay_words, sample_types
from bench.protocol_runs import (
    BPI_WINDOW,
    MODES,
    Bench,
    Scale,
    count_violations,
    mode_summary,
    outside_intervals,
    prepare,
    raise_on,
    rows_in_ms,
    run_modes,
    seq_query,
)
from bench.timing import timed
from exact.engine import evaluate
from exact.query.ast import Absent, AnyOf, EventSet, Query, Single, Strategy, Var, WithinEvents
from sketch.build import BuildOptions, build_from_table
from sketch.evaluate import PerfectIndex, TreeIndex, approximate, units_at

#: Baltus §5.2.1: "M = 2GB, N = total size of the dataset, C = 100, fpq = 0.0001, and s = 3".
THESIS_WORD_OPTIONS = BuildOptions(leaf_size=100, fpq=1e-4, query_length=3, memory_bytes=2 * 2**30)


# ------------------------------------------------------------------------ Baltus §5.1 (Tables 5.1, 5.2)


def _seq_length_runs(bench: Bench, scale: Scale, rng: np.random.Generator, checked: int) -> dict[str, Any]:
    per_length: dict[str, Any] = {}
    all_rows: list[dict[str, Any]] = []
    warm = seq_query(sample_types(bench.stream, 2, rng, by_frequency=False), within=BPI_WINDOW)
    run_modes(bench, warm, MODES)  # first-call costs (imports, caches) are not a query's latency
    for length in scale.seq_lengths:
        rows = []
        for i in range(scale.seq_queries):
            query = seq_query(sample_types(bench.stream, length, rng, by_frequency=False), within=BPI_WINDOW)
            row = run_modes(bench, query, MODES if i < checked else ("approximate",))
            row["length"] = length
            row["events_total"] = bench.stream.num_rows
            rows.append(row)
        per_length[str(length)] = mode_summary(rows)
        all_rows.extend(rows)
    return {"events": bench.stream.num_rows, "types": len(pc.unique(bench.stream.column("type"))),
            "build_s": round(bench.build_s, 3), "index": bench.tree.info(), "by_length": per_length,
            "overall": mode_summary(all_rows), "violations": count_violations(all_rows),
            "queries": rows_in_ms(all_rows)}


def baltus_bpi(scale: Scale, corpora: Corpora, workdir: Path) -> dict[str, Any]:
    """Baltus Tables 5.1/5.2 protocol: random SEQ(A1..AL) per length L, types drawn uniformly from the log's
    types, ``WITHIN 1 d``, skip-till-next; every query approximate, the first ``seq_checked`` per length also
    verified and exact.  On BPI 2012, and on a replay of BPI 2012 the size of BPI 2017."""
    rng = np.random.default_rng(scale.seed)
    bpic = prepare("bpic2012", corpora.bpic(), workdir)
    out = {"protocol": "baltus_bpi", "window": "1 d", "strategy": Strategy.SKIP_TILL_NEXT_MATCH.value,
           "options": asdict(BuildOptions()),
           "datasets": {"bpic2012": _seq_length_runs(bpic, scale, rng, scale.seq_checked)}}
    replay = prepare("bpic2012_replay", corpora.bpic_events(scale.bpic_replay_events), workdir)
    out["datasets"]["bpic2012_replay"] = _seq_length_runs(replay, scale, rng, scale.replay_checked)
    raise_on({k: sum(d["violations"][k] for d in out["datasets"].values())
              for k in ("verified_not_exact", "exact_matches_missed")}, "Baltus §5.1 protocol")
    return out


# ---------------------------------------------------------------------- Baltus §5.2 (Tables 5.3 – 5.6)

OPERATOR_FORMS = ("SEQ(A, B, C)", "SEQ(A, OR(B, C))", "SEQ(A, AND(B, C))", "SEQ(A, NOT(B), C)")


def operator_query(form: str, a: str, b: str, c: str, strategy: Strategy) -> Query:
    """One of the four operator forms of Baltus Tables 5.5/5.6 with types ``a``, ``b``, ``c``."""
    A, B, C = Var("a", a), Var("b", b), Var("c", c)
    pattern = {
        OPERATOR_FORMS[0]: (Single(A), Single(B), Single(C)),
        OPERATOR_FORMS[1]: (Single(A), AnyOf((B, C))),
        OPERATOR_FORMS[2]: (Single(A), EventSet((B, C))),
        OPERATOR_FORMS[3]: (Single(A), Absent((B,)), Single(C)),
    }[form]
    return Query(pattern=pattern, strategy=strategy)


def _word_dataset(bench: Bench, rng: np.random.Generator, asked: int, checked: int,
                  builds: list[float]) -> dict[str, Any]:
    cells: dict[str, Any] = {}
    all_rows: list[dict[str, Any]] = []
    for strategy in (Strategy.STRICT_CONTIGUITY, Strategy.SKIP_TILL_NEXT_MATCH):
        for form in OPERATOR_FORMS:
            rows = []
            for i in range(asked):
                a, b, c = sample_types(bench.stream, 3, rng, by_frequency=True)
                row = run_modes(bench, operator_query(form, a, b, c, strategy),
                                MODES if i < checked else ("approximate",))
                row.update(form=form, strategy=strategy.value, events_total=bench.stream.num_rows)
                rows.append(row)
            cells[f"{strategy.value}|{form}"] = mode_summary(rows)
            all_rows.extend(rows)
    return {"events": bench.stream.num_rows, "distinct": len(pc.unique(bench.stream.column("type"))),
            "build_s_mean": round(float(np.mean(builds)), 3), "build_s_runs": [round(b, 3) for b in builds],
            "build_events_per_s": round(bench.stream.num_rows / float(np.mean(builds))),
            "index": bench.tree.info(), "index_bytes": bench.tree.stored_bytes(),
            "store_bytes": bench.store.size_bytes(), "seek_bytes": bench.store.seek_bytes(),
            "cells": cells, "violations": count_violations(all_rows),
            "queries": rows_in_ms(all_rows)}


def _timed_builds(stream: pa.Table, repeat: int) -> list[float]:
    return [timed(lambda: build_from_table(stream, THESIS_WORD_OPTIONS))[1] for _ in range(repeat)]


def baltus_words(scale: Scale, corpora: Corpora, workdir: Path) -> dict[str, Any]:
    """Baltus Tables 5.3–5.6 protocol on word streams: the tree at the thesis' settings (C = 100,
    fpq = 1e-4, s = 3, M = 2 GB), build time (mean of ``build_repeat`` builds), then per operator form and
    strategy ``word_queries`` random queries (``word_replay_queries`` on the replay) with A, B, C drawn from
    the stream's events (no window; all matches), the first few also verified and exact."""
    rng = np.random.default_rng(scale.seed + 1)
    brown = corpora.brown()
    datasets: dict[str, Any] = {}
    for name, stream, asked, checked in (
            ("brown", brown, scale.word_queries, scale.word_checked),
            (f"brown_x{scale.word_replay}", replay_words(brown, scale.word_replay), scale.word_replay_queries,
             scale.word_replay_checked)):
        builds = _timed_builds(stream, scale.build_repeat)
        bench = prepare(name, stream, workdir, THESIS_WORD_OPTIONS)
        run_modes(bench, operator_query(OPERATOR_FORMS[0], *sample_types(stream, 3, rng, by_frequency=True),
                                        Strategy.SKIP_TILL_NEXT_MATCH), MODES)  # warm-up, not reported
        datasets[name] = _word_dataset(bench, rng, asked, checked, builds)
        shutil.rmtree(workdir / name, ignore_errors=True)
    out = {"protocol": "baltus_words", "options": asdict(THESIS_WORD_OPTIONS), "datasets": datasets,
           "forms": list(OPERATOR_FORMS)}
    raise_on({k: sum(d["violations"][k] for d in datasets.values())
              for k in ("verified_not_exact", "exact_matches_missed")}, "Baltus §5.2 protocol")
    return out


# ------------------------------------------------------------------------------------ build scaling


def build_scaling(scale: Scale, corpora: Corpora, workdir: Path) -> dict[str, Any]:
    """Build throughput and index size against N (BPI 2012 prefixes, then replays with shifted time and
    case ids), with the project's default options and the in-process builder (:func:`bench.tree.measure`).
    Spark against local, end to end, is :mod:`bench.spark`'s (the report reads its record)."""
    from bench.tree import measure

    rows = []
    for n in scale.build_sizes:
        stream = corpora.bpic_events(n)
        m = measure(f"bpic2012 {n}", stream, repeat=2 if n <= 1_000_000 else 1, fp=False)
        rows.append({k: m[k] for k in ("events", "build_seconds", "build_events_per_s", "index_bytes",
                                        "index_bytes_per_event", "store_bytes", "seek_bytes",
                                        "index_share_of_store",
                                        "levels", "nodes", "m", "k", "expected_fpq")})
    return {"protocol": "build_scaling", "options": asdict(BuildOptions()), "local": rows,
            "spark": "local vs Spark end to end comes from the spark benchmark (bench/spark.py)"}


# ------------------------------------------------------------------------------------------- accuracy


def _false_starts(query: Query, tree: Any, perfect: PerfectIndex) -> tuple[int, int, float, Any]:
    """Start units the tree proposes that a perfect index would not, the units that can start nothing, the
    approximation's expected rate, and the tree's approximation."""
    approx = approximate(query, TreeIndex(tree))
    truth = approximate(query, perfect)
    false = np.setdiff1d(approx.starts, truth.starts).size
    negatives = len(approx.units) - truth.starts.size
    return int(false), int(negatives), float(approx.expected_false_positive_rate), approx


def accuracy(scale: Scale, corpora: Corpora, workdir: Path) -> dict[str, Any]:
    """Measured false positives against the configured fpq ∈ {1e-2, 1e-3, 1e-4}, and recall.

    Per fpq and stream: (1) single-type probes of nodes that do not hold the type (:func:`bench.tree.
    false_positive_rate`), beside the sized per-filter rate; (2) per query (random SEQ of length s = 2 under
    skip-till-next, ``WITHIN``), the start units the tree proposes that a perfect type index over the same
    units would not, over the units that can start nothing — and the share of queries with any such false
    candidate, beside the answers' expected rate; (3) recall: every exact match must lie inside a candidate
    interval of the tree's answer — any miss raises."""
    from bench.tree import false_positive_rate

    rng = np.random.default_rng(scale.seed + 2)
    streams = {"bpic2012": (corpora.bpic(), False, BPI_WINDOW, "1 d"),
               "brown": (corpora.brown(), True, WithinEvents(50), "50 EVENTS")}
    out: dict[str, Any] = {"protocol": "accuracy", "streams": {}}
    missed_total = 0
    for name, (stream, by_freq, window, window_text) in streams.items():
        queries = [seq_query(sample_types(stream, 2, rng, by_frequency=by_freq), within=window)
                   for _ in range(scale.accuracy_queries)]
        exact = [evaluate(q, stream) for q in queries]
        seq = stream.column("seq").to_numpy(zero_copy_only=False)
        types = stream.column("type").to_numpy(zero_copy_only=False)
        rows = []
        for fpq in scale.fpqs:
            tree, _ = build_from_table(stream, BuildOptions(fpq=fpq))
            perfect = PerfectIndex(units_at(tree), seq, types)
            false = negatives = noisy = missed = 0
            expected = []
            for query, matches in zip(queries, exact, strict=True):
                f, n, e, approx = _false_starts(query, tree, perfect)
                false, negatives, noisy = false + f, negatives + n, noisy + (f > 0)
                expected.append(e)
                spans = [{"start_seq": iv["start_seq"], "end_seq": iv["end_seq"]}
                         for iv in approx.intervals()]
                missed += outside_intervals([{"start_seq": m.start_seq, "end_seq": m.end_seq}
                                             for m in matches], spans)
            probes = false_positive_rate(tree, stream, nodes=300, keys=100, seed=scale.seed)
            missed_total += missed
            rows.append({
                "fpq": fpq, "m": tree.config.m, "k": tree.config.k, "index_bytes": tree.stored_bytes(),
                "sized_filter_fp": tree.config.filter_fp, "probe": probes,
                "false_start_units": false, "negative_units": negatives,
                "unit_false_positive_rate": false / negatives if negatives else 0.0,
                "queries": len(queries), "queries_with_false_candidates": noisy,
                "query_false_positive_rate": noisy / len(queries) if queries else 0.0,
                "expected_query_rate_mean": float(np.mean(expected)) if expected else 0.0,
                "exact_matches": sum(len(m) for m in exact), "exact_matches_missed": missed,
                "recall": 1.0 if missed == 0 else 1 - missed / max(1, sum(len(m) for m in exact)),
            })
        out["streams"][name] = {"events": stream.num_rows, "window": window_text, "by_fpq": rows}
    raise_on({"exact_matches_missed": missed_total}, "accuracy protocol")
    return out

