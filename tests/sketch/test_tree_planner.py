"""The planner passes the stream tree over where it would rule out next to nothing (the pattern's rarest
position occurs, within a window, throughout the stream: :func:`sketch.evaluate.candidates.tree_narrows`),
and keeps it where its types are clustered in time — on stores built for real, over more units than the
planner's threshold.  Either way the verified answer is the exact one."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from api.service import run_query
from exact.query.language.parser import parse
from exact.reference import stream_table
from sketch.answer import modes
from sketch.build import BuildOptions
from sketch.dataset import Dataset
from sketch.evaluate import TreeIndex
from sketch.evaluate.candidates import PASS_OVER_MIN_UNITS, tree_narrows
from sketch.tree.nodes import TreeNodes

EVENTS = 2 * PASS_OVER_MIN_UNITS + 400  # leaves of 2 events: more units than the threshold
RARE_UNTIL = EVENTS // 20  # R occurs in the first 5 % of the stream only


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = random.Random(7)
    rows = []
    for i in range(EVENTS):
        kind = rng.choice("ABCD" if i >= RARE_UNTIL else "ABCDR")
        rows.append({"seq": i, "ts": i * 1_000_000, "type": kind, "x": rng.randrange(100)})
    root = tmp_path_factory.mktemp("planner")
    Dataset.build(root, "d", stream_table(rows), BuildOptions(leaf_size=2))
    return root


def both(home: Path, text: str) -> tuple[dict, dict]:
    verified = run_query(home, "d", text, mode="verified")
    exact = run_query(home, "d", text, mode="exact")
    assert verified["count"] == exact["count"], text
    assert verified.get("matches") == exact.get("matches"), text
    return verified, exact


@pytest.mark.parametrize("text", [
    "PATTERN SEQ(A a, B b) WITHIN 20 seconds RETURN count",
    "PATTERN SEQ(A a, NOT(C c), B+ b) WITHIN 20 seconds STRATEGY skip_till_next_match RETURN matches",
    "PATTERN SEQ(A a, D d) WITHIN 20 seconds STRATEGY strict_contiguity RETURN matches",
    "PATTERN SEQ(A a, B b) WHERE a.x < 3 AND b.x > 96 WITHIN 20 seconds RETURN matches",
])
def test_types_throughout_the_stream_pass_the_tree_over(home: Path, text: str) -> None:
    verified, exact = both(home, text)
    assert verified["stats"]["index"] == "store"
    assert verified["stats"]["candidate_intervals"] == 1
    assert verified["stats"]["events_scanned"] == exact["stats"]["events_scanned"]


def test_an_empty_answer_without_the_tree_says_why(home: Path) -> None:
    verified, _ = both(home, "PATTERN SEQ(A a, B b) WHERE a.x > 98 AND b.x > 98 AND a.x < b.x "
                             "WITHIN 20 seconds RETURN count")
    assert verified["stats"]["index"] == "store" and verified["count"] == 0
    assert verified["explain"].startswith("the tree rules out no part of the stream"), verified["explain"]
    # (what follows is the search for a cause, budgeted in time: docs/query-language.md)
    assert f"{EVENTS:,} events hold no exact match: " in verified["explain"]


@pytest.mark.parametrize("text", [
    "PATTERN SEQ(R r, A a) WITHIN 20 seconds RETURN matches",
    "PATTERN SEQ(A a, R r, B b) WITHIN 20 seconds STRATEGY skip_till_next_match RETURN matches",
    "PATTERN SEQ(B b, R r) RETURN count",  # no window: R's units, 5 % of the stream, keep the tree
])
def test_types_clustered_in_time_keep_the_tree(home: Path, text: str) -> None:
    verified, exact = both(home, text)
    assert verified["stats"]["index"] == "stream"
    if "WITHIN" in text:  # the tree's candidates lie near R, in the first 5 % of the stream
        assert verified["stats"]["events_scanned"] < exact["stats"]["events_scanned"] / 4


def test_a_short_between_range_keeps_the_tree(home: Path) -> None:
    """Fewer units than the threshold in the query's range: the tree's walk costs little there."""
    text = ("PATTERN SEQ(A a, B b) WITHIN 20 seconds BETWEEN '1970-01-01T00:00:00Z' AND '1970-01-01T00:10:00Z' "
            "RETURN matches")
    verified, _ = both(home, text)
    assert verified["stats"]["index"] == "stream"


PASSED_OVER = ["PATTERN SEQ(A a, B b) WITHIN 20 seconds", "PATTERN SEQ(C c, D d) WITHIN 20 events"]
KEPT = ["PATTERN SEQ(R r, A a) WITHIN 20 seconds", "PATTERN SEQ(B b, R r)", "PATTERN SEQ(A a, R r) WITHIN 20 events",
        # without a window a unit counts only when it may hold the rarest position itself: A is in about
        # 44 % of these 2-event leaves
        "PATTERN SEQ(A a, B b)"]


@pytest.mark.parametrize("sliced", [True, False], ids=["sliced", "sampled"])
def test_the_planner_decides_alike_from_sliced_filters_and_from_a_sample(home: Path, sliced: bool,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A tree too large to slice is judged on a sample of its units, each probed near it."""
    if not sliced:
        monkeypatch.setattr(TreeNodes, "sliced", lambda self, nodes, **kw: None)
    dataset = Dataset.open(home, "d")
    snap = dataset.snapshot()
    assert snap.tree is not None
    index = TreeIndex(snap.tree)
    assert index.lists_units is sliced
    counts = snap.store.type_counts
    assert [tree_narrows(parse(t), index, counts) for t in PASSED_OVER] == [False] * len(PASSED_OVER)
    assert [tree_narrows(parse(t), index, counts) for t in KEPT] == [True] * len(KEPT)
    assert index.probes() > 0


