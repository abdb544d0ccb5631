"""The index file: round trips keep the digest, appends continue after a load, damage is always refused."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from exact.errors import IndexCorrupt
from sketch import persist
from sketch.tree import BloomTree, TreeConfig
from tests.generators import scaled, zipf_types


def sample_tree(events: int = 3000, *, leaf_size: int = 16, fold: bool = True, seed: int = 3) -> BloomTree:
    rng = np.random.default_rng(seed)
    types = zipf_types(rng, events, 200, 1.3, "t")
    tree = BloomTree(TreeConfig(leaf_size=leaf_size, m=1024, k=4, fold=fold))
    tree.update(types, np.sort(rng.integers(0, 10**12, events)))
    return tree


@pytest.mark.parametrize("fold", [True, False])
@pytest.mark.parametrize("events", [0, 1, 15, 16, 3000, 3001])
def test_save_load_keeps_the_digest_and_every_answer(tmp_path: Path, events: int, fold: bool) -> None:
    tree = sample_tree(events, fold=fold)
    path = tmp_path / "tree.sqt"
    written = persist.save(tree, path)
    assert written == path.stat().st_size == tree.stored_bytes()
    loaded = persist.load(path)
    assert loaded.digest() == tree.digest() and loaded == tree
    assert loaded.nodes() == tree.nodes()
    assert loaded.top_nodes() == tree.top_nodes()
    keys = [f"t{i}" for i in range(0, 220, 7)]
    assert (loaded.probe(range(loaded.rows), keys) == tree.probe(range(tree.rows), keys)).all()
    assert persist.deserialize(persist.serialize(tree)) == tree
    assert not list(tmp_path.glob(".*tmp*"))  # no temporary file left behind


@scaled(40)
@given(st.integers(0, 400), st.integers(0, 400), st.integers(1, 9), st.sampled_from([None, True, False]))
def test_append_after_load_equals_building_at_once(first: int, second: int, leaf_size: int,
                                                   sparse: bool | None) -> None:
    rng = np.random.default_rng(first * 1000 + second)
    types = zipf_types(rng, first + second, 50, 1.3, "t")
    ts = np.arange(first + second, dtype=np.int64)
    config = TreeConfig(leaf_size=leaf_size, m=128, k=3, fanout=2 + (first % 3))
    whole = BloomTree(config)
    whole.update(types, ts)
    part = BloomTree(config)
    part.sparse_leaves = sparse  # open nodes saved as position lists, rows, or in the stored bits
    part.update(types[:first], ts[:first])
    resumed = persist.deserialize(persist.serialize(part))
    resumed.update(types[first:], ts[first:])
    assert resumed.digest() == whole.digest()


def test_a_loaded_tree_is_memory_mapped_and_copied_on_append(tmp_path: Path) -> None:
    tree = sample_tree()
    path = tmp_path / "tree.sqt"
    persist.save(tree, path)
    loaded = persist.load(path)
    assert not loaded._pool.view().flags.writeable  # a view into the mapping, not a copy
    loaded.update(["t1", "t2"], [10**12 + 1, 10**12 + 2])
    assert loaded.n_events == tree.n_events + 2
    assert persist.load(path) == tree  # the file is untouched


def flip(data: bytes, offset: int) -> bytes:
    return data[:offset] + bytes([data[offset] ^ 0x10]) + data[offset + 1:]


def test_every_damaged_byte_is_refused(tmp_path: Path) -> None:
    data = persist.serialize(sample_tree(800))
    # Every byte that carries content: the prefix, every section, the header.  (Padding between sections is
    # never read, so a flip there may go unnoticed.)
    _, _, _, header_offset, header_len, _ = struct.unpack_from("<8sIIQQI", data, 0)
    header = json.loads(data[header_offset:header_offset + header_len])
    spans = [(0, 64)] + [(s["offset"], s["offset"] + s["length"]) for s in header["sections"]]
    spans.append((header_offset, len(data)))
    offsets = sorted({o for lo, hi in spans for o in range(lo, hi, max(1, (hi - lo) // 25))})
    for offset in offsets:
        with pytest.raises(IndexCorrupt):
            persist.deserialize(flip(data, offset))
    for cut in (0, 10, 64, len(data) // 2, len(data) - 1):
        with pytest.raises(IndexCorrupt):
            persist.deserialize(data[:cut])
    with pytest.raises(IndexCorrupt):
        persist.deserialize(data + b"\0")


def test_damaged_file_on_disk_is_refused_with_its_path(tmp_path: Path) -> None:
    path = tmp_path / "tree.sqt"
    persist.save(sample_tree(), path)
    data = bytearray(path.read_bytes())
    data[200] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(IndexCorrupt) as err:
        persist.load(path)
    assert str(path) in str(err.value) and err.value.code == "index_corrupt"
    with pytest.raises(IndexCorrupt, match="missing"):
        persist.load(tmp_path / "absent.sqt")


def test_a_consistent_but_impossible_structure_is_refused() -> None:
    """A file whose checksums were recomputed over nonsense (levels no tree can have) is still refused."""
    tree = sample_tree(400)
    forged = tree.copy()
    forged._level.data[forged._level.n - 1] = 5  # a level-5 node whose children cannot exist
    with pytest.raises(IndexCorrupt, match="structure"):
        persist.deserialize(persist.serialize(forged))
