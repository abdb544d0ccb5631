"""Answers over a dataset whose oldest history was retired: where the history starts, and what the decayed
summary of the retired history says.

Every answer of a dataset that retention has trimmed tells where its history starts (``stats.history_from``:
the first seq kept and its time): verified and exact answers are over the retained events only.  An
approximate answer also gives ``retired``: the candidate intervals of the pattern in the retired history,
found on the decayed summary (:mod:`sketch.tree.decay`) by the same evaluation as on the live tree — so no
match that occurred there is missed — with the false-positive rate of the summary's units it probed.  The
events are gone, so it is marked ``verifiable: false`` and is never part of ``exists``, ``count`` or
``intervals``; an empty verified answer's ``explain`` says that the retired history was not searched.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from exact.engine import iso_ts_many
from exact.query.ast import Query, Return
from exact.store import Snapshot
from sketch.evaluate.candidates import approximate
from sketch.tree.decay import Decayed


def history_from(snap: Snapshot) -> dict[str, Any] | None:
    """Where the retained history starts (None when nothing was retired)."""
    if not snap.retained_from:
        return None
    ts = iso_ts_many([snap.first_ts])[0] if snap.first_ts is not None else None
    return {"seq": snap.retained_from, "ts": ts}


def retired_section(query: Query, summary: Decayed) -> dict[str, Any]:
    """The approximate answer of ``query`` over the retired history the summary holds."""
    index = summary.index()
    approx = approximate(query, index)
    found = approx.intervals() if query.returns != Return.EXISTS or approx.exists else []
    units = index.units
    intervals = []
    if found:
        starts = units.index_of_seq(np.array([iv["start_seq"] for iv in found], dtype=np.int64))
        ends = units.index_of_seq(np.array([iv["end_seq"] for iv in found], dtype=np.int64))
        start_ts, end_ts = iso_ts_many(units.lo_ts[starts]), iso_ts_many(units.hi_ts[ends])
        intervals = [{"start_seq": iv["start_seq"], "end_seq": iv["end_seq"], "start_ts": a, "end_ts": b}
                     for iv, a, b in zip(found, start_ts, end_ts, strict=True)]
    return {"verifiable": False, "exists": approx.exists, "intervals": intervals,
            "expected_false_positive_rate": approx.expected_false_positive_rate,
            "until_seq": summary.end_seq, "units": len(summary),
            "note": "the history before until_seq was retired: these are the decayed summary's candidate "
                    "intervals, a superset of where the pattern occurred, never verified (the events are gone)"}


def with_history(body: dict[str, Any], query: Query, snap: Snapshot, summary: Decayed | None,
                 mode: str) -> dict[str, Any]:
    """``body`` (an answer of dataset snapshot ``snap``) with where its history starts, and in approximate
    mode the retired history's section (see the module docstring)."""
    start = history_from(snap)
    if start is None:
        return body
    if isinstance(body.get("stats"), dict):
        body["stats"]["history_from"] = start
    if mode == "approximate" and summary is not None and len(summary):
        body["retired"] = retired_section(query, summary)
    if mode != "approximate" and not body.get("exists") and body.get("explain"):
        body["explain"] += (f" (the history before seq {start['seq']}, {start['ts']}, was retired and not "
                            "searched; ask in approximate mode for what its decayed summary says)")
    elif mode == "approximate" and not body.get("exists") and body.get("explain"):
        said = body.get("retired", {}).get("exists")
        body["explain"] += (f" (the history before seq {start['seq']}, {start['ts']}, was retired: "
                            + ("its decayed summary says the pattern may have occurred there — see `retired`, "
                               "which cannot be verified)" if said else "its decayed summary rules it out there)"))
    return body
