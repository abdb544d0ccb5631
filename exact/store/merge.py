"""Merging parts: the small parts of many appends folded into few, and published atomically.

Every append writes a part of its own, and a read pays per part it opens.  Neighbouring parts are merged into
one as a log-structured merge tree merges its runs: a run of at least :data:`FANOUT` parts in which no part
holds more than half of the rows (:func:`merge_plan`).  So a stream of appends of any sizes keeps
``O(FANOUT · log N)`` parts, and each event is rewritten ``O(log N)`` times.  Under a retention policy
merges stay within stretches of a sixteenth of the span kept (:func:`buckets`), so that whole parts fall out
of the span as it moves.

A merge reads its parts' events, writes one part of them as any write does — Parquet and seek file (with its
value indexes) under temporary names, fsynced, renamed — and only then takes the writer's lock to publish it
in the place of its parts, in one logged commit (:meth:`~exact.store.writer.StoreWriter.commit` with
``replace``).  Seqs never change, so readers keep their snapshots (the replaced files stay on disk a while:
:data:`~exact.store.manifest.REMOVED_GRACE_S`), standing queries keep their cursors, and appends go on
meanwhile.  A merge killed at any point leaves either the old parts named or the new one: a new part's file
that no commit names is deleted by a later write once it is older than the grace.  The trees are over the
stream's leaves, not its parts: a merge leaves them as they are.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from exact.errors import Conflict
from exact.store.manifest import DEFAULT_PART_ROWS, PARTS, PartInfo, Snapshot

#: the fewest neighbouring parts merged into one
FANOUT = 8
#: how a dataset no commit came to for a while is merged (:data:`QUIET_S` in :mod:`sketch.upkeep`): any two or
#: more neighbouring parts of which the largest holds at most this share — a quiet dataset ends with a part per
#: ``cap`` rows (per stretch under retention), as a fresh build has, and a part is rewritten only once the
#: parts after it have added a sixteenth of its rows
QUIET_FANOUT = 2
QUIET_SHARE = 16 / 17


def buckets(snap: Snapshot) -> Callable[[PartInfo], int] | None:
    """Under a retention policy, the stretch of the stream each part lies in — a sixteenth of the span kept
    (of time or of events) — so that merges never join parts of different stretches: a merged part would
    otherwise hold old events beside new ones, and be retired only when the newest went.  A part that
    straddles two stretches is its own (-1).  None without a policy."""
    from exact.store.retention import policy_of

    policy = policy_of(snap)
    if policy is None:
        return None
    if policy.events is not None:
        width = max(1, policy.events // 16)
        return lambda p: p.first_seq // width if p.first_seq // width == p.last_seq // width else -1
    span = max(1, int(policy.span_us or 1) // 16)
    return lambda p: p.min_ts // span if p.min_ts // span == p.max_ts // span else -1


def merge_plan(snap: Snapshot, *, fanout: int = FANOUT, cap: int = DEFAULT_PART_ROWS,
               share: float = 0.5) -> list[PartInfo] | None:
    """The next run of neighbouring parts to merge into one: of the **balanced** runs — at least ``fanout``
    and at most ``4 · max(fanout, FANOUT)`` parts, within ``cap`` rows, under a retention policy within one
    stretch (:func:`buckets`), and no part holding more than ``share`` (half) of the run's rows — the one with
    the fewest rows (the oldest of those); None when there is none.

    Balance bounds the work: an event's part at least doubles each time it is rewritten, so it is rewritten
    at most ``log2 N`` times.  It also bounds the parts: where no balanced run is left, every run's largest
    part outweighs the rest of it, so the parts shrink geometrically from the oldest, and there are
    ``O(fanout · log N)`` of them — whatever sizes the appends come in."""
    parts = snap.parts
    if len(parts) < fanout:
        return None
    stretch = buckets(snap)
    where = [stretch(p) if stretch is not None else 0 for p in parts]
    best: tuple[int, int, int] | None = None  # (rows, first index, length)
    for at in range(len(parts) - fanout + 1):
        if where[at] == -1:
            continue
        total = largest = 0
        for length in range(1, min(4 * max(fanout, FANOUT), len(parts) - at) + 1):
            part = parts[at + length - 1]
            if where[at + length - 1] != where[at]:
                break
            total += part.rows
            largest = max(largest, part.rows)
            if total > cap or (best is not None and total >= best[0]):
                break
            if length >= fanout and largest <= share * total:
                best = (total, at, length)
                break
    return None if best is None else list(parts[best[1]:best[1] + best[2]])


def merge(store: object, run: Sequence[PartInfo]) -> Snapshot | None:
    """Merge ``run`` (neighbouring parts of ``store``, an :class:`~exact.store.EventStore`) into one part and
    publish it in their place; returns the snapshot published, or None when the run is no longer the store's
    (a retention or another merge took some of it meanwhile: nothing changes)."""
    from exact.store import EventStore

    assert isinstance(store, EventStore)
    snap = store.snapshot()
    table = store.read_table(run[0].first_seq, run[-1].last_seq, snapshot=snap)
    part = store.write_part(table, run[0].first_seq, row_group_size=snap.row_group_size)
    try:
        return store.commit([part], replace=[p.file for p in run])
    except Conflict:
        for f in part.files:
            (store.root / PARTS / f).unlink(missing_ok=True)
        return None


def upgrade_all(store: object) -> int:
    """Rewrite each part whose seek file is of an older version than this build writes (or that has none)
    as a merge of that one part does: the same events under a new name, with a seek file of the current
    layout (:data:`exact.store.seek_format.VERSION`), published in its place.  Returns how many were rewritten.
    Seqs and trees stay as they are; a part taken by another merge or a retention meanwhile is passed."""
    from exact.store import EventStore
    from exact.store.seek_format import VERSION, file_version, seek_name

    assert isinstance(store, EventStore)
    made = 0
    for part in store.snapshot().parts:
        if part.seek_bytes and file_version(store.root / PARTS / seek_name(part.file)) == VERSION:
            continue
        current = {p.file for p in store.snapshot().parts}
        if part.file in current and merge(store, [part]) is not None:
            made += 1
    return made


def merge_all(store: object, *, fanout: int = FANOUT, cap: int = DEFAULT_PART_ROWS, most: int | None = None,
              seconds: float | None = None, share: float = 0.5) -> int:
    """Merge until the plan is empty (or ``most`` merges were made, or ``seconds`` have passed); returns how
    many were made."""
    from exact.store import EventStore

    assert isinstance(store, EventStore)
    made = missed = 0
    deadline = None if seconds is None else time.monotonic() + seconds
    while (most is None or made < most) and missed < 3 and (deadline is None or time.monotonic() < deadline):
        run = merge_plan(store.snapshot(), fanout=fanout, cap=cap, share=share)
        if run is None:
            break
        if merge(store, run) is not None:
            made, missed = made + 1, 0
        else:
            missed += 1  # (taken meanwhile: plan again, a few times)
    return made
