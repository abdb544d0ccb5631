"""Attribute columns of a seek file: each attribute of a part, fixed-width, so a few rows' values are read in place.

A condition on an attribute (``WHERE o.AMOUNT_REQ = '50000'``) needs the values of the candidate events only,
but a Parquet row group decodes whole (see :mod:`exact.store.seek`): the few hundred candidates of a
verification, spread over the history, meet every row group.  So beside ``ts`` and ``type`` a seek file
(version 3) holds each attribute of its part as one code per row, chosen per attribute from the part's own
values so that the code gives the value back exactly:

=========  =====================================================================================
``string`` the rank of the value in the part's sorted distinct values (a *sorted* dictionary, so codes
           order as the values do), uint8 or uint16; the dictionary is a section of its own.  A part with
           more than 65,535 distinct values, or with a dictionary over :data:`MAX_DICTIONARY_BYTES`, is not
           served (its values are nearly as many as its rows: a copy, not an index)
``int64``  ``value - base`` in uint8, uint16 or uint32 where the part's range fits, else the int64 itself
``double`` the float64 itself (every bit: NaN and -0.0 come back as written)
``bool``   uint8: 0, 1
``null``   nothing: an attribute whose values in the part are all null
=========  =====================================================================================

Which attributes: those a build names (``--index-attrs``), or by default the cheapest in bytes per row while
together they take at most :data:`DEFAULT_BUDGET` bytes per row. A null is the largest code of the narrow
widths (``null`` in the header); the raw int64 and float64 columns carry a ``valid`` section (a byte per row)
when the part has nulls. Every section is covered by the seek file's checksum. What a read asks of an
attribute the part does not have is null, as in the Parquet read.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from exact.store.footprint import within
from exact.store.packing import Packed
from exact.store.value_index import ValueIndex, value_index

#: A string attribute with more distinct values than this in a part is not served from the seek file.
MAX_DICTIONARY = 0xFFFF
#: Nor one whose distinct values take more bytes than this.
MAX_DICTIONARY_BYTES = 16 << 20
#: Bytes per row all the attribute columns of a part take at most, unless the attributes are named: the
#: cheapest are served first (a low-cardinality string or a small-range integer costs 1-2 bytes, a double 8),
#: so that a few numeric measures and the strings of a log are served, and a wide table of doubles is not
#: copied whole.
DEFAULT_BUDGET = 24.0

_UNSIGNED = (np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.uint32))
#: Integers below this in magnitude are float64 exactly (a narrow column's base and codes together).
_EXACT_BELOW = 1 << 52


@dataclass(frozen=True)
class AttrColumn:
    """One attribute of a part as its seek file holds it (arrays: views of the mapped file)."""

    kind: str  # "string" | "int64" | "double" | "bool" | "null"
    codes: np.ndarray | None
    #: the code that stands for null in a narrow column (None: the column has a ``valid`` section or no nulls)
    null: int | None = None
    #: ``int64`` in a narrow width: the value of code 0
    base: int = 0
    #: a byte per row, 0 where the value is null (raw ``int64`` and ``double`` columns with nulls)
    valid: np.ndarray | None = None
    #: ``string``: the part's distinct values, sorted (code ``c`` is ``dictionary[c]``)
    dictionary: pa.Array | None = None
    #: the rows by type and value (version 5; ``string``: by code, which orders as the values do)
    index: ValueIndex | None = None
    #: ``double`` kept as decimals (version 7): the codes are int64, the value ``code / 10**scale``
    scale: int | None = None

    def numbers(self, codes: np.ndarray) -> np.ndarray:
        """Raw codes (a raw int64 or double column's, not a narrow one's) as the values they stand for."""
        if self.scale is not None:
            return codes.astype(np.float64) / 10.0 ** self.scale
        return codes

    @cached_property
    def plain_codes(self) -> np.ndarray:
        """``codes`` as a plain array, for the compiled partition-link passes (:mod:`exact.store.links`), which
        read a code per row of long ranges and per probe of many cells: packed codes are decoded once (their
        width in bytes a row, kept with the open file) rather than a block per look."""
        assert self.codes is not None
        return np.asarray(self.codes) if isinstance(self.codes, Packed) else self.codes

    @cached_property
    def code_of(self) -> dict[str, int]:
        """``string``: each value's code (the inverse of ``dictionary``)."""
        values = [] if self.dictionary is None else self.dictionary.to_pylist()
        return {v: i for i, v in enumerate(values)}

    def in_buckets(self, rows: np.ndarray, lo: int, hi: int) -> NDArray[np.bool_]:
        """Per row of ``rows`` (positions in the part): is its value-index bucket within ``lo … hi`` (the
        value buckets only: ``hi`` at most ``index.width - 2``)?  As the index files it: null and NaN in
        no value bucket, a value in the bucket of the number of edges not above it.  Tested on the codes
        themselves, against the edges turned into code bounds: a narrow integer's or a string's code is
        compared as an integer, a raw value as the float64 the index was built from."""
        index = self.index
        assert index is not None and self.codes is not None and 0 <= lo and hi <= index.width - 2
        edges = index.edge_list
        below = edges[lo - 1] if lo > 0 else None  # bucket >= lo: value >= edges[lo - 1]
        above = edges[hi] if hi < len(edges) else None  # bucket <= hi: value < edges[hi]
        codes = self.codes[rows]
        out: NDArray[np.bool_]
        if self.null is not None and (self.kind == "string" or abs(self.base) < _EXACT_BELOW):
            # integer codes of integer values (a string's code is its value here): v >= e iff code >=
            # ceil(e) - base, v < e iff code < ceil(e) - base; the null code is above every value's
            shift = self.base if self.kind == "int64" else 0
            low = None if below is None else math.ceil(below) - shift
            high = self.null if above is None else min(math.ceil(above) - shift, self.null)
            out = codes < high  # (NumPy compares with an integer out of the codes' range as numbers)
            if low is not None and low > 0:
                out &= codes >= low
            return out
        values = self.numbers(codes).astype(np.float64)
        if self.null is not None:
            values += float(self.base)
            values[codes == self.null] = np.nan
        out = ~np.isnan(values) if below is None and above is None else np.ones(len(values), bool)
        if below is not None:
            out &= values >= below
        if above is not None:
            out &= values < above
        if self.valid is not None:
            out &= self.valid[rows] != 0
        return out

    def values(self, rows: np.ndarray) -> pa.Array:
        """The values of ``rows`` (positions in the part) as an Arrow array of the part's own type."""
        n = len(rows)
        if self.kind == "null" or self.codes is None:
            return pa.nulls(n)
        codes = self.codes[rows]
        if self.kind == "string":
            assert self.dictionary is not None
            missing = codes == self.null
            index = pa.array(codes.astype(np.int32), mask=missing if missing.any() else None)
            return self.dictionary.take(index)
        if self.kind == "bool":
            missing = codes == self.null
            return pa.array(codes == 1, pa.bool_(), mask=missing if missing.any() else None)
        if self.kind == "int64" and self.null is not None:
            missing = codes == self.null
            values = codes.astype(np.int64) + self.base
            return pa.array(values, pa.int64(), mask=missing if missing.any() else None)
        missing_raw = None if self.valid is None else self.valid[rows] == 0
        typ = pa.int64() if self.kind == "int64" else pa.float64()
        return pa.array(np.ascontiguousarray(self.numbers(codes)), typ,
                        mask=missing_raw if missing_raw is not None and missing_raw.any() else None)


