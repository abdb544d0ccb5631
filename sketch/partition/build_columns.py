"""The compact per-event columns the partition build needs, written by each Spark window task and merged
in the driver (:mod:`sketch.partition.assemble` builds the layout and tree from them).

A window task writes its events' partition-key values and types, each dictionary-encoded within the window,
and their times (µs) as one Arrow IPC file — about 14 bytes an event — beside the build's staged chunks
(:func:`window_columns`).  The driver reads the windows' files in seq order into three arrays
(:func:`merge_window_columns`): per event its group (int32; -1 without a key value), its type's code in the
stream's sorted types (int32) and its time (int64).  Groups are numbered in order of their first event: the
windows' key dictionaries, concatenated in window order and encoded again, number every key by its first
appearance in the stream, as :func:`exact.store.grouping.build_layout` numbers it.  No numba here: the executors
import this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from exact.events import ATTRS, TS, TYPE, micros
from exact.store.grouping import key_values

#: Per event: its group (-1 without a key value), the keys in group order, its type's code, its time.
Columns = tuple[np.ndarray, pa.Array, np.ndarray, np.ndarray]


def window_columns(stream: pa.Table, key: str, path: Path) -> int:
    """Write what the partition build needs of one window (``stream``: its events in seq order) to
    ``path``: the key values and types dictionary-encoded, the times as µs.  Returns how many of its
    events lack a key value (the default key is taken only when none does)."""
    values = key_values(stream, key).combine_chunks()
    missing: int = values.null_count
    if ATTRS in stream.column_names:
        missing = max(missing, stream.column(ATTRS).null_count)
    table = pa.table({"key": pc.dictionary_encode(values),
                      "type": pc.dictionary_encode(stream.column(TYPE).combine_chunks()),
                      "ts": pa.array(micros(stream.column(TS)), pa.int64())})
    with ipc.new_file(str(path), table.schema) as writer:
        writer.write_table(table)
    return missing


def merge_window_columns(paths: Sequence[str], events: int, types: tuple[str, ...]) -> Columns:
    """The windows' columns (in seq order, ``events`` in all) as the stream's: see the module docstring;
    type codes index ``types`` (sorted)."""
    group = np.empty(events, dtype=np.int32)
    code = np.empty(events, dtype=np.int32)
    ts = np.empty(events, dtype=np.int64)
    vocabulary = pa.array(types, pa.string())
    dictionaries: list[pa.Array] = []
    local: list[tuple[int, np.ndarray]] = []  # (first row, codes into the window's dictionary)
    at = 0
    for path in paths:
        with pa.memory_map(path) as source:
            table = ipc.open_file(source).read_all().combine_chunks()
        rows = table.num_rows
        keys = table.column("key").chunk(0) if table.column("key").num_chunks else None
        if keys is not None:
            local.append((at, pc.fill_null(keys.indices, -1).to_numpy(zero_copy_only=False)))
            dictionaries.append(keys.dictionary)
        typ = table.column("type").chunk(0)
        where = pc.index_in(typ.dictionary, value_set=vocabulary).to_numpy(zero_copy_only=False)
        code[at:at + rows] = where[typ.indices.to_numpy(zero_copy_only=False)]
        ts[at:at + rows] = table.column("ts").chunk(0).to_numpy(zero_copy_only=False)
        at += rows
    if at != events:
        raise ValueError(f"the windows' partition columns hold {at} events of {events}")
    everything = pc.dictionary_encode(pa.concat_arrays(dictionaries) if dictionaries else pa.array([]))
    numbers = everything.indices.to_numpy(zero_copy_only=False).astype(np.int32)
    offset = 0
    for (first, codes), dictionary in zip(local, dictionaries, strict=True):
        mapping = np.append(numbers[offset:offset + len(dictionary)], np.int32(-1))  # -1 stays -1
        group[first:first + len(codes)] = mapping[codes]
        offset += len(dictionary)
    return group, everything.dictionary, code, ts
