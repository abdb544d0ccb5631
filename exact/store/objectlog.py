"""A store's commits on object storage, where there is no rename: the checkpoint-and-log of
:mod:`exact.store.manifest`, each version published by a conditional put.

Version ``v``'s commit is the object ``log/<v>.json`` (a :class:`~exact.store.manifest.Change`), written with
:meth:`~exact.store.objects.ObjectStore.put_if_absent`: of writers racing to publish one version — on one
server or several — exactly one succeeds, and the others get :class:`~exact.errors.Conflict` (the service's
``409``: read the new state and retry) and leave nothing behind.  A reader never sees half a commit: an
object appears whole or not at all.  Every :data:`~exact.store.manifest.CHECKPOINT_EVERY` versions the
writer that published one also writes the whole snapshot as ``checkpoint/<v>.json`` (conditionally as well:
any copy of a version's checkpoint is the same state).  A reader starts from the newest checkpoint it lists
and follows the log from there (a missing next version ends it); afterwards it only follows the log from
the version it reached.

Why not Delta Lake's or Iceberg's table formats: both keep the same kind of ordered log of immutable files
(Delta's ``_delta_log`` with put-if-absent on S3; Iceberg's metadata files swapped by a catalog), but their
commits describe data files only — the store's commits also carry its index versions, watermark, retention
and per-part seek-file facts, which would live beside them in a second place to keep in step.  The manifest
keeps one place.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

from exact.errors import Conflict, NotFound, SeqsketchError
from exact.store.manifest import CHECKPOINT_EVERY, LOG, Change, Snapshot
from exact.store.objects import ObjectStore

CHECKPOINTS = "checkpoint"
#: how often a reader lists the checkpoints again (seconds): the log behind the newest one may be swept
#: (:func:`exact.store.replica.sweep_bucket`, which waits longer than this before it deletes)
LIST_EVERY_S = 60.0


class LostRace(Conflict):
    """Another writer published the version this commit was to be: nothing of it is visible; the writer reads
    the new state and tries again (the service's ``409`` if it gives up)."""


def _key(folder: str, version: int) -> str:
    return f"{folder}/{version:012d}.json"


class ObjectLog:
    """The commits of the store at ``objects`` (an :class:`~exact.store.objects.ObjectStore` location)."""

    def __init__(self, objects: ObjectStore) -> None:
        self.objects = objects
        self._latest: Snapshot | None = None  # the newest state this object has read or published
        self._listed = -math.inf  # when the checkpoints were last listed (time.monotonic)

    def create(self, first: Snapshot) -> Snapshot:
        """Publish the first state of a new store (as a checkpoint of its version: a store built on disk
        arrives with the versions its build committed); :class:`~exact.errors.Conflict` if the location holds
        a store already."""
        if first.version < 1:
            raise ValueError(f"a store starts at version 1 or later, not {first.version}")
        if self.objects.list(CHECKPOINTS):
            raise Conflict("an event store exists here already", where=self.objects.uri)
        snap = self._checkpointed(first)
        if not self.objects.put_if_absent(_key(CHECKPOINTS, snap.version), _encode(snap.to_json())):
            raise Conflict("an event store exists here already", where=self.objects.uri)
        self._latest = snap
        return snap

    def snapshot(self) -> Snapshot:
        """The current state: the newest checkpoint (listed once), then the log after it."""
        snap = self._latest
        if snap is None or time.monotonic() - self._listed > LIST_EVERY_S:
            # (listed again now and then: a sweep deletes the log well behind the newest checkpoint)
            versions = [int(k.rsplit("/", 1)[1].split(".")[0]) for k in self.objects.list(CHECKPOINTS)
                        if k.endswith(".json")]
            self._listed = time.monotonic()
            if not versions:
                raise NotFound("no event store here", where=self.objects.uri)
            if snap is None or max(versions) > snap.version:
                snap = Snapshot.from_json(self._read(_key(CHECKPOINTS, max(versions))))
        snap = self._follow(snap)
        self._latest = snap
        return snap

    def _follow(self, snap: Snapshot) -> Snapshot:
        while True:
            try:
                data = self._read(_key(LOG, snap.version + 1))
            except NotFound:
                return snap
            snap = snap.apply(Change.from_json(data))

    def commit(self, before: Snapshot, after: Snapshot) -> Snapshot:
        """Publish ``after`` as the version following ``before`` (which must be the current state):
        :class:`~exact.errors.Conflict` if another writer published that version first — nothing of this
        commit is then visible.  Returns the state as readers see it."""
        if after.version != before.version + 1:
            raise ValueError(f"version {after.version} does not follow {before.version}")
        change = Change.between(before, after, time.time())
        if not self.objects.put_if_absent(_key(LOG, change.version), _encode(change.to_json())):
            self._latest = None  # (read again: another writer moved on)
            raise LostRace(f"version {change.version} was committed meanwhile (by another writer); retry",
                           where=self.objects.uri)
        snap = before.apply(change)
        if snap.version - snap.checkpoint >= CHECKPOINT_EVERY:
            snap = self._checkpointed(snap)
            self.objects.put_if_absent(_key(CHECKPOINTS, snap.version), _encode(snap.to_json()))
        self._latest = snap
        return snap

    @staticmethod
    def _checkpointed(snap: Snapshot) -> Snapshot:
        import dataclasses

        return dataclasses.replace(snap, checkpoint=snap.version, committed=snap.committed or time.time())

    def _read(self, key: str) -> dict[str, Any]:
        raw = self.objects.get(key)
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise SeqsketchError(f"unreadable commit: {err}", where=f"{self.objects.uri}/{key}") from None
        if not isinstance(data, dict):
            raise SeqsketchError("unreadable commit: not a JSON object", where=f"{self.objects.uri}/{key}")
        return data


def _encode(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode("utf-8")