def numeric_values(parts: Sequence[tuple[AttrColumn | None, np.ndarray]], typ: pa.DataType) -> pa.Array | None:
    """The values of one attribute at rows of several parts (per part its column, None where the part has no
    such attribute: null, and the rows), one part's after the other's, as one array of ``typ`` — when
    ``typ`` is int64 or double and every column holds that kind (narrow codes or raw values): decoded with
    NumPy and wrapped once, not an Arrow array per part.  None otherwise (the caller goes part by part)."""
    dtype: np.dtype[Any]
    if typ == pa.int64():
        kind, dtype = "int64", np.dtype(np.int64)
    elif typ == pa.float64():
        kind, dtype = "double", np.dtype(np.float64)
    else:
        return None
    values: list[np.ndarray] = []
    nulls: list[np.ndarray] = []
    for column, rows in parts:
        n = len(rows)
        if column is None or column.kind == "null" or column.codes is None:
            values.append(np.zeros(n, dtype=dtype))
            nulls.append(np.ones(n, dtype=bool))
            continue
        if column.kind != kind:
            return None
        codes = column.codes[rows]
        if column.null is not None:  # narrow int64 codes
            values.append(codes.astype(np.int64) + column.base)
            nulls.append(codes == column.null)
        else:
            values.append(column.numbers(codes).astype(dtype, copy=False))
            nulls.append(np.zeros(n, dtype=bool) if column.valid is None else column.valid[rows] == 0)
    if not values:
        return pa.array(np.zeros(0, dtype=dtype), typ)
    missing = np.concatenate(nulls)
    return pa.array(np.concatenate(values), typ, mask=missing if missing.any() else None)


