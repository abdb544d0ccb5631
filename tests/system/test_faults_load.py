"""A short load test on loopback (the long one is ``python -m bench load``): a real ``seqsketch serve``
subprocess, reader threads querying while a writer appends.  No request may fail, every probe answer must
match a committed state (its count is that of the event total it reports), and afterwards every appended
event is stored exactly once, with an index equal to a rebuild."""

from __future__ import annotations

from pathlib import Path

from bench.load import BATCH, build, load_test, server_log, synthetic_input


def test_queries_while_appending_see_only_committed_states(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    build(home, "load", [synthetic_input(tmp_path / "stream.jsonl", 3_000)])
    queries = ["PATTERN SEQ(T0 a, T1 b) WITHIN 30 s",
               "PATTERN SEQ(T2 a, T3 b) PARTITION BY case RETURN count"]
    result = load_test(home, "load", queries, threads=3, baseline_s=0, append_s=5.0)
    mixed, final = result["with_appends"], result["final"]
    assert mixed["errors"] == 0, (mixed["error_samples"], server_log(home)[-4000:])
    assert mixed["violations"] == 0, mixed["violation_samples"]
    # The run must have exercised both sides, or it proves nothing.
    assert mixed["appended_events"] >= 3 * BATCH
    assert mixed["kinds"]["probe_verified"]["requests"] >= 3
    assert final["events"] == final["expected_events"] == 3_000 + mixed["appended_events"]
    assert final["seq_contiguous"] and final["lost"] == 0 and final["duplicated"] == 0
    assert final["marks"] == final["expected_marks"]
    assert final["index_equals_rebuild"]


def test_concurrent_recording_of_one_index_version(tmp_path: Path) -> None:
    """An append publishing version N while a listing catches the catalog up with the disk records the same
    version twice at once: both must succeed, leaving one row."""
    import threading

    from api.catalog import DatasetState, open_catalog

    catalog = open_catalog(f"sqlite:///{tmp_path / 'catalog.db'}", init_empty_sqlite=True)
    catalog.upsert_dataset("race", state=DatasetState.READY, events=0)
    errors: list[BaseException] = []
    for number in range(1, 16):
        barrier = threading.Barrier(6)

        def record(number: int = number, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            try:
                catalog.record_index_version("race", number=number, events=number * 10, files=[],
                                             digest=f"d{number}", config={})
            except BaseException as err:  # collected and reported below
                errors.append(err)

        threads = [threading.Thread(target=record) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    try:
        assert not errors, errors[:3]
        assert [v["number"] for v in catalog.index_versions("race")] == list(range(1, 16))
    finally:
        catalog.dispose()
