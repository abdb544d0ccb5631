"""A live dataset's upkeep: parts merged, history retired under a retention policy (its stretch of the tree kept
as a decayed summary), the partition layout folded — the half of :class:`sketch.dataset.Dataset` that keeps a
dataset fed by a stream healthy (docs/operations.md, "Merges, retention and upkeep").

Each step writes its files aside and publishes them in one commit of the store; the files a commit replaces
are marked and swept after the grace readers of older snapshots get.
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from exact.errors import NotFound
from exact.store import EventStore, Snapshot
from exact.store import writer as store_writer
from exact.store.grouping import LAYOUT_KEY
from exact.store.merge import QUIET_FANOUT, QUIET_SHARE, merge_all, upgrade_all
from exact.store.replica import sweep_bucket
from exact.store.retention import RETAIN_KEY, Retention, counts_of, policy_of, retirable
from sketch.build import BuildOptions
from sketch.index_files import (
    INDEX_DIR,
    INDEX_KEY,
    LOADED,
    DatasetSnapshot,
    IndexRef,
    _index_ref,
    file_token,
    write_index,
)
from sketch.partition.files import PARTITION_KEY, PARTITION_LEAVES, build_partition_into
from sketch.tree import BloomTree, TreeConfig
from sketch.tree.decay import DECAY_KEY, MOST_UNITS, Decayed
from sketch.tree.decay import load as load_decayed
from sketch.tree.decay import save as save_decayed

#: how often upkeep sweeps a dataset's bucket of what no commit names (seconds)
SWEEP_EVERY_S = 30.0
_SWEPT_BUCKET: dict[str, float] = {}

#: a fold of a dataset under a steady feed waits this many times as long as its last fold took
FOLD_SPACING = 10.0
#: a dataset no commit came to for this long (seconds) is merged down to a part per cap
#: (:data:`~exact.store.merge.QUIET_SHARE`), as a fresh build lays it out
QUIET_S = 10.0
#: when each dataset's last fold under upkeep ended (monotonic) and how long it took, by dataset folder
_FOLDS: dict[str, tuple[float, float]] = {}
#: when this process last pruned each dataset's index folder (monotonic), by dataset folder: an append that
#: writes no checkpoint, and upkeep, prune once every :data:`~exact.store.writer.CLEAN_EVERY_S`
_PRUNED: dict[str, float] = {}

#: the manifest entries whose files a sweep deletes once no commit names them and the grace is over
_SWEPT_KEYS = (PARTITION_KEY, LAYOUT_KEY, DECAY_KEY)


class Upkeep:
    """The upkeep of :class:`~sketch.dataset.Dataset` (its base): what it needs of the dataset is named here."""

    root: Path
    store: EventStore
    name: str

    def snapshot(self) -> DatasetSnapshot:
        raise NotImplementedError

    def _load(self, ref: IndexRef, snap: Snapshot) -> BloomTree:
        raise NotImplementedError

    def _prune(self, live: int) -> None:
        raise NotImplementedError

    def checkpoint(self) -> bool:
        raise NotImplementedError

    def compact(self, *, merges: bool = True) -> DatasetSnapshot:
        """Fold the events appended since the last build into the partition layout and tree (both built anew
        over every stored event: the same bits a build of these events makes), and with ``merges`` merge the
        store's small parts until no balanced run is left (:mod:`exact.store.merge`) and rewrite the parts
        whose seek files are of an older layout (:func:`~exact.store.merge.upgrade_all`).  Appends go on
        meanwhile: the layout covers the events stored when it began, the rest stay its tail.  What the
        retention policy no longer keeps is retired first (:meth:`retire`)."""
        while self.retire() is not None:
            pass
        if merges:
            merge_all(self.store)
            merge_all(self.store, fanout=QUIET_FANOUT, share=QUIET_SHARE)
            upgrade_all(self.store)
        if (self.store.snapshot().extra or {}).get(PARTITION_KEY):
            self.fold_layout()
        elif not merges:
            raise NotFound(f"dataset {self.name!r} has no partition key to compact by; rebuild it with "
                           "`seqsketch build … --partition-key ATTR`", where=self.name)
        self.checkpoint()
        return self.snapshot()

    def fold_layout(self) -> bool:
        """Build the partition layout and tree anew over every event stored now, and publish them unless a
        fold of as many events or more was published meanwhile; False when there was nothing to fold."""
        snap = self.store.snapshot()
        ref = (snap.extra or {}).get(PARTITION_KEY)
        if not ref:
            raise NotFound(f"dataset {self.name!r} has no partition key to compact by; rebuild it with "
                           "`seqsketch build … --partition-key ATTR`", where=self.name)
        if snap.events == (snap.extra or {}).get(LAYOUT_KEY, {}).get("events"):
            return False  # nothing appended since
        update = self._layout_files(snap, ref, start_seq=snap.retained_from)
        with self.store.writing():  # (only the publication waits for the lock: appends went on meanwhile)
            now = self.store.snapshot()
            current = (now.extra or {}).get(LAYOUT_KEY, {})
            if int(current.get("events", 0)) >= snap.events or (now.extra or {}).get(PARTITION_KEY) != ref:
                for entry in update.values():
                    (self.root / entry["file"]).unlink(missing_ok=True)
                return False
            self._replacing(now, update)
            try:
                self.store.commit((), update)
            except BaseException:
                for entry in update.values():
                    (self.root / entry["file"]).unlink(missing_ok=True)
                raise
        return True

    def _replacing(self, now: Snapshot, update: Mapping[str, Any]) -> None:
        """Before a commit (under the writer's lock) that replaces the files ``now`` names under the keys of
        ``update``: mark them replaced, so that a sweep — of this process, right after the commit, or of
        another at any time — deletes them only after the grace a reader of an older snapshot gets
        (:meth:`_sweep`); a query that opened ``now`` before still reads them.  Marked after the commit
        instead, a sweep in between found them unnamed and as old as their writing, and deleted them under
        that query's feet."""
        extra = now.extra or {}
        for key in update:
            ref = extra.get(key) if key in _SWEPT_KEYS else None  # (trees go by version: _prune)
            if isinstance(ref, Mapping) and "file" in ref:
                try:
                    os.utime(self.root / ref["file"])
                except FileNotFoundError:
                    continue

    # ------------------------------------------------------------------------------------------- retention
    def retain(self, policy: Retention | None) -> DatasetSnapshot:
        """Keep ``policy`` (None: keep everything) from now on; the parts past it go at the next upkeep
        (:meth:`retire`, run by the job runner and by ``seqsketch retain``)."""
        self.store.commit((), {RETAIN_KEY: None if policy is None else policy.to_json()})
        return self.snapshot()

    def decayed(self, snap: Snapshot | None = None) -> Decayed | None:
        """The decayed summary of the history retention retired (None: nothing was)."""
        snap = snap or self.store.snapshot()
        ref = (snap.extra or {}).get(DECAY_KEY)
        if not ref:
            return None
        return _DECAYED.load(self.root / ref["file"])

    def retire(self, *, most_units: int = MOST_UNITS) -> dict[str, Any] | None:
        """Retire the parts past the retention policy, if any: in one commit, the parts go, the stream tree
        is kept from the first leaf that holds a retained event (the same bits a build of the events from
        there makes), the retired stretch of the old tree joins the decayed summary (:mod:`sketch.tree.decay`),
        and the partition layout is built anew over the retained events.  Appends go on meanwhile: what they
        add is caught up under the lock.  What was retired, or None."""
        snap = self.store.snapshot()
        gone = retirable(snap, policy_of(snap))
        ref = _index_ref(snap)
        if not gone or ref is None:
            return None
        kept_from = gone[-1].last_seq + 1
        counts = counts_of(self.store, gone, snap)
        old = self._load(ref, snap)
        config = old.config
        first_leaf = kept_from // config.leaf_size
        start = max(first_leaf * config.leaf_size, old.first_seq)
        first_leaf = start // config.leaf_size
        tree = BloomTree(config, first_leaf=first_leaf)
        table = self.store.read_table(start, snap.events - 1, columns=["seq", "ts", "type"], snapshot=snap)
        tree.update(table.column("type"), table.column("ts"))
        before = self.decayed(snap) or Decayed.empty(config.m, config.k)
        summary = before.absorb(old, start).decayed(most=most_units)
        layout_update: dict[str, Any] = {}
        pref = (snap.extra or {}).get(PARTITION_KEY)
        if pref:
            layout_update = self._layout_files(snap, pref, start_seq=kept_from)
        with self.store.writing():
            now = self.store.snapshot()
            if [p.file for p in now.parts[:len(gone)]] != [p.file for p in gone] or _index_ref(now) is None:
                self._discard(layout_update)
                return None  # (taken meanwhile)
            if now.events > snap.events:  # appended meanwhile: the tree catches up
                more = self.store.read_table(snap.events, now.events - 1, columns=["ts", "type"], snapshot=now)
                tree.update(more.column("type"), more.column("ts"))
            version = (_index_ref(now) or ref).version + 1
            new_ref = write_index(self.root, tree, version)
            decay_name = f"{INDEX_DIR}/decay-{version:06d}-{file_token()}.sqd"
            size = save_decayed(summary, self.root / decay_name)
            update = {INDEX_KEY: new_ref.to_json(),
                      DECAY_KEY: {"file": decay_name, "units": len(summary), "bytes": size,
                                  "first_seq": int(summary.lo_seq[0]) if len(summary) else 0,
                                  "end_seq": summary.end_seq},
                      **layout_update}
            self._replacing(now, update)
            try:
                self.store.commit((), update, retire=[p.file for p in gone], retired_counts=counts)
            except BaseException:
                for f in (new_ref.file, decay_name):
                    (self.root / f).unlink(missing_ok=True)
                self._discard(layout_update)
                raise
            LOADED.put(self.root / new_ref.file, tree, written=True)
            self._prune(new_ref.version)
        return {"retired_parts": len(gone), "retired_events": sum(p.rows for p in gone),
                "retained_from": kept_from, "decayed_units": len(summary)}

    def _layout_files(self, snap: Snapshot, ref: Mapping[str, Any], *, start_seq: int = 0) -> dict[str, Any]:
        """The partition layout and tree of the events of ``snap`` from ``start_seq`` on, written (not yet
        published); their manifest entries."""
        key = ref["key"]
        config = TreeConfig.from_dict(ref["config"])
        assert config.fpq is not None  # (a build records the target it sized the tree for)
        options = BuildOptions(leaf_size=config.leaf_size // PARTITION_LEAVES, fpq=config.fpq,
                               fanout=config.fanout, fold=config.fold, query_length=config.query_length)
        version = _file_version(ref["file"]) + 1  # (the files' names are their own: index_file_name)
        table = self.store.read_table(start_seq, None, snapshot=snap, columns=["seq", "ts", "type", f"attrs.{key}"])
        return build_partition_into(self.root, table, key, options, version=version)

    def _discard(self, update: Mapping[str, Any]) -> None:
        for entry in update.values():
            (self.root / entry["file"]).unlink(missing_ok=True)

    def maintain(self, *, seconds: float = 0.25, layout_tail: float = 0.02, layout_least: int = 4096,
                 quiet_s: float = 1.0) -> dict[str, Any]:
        """One round of upkeep for a live dataset: merges of its small parts for about ``seconds`` (until no
        balanced run is left; once no commit came for :data:`QUIET_S`, down to a part per cap, as a fresh
        build lays the events out), and the partition layout folded when its tail holds more than
        ``layout_tail`` of the events (and at least ``layout_least``), or holds any once no commit came for
        ``quiet_s`` seconds — but a fold of a fed dataset waits :data:`FOLD_SPACING` times as long as the last
        one took (it reads every event's type, ts and key: under a steady feed it then takes at most a tenth of
        a core, and leaves few replaced layouts behind).  What was done."""
        retired = self.retire()
        merged = merge_all(self.store, seconds=seconds)
        snap = self.store.snapshot()
        if not merged and snap.committed and time.time() - snap.committed > QUIET_S:
            # (at once, not a merge per round: each commit would start the wait for quiet again)
            merged = merge_all(self.store, seconds=20 * seconds, fanout=QUIET_FANOUT, share=QUIET_SHARE)
        folded = False
        snap = self.store.snapshot()
        if (snap.extra or {}).get(PARTITION_KEY):
            covered = int((snap.extra or {}).get(LAYOUT_KEY, {}).get("events", 0))
            tail = snap.events - covered
            quiet = snap.committed and time.time() - snap.committed > quiet_s
            ended, took = _FOLDS.get(str(self.root), (0.0, 0.0))
            spaced = time.monotonic() - ended >= FOLD_SPACING * took
            if (spaced and tail >= max(layout_least, layout_tail * snap.events)) or (tail and quiet and not merged):
                started = time.monotonic()
                folded = self.fold_layout()
                _FOLDS[str(self.root)] = (time.monotonic(), time.monotonic() - started)
        # a quiet dataset's tree is written whole, so that a process loading it adds nothing from the store
        checkpointed = bool(snap.committed and time.time() - snap.committed > quiet_s and self.checkpoint())
        ref = _index_ref(self.store.snapshot())
        if ref is not None and time.monotonic() - _PRUNED.get(str(self.root), -math.inf) >= store_writer.CLEAN_EVERY_S:
            with self.store.writing():
                self._prune(ref.file_version)
        remote = self.store.remote
        swept = None
        if remote is not None and time.monotonic() - _SWEPT_BUCKET.get(remote.uri, -math.inf) >= SWEEP_EVERY_S:
            _SWEPT_BUCKET[remote.uri] = time.monotonic()
            swept = sweep_bucket(remote)  # (what no commit names any more, from the bucket)
        return {"merged": merged, "layout_folded": folded, "retired": retired, "checkpointed": checkpointed,
                **({"bucket_swept": swept} if swept and any(swept.values()) else {})}


class _DecayedCache:
    """Decayed summaries loaded in this process, by file (a summary file is never changed once written)."""

    def __init__(self, capacity: int = 8) -> None:
        self.capacity = capacity
        self._held: OrderedDict[str, Decayed] = OrderedDict()
        self._lock = threading.Lock()

    def load(self, path: Path) -> Decayed:
        with self._lock:
            found = self._held.get(str(path))
            if found is not None:
                return found
        summary = load_decayed(path)
        with self._lock:
            self._held[str(path)] = summary
            while len(self._held) > self.capacity:
                self._held.popitem(last=False)
        return summary


_DECAYED = _DecayedCache()


def _file_version(name: str) -> int:
    return int(re.search(r"(\d{6,})", name).group(1))  # type: ignore[union-attr]
