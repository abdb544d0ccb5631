"""Long per-case patterns of frequent activities, as SIESTA's authors ask them, beside ClickHouse's
``sequenceMatch``: ``python -m bench siesta``.

SIESTA (Mavroudopoulos and Gounaris) measured 50 patterns of 2–15 steps over the most frequent activities
of BPI Challenge 2012, each with the traces that hold it.  Their pattern files are not kept here, so this
benchmark makes patterns of the same shape from the log itself, the way theirs were made: a case is drawn
at random, and a pattern is a subsequence of its activities restricted to the ten most frequent ones
(lengths 2, 3, … 15, then again from 2, to 50 patterns; a fixed seed).  Each one is asked as

* seqsketch: ``PATTERN SEQ('A' v1, 'B' v2, …) PARTITION BY case RETURN cases`` (the default, verified
  mode; and exact mode beside it) on a built dataset, in process — the cases as an Arrow table (what the SDK's
  ``query_arrow`` and ``query_pandas`` hand over; ``columnar``), and as the JSON answer's objects (one dict
  per case with its first match's seqs and ISO times: a few µs a case in Python whatever the engine);
* ClickHouse (``chdb``, a MergeTree table ordered by case and seq):
  ``SELECT cid FROM ev GROUP BY cid HAVING sequenceMatch('(?1).*(?2).*…')(seq, type = 'A', type = 'B', …)``
  — ``.*`` between the steps, as events that meet another step's condition are not skipped otherwise,
  and ``seq`` as the time, so that events at the same instant keep the stream's order.

Without a window or conditions, a case holds a skip-till-next-match match of the sequence exactly when the
sequence is a subsequence of the case's events, which is what ``sequenceMatch`` decides: the cases are
checked equal before anything is timed.  Times are medians of several interleaved rounds, in milliseconds;
the record holds each pattern's ratios to ClickHouse (the Arrow answer's and the JSON answer's) and their
median and worst.  ClickHouse comes from the
``peers`` extra (``pip install -e '.[peers]'``).
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from api.service import run_query
from bench.timing import median_ms
from sketch.build import BuildOptions
from sketch.dataset import Dataset

PATTERNS = 50
SHORTEST, LONGEST = 2, 15
FREQUENT = 10
SEED = 2012


def patterns(stream: pa.Table, count: int = PATTERNS, seed: int = SEED) -> list[tuple[str, ...]]:
    """``count`` subsequences of drawn cases' frequent activities, of lengths 2 … 15 in turn."""
    types = stream.column("type").cast(pa.string()).to_numpy(zero_copy_only=False)
    cases = pc.struct_field(stream.column("attrs"), "case").cast(pa.string()).to_numpy(zero_copy_only=False)
    names, counts = np.unique(types, return_counts=True)
    frequent = set(names[np.argsort(-counts, kind="stable")[:FREQUENT]].tolist())
    traces: dict[str, list[str]] = {}
    for case, kind in zip(cases.tolist(), types.tolist(), strict=True):  # (stream order: seq)
        if kind in frequent:
            traces.setdefault(case, []).append(kind)
    rng = np.random.default_rng(seed)
    keys = sorted(traces)
    out: list[tuple[str, ...]] = []
    while len(out) < count:
        length = SHORTEST + len(out) % (LONGEST - SHORTEST + 1)
        trace = traces[keys[int(rng.integers(len(keys)))]]
        if len(trace) < length:
            continue
        picked = np.sort(rng.choice(len(trace), size=length, replace=False))
        out.append(tuple(trace[i] for i in picked))
    return out


def ours_text(steps: tuple[str, ...]) -> str:
    body = ", ".join(f"'{t}' v{i + 1}" for i, t in enumerate(steps))
    return f"PATTERN SEQ({body}) PARTITION BY case RETURN cases"


def clickhouse_sql(steps: tuple[str, ...]) -> str:
    pattern = ".*".join(f"(?{i + 1})" for i in range(len(steps)))
    conditions = ", ".join(f"type = '{t}'" for t in steps)
    return f"SELECT cid FROM ev GROUP BY cid HAVING sequenceMatch('{pattern}')(seq, {conditions})"


