"""A dataset publishes its events and the index that covers them together (real store, real files)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from exact.errors import Conflict, IndexCorrupt
from exact.events import TS_TYPE
from exact.ingest import ingest
from exact.store import EventStore, dataset_dir, staged_dataset, store_dir
from sketch import index_files
from sketch.build import BuildOptions, build_from_table
from sketch.dataset import INDEX_KEY, Dataset
from sketch.index_files import LOADED
from sketch.tree import BloomTree
from tests.generators import zipf_types


def stream(n: int, seed: int = 0, start_ts: int = 1_600_000_000_000_000) -> pa.Table:
    """A stream table without ``seq``: Zipf-distributed types, non-decreasing ts, one attribute."""
    rng = np.random.default_rng(seed)
    ts = start_ts + np.cumsum(rng.integers(0, 5_000_000, n))
    types = zipf_types(rng, n, 300, 1.4, "T")
    attrs = pa.StructArray.from_arrays([pa.array(rng.integers(0, 50, n))], names=["case"])
    return pa.table({"ts": pa.array(ts, TS_TYPE), "type": types, "attrs": attrs})


def with_seq(table: pa.Table) -> pa.Table:
    return table.add_column(0, "seq", pa.array(np.arange(table.num_rows), pa.int64()))


OPTIONS = BuildOptions(leaf_size=32, fpq=0.01)


def test_build_open_snapshot(home: Path, shared_data: Path) -> None:
    table = ingest([shared_data / "running-example.xes"])
    Dataset.build(home, "example", table, OPTIONS)
    snap = Dataset.open(home, "example").snapshot()
    assert snap.events == snap.tree.n_events == 42 and snap.index_version == 1
    expected, _ = build_from_table(table, OPTIONS)
    assert snap.tree.digest() == expected.digest() == snap.index.index_digest
    assert (dataset_dir("example", home) / snap.index.file).stat().st_size == snap.index.bytes
    info = Dataset.open(home, "example").index_info()
    assert info["index_digest"] == expected.digest() and info["leaf_size"] == 32 and info["version"] == 1


def test_appends_equal_building_at_once_and_publish_together(home: Path) -> None:
    whole = stream(5000)
    Dataset.build(home, "s", with_seq(whole.slice(0, 1234)), OPTIONS)
    dataset = Dataset.open(home, "s")
    config = dataset.snapshot().tree.config
    before = dataset.snapshot()
    for lo, hi in ((1234, 1235), (1235, 3000), (3000, 5000)):
        snap = dataset.append(whole.slice(lo, hi - lo))
        assert snap.events == snap.tree.n_events == hi
        assert snap.store.extra[INDEX_KEY]["events"] == hi
    at_once = BloomTree(config)
    at_once.update(whole.column("type"), whole.column("ts"))
    final = Dataset.open(home, "s").snapshot()
    assert final.tree.digest() == at_once.digest() and final.index_version == 4
    # A reader holding the snapshot taken before the appends still has a whole, usable tree.
    assert before.tree.n_events == 1234 and before.tree.probe(before.tree.top_nodes(), ["T1"]).shape[0] > 0
    # Small appends did not write the tree whole: each version names the build's checkpoint, and a process
    # that holds no tree yet adds the appended events to it from the store.
    assert version_of(final.store.extra[INDEX_KEY]["file"]) == 1
    assert final.store.extra[INDEX_KEY]["file_events"] == 1234
    LOADED._trees.clear()
    cold = Dataset.open(home, "s").snapshot()
    assert cold.tree is not final.tree and cold.tree.digest() == at_once.digest() and cold.events == 5000
    assert Dataset.open(home, "s").index_info()["index_digest"] == at_once.digest()


def test_appends_write_the_tree_whole_at_checkpoints_and_prune_older_ones(home: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_files, "CHECKPOINT_VERSIONS", 2)
    whole = stream(3000, seed=3)
    Dataset.build(home, "s", with_seq(whole.slice(0, 1000)), OPTIONS)
    dataset = Dataset.open(home, "s")
    written = []
    for lo in range(1000, 2500, 250):
        snap = dataset.append(whole.slice(lo, 250))
        written.append((snap.index_version, snap.index.file, snap.index.covered))
    # every second version writes its tree whole; the one between names the one before
    assert [(v, version_of(f), n) for v, f, n in written[:4]] == [(2, 1, 1000), (3, 3, 1500), (4, 3, 1500),
                                                                  (5, 5, 2000)]
    assert written[1][1] == written[2][1] != written[3][1]  # (one file named by both versions)
    # as does a version that adds more events than a checkpoint may leave behind
    monkeypatch.setattr(index_files, "CHECKPOINT_VERSIONS", 100)
    monkeypatch.setattr(index_files, "CHECKPOINT_EVENTS", 400)
    assert (written[-1][0], version_of(written[-1][1]), written[-1][2]) == (7, 7, 2500)
    assert dataset.append(whole.slice(2500, 250)).index.covered == 2500
    last = dataset.append(whole.slice(2750, 250)).index.file
    assert version_of(last) == 9
    snap = Dataset.open(home, "s").snapshot()
    at_once = BloomTree(snap.tree.config)
    at_once.update(whole.column("type"), whole.column("ts"))
    LOADED._trees.clear()
    final = Dataset.open(home, "s").snapshot()
    assert final.tree.digest() == at_once.digest() and final.events == 3000
    # the live checkpoint and the one before stay; older ones are gone
    files = sorted(p.name for p in (dataset_dir("s", home) / "index").iterdir() if p.name.startswith("tree-"))
    assert files == sorted(Path(f).name for f in (written[-1][1], last))


def test_an_append_going_back_in_time_changes_nothing(home: Path) -> None:
    whole = stream(600)
    Dataset.build(home, "s", with_seq(whole), OPTIONS)
    dataset = Dataset.open(home, "s")
    before = dataset.snapshot()
    old = stream(10, seed=1, start_ts=1_000_000)  # far older than the dataset's last event
    with pytest.raises(Conflict):
        dataset.append(old)
    after = dataset.snapshot()
    assert after.store.version == before.store.version and after.tree.digest() == before.tree.digest()
    assert sorted(p.name for p in (dataset_dir("s", home) / "index").iterdir()
                  if p.name.startswith("tree-")) == [Path(before.index.file).name]


def test_a_store_without_index_gets_one_and_a_lagging_index_catches_up(home: Path) -> None:
    whole = stream(3000, seed=4)
    with staged_dataset("plain", home) as stage:
        EventStore.create(store_dir(stage), with_seq(whole.slice(0, 1000)))
    dataset = Dataset.open(home, "plain")
    assert dataset.snapshot().tree is None and dataset.index_info() is None
    snap = dataset.append(whole.slice(1000, 500))
    assert snap.tree.n_events == 1500
    config = snap.tree.config
    # Events appended around the index (straight into the store) are indexed on the next append.
    dataset.store.append(whole.slice(1500, 700))
    snap = dataset.append(whole.slice(2200, 800))
    at_once = BloomTree(config)
    at_once.update(whole.column("type"), whole.column("ts"))
    assert snap.events == 3000 and snap.tree.digest() == at_once.digest()


def test_reindex_rebuilds_with_new_options(home: Path) -> None:
    whole = stream(2000, seed=2)
    Dataset.build(home, "s", with_seq(whole), OPTIONS)
    dataset = Dataset.open(home, "s")
    snap = dataset.reindex(BuildOptions(leaf_size=128, fpq=0.001))
    assert snap.tree.config.leaf_size == 128 and snap.index_version == 2 and snap.events == 2000
    expected, _ = build_from_table(with_seq(whole), BuildOptions(leaf_size=128, fpq=0.001))
    assert snap.tree.digest() == expected.digest()


def test_a_damaged_index_is_refused_not_used(home: Path) -> None:
    Dataset.build(home, "s", with_seq(stream(800)), OPTIONS)
    snap = Dataset.open(home, "s").snapshot()
    path = dataset_dir("s", home) / snap.index.file
    data = bytearray(path.read_bytes())
    data[100] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(IndexCorrupt):
        Dataset.open(home, "s").snapshot()
    with pytest.raises(IndexCorrupt):
        Dataset.open(home, "s").append(stream(5, seed=9, start_ts=2_000_000_000_000_000))


def test_a_refused_budget_leaves_no_dataset(home: Path) -> None:
    from exact.errors import SeqsketchError

    with pytest.raises(SeqsketchError, match="--memory"):
        Dataset.build(home, "s", with_seq(stream(3000)), BuildOptions(leaf_size=32, memory_bytes=100))
    assert not dataset_dir("s", home).exists()


def test_an_orphan_from_a_crashed_append_is_never_read(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash between writing the next index version and committing it leaves an unreferenced file: readers
    keep using the version the manifest names, and the next append writes a file of its own name."""
    monkeypatch.setattr(index_files, "CHECKPOINT_VERSIONS", 1)  # (every append writes its tree whole)
    whole = stream(900, seed=6)
    Dataset.build(home, "s", with_seq(whole.slice(0, 500)), OPTIONS)
    orphan = dataset_dir("s", home) / "index" / "tree-000002.sqt"
    orphan.write_bytes(b"half-written garbage")
    dataset = Dataset.open(home, "s")
    assert dataset.snapshot().index_version == 1 and dataset.snapshot().events == 500
    snap = dataset.append(whole.slice(500, 400))
    assert snap.index_version == 2 and snap.events == snap.tree.n_events == 900
    assert version_of(snap.index.file) == 2 and Path(snap.index.file).name != orphan.name
    assert orphan.read_bytes() == b"half-written garbage"  # (never read, nor overwritten)


