"""A store that lives with a stream: appends, merges, retention and folds interleaved at random, each step
held to the definitions on the same events.

After every step of a random plan the live dataset is checked against what it must be:

- its stored events are exactly the appended ones from ``retained_from`` on (seqs kept), and the policy's
  promise holds (every event within the span, or at least the number of events, kept);
- its stream tree is bit for bit the tree a build of the events from its first leaf makes;
- verified and exact answers equal the reference (the definitions, brute force) over the retained events;
- an approximate answer misses no match: the live tree's intervals cover every match among the retained
  events, and the decayed summary's ``retired`` intervals every match that lay wholly in the retired history.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from api.service.queries import run_query
from exact.errors import QuerySemanticError
from exact.query.ast import WithinEvents, WithinTime
from exact.reference import reference_matches, stream_table
from exact.store.grouping import LAYOUT_KEY
from exact.store.merge import QUIET_FANOUT, QUIET_SHARE, merge_all, merge_plan
from exact.store.retention import Retention, policy_of
from sketch.build import BuildOptions
from sketch.dataset import PARTITION_KEY, Dataset
from sketch.tree import BloomTree
from tests.generators import engine_queries, keyed_streams, scaled
from tests.sketch.test_standing import key, windowed

TINY = BuildOptions(leaf_size=2, fpq=0.9)


def table_of(rows: list[dict], first_seq: int = 0) -> pa.Table:
    return stream_table([{"seq": first_seq + i, **r} for i, r in enumerate(rows)])


@st.composite
def plans(draw: st.DrawFn) -> list[tuple[str, Any]]:
    """Steps: small appends (most of them, so merges have parts to merge), merges, policies, retirements,
    folds and the job runner's whole round."""
    step = st.one_of(
        st.tuples(st.just("append"), keyed_streams(max_events=4)),
        st.tuples(st.just("append"), keyed_streams(max_events=4)),
        st.tuples(st.just("append"), keyed_streams(max_events=4)),
        st.tuples(st.just("merge"), st.sampled_from((2, 3))),
        st.tuples(st.just("quiet merge"), st.none()),
        st.tuples(st.just("retain"), st.one_of(st.builds(Retention, events=st.integers(1, 20)),
                                               st.builds(Retention, span_us=st.integers(1, 24)),
                                               st.builds(Retention, events=st.integers(1, 20)),
                                               st.builds(Retention, span_us=st.integers(1, 24)),
                                               st.none())),
        st.tuples(st.just("retire"), st.none()),
        st.tuples(st.just("retire"), st.none()),
        st.tuples(st.just("fold"), st.none()),
        st.tuples(st.just("maintain"), st.none()))
    return draw(st.lists(step, min_size=1, max_size=16))