FEW_HOME_EVENTS = modes.FEW_EVENTS_OF + 1000


@pytest.fixture(scope="module")
def long_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stream long enough for the few-events rule, where R (about 300 events) and S (about 6,000) occur
    throughout."""
    rng = random.Random(11)
    rows = [{"seq": i, "ts": i * 1_000_000, "type": rng.choices("ABRS", weights=(55, 36, 0.5, 8.5))[0],
             "x": rng.randrange(100)} for i in range(FEW_HOME_EVENTS)]
    root = tmp_path_factory.mktemp("few")
    Dataset.build(root, "d", stream_table(rows), BuildOptions())
    return root


@pytest.mark.parametrize("text", [
    "PATTERN SEQ(R r, R s) WITHIN 2000 seconds RETURN matches",
    "PATTERN SEQ(R r, NOT(R n), R s) WHERE r.x < s.x RETURN count",
    "PATTERN SEQ(R r, R s) WHERE r.x > 200 RETURN count",  # (empty: its explain says why)
])
def test_a_pattern_of_few_events_reads_them_in_place(long_home: Path, text: str) -> None:
    """The planner reads a pattern's few events in place, without the tree's walk (modes.FEW_EVENTS): the
    plan says so, and the answer is the exact one; an empty answer says how many events were read."""
    verified, exact = both(long_home, text)
    stats = verified["stats"]
    assert stats["index"] == "store" and "in place costs less than the tree's walk" in stats["plan"], stats
    assert stats["events_scanned"] == exact["stats"]["events_scanned"] <= modes.FEW_EVENTS
    if not verified["exists"]:
        assert verified["explain"].startswith("the pattern's types hold "), verified["explain"]


def test_a_pattern_of_more_events_keeps_the_tree(long_home: Path) -> None:
    """S holds more than modes.FEW_EVENTS events: the rule leaves the choice to the tree's planner."""
    verified, _ = both(long_home, "PATTERN SEQ(S r, S s) WITHIN 3 seconds RETURN count")
    assert "in place costs less than the tree's walk" not in verified["stats"].get("plan", "")
