"""A match's bound events (``include_events``, the CLI's partition column) are exactly the stored events its
bindings name, in stream order, with every attribute — read without the events between them, across parts
and an appended tail."""

from __future__ import annotations

import json
import random
from pathlib import Path

from api import service
from exact.events import iso_of_micros, to_records
from exact.store import EventStore, dataset_dir, store_dir


def test_bound_events_are_the_stored_events_the_bindings_name(home: Path, tmp_path: Path) -> None:
    rng = random.Random(7)
    path = tmp_path / "log.jsonl"
    with path.open("w") as f:
        for i in range(3000):
            f.write(json.dumps({"type": rng.choice("ABCD"), "ts": 1_600_000_000 + i,
                                "case": f"c{rng.randrange(40)}", "amount": rng.randrange(1000)}) + "\n")
    service.build_from_inputs(home, "log", [str(path)], engine="local")
    service.append_records(home, "log", [
        {"type": rng.choice("ABCD"), "ts": 1_600_003_000 + i, "case": f"c{rng.randrange(40)}", "note": "tail"}
        for i in range(500)])
    query = "PATTERN SEQ(A a, B+ b, C c) PARTITION BY case WITHIN 600 s"
    answer = service.run_query(home, "log", query, mode="exact", limit=None)
    matches = answer["matches"]
    assert len(matches) > 20 and any(m["start_seq"] < 3000 <= m["end_seq"] for m in matches)

    store = EventStore.open(store_dir(dataset_dir("log", home)))
    stored = {r["seq"]: r for r in to_records(store.read_table())}
    bound = service.bound_events(home, "log", matches)
    assert len(bound) == len(matches)
    for match, events in zip(matches, bound, strict=True):
        seqs = sorted(s for b in match["bindings"].values() for s in b)
        assert [e["seq"] for e in events] == seqs
        for e in events:
            want = stored[e["seq"]]
            assert e["ts"] == iso_of_micros(want["ts"])
            assert (e["type"], e["attrs"]) == (want["type"], want["attrs"])
        assert len({e["attrs"]["case"] for e in events}) == 1  # PARTITION BY case: one case per match
    assert service.bound_events(home, "log", []) == []
    assert service.bound_events(home, "log", [{"start_seq": 0, "end_seq": 0}]) == [[]]
