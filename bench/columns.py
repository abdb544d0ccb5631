"""Answers as columns beside pm4py: listing matches and cases through the SDK, against counting them, and
against the process-mining library a notebook user already has.

``python -m bench columns [--quick]``.  Data: a replay of BPI Challenge 2012 with shifted time and case ids
(5 copies: 1,311,000 events; 2 with ``--quick``), built as a real dataset (local builder) and served by a real
``seqsketch serve`` (gunicorn, one worker) on loopback; the same events as a pandas DataFrame for pm4py, made
once before any timing.

The question: which cases hold 'W_Completeren aanvraag' eventually followed by 'W_Nabellen offertes'
(``PARTITION BY case``; pm4py's ``filter_eventually_follows_relation``).  Checked equal first: the cases
``RETURN cases`` lists are pm4py's, each case's number of matches sums to the count, and the matches listed
as Arrow are the JSON listing's.  Then, interleaved, several rounds of: the SDK's ``RETURN count``; the
matches listed as JSON and through the Arrow path (``format="arrow"``, then ``to_pandas()``); ``RETURN cases``
as JSON and as Arrow; and pm4py's filter with its distinct cases.  Medians and their ratios are recorded.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from bench.timing import timed

FIRST, THEN = "W_Completeren aanvraag", "W_Nabellen offertes"
QUERY = f"PATTERN SEQ('{FIRST}' c, '{THEN}' n) PARTITION BY case"


def pm4py_frame(stream: pa.Table) -> Any:
    """The stream as pm4py's event log frame (case, activity, timestamp), in stream order."""
    import pandas as pd

    frame = pd.DataFrame({
        "case:concept:name": pc.struct_field(stream.column("attrs"), "case").to_pandas(),
        "concept:name": stream.column("type").cast(pa.string()).to_pandas(),
        "time:timestamp": stream.column("ts").to_pandas(),
    })
    frame.index = pd.RangeIndex(len(frame))
    return frame


def pm4py_cases(frame: Any) -> set[str]:
    import pm4py

    kept = pm4py.filter_eventually_follows_relation(
        frame, [(FIRST, THEN)], retain=True, activity_key="concept:name", case_id_key="case:concept:name",
        timestamp_key="time:timestamp")
    return set(kept["case:concept:name"].unique().tolist())


def measure(stream: pa.Table, rounds: int) -> dict[str, Any]:
    from api.client import Client
    from bench.load import served
    from sketch.build import BuildOptions
    from sketch.dataset import Dataset

    frame = pm4py_frame(stream)
    with tempfile.TemporaryDirectory(prefix="seqsketch-columns-") as tmp:
        home = Path(tmp)
        Dataset.build(home, "replay", stream, BuildOptions())
        env = {"SEQSKETCH_QUERY_MAX_MATCHES": "10000000", "SEQSKETCH_QUERY_MAX_ROWS": "10000000"}
        with served(home, server="gunicorn", workers=1, env=env) as url:
            client = Client(url, timeout=300)
            count = client.query("replay", QUERY + " RETURN count")
            listed = client.query("replay", QUERY)
            arrow = client.query("replay", QUERY, format="arrow")
            cases = client.query("replay", QUERY + " RETURN cases")
            cases_arrow = client.query("replay", QUERY + " RETURN cases", format="arrow")
            theirs = pm4py_cases(frame)
            ours = {c["case"] for c in cases.cases}
            table = arrow.to_arrow()
            equal = (ours == theirs and cases.case_count == len(theirs)
                     and sum(c["matches"] for c in cases.cases) == count.count == table.num_rows
                     and len(listed.matches) == count.count
                     and table.column("c.seq").to_pylist() == [m["bindings"]["c"][0] for m in listed.matches]
                     and table.column("n.seq").to_pylist() == [m["bindings"]["n"][0] for m in listed.matches]
                     and set(cases_arrow.to_arrow().column("case").to_pylist()) == theirs)
            if not equal:
                raise AssertionError(f"seqsketch and pm4py disagree: {len(ours)} cases against {len(theirs)}")
            runs = {
                "count": lambda: client.query("replay", QUERY + " RETURN count"),
                "matches_json": lambda: client.query("replay", QUERY).matches,
                "matches_arrow": lambda: client.query("replay", QUERY, format="arrow").to_arrow(),
                "matches_pandas": lambda: client.query("replay", QUERY, format="arrow").to_pandas(),
                "cases_json": lambda: client.query("replay", QUERY + " RETURN cases").cases,
                "cases_arrow": lambda: client.query("replay", QUERY + " RETURN cases", format="arrow").to_arrow(),
                "pm4py": lambda: pm4py_cases(frame),
            }
            times: dict[str, list[float]] = {k: [] for k in runs}
            for _ in range(rounds):  # interleaved: the machine's moods fall on all alike
                for key, call in runs.items():
                    times[key].append(1000 * timed(call)[1])
    med = {k: round(statistics.median(v), 2) for k, v in times.items()}
    row = {"events": stream.num_rows, "query": QUERY, "matches": count.count, "cases": len(theirs),
           "equal": equal, **{f"{k}_ms": v for k, v in med.items()},
           "matches_arrow_over_count": round(med["matches_arrow"] / med["count"], 3),
           "matches_pandas_over_count": round(med["matches_pandas"] / med["count"], 3),
           "matches_json_over_count": round(med["matches_json"] / med["count"], 3),
           "cases_json_over_pm4py": round(med["cases_json"] / med["pm4py"], 3),
           "cases_arrow_over_pm4py": round(med["cases_arrow"] / med["pm4py"], 3)}
    print(f"{stream.num_rows:,} events, {count.count:,} matches in {len(theirs):,} cases: "
          + "  ".join(f"{k} {v:.1f} ms" for k, v in med.items()), flush=True)
    return row


def run(quick: bool = False) -> dict[str, Any]:
    from bench.corpora import Corpora, replay_log

    corpora = Corpora()
    copies = 2 if quick else 5
    rounds = 3 if quick else 7
    row = measure(replay_log(corpora.bpic_raw(), copies * 262_200), rounds)
    return {"rounds": rounds, "rows": [row]}
