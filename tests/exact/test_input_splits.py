"""Inputs read in pieces (exact.readers.splits) give the events of reading them whole.

Generated files with many rows — CSV with a header, CRLF line ends, quoted fields (commas, doubled quotes,
newlines), multi-byte UTF-8 and column types that only the whole file decides; JSON Lines with a byte
order mark, blank lines and multi-byte text; Parquet with many row groups — are cut into small pieces and
read piece by piece, and the events (seq order, ts, type, every attribute with its type) equal the whole
file's.  A cut inside a quoted multi-line CSV field is detected (the pieces disagree), never read wrong.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from exact.events import ATTRS, concat_batches
from exact.readers import ReadOptions, read_events
from exact.readers.splits import (
    PieceFacts,
    Split,
    csv_column_types,
    pieces_agree,
    plan_splits,
    read_piece,
)
from exact.readers.tabular import cast_text_column
from tests.generators import write_csv, write_jsonl


def read_whole(path: Path, fmt: str) -> pa.Table:
    return concat_batches(list(read_events(path, fmt, ReadOptions(batch_rows=300))))


def read_in_pieces(path: Path, fmt: str, target: int) -> tuple[list[Split], list[PieceFacts], pa.Table]:
    splits = plan_splits(path, fmt, target)
    facts, tables = [], []
    for split in splits:
        found = PieceFacts()
        tables.extend(read_piece(split, ReadOptions(batch_rows=300), found))
        facts.append(found)
    if fmt == "csv" and len(splits) > 1 and pieces_agree(facts):
        types = csv_column_types(facts)
        typed = []
        for t in tables:
            struct = t.column(ATTRS).combine_chunks()
            children = [cast_text_column(struct.field(n), types[n]) for n in types]
            typed.append(pa.table({"ts": t.column("ts"), "type": t.column("type"),
                                   ATTRS: pa.StructArray.from_arrays(children, names=list(types))}))
        tables = typed
    return splits, facts, concat_batches(tables)


@pytest.mark.parametrize("target", [1_000, 7_777, 40_000])
def test_csv_in_pieces_equals_whole(tmp_path: Path, target: int) -> None:
    path = write_csv(tmp_path / "events.csv", 3_000)
    splits, facts, got = read_in_pieces(path, "csv", target)
    assert len(splits) > 3
    assert pieces_agree(facts)
    whole = read_whole(path, "csv")
    assert got.schema == whole.schema
    assert got.equals(whole)
    types = dict(zip(whole.schema.field(ATTRS).type.names, [f.type for f in whole.schema.field(ATTRS).type],
                     strict=True))
    assert types["amount"] == pa.float64() and types["flag"] == pa.bool_() and types["case"] == pa.int64()
    assert types["empty"] == pa.string()  # no value anywhere: settled to text, as for a whole read
    assert csv_column_types(facts)["empty"] == pa.null()


def test_csv_cut_inside_a_quoted_newline_is_detected(tmp_path: Path) -> None:
    """A piece whose first line starts inside a multi-line quoted field disagrees with its predecessor;
    the others agree."""
    path = write_csv(tmp_path / "multi.csv", 3_000, multiline=97)
    data = path.read_bytes()
    splits = plan_splits(path, "csv", 2_000)
    facts = []
    for split in splits:
        found = PieceFacts()
        try:
            list(read_piece(split, ReadOptions(), found))
        except Exception:  # a piece that starts inside a quoted field may not even parse
            found.first_record = -1
        facts.append(found)
    inside = [False]  # the first piece starts after the header
    for split in splits[1:]:
        start = data.find(b"\n", split.start - 1) + 1  # the piece's guess: the next line start
        inside.append(data[:start].count(b'"') % 2 == 1)  # odd quotes before it: inside a quoted field
    for k in range(1, len(splits)):
        if not inside[k - 1]:  # a piece that began on a record start knows where the next one begins
            assert (facts[k].first_record == facts[k - 1].next_record) == (not inside[k])
    assert any(inside) and not all(inside)
    assert not pieces_agree(facts)


def test_jsonl_in_pieces_equals_whole(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "events.jsonl", 2_500)
    splits, facts, got = read_in_pieces(path, "jsonl", 5_000)
    assert len(splits) > 10 and pieces_agree(facts)
    assert got.equals(read_whole(path, "jsonl"))


def test_parquet_in_row_group_pieces_equals_whole(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    n = 20_000
    table = pa.table({"ts": pa.array(1_600_000_000 + rng.integers(0, 9_000, n), pa.int64()),
                      "type": pa.array([f"T{x}" for x in rng.integers(0, 30, n)]).dictionary_encode(),
                      "case": pa.array(rng.integers(0, 500, n), pa.int32()),
                      "amount": pa.array(rng.random(n)), "when": pa.array(rng.integers(0, 10**12, n),
                                                                          pa.timestamp("ms"))})
    path = tmp_path / "events.parquet"
    pq.write_table(table, path, row_group_size=1_500)
    splits, _, got = read_in_pieces(path, "parquet", 50_000)
    assert len(splits) > 3 and [s.first_record for s in splits][:2] == [1, splits[1].start * 1_500 + 1]
    assert got.equals(read_whole(path, "parquet"))


def test_small_and_compressed_inputs_are_one_piece(tmp_path: Path) -> None:
    import gzip

    path = write_csv(tmp_path / "small.csv", 50)
    assert len(plan_splits(path, "csv", 1 << 20)) == 1
    packed = tmp_path / "big.csv.gz"
    packed.write_bytes(gzip.compress(write_csv(tmp_path / "big.csv", 3_000).read_bytes()))
    assert len(plan_splits(packed, "csv", 1_000)) == 1
    assert len(plan_splits(tmp_path / "big.csv", "csv", 1_000)) > 10
