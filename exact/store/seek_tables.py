"""Rows found in seek files made into the stream's columns: seq, ts and type codes as NumPy arrays
(:func:`seek_columns`), attributes from the value sections (:func:`seek_attrs`), and tables in the stream
schema of them and of Parquet pieces alike (:func:`pieces_table`) — reads that never open a Parquet file."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa

from exact.arrays import joined
from exact.events import ATTRS, SEQ, SEQ_TYPE, TS, TS_TYPE, TYPE, conform_attrs
from exact.store.manifest import TYPE_DICTIONARY, PartInfo
from exact.store.seek import ts_of
from exact.store.seek_attrs import numeric_values
from exact.store.seek_format import SeekFile

#: a part's rows found in its seek file: the part, the file, the rows, their type codes
SeekRows = tuple[PartInfo, SeekFile, np.ndarray, np.ndarray]


def pieces_table(pieces: list[pa.Table | list[SeekRows]], schema: pa.Schema) -> pa.Table:
    """What :meth:`EventStore._range_pieces` read as one table of ``schema``."""
    tables = [seek_table(p, schema) if isinstance(p, list) else p for p in pieces]
    if not tables:
        return pa.Table.from_batches([], schema=schema)  # (Schema.empty_table imports pandas)
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def seek_table(kept: Sequence[SeekRows], schema: pa.Schema) -> pa.Table:
    """The rows (and their type codes) of consecutive parts read from their seek files as one table of
    ``schema`` (of seq, ts, type: a read's schema); ``type`` dictionary-encoded over the union of the
    parts' types (one dictionary: parts of one stream mostly share their types), or decoded when ``schema``
    says string.  The Arrow arrays wrap the numpy ones (their values are known valid)."""
    seq, ts, codes, dictionary, _ = seek_columns(kept, schema.names)
    attrs = seek_attrs(kept, schema.field(ATTRS).type) if ATTRS in schema.names else None
    return columns_table(seq, ts, codes, dictionary, schema, attrs)


def seek_attrs(kept: Sequence[SeekRows], struct: pa.StructType) -> pa.StructArray:
    """The attributes of ``struct`` (the snapshot's types) of the rows read from seek files, part by part
    from their attribute columns, widened as a Parquet read widens them (:func:`conform_attrs`)."""
    types = {field.name: field.type for field in struct}
    # numeric attributes every part holds in the snapshot's own kind: decoded over the parts at once
    whole = {name: numeric_values([(seek.attrs.get(name), rows) for _, seek, rows, _ in kept], typ)
             for name, typ in types.items()} if len(kept) > 1 else {}
    rest = {name: typ for name, typ in types.items() if whole.get(name) is None}
    if not rest:
        return pa.StructArray.from_arrays(list(whole.values()), fields=list(struct))
    pieces = []
    for _, seek, rows, _ in kept:
        have = [name for name in rest if name in seek.attrs]
        own = (pa.StructArray.from_arrays([seek.attrs[name].values(rows) for name in have], names=have)
               if have else None)
        pieces.append(conform_attrs(own, len(rows), rest))
    joined_rest = pa.concat_arrays(pieces) if len(pieces) > 1 else pieces[0]
    if len(rest) == len(types):
        return joined_rest
    others = dict(zip(rest, joined_rest.flatten(), strict=True))
    return pa.StructArray.from_arrays([whole[n] if n not in rest else others[n] for n in types], fields=list(struct))


def seek_columns(kept: Sequence[SeekRows], names: Sequence[str] = (SEQ, TS, TYPE)
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, pa.Array, list[str]]:
    """:func:`seek_table`'s columns as numpy arrays (those not in ``names`` empty): seq, ts (int64 µs),
    type codes (int32) into a dictionary, the dictionary, and its values."""
    seq = ts = codes = np.zeros(0, dtype=np.int64)
    if SEQ in names:
        seq = joined([rows + part.first_seq for part, _, rows, _ in kept])
    if TS in names:
        ts = ts_of([seek for _, seek, _, _ in kept], [rows for _, _, rows, _ in kept])
    first = kept[0][1]
    dictionary, types = first.dictionary, list(first.types)
    if TYPE in names:
        if all(seek.types == first.types for _, seek, _, _ in kept):
            codes = joined([codes for _, _, _, codes in kept]).astype(np.int32)
        else:
            types = sorted({t for _, seek, _, _ in kept for t in seek.types})
            dictionary = pa.array(types, pa.string())
            at = {t: i for i, t in enumerate(types)}
            codes = np.concatenate([np.asarray([at[t] for t in seek.types], dtype=np.int32)[codes]
                                    for _, seek, _, codes in kept])
    return seq, ts, codes, dictionary, types


def seek_ts_at(kept: Sequence[SeekRows]) -> Callable[[np.ndarray], np.ndarray]:
    """What gives the ts (int64 µs) of the rows at some positions of ``kept`` (its files' rows one after
    the other, as :func:`seek_columns` joins them), decoding only those rows'."""
    files = [seek for _, seek, _, _ in kept]
    rows = [r for _, _, r, _ in kept]
    ends = np.cumsum([len(r) for r in rows])

    def at(positions: np.ndarray) -> np.ndarray:
        if len(files) == 1:
            return ts_of(files, [rows[0][positions]])
        # each file's positions are a slice of the sorted positions: all files' rows decoded in one call
        order = None
        if len(positions) > 1 and bool(np.any(positions[1:] < positions[:-1])):
            order = np.argsort(positions, kind="stable")
            positions = positions[order]
        cuts = np.searchsorted(positions, ends).tolist()
        chosen: list[SeekFile] = []
        their: list[np.ndarray] = []
        begin = 0
        for i, cut in enumerate(cuts):
            if cut > begin:
                chosen.append(files[i])
                their.append(rows[i][positions[begin:cut] - (int(ends[i]) - len(rows[i]))])
            begin = cut
        found = ts_of(chosen, their) if chosen else np.zeros(0, dtype=np.int64)
        if order is None:
            return found
        out = np.empty(len(found), dtype=np.int64)
        out[order] = found
        return out

    return at


def columns_table(seq: np.ndarray, ts: np.ndarray, codes: np.ndarray, dictionary: pa.Array,
                   schema: pa.Schema, attrs: pa.StructArray | None = None) -> pa.Table:
    """seq, ts and type codes (as :func:`seek_columns` makes them), and the attributes, as a table of
    ``schema``."""
    n = max(len(seq), len(ts), len(codes), 0 if attrs is None else len(attrs))
    arrays = []
    for name in schema.names:
        if name == SEQ:
            arrays.append(pa.Array.from_buffers(SEQ_TYPE, n, [None, pa.py_buffer(seq)]))
        elif name == TS:
            arrays.append(pa.Array.from_buffers(TS_TYPE, n, [None, pa.py_buffer(ts)]))
        elif name == ATTRS:
            assert attrs is not None
            arrays.append(attrs)
        else:
            column = pa.DictionaryArray.from_buffers(TYPE_DICTIONARY, n, [None, pa.py_buffer(codes)],
                                                     dictionary)
            arrays.append(column if schema.field(TYPE).type == TYPE_DICTIONARY else column.cast(pa.string()))
    return pa.Table.from_batches([pa.RecordBatch.from_arrays(arrays, schema=schema)])
