"""A short load test on loopback (the long one is ``python -m bench load``): a real ``seqsketch serve``
subprocess, reader threads querying while a writer appends.  No request may fail, every probe answer must
match a committed state (its count is that of the event total it reports), and afterwards every appended
event is stored exactly once, with an index equal to a rebuild."""

from __future__ import annotations

from pathlib import Path

from bench.load import BATCH, build, load_test, synthetic_input


def test_queries_while_appending_see_only_committed_states(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    build(home, "load", [synthetic_input(tmp_path / "stream.jsonl", 3_000)])
    queries = ["PATTERN SEQ(T0 a, T1 b) WITHIN 30 s",
               "PATTERN SEQ(T2 a, T3 b) PARTITION BY case RETURN count"]
    result = load_test(home, "load", queries, threads=3, baseline_s=0, append_s=5.0)
    mixed, final = result["with_appends"], result["final"]
    assert mixed["errors"] == 0, mixed["error_samples"]
    assert mixed["violations"] == 0, mixed["violation_samples"]
    # The run must have exercised both sides, or it proves nothing.
    assert mixed["appended_events"] >= 3 * BATCH
    assert mixed["kinds"]["probe_verified"]["requests"] >= 3
    assert final["events"] == final["expected_events"] == 3_000 + mixed["appended_events"]
    assert final["seq_contiguous"] and final["lost"] == 0 and final["duplicated"] == 0
    assert final["marks"] == final["expected_marks"]
    assert final["index_equals_rebuild"]