def _narrow(span: int) -> np.dtype | None:
    """The narrowest unsigned width holding codes ``0..span`` and one more for null."""
    for dtype in _UNSIGNED:
        if span + 1 < np.iinfo(dtype).max:
            return dtype
    return None


def encode_attrs(attrs: pa.StructArray | pa.ChunkedArray | None, rows: int, chosen: Sequence[str] | None = None,
                 budget: float = DEFAULT_BUDGET, type_codes: np.ndarray | None = None, n_types: int = 0,
                 *, packed: bool = False, allowance: int | None = None, compressed: bool = False
                 ) -> tuple[list[dict[str, Any]], list[str], dict[str, bytes], list[str]]:
    """A part's attribute struct as seek-file columns: the header entry of each served attribute, the names
    of those not served, the sections (name → bytes) to write, and which of them are bit-packed
    (``packed``, version 7: the codes by frame of reference, a value index's rows as steps, a double that is
    a decimal of at most :data:`MAX_SCALE` places as its integer of that scale — see :func:`_pack_sections`).

    ``chosen`` names the attributes to serve (those a part cannot serve are left out all the same); None
    serves the cheapest attributes, in bytes per row, while together they take at most ``budget`` bytes per
    row (:data:`DEFAULT_BUDGET`), and then — with an ``allowance``, the bytes the attribute sections may take
    in all (the footprint budget, :func:`exact.store.footprint.seek_allowance`) — the cheapest columns as
    written while they fit, then the value indexes of those served, cheapest first, while they fit too.
    Attributes named are served with their value indexes whatever the allowance.  ``compressed`` (version 8):
    a string dictionary's values are kept compressed and its offsets packed (:func:`_compress_dictionary`)."""
    unserved: list[str] = []
    costed: list[tuple[float, str, int, dict[str, Any], dict[str, bytes], dict[str, bytes]]] = []
    for i, (name, column) in enumerate(_fields(attrs)):
        if chosen is not None and name not in chosen:
            unserved.append(name)
            continue
        entry, raw = _encode_one(column, rows, scaled=packed)
        if entry is None:
            unserved.append(name)
            continue
        data = dict(raw)
        if compressed and entry["kind"] == "string":
            _compress_dictionary(entry, data)
        if packed:
            _pack_sections(entry, data)
        # (costed at its plain width: packing's fixed bytes would price a column of a short part out)
        costed.append((sum(map(len, raw.values())) / max(rows, 1), name, i, entry, data, raw))
    if chosen is None:
        spent, kept = 0.0, []
        for item in sorted(costed, key=lambda c: (c[0], c[1])):
            if spent + item[0] <= budget:
                spent += item[0]
                kept.append(item)
            else:
                unserved.append(item[1])
        costed = sorted(kept, key=lambda c: c[2])
    indexes: dict[str, dict[str, bytes]] = {}
    for _, name, _, entry, _, raw in costed:
        if type_codes is not None and entry["kind"] in ("int64", "double", "string"):
            values = _as_float(entry, raw, rows)
            present = values[~np.isnan(values)]
            if packed and (not len(present) or present.min() == present.max()):
                continue  # (one value in the part: its bucket holds a type's rows, as the rows by type do)
            index = value_index(values, type_codes, n_types, keyed=packed)
            if packed:
                entry["vkeyed"] = True
                _pack_sections(entry, index)
            indexes[name] = index
    if chosen is None and allowance is not None:
        costed, dropped, indexes = within(costed, indexes, allowance)
        unserved.extend(dropped)
    served: list[dict[str, Any]] = []
    sections: dict[str, bytes] = {}
    packed_names: list[str] = []
    for _, name, i, entry, data, _ in costed:
        if name in indexes:
            data.update(indexes[name])
            entry["edges"] = len(data["edges"]) // 8
        if packed:
            packed_names.extend(f"a{i}.{key}" for key in data if _packs(entry, key))
        entry.update(name=name, id=i, sections=sorted(data))
        sections.update({f"a{i}.{key}": blob for key, blob in data.items()})
        served.append(entry)
    return served, sorted(unserved), sections, sorted(packed_names)


