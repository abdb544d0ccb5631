"""The seeds' experiment protocols, run on this project with real data (issue 9).

Each protocol is a function ``(scale, corpora, workdir) -> dict`` of JSON-able figures; :mod:`bench.suite`
runs them all and :mod:`bench.report` puts them beside the seeds' published figures (:mod:`bench.seeds`).

* :func:`baltus_bpi` — Baltus 2021 §5.1 (Tables 5.1/5.2): random SEQ queries of length 2–8 under
  skip-till-next on BPI 2012; approximate, verified and exact latency side by side.
* :func:`baltus_words` — Baltus §5.2 (Tables 5.3–5.6): word streams (Brown and a larger replay of it); build
  time at the thesis' settings; the four operator forms under strict contiguity and skip-till-next.
* :func:`build_scaling` — build throughput and index size against N (Spark: :mod:`bench.spark`).
* :func:`accuracy` — false positives against the configured fpq; recall, which must be 1.0.
* :func:`exact_engine` — the exact engine: strategies, two-phase and prefilter on/off (Cadonna §5.4), and
  runtime against the maximal match-window size (Cadonna §4.7.4, Table 4.1).

Guarantees are checked while measuring: a verified answer different from the exact one, or an exact match
outside every approximate candidate interval, raises :class:`bench.timing.RecallError` once the protocol's
figures are complete (the runner writes them, then fails).
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.corpora import Corpora, replay_words, sample_types
from bench.timing import RecallError, ratio, summary_ms, timed
from exact.ast import (
    Absent,
    AnyOf,
    EventSet,
    Query,
    Single,
    Strategy,
    Var,
    WithinEvents,
    WithinTime,
)
from exact.engine import evaluate
from exact.language import to_text
from exact.store import EventStore
from sketch.build import BuildOptions, build_from_table
from sketch.evaluate import PerfectIndex, TreeIndex, approximate, units_at
from sketch.verify import StoreSource, answer_indexed

DAY_US = 86_400 * 1_000_000
MODES = ("approximate", "verified", "exact")
#: Baltus §5.2.1: "M = 2GB, N = total size of the dataset, C = 100, fpq = 0.0001, and s = 3".
THESIS_WORD_OPTIONS = BuildOptions(leaf_size=100, fpq=1e-4, query_length=3, memory_bytes=2 * 2**30)


@dataclass(frozen=True)
class Scale:
    """How much of every protocol to run.  ``full`` follows the seeds' sizes where this machine allows it;
    ``quick`` keeps every protocol and section but shrinks counts and sizes; ``tiny`` is for the smoke
    test."""

    name: str
    bpic_limit: int | None = None
    brown_limit: int | None = None
    seq_lengths: tuple[int, ...] = (2, 3, 4, 5, 6, 7, 8)
    seq_queries: int = 100            # per length: approximate answers (Baltus: 100)
    seq_checked: int = 20             # per length: of those, also verified and exact
    bpic_replay_events: int = 1_311_000   # a BPI-2017-sized replay of BPI 2012 (Table 5.2: 1.2M)
    replay_checked: int = 1
    word_replay: int = 2              # copies of the word stream for the larger dataset (2.3M events)
    word_queries: int = 50            # per operator form and strategy (Baltus: 100)
    word_checked: int = 2
    word_replay_queries: int = 20     # on the larger replay (each approximate answer reads a bigger tree)
    word_replay_checked: int = 1
    build_repeat: int = 2             # Table 5.4 builds per dataset (Baltus: 100)
    build_sizes: tuple[int, ...] = (100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_244_000)
    fpqs: tuple[float, ...] = (1e-2, 1e-3, 1e-4)
    accuracy_queries: int = 25
    engine_prefix: int = 20_000       # events for the on/off grid (baselines are slow by design)
    engine_patterns: int = 2          # random patterns per k for P_seq / P_set (Cadonna: 10)
    engine_ks: tuple[int, ...] = (2, 3, 4)
    window_prefix: int = 15_000       # events for the |Ŵ| protocol (P4/P5 grow polynomially by design)
    window_copies: tuple[int, ...] = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9)
    window_cap_s: float = 10.0
    seed: int = 2021

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


FULL = Scale("full")
QUICK = Scale("quick", seq_queries=10, seq_checked=2, bpic_replay_events=524_400, replay_checked=1,
              brown_limit=300_000, word_replay=2, word_queries=6, word_checked=2, word_replay_queries=4,
              word_replay_checked=1, build_repeat=1, build_sizes=(100_000, 262_200, 524_400),
              accuracy_queries=8, engine_prefix=15_000, engine_patterns=1, engine_ks=(2, 3),
              window_prefix=8_000, window_copies=(0, 2), window_cap_s=10.0)
TINY = Scale("tiny", bpic_limit=12_000, brown_limit=20_000, seq_lengths=(2, 3, 5), seq_queries=3,
             seq_checked=1, bpic_replay_events=30_000, replay_checked=1, word_replay=2, word_queries=2,
             word_checked=1, word_replay_queries=2, word_replay_checked=1, build_repeat=1,
             build_sizes=(5_000, 20_000), accuracy_queries=3, engine_prefix=3_000, engine_patterns=1,
             engine_ks=(2,), window_prefix=2_000, window_copies=(0, 1), window_cap_s=5.0)
SCALES = {s.name: s for s in (FULL, QUICK, TINY)}


# ------------------------------------------------------------------------------------------ query timing


@dataclass
class Bench:
    """A stream with its event store and tree, ready for the three answer modes."""

    name: str
    stream: pa.Table
    store: EventStore
    tree: Any
    build_s: float

    @property
    def source(self) -> StoreSource:
        return StoreSource(self.store)


def prepare(name: str, stream: pa.Table, workdir: Path, options: BuildOptions | None = None) -> Bench:
    """Store ``stream`` and build its tree (timed) under ``workdir`` (the project's default options)."""
    options = options or BuildOptions()
    root = workdir / name
    if root.exists():
        shutil.rmtree(root)
    store = EventStore.create(root, stream)
    (tree, _), seconds = timed(lambda: build_from_table(stream, options))
    return Bench(name, stream, store, tree, seconds)


def _inside(matches: list[dict[str, Any]], intervals: list[dict[str, Any]]) -> int:
    """How many matches lie inside no interval (intervals sorted and disjoint, as the answers give them)."""
    if not matches:
        return 0
    lo = np.asarray([iv["start_seq"] for iv in intervals], dtype=np.int64)
    hi = np.asarray([iv["end_seq"] for iv in intervals], dtype=np.int64)
    missed = 0
    for m in matches:
        i = int(np.searchsorted(lo, m["start_seq"], "right")) - 1
        if i < 0 or m["end_seq"] > hi[i]:
            missed += 1
    return missed


def run_modes(bench: Bench, query: Query, modes: Sequence[str]) -> dict[str, Any]:
    """One query in each of ``modes``: wall seconds per mode, the answers' sizes, and the guarantee checks
    (verified = exact; every exact match inside an approximate candidate interval)."""
    source = bench.source
    answers: dict[str, dict[str, Any]] = {}
    row: dict[str, Any] = {"query": to_text(query).replace("\n", " ")}
    for mode in modes:
        answers[mode], seconds = timed(lambda m=mode: answer_indexed(query, bench.tree, source, mode=m))
        row[f"{mode}_s"] = seconds
    if "approximate" in answers:
        approx = answers["approximate"]
        row["candidate_intervals"] = len(approx["intervals"])
        row["candidate_events"] = sum(iv["end_seq"] - iv["start_seq"] + 1 for iv in approx["intervals"])
        row["nodes_probed"] = approx["stats"]["nodes_probed"]
        row["approx_exists"] = approx["exists"]
    if "verified" in answers:
        row["events_scanned"] = answers["verified"]["stats"]["events_scanned"]
    if "exact" in answers:
        exact = answers["exact"]
        row["matches"] = exact["count"]
        if "verified" in answers:
            row["verified_equals_exact"] = answers["verified"].get("matches") == exact.get("matches")
        if "approximate" in answers:
            row["missed_by_approximate"] = _inside(exact.get("matches", []),
                                                   answers["approximate"]["intervals"])
    return row


def _mode_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Latency summaries per mode, and ratios on the queries answered in all three modes."""
    out: dict[str, Any] = {}
    for mode in MODES:
        out[mode] = summary_ms([r[f"{mode}_s"] for r in rows if f"{mode}_s" in r])
    checked = [r for r in rows if all(f"{m}_s" in r for m in MODES)]
    if checked:
        mean = {m: float(np.mean([r[f"{m}_s"] for r in checked])) for m in MODES}
        out["checked"] = len(checked)
        out["exact_over_approximate"] = ratio(mean["exact"], mean["approximate"])
        out["exact_over_verified"] = ratio(mean["exact"], mean["verified"])
        scanned = [r.get("events_scanned", 0) for r in checked]
        out["scanned_share"] = round(float(np.mean(scanned)) / max(1, _events_total(checked)), 4)
        out["matches_mean"] = round(float(np.mean([r["matches"] for r in checked])), 1)
    return out


def _events_total(rows: list[dict[str, Any]]) -> int:
    return int(rows[0].get("events_total", 1)) if rows else 1


def _violations(rows: list[dict[str, Any]]) -> dict[str, int]:
    return {"verified_not_exact": sum(1 for r in rows if r.get("verified_equals_exact") is False),
            "exact_matches_missed": sum(int(r.get("missed_by_approximate", 0)) for r in rows)}


def _raise_on(violations: dict[str, int], where: str) -> None:
    if any(violations.values()):
        raise RecallError(f"{where}: {violations} — a CONTRACT §3 guarantee is broken")


def _seq(types: Sequence[str], **kw: Any) -> Query:
    return Query(pattern=tuple(Single(Var(f"v{i + 1}", t)) for i, t in enumerate(types)), **kw)


def _drop_seconds(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows as stored: seconds become milliseconds (3 decimals) so the JSON reads at a glance."""
    out = []
    for r in rows:
        r = dict(r)
        for mode in MODES:
            if f"{mode}_s" in r:
                r[f"{mode}_ms"] = round(r.pop(f"{mode}_s") * 1000.0, 3)
        out.append(r)
    return out


# ------------------------------------------------------------------------ Baltus §5.1 (Tables 5.1, 5.2)

BPI_WINDOW = WithinTime(DAY_US)


def _seq_length_runs(bench: Bench, scale: Scale, rng: np.random.Generator, checked: int) -> dict[str, Any]:
    per_length: dict[str, Any] = {}
    all_rows: list[dict[str, Any]] = []
    warm = _seq(sample_types(bench.stream, 2, rng, by_frequency=False), within=BPI_WINDOW)
    run_modes(bench, warm, MODES)  # first-call costs (imports, caches) are not a query's latency
    for length in scale.seq_lengths:
        rows = []
        for i in range(scale.seq_queries):
            query = _seq(sample_types(bench.stream, length, rng, by_frequency=False), within=BPI_WINDOW)
            row = run_modes(bench, query, MODES if i < checked else ("approximate",))
            row["length"] = length
            row["events_total"] = bench.stream.num_rows
            rows.append(row)
        per_length[str(length)] = _mode_summary(rows)
        all_rows.extend(rows)
    return {"events": bench.stream.num_rows, "types": len(pc.unique(bench.stream.column("type"))),
            "build_s": round(bench.build_s, 3), "index": bench.tree.info(), "by_length": per_length,
            "overall": _mode_summary(all_rows), "violations": _violations(all_rows),
            "queries": _drop_seconds(all_rows)}


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
    _raise_on({k: sum(d["violations"][k] for d in out["datasets"].values())
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
            cells[f"{strategy.value}|{form}"] = _mode_summary(rows)
            all_rows.extend(rows)
    return {"events": bench.stream.num_rows, "distinct": len(pc.unique(bench.stream.column("type"))),
            "build_s_mean": round(float(np.mean(builds)), 3), "build_s_runs": [round(b, 3) for b in builds],
            "build_events_per_s": round(bench.stream.num_rows / float(np.mean(builds))),
            "index": bench.tree.info(), "index_bytes": bench.tree.stored_bytes(),
            "store_bytes": bench.store.size_bytes(), "seek_bytes": bench.store.seek_bytes(),
            "cells": cells, "violations": _violations(all_rows),
            "queries": _drop_seconds(all_rows)}


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
    _raise_on({k: sum(d["violations"][k] for d in datasets.values())
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
        queries = [_seq(sample_types(stream, 2, rng, by_frequency=by_freq), within=window)
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
                missed += _inside([{"start_seq": m.start_seq, "end_seq": m.end_seq} for m in matches], spans)
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
    _raise_on({"exact_matches_missed": missed_total}, "accuracy protocol")
    return out


# -------------------------------------------------------------------------------------- exact engine

#: BPI 2012 types of the engine patterns (a loan application's usual path).
_SEQ3 = ("A_SUBMITTED", "A_ACCEPTED", "O_SENT")
_WC = "W_Completeren aanvraag"


def _engine_patterns() -> dict[str, Query]:
    case = ("case",)
    return {
        "SEQ(A_SUBMITTED, A_ACCEPTED, O_SENT) WITHIN 1 d": _seq(_SEQ3, within=BPI_WINDOW),
        "SEQ(A_SUBMITTED, W_Completeren+, A_ACCEPTED) PARTITION BY case WITHIN 7 d": Query(
            pattern=(Single(Var("a", "A_SUBMITTED")), Single(Var("w", _WC, kleene=True)),
                     Single(Var("b", "A_ACCEPTED"))), partition_by=case, within=WithinTime(7 * DAY_US)),
        "SEQ({A_PARTLYSUBMITTED, A_PREACCEPTED}, {O_CREATED, O_SENT}) PARTITION BY case WITHIN 30 d": Query(
            pattern=(EventSet((Var("a", "A_PARTLYSUBMITTED"), Var("b", "A_PREACCEPTED"))),
                     EventSet((Var("c", "O_CREATED"), Var("d", "O_SENT")))),
            partition_by=case, within=WithinTime(30 * DAY_US)),
    }


def _throughput(query: Query, table: pa.Table, **switches: Any) -> dict[str, Any]:
    """One ``evaluate`` call timed by :func:`bench.exact.measure` (events/s from CPU seconds, so other load
    on the machine does not count; wall seconds beside), with the stream's type counts (rarest first)."""
    from bench.exact import measure

    counts = dict(zip(*np.unique(table.column("type").to_numpy(zero_copy_only=False), return_counts=True),
                      strict=True))
    row = measure("protocol", query, table, {str(k): int(v) for k, v in counts.items()}, repeat=1,
                  two_phase=switches.get("two_phase", True), prefilter=switches.get("prefilter", True))
    rate = row.events_per_s
    return {"seconds": round(row.cpu_s, 4), "wall_s": round(row.wall_s, 4),
            "events_per_s": round(rate) if math.isfinite(rate) else None, "matches": row.matches}


def _combinatorial(query: Query) -> bool:
    """Skip-till-any-match reports every combination: every subset of a Kleene variable's events, and
    without a partition every combination of a window's events (on BPI 2012, ~800K matches for 12K events)."""
    return any(v.kleene for v in query.variables()) or not query.partition_by


def _strategy_runs(stream: pa.Table) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, query in _engine_patterns().items():
        out[label] = {}
        for s in Strategy:
            if s == Strategy.SKIP_TILL_ANY_MATCH and _combinatorial(query):
                out[label][s.value] = {"skipped": "the number of matches is combinatorial by definition"}
                continue
            out[label][s.value] = _throughput(replace(query, strategy=s), stream)
    return out


_SWITCHES = {"baseline": {"two_phase": False, "prefilter": False},
             "prefilter (f)": {"two_phase": False, "prefilter": True},
             "two-phase (w)": {"two_phase": True, "prefilter": False},
             "both (f + w)": {"two_phase": True, "prefilter": True}}


def _switch_runs(query: Query, table: pa.Table) -> dict[str, Any]:
    runs = {name: _throughput(query, table, **kw) for name, kw in _SWITCHES.items()}
    if len({r["matches"] for r in runs.values()}) != 1:
        raise RecallError(f"two-phase/prefilter switches changed the answer of {to_text(query)!r}: "
                          f"{ {k: r['matches'] for k, r in runs.items()} }")
    base = runs["baseline"]["seconds"]
    for r in runs.values():
        r["speedup"] = ratio(base, r["seconds"], 2)
    return runs


def _two_phase_runs(scale: Scale, stream: pa.Table, rng: np.random.Generator) -> dict[str, Any]:
    """Cadonna §5.4.2: P_seq = <{v1},…,{vk}> and P_set = <{v1,…,vk}> with random distinct types, same case,
    τ = 10 days, skip-till-next; throughput of each switch setting and its factor over the baseline."""
    prefix = stream.slice(0, min(scale.engine_prefix, stream.num_rows))
    distinct = sorted(set(prefix.column("type").unique().to_pylist()))
    out: dict[str, Any] = {"events": prefix.num_rows, "fixed": {}, "P_seq": {}, "P_set": {}}
    for label, query in _engine_patterns().items():
        out["fixed"][label] = _switch_runs(query, prefix)
    for k in scale.engine_ks:
        for shape in ("P_seq", "P_set"):
            runs = []
            for _ in range(scale.engine_patterns):
                types = [distinct[i] for i in rng.choice(len(distinct), size=k, replace=False)]
                variables = tuple(Var(f"v{i + 1}", t) for i, t in enumerate(types))
                pattern = (tuple(Single(v) for v in variables) if shape == "P_seq" else (EventSet(variables),)
                           if k > 1 else (Single(variables[0]),))
                runs.append(_switch_runs(Query(pattern=pattern, partition_by=("case",),
                                               within=WithinTime(10 * DAY_US)), prefix))
            out[shape][str(k)] = {name: _mean_switch(runs, name) for name in _SWITCHES}
    return out


def _mean_switch(runs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    base = float(np.mean([r["baseline"]["seconds"] for r in runs]))
    return {"events_per_s": round(float(np.mean([r[name]["events_per_s"] or 0 for r in runs]))),
            "speedup": ratio(base, float(np.mean([r[name]["seconds"] for r in runs])), 2)}


def window_patterns() -> dict[str, tuple[Query, frozenset[str]]]:
    """Cadonna §4.7.4's five patterns on BPI 2012: ⟨B1 = {v1, v2, v3}, B2 = {v4, v5}⟩, same case, τ = 5 days;
    P1–P3 with distinct (mutually exclusive) types in B1 and 0, 1, 2 Kleene variables, P4–P5 with one type
    for v1..v3 (not mutually exclusive) and 0, 1 Kleene variables."""
    b2 = (Var("v4", "O_CREATED"), Var("v5", "O_SENT"))
    distinct = ("A_PREACCEPTED", _WC, "A_ACCEPTED")
    same = (_WC, _WC, _WC)

    def pattern(types: tuple[str, ...], plus: tuple[bool, ...]) -> Query:
        b1 = tuple(Var(f"v{i + 1}", t, kleene=k) for i, (t, k) in enumerate(zip(types, plus, strict=True)))
        return Query(pattern=(EventSet(b1), EventSet(b2)), partition_by=("case",),
                     within=WithinTime(5 * DAY_US))

    shapes = {"P1": (distinct, (False, False, False)), "P2": (distinct, (False, True, False)),
              "P3": (distinct, (True, True, False)), "P4": (same, (False, False, False)),
              "P5": (same, (True, False, False))}
    return {name: (pattern(t, p), frozenset(t) | {"O_CREATED", "O_SENT"}) for name, (t, p) in shapes.items()}


def duplicate_types(stream: pa.Table, types: frozenset[str], copies: int) -> pa.Table:
    """Cadonna's derived data sets: every event of ``types`` emitted ``copies`` more times right after itself
    (same ts and attributes), the stream trimmed at the tail to its original length and renumbered."""
    n = stream.num_rows
    if copies == 0:
        return stream
    hit = pc.is_in(stream.column("type"), pa.array(sorted(types))).to_numpy(zero_copy_only=False)
    repeat = np.where(hit, copies + 1, 1)
    take = np.repeat(np.arange(n), repeat)[:n]
    from exact.ingest import with_seq

    return with_seq(stream.drop_columns(["seq"]).take(pa.array(take)))


def max_window(stream: pa.Table, window_us: int) -> int:
    """|Ŵ|: the most events of one case within ``window_us`` after any of its events."""
    case = stream.column("attrs").combine_chunks().field("case")
    codes = pc.dictionary_encode(case).indices.to_numpy(zero_copy_only=False).astype(np.int64)
    ts = stream.column("ts").cast(pa.int64()).to_numpy(zero_copy_only=False)
    ts = ts - ts.min()
    key = codes * (int(ts.max()) + window_us + 1) + ts
    key.sort()
    return int((np.searchsorted(key, key + window_us, "right") - np.arange(key.size)).max())


def _window_runs(scale: Scale, stream: pa.Table) -> dict[str, Any]:
    stream = stream.slice(0, min(scale.window_prefix, stream.num_rows))
    out: dict[str, Any] = {}
    for name, (query, types) in window_patterns().items():
        rows = []
        for copies in scale.window_copies:
            derived = duplicate_types(stream, types, copies)
            run = _throughput(query, derived)
            rows.append({"copies": copies, "max_window": max_window(derived, 5 * DAY_US), **run})
            if run["seconds"] > scale.window_cap_s:
                break  # the next, larger window would only take longer
        out[name] = {"query": to_text(query).replace("\n", " "), "rows": rows, "growth": _growth(rows)}
    return {"events": stream.num_rows, "window": "5 d", "patterns": out}


def _growth(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """How runtime grows with |Ŵ|: the exponent of a power-law fit (1 = linear, as Thms 4.1/4.2 bound)."""
    pts = [(r["max_window"], r["seconds"]) for r in rows if r["seconds"] > 0]
    if len(pts) < 2 or len({w for w, _ in pts}) < 2:
        return None
    w, s = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
    slope = float(np.polyfit(w, s, 1)[0])
    return {"exponent": round(slope, 2), "window_ratio": round(pts[-1][0] / pts[0][0], 2),
            "time_ratio": round(pts[-1][1] / pts[0][1], 2)}


def exact_engine(scale: Scale, corpora: Corpora, workdir: Path) -> dict[str, Any]:
    """The exact engine on BPI 2012 (in memory, one core): throughput per strategy on the whole log; the
    two-phase and prefilter switches (Cadonna §5.4) on a prefix; runtime against |Ŵ| (§4.7.4, Table 4.1)."""
    rng = np.random.default_rng(scale.seed + 3)
    stream = corpora.bpic()
    return {"protocol": "exact_engine", "events": stream.num_rows, "strategies": _strategy_runs(stream),
            "switches": _two_phase_runs(scale, stream, rng), "window": _window_runs(scale, stream)}


PROTOCOLS: dict[str, Callable[[Scale, Corpora, Path], dict[str, Any]]] = {
    "seeds_baltus_bpi": baltus_bpi,
    "seeds_baltus_words": baltus_words,
    "seeds_build_scaling": build_scaling,
    "seeds_accuracy": accuracy,
    "seeds_exact_engine": exact_engine,
}


def run_protocol(name: str, scale: Scale, corpora: Corpora, workdir: Path | None = None) -> dict[str, Any]:
    """Run one protocol in a scratch directory (removed afterwards)."""
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        return PROTOCOLS[name](scale, corpora, Path(tmp))
