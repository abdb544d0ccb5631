"""What the crash and damage tests share: the inputs they build from, copies of a built home, a stored
stream read back, and the check that a live index equals a rebuild."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pyarrow as pa

from api.service import dataset_info
from exact.store import EventStore, dataset_dir, store_dir
from sketch import persist
from sketch.dataset import Dataset
from sketch.tree import BloomTree

BASE_EVENTS = 600
BATCH_EVENTS = 900


def jsonl(path: Path, first: int, count: int, start_ts: int) -> Path:
    rng = random.Random(first)
    lines = [f'{{"type": "T{rng.randrange(40)}", "ts": {start_ts + (first + i) * 7}, "case": {i % 13}}}\n'
             for i in range(count)]
    path.write_text("".join(lines))
    return path


def fresh_copy(base_home: Path, target: Path) -> Path:
    shutil.copytree(base_home, target, symlinks=True)
    return target


def stream(home: Path, name: str) -> pa.Table:
    store = EventStore.open(store_dir(dataset_dir(name, home)))
    return store.read_table(columns=["seq", "ts", "type"])


def assert_index_equals_rebuild(home: Path, name: str) -> None:
    """The live index covers exactly the stored events and equals a tree built from them at once."""
    snap = Dataset.open(home, name).snapshot()
    table = stream(home, name)
    assert snap.events == table.num_rows == snap.tree.n_events
    assert table.column("seq").to_pylist() == list(range(table.num_rows))
    rebuilt = BloomTree(snap.tree.config)
    rebuilt.update(table.column("type"), table.column("ts"))
    assert snap.tree.digest() == rebuilt.digest()
    assert_checkpoint_holds(home, name)
    assert dataset_info(home, name)["index"]["index_digest"] == rebuilt.digest()


def assert_checkpoint_holds(home: Path, name: str, whole: pa.Table | None = None) -> None:
    """The index file the live version names holds the tree of the events it says it covers (appends
    between checkpoints name the last one), and the digest the manifest records for it; ``whole``: every
    event the dataset was given, from seq 0 (retention retired some), else the stored ones."""
    snap = Dataset.open(home, name).snapshot()
    checkpoint = persist.load(dataset_dir(name, home) / snap.index.file)
    assert checkpoint.n_events == snap.index.covered and checkpoint.digest() == snap.index.index_digest
    table = (whole if whole is not None else stream(home, name))
    table = table.slice(checkpoint.first_seq, snap.index.covered - checkpoint.first_seq)
    rebuilt = BloomTree(checkpoint.config, first_leaf=checkpoint.first_leaf)
    rebuilt.update(table.column("type"), table.column("ts"))
    assert rebuilt.digest() == checkpoint.digest()


def later_events(current: pa.Table) -> pa.Table:
    """Fifty events after the last one of ``current``."""
    last = current.column("ts")[-1].value
    return pa.table({"ts": pa.array([last + i for i in range(1, 51)], pa.timestamp("us", tz="UTC")),
                     "type": [f"R{i % 3}" for i in range(50)]})
