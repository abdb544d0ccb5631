"""A query whose answer the dataset's type counts decide — a position of the pattern needs a type no event
has — is answered from the manifest alone, in every mode, before any index, layout or part is opened."""

from __future__ import annotations

from pathlib import Path

import pytest

from api.service import run_query
from exact.errors import SeqsketchError
from exact.reference import stream_table
from sketch.build import BuildOptions
from sketch.dataset import Dataset

ABSENT = "PATTERN SEQ(A a, OR(X x, Y y)) PARTITION BY case RETURN {}"


@pytest.fixture()
def built(home: Path) -> Path:
    rows = [{"seq": i, "ts": i, "type": "ABC"[i % 3], "case": i % 4} for i in range(60)]
    Dataset.build(home, "d", stream_table(rows), BuildOptions(leaf_size=4))
    return home


@pytest.mark.parametrize("returns", ["matches", "count", "exists", "intervals"])
def test_an_absent_type_is_answered_from_the_counts(built: Path, returns: str) -> None:
    text = ABSENT.format(returns)
    answers = {mode: run_query(built, "d", text, mode=mode) for mode in ("approximate", "verified", "exact")}
    # the index, the layout and the parts are unreadable: nothing of them is opened
    for path in (built / "datasets" / "d").rglob("*"):
        if path.is_file() and path.name != "manifest.json":
            path.write_bytes(b"damaged")
    for mode, before in answers.items():
        again = run_query(built, "d", text, mode=mode)
        assert again == {**before, "stats": {**before["stats"], "total_ms": again["stats"]["total_ms"]}}
        assert again["exists"] is False and again["stats"]["events_scanned"] == 0
        assert again["stats"]["index"] == (None if mode == "exact" else "statistics")
        if mode != "exact":
            assert again["explain"] == "X | Y never occurs in the history"
        if mode != "approximate" and returns != "exists":
            assert again["count"] == 0
    # a question the counts do not decide needs the files
    with pytest.raises(SeqsketchError):
        run_query(built, "d", "PATTERN SEQ(A a, B b) PARTITION BY case", mode="verified")


def test_a_position_no_type_can_fill_is_left_to_the_index(built: Path) -> None:
    for mode in ("approximate", "verified", "exact"):
        body = run_query(built, "d", "PATTERN SEQ(A a, B b) WHERE b.type = 'C'", mode=mode)
        assert body["exists"] is False and body["stats"]["index"] != "statistics"