#: Sections of an attribute that version 7 bit-packs, and whether as steps (:mod:`exact.store.packing`):
#: the codes (a narrow width's range, or a raw int64's, or a scaled double's) and the null flags by frame of
#: reference, the value index's rows as steps (keyed by cell: one increasing run) and where its cells start
#: (decoded whole when the file is opened: a cell's bounds are looked up per condition and part).
PACKED_SECTIONS = {"codes": False, "valid": False, "vrows": True, "vstart": True, "offsets": True}


def _packs(entry: dict[str, Any], key: str) -> bool:
    """Does version 7 pack section ``key`` of the attribute ``entry`` describes?  (A string dictionary's
    offsets, as steps, from version 8: beside its compressed values.)"""
    if key == "offsets":
        return "zsize" in entry
    return key in PACKED_SECTIONS and not (key == "codes" and entry["kind"] == "double" and entry.get("scale") is None)


#: the codec of a string dictionary's values from version 8 (zstd: what the Parquet parts use)
DICTIONARY_CODEC = "zstd"


def _compress_dictionary(entry: dict[str, Any], data: dict[str, bytes]) -> None:
    """Version 8: a string attribute's dictionary values (``data``: the sorted distinct strings one after the
    other, read once when the column is opened) kept compressed as ``zdata``, their length before and after
    in the entry (``zsize``, ``zlen``).  Sorted values share their prefixes: a dictionary of dates or ids
    takes a fraction of its bytes."""
    raw = data.pop("data")
    packed = pa.compress(raw, codec=DICTIONARY_CODEC, asbytes=True) if raw else b""
    data["zdata"] = packed
    entry.update(zsize=len(raw), zlen=len(packed))


def _pack_sections(entry: dict[str, Any], data: dict[str, bytes]) -> list[str]:
    """Replace ``data``'s sections that pack (:data:`PACKED_SECTIONS`) with their packed form; their keys.
    A raw double's codes (its float64 bits) are left as they are: they are not integers to pack."""
    from exact.store.packing import pack, to_bytes

    done = []
    for key, delta in PACKED_SECTIONS.items():
        if key not in data or not _packs(entry, key):
            continue
        dtype = {"vrows": np.dtype(np.int64) if entry.get("vkeyed") else np.dtype(np.uint32),
                 "vstart": np.dtype(np.int64), "valid": np.dtype(np.uint8),
                 "offsets": np.dtype(np.int32)}.get(key, np.dtype(entry["dtype"]))
        data[key] = to_bytes(pack(np.frombuffer(data[key], dtype=dtype), delta=delta))
        done.append(key)
    return done


def _as_float(entry: dict[str, Any], data: dict[str, bytes], rows: int) -> np.ndarray:
    """A served column's values as float64 per row (a string's code, which orders as its value), NaN for
    null: what its value index buckets.  (float64 keeps the order of int64 values, ties aside: a bucket range
    found for a literal the same way holds every row that can meet it.)"""
    codes = np.frombuffer(data["codes"], dtype=np.dtype(entry["dtype"]), count=rows)
    out = codes.astype(np.float64) + (float(entry.get("base", 0)) if entry["kind"] == "int64" else 0.0)
    if entry.get("scale") is not None:
        out /= 10.0 ** int(entry["scale"])
    if entry.get("null") is not None:
        out[codes == entry["null"]] = np.nan
    if "valid" in data:
        out[np.frombuffer(data["valid"], dtype=np.uint8, count=rows) == 0] = np.nan
    return out


