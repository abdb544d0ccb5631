"""What every seed protocol shares: how much to run, a stream ready in three answer modes, the checks.

:class:`Scale` says how much of each protocol to run (``full`` follows the seeds' sizes, ``quick`` and
``tiny`` shrink them); :func:`prepare` stores a stream and builds its tree; :func:`run_modes` answers one
query approximately, verified and exactly and checks docs/contract.md §3.5's guarantees on the way (verified =
exact; every exact match inside an approximate candidate interval), which :func:`raise_on` turns into a
:class:`bench.timing.RecallError`.  The protocols themselves are :mod:`bench.protocols_baltus` (Baltus 2021,
ch. 5) and :mod:`bench.protocols_cadonna` (Cadonna 2013); :mod:`bench.protocols` lists them.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bench.timing import RecallError, ratio, summary_ms, timed
from exact.query.ast import Query, Single, Var, WithinTime
from exact.query.language import to_text
from exact.store import EventStore
from sketch.answer.event_sources import StoreSource
from sketch.answer.modes import answer_indexed
from sketch.build import BuildOptions, build_from_table

DAY_US = 86_400 * 1_000_000
MODES = ("approximate", "verified", "exact")
#: The window of the BPI 2012 queries (Baltus §5.1; the exact engine's fixed patterns too).
BPI_WINDOW = WithinTime(DAY_US)


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


def outside_intervals(matches: list[dict[str, Any]], intervals: list[dict[str, Any]]) -> int:
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
            row["missed_by_approximate"] = outside_intervals(exact.get("matches", []),
                                                             answers["approximate"]["intervals"])
    return row


def mode_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
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


def count_violations(rows: list[dict[str, Any]]) -> dict[str, int]:
    return {"verified_not_exact": sum(1 for r in rows if r.get("verified_equals_exact") is False),
            "exact_matches_missed": sum(int(r.get("missed_by_approximate", 0)) for r in rows)}


def raise_on(violations: dict[str, int], where: str) -> None:
    if any(violations.values()):
        raise RecallError(f"{where}: {violations} — a docs/contract.md §3.5 guarantee is broken")


def seq_query(types: Sequence[str], **kw: Any) -> Query:
    return Query(pattern=tuple(Single(Var(f"v{i + 1}", t)) for i, t in enumerate(types)), **kw)


def rows_in_ms(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows as stored: seconds become milliseconds (3 decimals) so the JSON reads at a glance."""
    out = []
    for r in rows:
        r = dict(r)
        for mode in MODES:
            if f"{mode}_s" in r:
                r[f"{mode}_ms"] = round(r.pop(f"{mode}_s") * 1000.0, 3)
        out.append(r)
    return out