def ours_cases(answer: dict[str, Any]) -> set[str]:
    assert not answer.get("truncated"), "a case list cut by the limit"
    if "rows" in answer:  # (the Arrow answer)
        return {str(c) for c in answer["rows"].column("case").to_pylist()}
    return {str(c["case"]) for c in answer["cases"]}


def measure(stream: pa.Table, rounds: int) -> list[dict[str, Any]]:
    import chdb.session  # pip install -e '.[peers]'
    import pyarrow.parquet as pq

    table = pa.table({"seq": stream.column("seq").cast(pa.uint64()), "type": stream.column("type").cast(pa.string()),
                      "cid": pc.struct_field(stream.column("attrs"), "case").cast(pa.string())})
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="seqsketch-siesta-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        Dataset.build(home, "bpi2012", stream, BuildOptions())
        session = chdb.session.Session(str(Path(tmp) / "chdb"))
        session.query("CREATE TABLE ev (seq UInt64, type String, cid String) ENGINE = MergeTree ORDER BY (cid, seq)")
        parquet = Path(tmp) / "ev.parquet"
        pq.write_table(table, parquet)
        session.query(f"INSERT INTO ev SELECT seq, type, cid FROM file('{parquet}', Parquet)")

        def theirs(steps: tuple[str, ...]) -> set[str]:
            return set(str(session.query(clickhouse_sql(steps), "TSV")).split())

        def ours(steps: tuple[str, ...], mode: str, columnar: bool = True) -> dict[str, Any]:
            return run_query(home, "bpi2012", ours_text(steps), mode=mode, limit=1_000_000, columnar=columnar)

        for steps in patterns(stream):
            verified, exact, cases = ours(steps, "verified"), ours(steps, "exact"), theirs(steps)
            as_json = ours(steps, "verified", columnar=False)
            equal = ours_cases(verified) == ours_cases(exact) == ours_cases(as_json) == cases
            times: dict[str, list[float]] = {"verified": [], "json": [], "exact": [], "clickhouse": []}
            runs: list[tuple[str, Callable[[], Any]]] = [
                ("verified", lambda s=steps: ours(s, "verified")), ("json", lambda s=steps: ours(s, "verified", False)),
                ("exact", lambda s=steps: ours(s, "exact")), ("clickhouse", lambda s=steps: theirs(s))]
            for k in range(rounds):  # interleaved, the first of a round turning: drift and a peer's leftovers in
                # the caches fall on all alike
                for name, call in runs[k % len(runs):] + runs[:k % len(runs)]:
                    times[name].append(median_ms(call, 1, None))
            ms = {k: round(statistics.median(v), 3) for k, v in times.items()}
            rows.append({"steps": len(steps), "pattern": " → ".join(steps), "cases": len(cases), "equal": equal,
                         "verified_ms": ms["verified"], "json_ms": ms["json"], "exact_ms": ms["exact"],
                         "clickhouse_ms": ms["clickhouse"],
                         "verified_over_clickhouse": round(ms["verified"] / ms["clickhouse"], 3),
                         "json_over_clickhouse": round(ms["json"] / ms["clickhouse"], 3),
                         "verified_over_exact": round(ms["verified"] / ms["exact"], 3),
                         "index": verified["stats"]["index"], "events_scanned": verified["stats"]["events_scanned"]})
        session.close()
    return rows


def run(quick: bool = False) -> dict[str, Any]:
    from bench.corpora import Corpora

    rows = measure(Corpora().bpic(), 3 if quick else 7)
    over = [r["verified_over_clickhouse"] for r in rows]
    json_over = [r["json_over_clickhouse"] for r in rows]
    return {"rows": rows, "all_equal": all(r["equal"] for r in rows),
            "median_over_clickhouse": round(statistics.median(over), 3), "worst_over_clickhouse": max(over),
            "json_median_over_clickhouse": round(statistics.median(json_over), 3),
            "json_worst_over_clickhouse": max(json_over),
            "worst_verified_over_exact": max(r["verified_over_exact"] for r in rows)}