def test_a_published_version_is_mapped_once_and_a_changed_file_is_reloaded(home: Path) -> None:
    Dataset.build(home, "s", with_seq(stream(700, seed=8)), OPTIONS)
    first = Dataset.open(home, "s").snapshot().tree
    assert Dataset.open(home, "s").snapshot().tree is first  # same immutable file: mapped and checked once
    snap = Dataset.open(home, "s").append(stream(50, seed=9, start_ts=2_000_000_000_000_000))
    assert snap.tree is not first and snap.tree.n_events == 750 and first.n_events == 700


def test_a_loaded_version_is_prepared_for_queries_once(home: Path) -> None:
    """Loading an index version makes its query index (units, node spans) there and then, so its first
    query only probes; forgetting the probe answers leaves the answers unchanged."""
    from exact.query.language import parse
    from sketch.evaluate import TreeIndex, approximate

    Dataset.build(home, "p", with_seq(stream(900, seed=3)), OPTIONS)
    tree = Dataset.open(home, "p").snapshot().tree
    index = tree.cached(("tree-index", 0), lambda: pytest.fail("the version was not prepared when loaded"))
    assert index is TreeIndex.shared(tree) and len(index.units) == len(tree.leaves())
    query = parse("PATTERN SEQ('T1', 'T2') WITHIN 1 h")
    before = index.probes()
    first = approximate(query, index)
    probed = index.probes() - before
    assert probed > 0
    again = approximate(query, index)
    assert index.probes() - before == 2 * probed  # the same walk, counted again
    index.forget_probes()
    third = approximate(query, index)
    for other in (again, third):
        assert other.starts.tolist() == first.starts.tolist() and other.ends.tolist() == first.ends.tolist()


def version_of(file: str) -> int:
    """The index version that wrote ``file`` (its name: ``index/tree-<version>-<token>.sqt``)."""
    match = re.fullmatch(r"index/tree-(\d{6})-[0-9a-f]{8}\.sqt", file)
    assert match, file
    return int(match.group(1))
