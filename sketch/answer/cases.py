"""The case of each match: the values of the query's ``PARTITION BY`` attributes at its first event.

Every event of a match shares them (that is what the partition means), so the first event's values are the
match's.  Events the store's partition layout covers are looked up by their group number there — no event
is read; the others (appended since the layout, or partitioned on another attribute) are read from the store
for exactly those seqs, in one pass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from exact.query.ast import Query
from exact.store.grouping import key_values
from sketch.partition.index import PartitionIndex

_I64 = np.int64

#: seqs of matches' first events → their cases (one value per seq, perhaps dictionary-encoded; a struct of the
#: attributes for several)
CaseOf = Callable[[np.ndarray], pa.Array]


def case_lookup(query: Query, source: Any, partition: PartitionIndex | None = None) -> CaseOf | None:
    """The case of each of an array of seqs for ``query`` on ``source`` (a store snapshot); None when the
    query has no ``PARTITION BY``."""
    attrs = list(query.partition_by)
    if not attrs:
        return None
    layout = partition.layout if partition is not None else None

    def of(seqs: np.ndarray) -> pa.Array:
        seqs = np.asarray(seqs, dtype=_I64)
        if not len(seqs):  # (no match: the column keeps the case's type all the same)
            return _no_cases(attrs, source, layout)
        if layout is not None and attrs == [layout.key] and (not len(seqs) or int(seqs.max()) < layout.events):
            # by group number: the layout's key values as the dictionary, nothing decoded or read
            groups = layout.group_of[seqs].astype(np.int32)
            return pa.DictionaryArray.from_arrays(pa.array(groups, mask=groups < 0), layout.keys)
        uniq, inverse = np.unique(seqs, return_inverse=True)
        columns: dict[str, pa.Array] = {}
        read: list[str] = []
        for attr in attrs:
            if layout is not None and attr == layout.key and bool((uniq < layout.events).all()):
                groups = layout.group_of[uniq].astype(_I64)
                columns[attr] = layout.keys.take(pa.array(groups, mask=groups < 0))
            else:
                read.append(attr)
        if read:
            breaks = np.flatnonzero(np.diff(uniq) != 1)  # the seqs as inclusive runs of consecutive ones
            runs = np.stack([np.r_[uniq[:1], uniq[breaks + 1]], np.r_[uniq[breaks], uniq[-1:]]], axis=1)
            table, _ = source.read_ranges(runs, ["seq", "ts", "type", *(f"attrs.{a}" for a in read)])
            at = np.searchsorted(table.column("seq").to_numpy(), uniq)
            for attr in read:
                columns[attr] = key_values(table, attr).combine_chunks().take(pa.array(at))
        per_seq = columns[attrs[0]] if len(attrs) == 1 else pa.StructArray.from_arrays(
            [columns[a] for a in attrs], names=attrs)
        return per_seq.take(pa.array(inverse.ravel()))

    return of


def _no_cases(attrs: list[str], source: Any, layout: Any) -> pa.Array:
    """An empty case column of the type a non-empty one has: the layout's keys, else the attributes' types
    in the stream (string for one the stream never had)."""
    if layout is not None and attrs == [layout.key]:
        return pa.DictionaryArray.from_arrays(pa.array([], pa.int32()), layout.keys)
    snapshot = getattr(source, "snapshot", None)
    if snapshot is not None:
        known = snapshot.attr_types()
    else:
        table = getattr(source, "table", None)
        struct = table.schema.field("attrs").type if table is not None and "attrs" in table.column_names else None
        known = {f.name: f.type for f in struct} if struct is not None else {}
    types = [known.get(a, pa.string()) for a in attrs]
    if len(attrs) == 1:
        return pa.array([], types[0])
    return pa.StructArray.from_arrays([pa.array([], t) for t in types], names=attrs)
