"""Cadonna 2013 run on this project with real data: the exact engine's protocol.

:func:`exact_engine` — throughput per strategy on BPI 2012; the two-phase (match windows, Alg. 3) and
prefilter switches (§5.4) on a prefix; runtime against the maximal match-window size |Ŵ| (§4.7.4,
Table 4.1) on Cadonna's derived data sets (:func:`duplicate_types`, :func:`max_window`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.corpora import Corpora
from bench.protocol_runs import BPI_WINDOW, DAY_US, Scale, seq_query
from bench.timing import RecallError, ratio
from exact.query.ast import EventSet, Query, Single, Strategy, Var, WithinTime
from exact.query.language import to_text

#: BPI 2012 types of the engine patterns (a loan application's usual path).
_SEQ3 = ("A_SUBMITTED", "A_ACCEPTED", "O_SENT")
_WC = "W_Completeren aanvraag"


def _engine_patterns() -> dict[str, Query]:
    case = ("case",)
    return {
        "SEQ(A_SUBMITTED, A_ACCEPTED, O_SENT) WITHIN 1 d": seq_query(_SEQ3, within=BPI_WINDOW),
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