def _fields(attrs: pa.StructArray | pa.ChunkedArray | None) -> Iterator[tuple[str, pa.Array]]:
    if attrs is None:
        return
    if isinstance(attrs, pa.ChunkedArray):
        attrs = attrs.combine_chunks()
    # flatten() honours a slice's offset and the struct's own validity
    for field, child in zip(attrs.type, attrs.flatten(), strict=True):
        yield field.name, child


def _encode_one(column: pa.Array, rows: int, *, scaled: bool = False
                ) -> tuple[dict[str, Any] | None, dict[str, bytes]]:
    typ = column.type
    nulls = column.null_count
    if pa.types.is_null(typ) or nulls == rows:
        return {"kind": "null"}, {}
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return _encode_strings(column)
    if pa.types.is_boolean(typ):
        codes = np.where(column.fill_null(False).to_numpy(zero_copy_only=False), 1, 0).astype(np.uint8)
        if nulls:
            codes[column.is_null().to_numpy(zero_copy_only=False)] = 2
        return {"kind": "bool", "dtype": "|u1", "null": 2}, {"codes": codes.tobytes()}
    if pa.types.is_int64(typ):
        values = column.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        valid = ~column.is_null().to_numpy(zero_copy_only=False) if nulls else None
        present = values if valid is None else values[valid]
        lo, hi = int(present.min()), int(present.max())
        dtype = _narrow(hi - lo)
        if dtype is not None:
            null = int(np.iinfo(dtype).max)
            codes = (values - lo).astype(dtype)
            if valid is not None:
                codes[~valid] = null
            return {"kind": "int64", "dtype": dtype.str, "null": null, "base": lo}, {"codes": codes.tobytes()}
        return _raw("int64", values, valid)
    if pa.types.is_float64(typ):
        values = column.fill_null(0.0).to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
        valid = ~column.is_null().to_numpy(zero_copy_only=False) if nulls else None
        scale = _decimal_scale(values) if scaled else None
        if scale is not None:
            entry, data = _raw("int64", np.rint(values * 10.0 ** scale).astype(np.int64), valid)
            return entry | {"kind": "double", "scale": scale}, data
        return _raw("double", values, valid)
    return None, {}


#: A double column whose every value is a decimal of at most this many places is kept as integers of that
#: scale (version 7), which pack.
MAX_SCALE = 6


def _decimal_scale(values: np.ndarray) -> int | None:
    """The fewest decimal places ``k`` (up to :data:`MAX_SCALE`) such that every value of ``values`` is
    ``round(value * 10**k) / 10**k`` to the bit (so the integers give it back exactly), or None: a NaN, an
    infinity, a -0.0, a magnitude past 2**53 at that scale, or more places than that."""
    if not len(values) or not bool(np.isfinite(values).all()):
        return None
    bits = values.view(np.int64)
    for k in range(MAX_SCALE + 1):
        factor = 10.0 ** k
        scaled = np.rint(values * factor)
        if float(np.abs(scaled).max()) >= 2.0 ** 53:
            return None
        if np.array_equal((scaled.astype(np.int64) / factor).view(np.int64), bits):
            return k
    return None


def _raw(kind: str, values: np.ndarray, valid: np.ndarray | None) -> tuple[dict[str, Any], dict[str, bytes]]:
    entry: dict[str, Any] = {"kind": kind, "dtype": values.dtype.str, "null": None}
    data = {"codes": np.ascontiguousarray(values).tobytes()}
    if valid is not None:
        data["valid"] = valid.astype(np.uint8).tobytes()
    return entry, data