def check_store(dataset: Dataset, every: list[dict], floor: int) -> int:
    """The stored events are the appended ones from ``retained_from`` on, the policy holds over the events
    still stored when it was set (from seq ``floor``: a policy brings nothing back), and the tree is a build
    of the events from its first leaf; returns ``retained_from``."""
    snap = dataset.snapshot()
    kept = snap.store.retained_from
    stored = dataset.store.read_table(columns=["seq", "ts", "type"], snapshot=snap.store)
    assert stored.column("seq").to_pylist() == list(range(kept, len(every)))
    assert stored.column("type").to_pylist() == [e["type"] for e in every[kept:]]
    assert stored.column("ts").cast(pa.int64()).to_pylist() == [e["ts"] for e in every[kept:]]
    assert sum(snap.store.type_counts.values()) == len(every) - kept
    policy = policy_of(snap.store)
    if policy is not None and policy.events is not None:
        assert len(every) - kept >= min(policy.events, len(every) - floor)
    elif policy is not None and policy.span_us is not None:
        now = max(every[-1]["ts"], snap.store.watermark or every[-1]["ts"])
        assert all(i >= kept for i, e in enumerate(every) if e["ts"] >= now - policy.span_us and i >= floor)
    tree = snap.tree
    assert tree.n_events == len(every) and tree.first_leaf == (kept // TINY.leaf_size if kept else 0)
    built = BloomTree(tree.config, first_leaf=tree.first_leaf)
    rest = table_of(every)[tree.first_seq:]
    built.update(rest.column("type"), rest.column("ts"))
    assert tree.digest() == built.digest()
    return kept


@scaled(200, HealthCheck.function_scoped_fixture, HealthCheck.too_slow)
@given(rows=keyed_streams(max_events=6), plan=plans(), data=st.data())
def test_merges_retention_and_folds_keep_the_answers_of_the_retained_events(
        rows: list[dict], plan: list[tuple[str, Any]], data: st.DataObject) -> None:
    within = data.draw(st.one_of(st.builds(WithinEvents, st.integers(2, 6)),
                                 st.builds(WithinTime, st.integers(0, 4))))
    query = windowed(data.draw(engine_queries()), within)
    home = Path(tempfile.mkdtemp(prefix="seqsketch-live-"))
    try:
        Dataset.build(home, "d", table_of(rows), TINY, partition_key="case")
        dataset = Dataset.open(home, "d")
        every = list(rows)
        kept = floor = 0
        for kind, value in plan:
            if kind == "append":
                base = every[-1]["ts"]
                batch = [{**r, "ts": r["ts"] + base} for r in value]
                dataset.append(table_of(batch).drop_columns(["seq"]))
                every += batch
            elif kind == "merge":
                merge_all(dataset.store, fanout=value)
            elif kind == "quiet merge":  # (as upkeep merges a dataset no commit came to for a while)
                merge_all(dataset.store, fanout=QUIET_FANOUT, share=QUIET_SHARE)
            elif kind == "retain":
                dataset.retain(value)
                floor = kept
            elif kind == "retire":
                dataset.retire()
            elif kind == "fold":
                dataset.fold_layout()
            else:
                dataset.maintain(seconds=1.0, layout_least=1)
            kept = check_store(dataset, every, floor)
        retained = table_of(every)[kept:]
        expected = sorted(key(m) for m in reference_matches(query, retained))
        try:
            exact = run_query(home, "d", query, mode="exact")
        except QuerySemanticError as refused:  # a comparison of kinds the dataset cannot hold: refused alike
            assert "in this dataset" in str(refused)
            return
        verified = run_query(home, "d", query, mode="verified")
        for answer in (exact, verified):
            assert sorted(key(m) for m in answer["matches"]) == expected, (query, answer["stats"])
            if kept:
                assert answer["stats"]["history_from"]["seq"] == kept
        approx = run_query(home, "d", query, mode="approximate")
        spans = [(iv["start_seq"], iv["end_seq"]) for iv in approx.get("intervals", [])]
        for first, last, _ in expected:
            assert any(lo <= first and last <= hi for lo, hi in spans), (query, first, last, spans)
        cut = dataset.snapshot().tree.first_seq  # the summary holds the tree before it; the tree the rest
        gone = [key(m) for m in reference_matches(query, table_of(every[:cut]))] if cut else []
        if gone:  # wholly in the retired history: the decayed summary names where, never misses one
            retired = approx["retired"]
            assert retired["verifiable"] is False and retired["exists"] and retired["until_seq"] == cut
            spans = [(iv["start_seq"], iv["end_seq"]) for iv in retired["intervals"]]
            for first, last, _ in gone:
                assert any(lo <= first and last <= hi for lo, hi in spans), (query, first, last, spans)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_a_quiet_dataset_is_merged_down_to_a_part_and_a_big_part_waits_for_a_sixteenth_more(tmp_path: Path) -> None:
    """Balanced merges leave a large part and the smaller ones after it; once quiet, runs of two or more
    merge whenever the largest holds at most 16/17 of the run: the parts of a fresh build, without
    rewriting a large part for every few events added to it."""
    rows = [{"type": "A", "ts": i, "case": "c"} for i in range(1700)]
    Dataset.build(tmp_path, "d", table_of(rows[:1600]), TINY)
    dataset = Dataset.open(tmp_path, "d")
    dataset.append(table_of(rows[1600:1650]).drop_columns(["seq"]))  # 50 more: under a sixteenth of 1,600
    assert merge_plan(dataset.store.snapshot(), fanout=QUIET_FANOUT, share=QUIET_SHARE) is None
    assert merge_plan(dataset.store.snapshot()) is None
    dataset.append(table_of(rows[1650:1700]).drop_columns(["seq"]))  # 100: a sixteenth
    run = merge_plan(dataset.store.snapshot(), fanout=QUIET_FANOUT, share=QUIET_SHARE)
    assert run is not None and [p.rows for p in run] == [50, 50]  # (the fewest rows first)
    assert merge_all(dataset.store, fanout=QUIET_FANOUT, share=QUIET_SHARE) == 2  # then [1600, 100]
    snap = dataset.snapshot()
    assert [p.rows for p in snap.store.parts] == [1700]
    assert dataset.store.read_table(columns=["seq"]).column("seq").to_pylist() == list(range(1700))


def test_folds_and_retirements_racing_from_threads_never_lose_a_file_the_store_names(tmp_path: Path) -> None:
    """A fold and a retirement write their partition files before they take the lock to publish them; run
    from several threads at once (the job runner's upkeep beside a request's), each writes under names of its
    own, so the loser's clean-up never deletes, and no writer overwrites, the file the winner published."""
    import threading

    rows = [{"type": "AB"[i % 2], "ts": i, "case": f"c{i % 7}"} for i in range(400)]
    Dataset.build(tmp_path, "d", table_of(rows[:200]), TINY, partition_key="case")
    dataset = Dataset.open(tmp_path, "d")
    for start in range(200, 400, 20):
        dataset.append(table_of(rows[start:start + 20]).drop_columns(["seq"]))
        barrier = threading.Barrier(4)
        errors: list[BaseException] = []
        if start == 300:
            dataset.retain(Retention(events=150))
        threads = [threading.Thread(target=race, args=(tmp_path, s, barrier, errors))
                   for s in ("fold", "fold", "fold", "retire")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        extra = dataset.store.snapshot().extra
        for entry in (PARTITION_KEY, LAYOUT_KEY):
            named = dataset.root / extra[entry]["file"]
            assert named.is_file() and named.stat().st_size > 0, (start, entry, named)
        kept = check_store(dataset, rows[:start + 20], 0)
        assert kept == dataset.store.snapshot().retained_from


def race(home: Path, step: str, barrier: Any, errors: list[BaseException]) -> None:
    """One of the racing upkeep steps, on a dataset of its own opening, started with the others."""
    try:
        barrier.wait()
        dataset = Dataset.open(home, "d")
        dataset.fold_layout() if step == "fold" else dataset.retire()
    except BaseException as e:  # (reported by the test)
        errors.append(e)


def test_a_snapshot_opened_before_an_upkeep_step_still_reads_the_files_it_replaced(tmp_path: Path) -> None:
    """A retirement or a fold publishes new partition files (and a new decayed summary) in the place of old
    ones, which a query that opened the snapshot before goes on reading: however old those files are, none
    may be deleted until the grace is over — neither by the step's own sweep nor by another writer's."""
    import os
    import time

    from exact.store.grouping import layout_of
    from sketch.tree.decay import DECAY_KEY

    rows = [{"type": "AB"[i % 2], "ts": i, "case": f"c{i % 7}"} for i in range(600)]
    Dataset.build(tmp_path, "d", table_of(rows[:200]), TINY, partition_key="case")
    dataset = Dataset.open(tmp_path, "d")
    dataset.retain(Retention(events=50))
    for start, step in ((200, "retire"), (300, "retire"), (400, "fold"), (500, "retire")):
        dataset.append(table_of(rows[start:start + 100]).drop_columns(["seq"]))
        long_ago = time.time() - 3600  # (written an hour ago, as a dataset's files are)
        for f in dataset.root.rglob("*"):
            if f.is_file():
                os.utime(f, (long_ago, long_ago))
        before = dataset.store.snapshot()
        held = [before.extra[k]["file"] for k in (PARTITION_KEY, LAYOUT_KEY, DECAY_KEY) if k in before.extra]
        assert (dataset.retire() is not None) if step == "retire" else dataset.fold_layout()
        after = dataset.store.snapshot().extra
        assert all(after[k]["file"] != before.extra[k]["file"] for k in (PARTITION_KEY, LAYOUT_KEY)), step
        dataset._sweep()  # (another writer's sweep, right after the commit)
        for f in held:
            assert (dataset.root / f).is_file(), (start, step, f)
        layout = layout_of(dataset.store.root, before.extra)
        assert layout is not None and layout.events == before.extra[LAYOUT_KEY]["events"]
