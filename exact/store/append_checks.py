"""What an append may bring, checked before anything is written: a part's rows (seq without gaps, ts never
decreasing), events not older than the stored ones nor at or before the watermark, a watermark that never goes
back, and attributes of nulls only that keep the stored types (:func:`keep_stored_types`)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exact.errors import Conflict
from exact.events import ATTRS, SEQ, TS, TYPE, iso_of_micros
from exact.store.manifest import Snapshot


def check_part_table(table: pa.Table, first_seq: int) -> None:
    missing = [c for c in (SEQ, TS, TYPE) if c not in table.column_names]
    if missing:
        raise ValueError(f"a part needs columns seq, ts, type; missing {missing}")
    if table.num_rows == 0:
        raise ValueError("a part needs at least one event")
    seq = table.column(SEQ).to_numpy()
    if seq[0] != first_seq or not np.array_equal(seq, np.arange(first_seq, first_seq + len(seq))):
        raise ValueError(f"a part's seq must run {first_seq}, {first_seq + 1}, … without gaps")
    ts = table.column(TS).combine_chunks().view(pa.int64()).to_numpy(zero_copy_only=False)
    if len(ts) > 1 and not np.all(ts[1:] >= ts[:-1]):
        raise ValueError("a part's ts must not decrease along seq")


def check_watermark(watermark: int, last_ts: int | None, current: int | None) -> None:
    """Refuse a watermark that goes back in time (:class:`Conflict`, as an append that does): event time has
    reached ``watermark`` only if no stored event is after it and no earlier watermark was past it."""
    if last_ts is not None and watermark < last_ts:
        raise Conflict(f"the watermark {iso_of_micros(watermark)} is before the dataset's last event "
                       f"({iso_of_micros(last_ts)}); event time never goes back, so nothing was written",
                       where="watermark")
    if current is not None and watermark < current:
        raise Conflict(f"the watermark {iso_of_micros(watermark)} is before the dataset's watermark "
                       f"({iso_of_micros(current)}); event time never goes back, so nothing was written",
                       where="watermark")


def keep_stored_types(table: pa.Table, snap: Snapshot) -> pa.Table:
    """``table`` whose attributes that hold only nulls say nothing about their type: one the store has takes
    the stored type (a batch of nulls would otherwise widen it to string), one it has not is left out (an
    attribute an event lacks reads as null all the same)."""
    if ATTRS not in table.column_names or not table.num_rows:
        return table
    struct = table.column(ATTRS).combine_chunks()
    stored = snap.attr_types()
    names, children, fields = [], [], []
    changed = False
    for i, child in enumerate(struct.flatten()):
        field = struct.type.field(i)
        if child.null_count == len(child):
            if field.name not in stored:
                changed = True
                continue
            if child.type != stored[field.name]:
                child, field = pa.nulls(len(child), stored[field.name]), pa.field(field.name, stored[field.name])
                changed = True
        names.append(field.name)
        children.append(child)
        fields.append(field)
    if not changed:
        return table
    at = table.column_names.index(ATTRS)
    if not fields:
        return table.remove_column(at)
    return table.set_column(at, ATTRS, pa.StructArray.from_arrays(children, fields=fields))


def last_ts_after(table: pa.Table, snap: Snapshot) -> int | None:
    """The last ts once ``table`` (ordered by ts) is appended to ``snap``."""
    if not table.num_rows:
        return snap.last_ts
    return int(table.column(TS).combine_chunks().view(pa.int64())[-1].as_py())


def check_not_older(table: pa.Table, snap: Snapshot) -> None:
    if table.num_rows == 0:
        return
    ts = table.column(TS).combine_chunks().view(pa.int64())
    first = ts[0].as_py()  # ordered: the first is the oldest
    if snap.watermark is not None and first <= snap.watermark:
        late = int(pc.sum(pc.less_equal(ts, snap.watermark)).as_py())
        raise Conflict(f"{late} event(s) of the batch are not after the dataset's watermark "
                       f"({iso_of_micros(first)} <= {iso_of_micros(snap.watermark)}): event time has reached it, so "
                       "nothing of this batch was written", where="append")
    if snap.last_ts is None:
        return
    if first < snap.last_ts:
        older = int(pc.sum(pc.less(ts, snap.last_ts)).as_py())
        raise Conflict(f"{older} event(s) of the batch are older than the dataset's last event "
                       f"({iso_of_micros(first)} < {iso_of_micros(snap.last_ts)}); appends must not go back "
                       "in time, so nothing of this batch was written", where="append")