def _encode_strings(column: pa.Array) -> tuple[dict[str, Any] | None, dict[str, bytes]]:
    encoded = pc.dictionary_encode(column.cast(pa.string()))
    names = encoded.dictionary
    if len(names) > MAX_DICTIONARY:
        return None, {}
    order = pc.sort_indices(names).to_numpy()
    ordered = names.take(pa.array(order))
    buffers = ordered.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int32, count=len(ordered) + 1, offset=ordered.offset * 4)
    start, end = int(offsets[0]), int(offsets[-1])
    if end - start > MAX_DICTIONARY_BYTES:
        return None, {}
    data = bytes(buffers[2])[start:end] if buffers[2] is not None else b""
    rank = np.empty(len(names), dtype=np.int64)
    rank[order] = np.arange(len(names))
    dtype = _narrow(len(names) - 1)
    assert dtype is not None
    null = int(np.iinfo(dtype).max)
    indices = encoded.indices
    codes = rank[indices.fill_null(0).to_numpy(zero_copy_only=False)].astype(dtype)
    if indices.null_count:
        codes[indices.is_null().to_numpy(zero_copy_only=False)] = null
    return ({"kind": "string", "dtype": dtype.str, "null": null, "n": len(names)},
            {"codes": codes.tobytes(), "offsets": (offsets - start).astype(np.int32).tobytes(), "data": data})


def decode_attrs(entries: list[dict[str, Any]], section: Any, rows: int, n_types: int = 0) -> dict[str, AttrColumn]:
    """The attribute columns named by a seek file's header ``entries``; ``section(name, dtype, count)`` gives
    a section's array (raising KeyError or the reader's error when it is missing or of the wrong size);
    ``n_types``: the part's types, for a value index."""
    out: dict[str, AttrColumn] = {}
    for entry in entries:
        name, kind, key = str(entry["name"]), str(entry["kind"]), f"a{int(entry['id'])}"
        if kind == "null":
            out[name] = AttrColumn("null", None)
            continue
        dtype = np.dtype(entry["dtype"])
        codes = section(f"{key}.codes", dtype, rows)
        null = entry.get("null")
        valid = section(f"{key}.valid", np.dtype(np.uint8), rows) if "valid" in entry.get("sections", []) else None
        dictionary = None
        if kind == "string":
            n = int(entry["n"])
            offsets = section(f"{key}.offsets", np.dtype(np.int32), n + 1)
            if isinstance(offsets, Packed):
                offsets = offsets.decode(0, len(offsets))
            size = int(offsets[-1]) if n >= 0 else 0
            if "zsize" in entry:  # (version 8: the values compressed, undone once as the column opens)
                if int(entry["zsize"]) != size or bool((np.diff(offsets) < 0).any()) or int(offsets[0]) != 0:
                    raise ValueError(f"attribute {name!r}: its dictionary's offsets disagree with its values")
                zipped = section(f"{key}.zdata", np.dtype(np.uint8), int(entry["zlen"]))
                data = pa.decompress(bytes(zipped), decompressed_size=size, codec=DICTIONARY_CODEC) if size \
                    else pa.py_buffer(b"")
            else:
                data = pa.py_buffer(section(f"{key}.data", np.dtype(np.uint8), size))
            dictionary = pa.StringArray.from_buffers(n, pa.py_buffer(offsets), data)
            top = int(codes.max()) if rows else 0
            if top >= n and top != null:
                raise ValueError(f"attribute {name!r}: a code beyond its dictionary")
        index = None
        if "vrows" in entry.get("sections", []):
            edges = section(f"{key}.edges", np.dtype(np.float64), int(entry["edges"]))
            if bool((np.diff(edges) <= 0).any()) or bool(np.isnan(edges).any()):
                raise ValueError(f"attribute {name!r}: its value index's edges do not increase")
            starts = np.asarray(section(f"{key}.vstart", np.dtype(np.int64), n_types * (len(edges) + 2) + 1))
            keyed = bool(entry.get("vkeyed"))
            vrows = section(f"{key}.vrows", np.dtype(np.int64 if keyed else np.uint32), rows)
            if len(starts) and (starts[0] != 0 or starts[-1] != rows or bool((np.diff(starts) < 0).any())):
                raise ValueError(f"attribute {name!r}: its value index does not cover the part")
            index = ValueIndex(edges, vrows, starts, rows if keyed else 0)
        scale = None if entry.get("scale") is None else int(entry["scale"])
        if scale is not None and (kind != "double" or dtype != np.int64 or not 0 <= scale <= MAX_SCALE):
            raise ValueError(f"attribute {name!r}: a decimal scale on a column that cannot have one")
        out[name] = AttrColumn(kind, codes, None if null is None else int(null), int(entry.get("base", 0)),
                               valid, dictionary, index, scale)
    return out
