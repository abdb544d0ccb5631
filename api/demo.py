"""``seqsketch demo``: build the bundled BPI Challenge 2012 log and answer a handful of real questions.

Each question is answered in ``verified`` mode (index first, then the exact engine on the candidates only)
and, for comparison, in ``exact`` mode (a full scan); the two answers must agree — the demo says so when they
do and fails loudly when they do not.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from api.service import (
    BuildRequest,
    build_from_inputs,
    dataset_exists,
    dataset_info,
    full_scan,
    run_query,
    shared_data_dirs,
)
from exact.errors import NotFound

DATASET = "bpi2012"
LOG_NAME = "bpic2012.xes.gz"


@dataclass(frozen=True)
class Question:
    title: str
    query: str


QUESTIONS = (
    Question("Was an offer declined after two offers were sent, within 30 days, in the same application?",
             "PATTERN SEQ(O_SENT o1, O_SENT o2, O_DECLINED d) PARTITION BY case WITHIN 30 days "
             "RETURN matches"),
    Question("How often was an application declined within an hour of a fraud assessment?",
             "PATTERN SEQ('W_Beoordelen fraude' f, A_DECLINED d) PARTITION BY case WITHIN 1 hour "
             "RETURN count"),
    Question("Were contract details changed and an offer then sent back within two days?",
             "PATTERN SEQ('W_Wijzigen contractgegevens' w, O_SENT_BACK b) PARTITION BY case WITHIN 2 days"),
    Question("Where in the history were contract details changed?",
             "PATTERN 'W_Wijzigen contractgegevens' w RETURN intervals"),
    Question("Applications approved after an accepted offer, with no offer sent back in between (30 days)",
             "PATTERN SEQ(O_ACCEPTED o, NOT(O_SENT_BACK b), A_APPROVED a) PARTITION BY case WITHIN 30 days "
             "RETURN count"),
    Question("Was any application re-opened after approval?",
             "PATTERN SEQ(A_APPROVED a, A_REOPENED r) RETURN exists"),
)


def find_log(explicit: str | None = None) -> Path:
    """The bundled BPI 2012 log: ``--data``, ``$SEQSKETCH_DEMO_DATA``, or ``shared/data`` (see
    :func:`shared_data_dirs`)."""
    candidates = [explicit, os.environ.get("SEQSKETCH_DEMO_DATA")]
    candidates += [str(d / LOG_NAME) for d in shared_data_dirs()]
    for c in candidates:
        if c and Path(c).is_file():
            return Path(c)
    raise NotFound(f"the demo log {LOG_NAME} was not found; pass --data PATH or set SEQSKETCH_DEMO_DATA",
                   where="demo")


def run_demo(home: Path, *, engine: str, rebuild: bool, data: str | None,
             say: Callable[[str], None] = print) -> dict[str, Any]:
    """Build (unless already built) and answer :data:`QUESTIONS`; returns everything as one JSON object."""
    out: dict[str, Any] = {"dataset": DATASET, "questions": []}
    if rebuild or not dataset_exists(home, DATASET):
        log = find_log(data)
        say(f"building {DATASET} from {log} with the {engine} engine …")
        summary = build_from_inputs(home, DATASET, [str(log)], BuildRequest(replace=rebuild), engine=engine)
        out["build"] = summary
    else:
        summary = dataset_info(home, DATASET)
        out["build"] = None
    index = summary.get("index") or {}
    say(f"{DATASET}: {summary['events']:,} events, {len(summary['types'])} types, "
        f"{summary['start_ts'][:10]} … {summary['end_ts'][:10]}; store {summary['store_bytes']:,} B, "
        f"index {index.get('bytes', 0):,} B ({index.get('nodes', '?')} Bloom filters, "
        f"expected fpq {_fmt(index.get('expected_fpq'))})"
        + (f"; built in {summary['seconds']} s" if "seconds" in summary else ""))
    # Each answer is timed as a service answers it: with the index, the seek files and the layout mapped and
    # checked (once per process, which the first question would otherwise pay alone).
    for q in QUESTIONS:
        run_query(home, DATASET, q.query, mode="verified", limit=3)
        run_query(home, DATASET, q.query, mode="exact", limit=3)
    for q in QUESTIONS:
        verified = run_query(home, DATASET, q.query, mode="verified", limit=3)
        exact = run_query(home, DATASET, q.query, mode="exact", limit=3)
        agree = all(verified.get(k) == exact.get(k) for k in ("exists", "count", "matches", "intervals"))
        if not agree:
            raise AssertionError(f"verified and exact answers differ for: {q.query}")
        scan = full_scan(home, DATASET, q.query, limit=3)
        if any(scan.get(k) != exact.get(k) for k in ("exists", "count", "matches", "intervals")):
            raise AssertionError(f"a full scan and the exact mode differ for: {q.query}")
        vs, es, fs = verified["stats"], exact["stats"], scan["stats"]
        ratio = fs["total_ms"] / vs["total_ms"] if vs["total_ms"] else float("inf")
        out["questions"].append({"title": q.title, "query": q.query, "verified": verified,
                                 "exact_ms": es["total_ms"], "full_scan_ms": fs["total_ms"],
                                 "speedup": round(ratio, 1)})
        say("")
        say(f"? {q.title}")
        say(f"  {q.query}")
        say("  " + _summary(verified))
        say(f"  verified in {vs['total_ms']:.1f} ms (index {vs['approximate_ms']:.1f} ms, read "
            f"{vs['events_scanned']:,} of {vs['events_total']:,} events) vs a full scan "
            f"{fs['total_ms']:.1f} ms (speed-up {ratio:.1f}x; exact mode, which reads only the types "
            f"asked for: {es['total_ms']:.1f} ms), same answer")
    return out


def _fmt(x: Any) -> str:
    return f"{x:.1e}" if isinstance(x, float) else str(x)


def _summary(answer: dict[str, Any]) -> str:
    if answer.get("explain"):
        why = answer["explain"]
        text = why if isinstance(why, str) else why.get("message", str(why))
        return f"no: {text}"
    if not answer.get("exists"):
        return "no match"
    parts = [f"yes: {answer['count']:,} match(es)"]
    matches = answer.get("matches") or []
    if matches:
        m = matches[0]
        binds = ", ".join(f"{k}={v}" for k, v in m["bindings"].items())
        parts.append(f"first at seq {m['start_seq']}–{m['end_seq']} ({m['start_ts'][:19]}): {binds}")
    intervals = answer.get("intervals") or []
    if intervals and not matches:
        first = intervals[0]
        parts.append(f"{len(intervals)} interval(s), first seq {first['start_seq']}–{first['end_seq']}")
    return "; ".join(parts)
