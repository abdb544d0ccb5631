"""Filter bits as the tree builds them (Baltus 2021, Alg. 1): types hashed once, leaves' bits set in bulk.

Types are dictionary-encoded (:func:`encode_types`) so each distinct type is hashed once; the distinct (leaf,
type) pairs of a batch are found in one pass (:func:`leaf_type_pairs`); each leaf's bits are set from its
types' precomputed positions — as ``m``-bit rows (:func:`dense_leaf_bits`), or, when ``m`` is large next to
what a leaf holds (big vocabularies), as sorted position sets (:func:`sparse_leaf_bits`).  Unfolded bits
(:data:`Bits`) are an integer or such a position set; :func:`bits_union` and :func:`fold_any` work on either
and give the same bits.
"""


from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exact.errors import SeqsketchError
from exact.events import micros
from sketch.bloom import fold_bits, sorted_unique

_I64 = np.int64


def encode_types(types: pa.Array | pa.ChunkedArray | Sequence[str] | np.ndarray,
                 ) -> tuple[np.ndarray, list[str]]:
    """Dictionary-encode event types: ``(codes int32, vocabulary)``, so each distinct type is hashed once."""
    arrow: pa.Array | pa.ChunkedArray = (pa.array(types, type=pa.string())
                                         if isinstance(types, np.ndarray | list | tuple) else types)
    if isinstance(arrow, pa.ChunkedArray):
        arrow = arrow.combine_chunks()
    if arrow.null_count:
        raise SeqsketchError("event types must not be null", where="type")
    encoded = pc.dictionary_encode(arrow)
    return encoded.indices.to_numpy(zero_copy_only=False).astype(np.int32), encoded.dictionary.to_pylist()


def as_micros(ts: pa.Array | pa.ChunkedArray | np.ndarray | Sequence[int]) -> np.ndarray:
    if isinstance(ts, pa.Array | pa.ChunkedArray):
        return micros(ts)
    return np.asarray(ts, dtype=_I64)


#: Unfolded filter bits: a Python integer (bit b = bit b of the int), or, for a sparse filter, the sorted
#: distinct set positions as an int64 array.  Sparse leaves keep the build linear in the data, not in
#: leaves × m, when m is large (big vocabularies); nodes turn dense once they fill 1/64 of m.
Bits = int | np.ndarray


def bits_count(bits: Bits) -> int:
    """Set bits (the density constraint's D)."""
    return bits.bit_count() if isinstance(bits, int) else int(bits.size)


def positions_to_int(positions: np.ndarray, size: int) -> int:
    """The ``size``-bit filter with the given positions set, as an integer."""
    positions = np.asarray(positions, dtype=_I64)
    if size < 64 * positions.size:  # a boolean row costs ~1 ns a bit, ufunc.at ~100 ns a position
        row = np.zeros(size, dtype=bool)
        row[positions] = True
        return int.from_bytes(np.packbits(row, bitorder="little").tobytes(), "little")
    table = np.zeros(size // 8, dtype=np.uint8)
    np.bitwise_or.at(table, positions >> 3, np.left_shift(1, positions & 7).astype(np.uint8))
    return int.from_bytes(table.tobytes(), "little")


def bits_to_int(bits: Bits, m: int) -> int:
    return bits if isinstance(bits, int) else positions_to_int(bits, m)


def bits_union(members: Sequence[Bits], m: int) -> Bits:
    """The union (bitwise OR) of filters; sparse while the result holds at most m/64 positions."""
    if all(not isinstance(b, int) for b in members):
        union = sorted_unique(np.concatenate(members))
        return union if union.size <= m // 64 else positions_to_int(union, m)
    out = 0
    for member in members:
        out |= bits_to_int(member, m)
    return out


def fold_any(bits: Bits, m: int, min_bits: int) -> tuple[int, int]:
    """:func:`sketch.bloom.fold_bits` for either representation, with the same result.

    A sparse filter with ``P`` positions is at most ``P`` bits full at any size, so every fold down to the
    first power of two ≥ 2P passes the density test; it is folded there directly, then by the usual rule.
    """
    if isinstance(bits, int):
        return fold_bits(bits, m, min_bits=min_bits)
    start = max(min_bits, 1 << max(0, int(2 * bits.size - 1).bit_length()))
    if start >= m:
        return fold_bits(positions_to_int(bits, m), m, min_bits=min_bits)
    return fold_bits(positions_to_int(bits & (start - 1), start), start, min_bits=min_bits)


def leaf_type_pairs(codes: np.ndarray, vocabulary_size: int, start: int, leaf_size: int) -> np.ndarray:
    """The distinct (leaf, type) pairs of a batch as sorted ``local_leaf * V + code`` values.

    Events are numbered from ``start``; local leaf 0 is the leaf of event ``start``.  Small leaf × type grids
    are marked in a bitmap (linear time); larger ones are sorted.
    """
    if len(codes) == 0:
        return np.zeros(0, dtype=_I64)
    first_leaf = start // leaf_size
    leaf_of = np.arange(start, start + len(codes), dtype=_I64) // leaf_size - first_leaf
    keys = leaf_of * vocabulary_size + codes
    grid = (int(leaf_of[-1]) + 1) * vocabulary_size
    if grid <= 4 * len(codes) + (1 << 16):
        seen = np.zeros(grid, dtype=bool)
        seen[keys] = True
        return np.flatnonzero(seen)
    return sorted_unique(keys)


def dense_leaf_bits(m: int, positions: np.ndarray, pair_code: np.ndarray, pair_bounds: np.ndarray, lo: int,
                    hi: int) -> list[int]:
    """The unfolded ``m``-bit filters of leaves ``lo … hi−1`` (local numbering), as Python integers
    (``positions``: per type code its ``k`` positions; ``pair_code``/``pair_bounds``: the leaves' distinct
    type codes, leaf ``j``'s at ``pair_bounds[j]:pair_bounds[j+1]``).

    One boolean row of ``m`` per leaf, set at the positions of its distinct types, packed little-endian.
    """
    codes = pair_code[pair_bounds[lo]:pair_bounds[hi]]
    rows_of = np.repeat(np.arange(hi - lo, dtype=_I64), np.diff(pair_bounds[lo:hi + 1]))
    flat = (rows_of[:, None] * m + positions[codes]).ravel()
    table = np.zeros((hi - lo) * m, dtype=bool)
    table[flat] = True
    raw = np.packbits(table, bitorder="little").tobytes()
    row_bytes = m // 8
    return [int.from_bytes(raw[i:i + row_bytes], "little") for i in range(0, len(raw), row_bytes)]


def sparse_leaf_bits(m: int, positions: np.ndarray, pair_code: np.ndarray, pair_bounds: np.ndarray, lo: int,
                     hi: int) -> list[np.ndarray]:
    """:func:`dense_leaf_bits` as the leaves' set positions (sorted, distinct), one array per leaf: one sort
    for the whole chunk."""
    codes = pair_code[pair_bounds[lo]:pair_bounds[hi]]
    rows_of = np.repeat(np.arange(hi - lo, dtype=_I64), np.diff(pair_bounds[lo:hi + 1]))
    flat = sorted_unique((rows_of[:, None] * m + positions[codes]).ravel())
    cuts = np.searchsorted(flat, np.arange(hi - lo + 1, dtype=_I64) * m)
    return [flat[cuts[i]:cuts[i + 1]] - i * m for i in range(hi - lo)]
