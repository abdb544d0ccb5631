"""The Bloom-filter tree over an event stream (Baltus 2021, §4.1, Algorithms 1 and 2).

The stream is cut into count-based leaves of ``C`` events: leaf ``i`` covers seqs ``[i·C, (i+1)·C − 1]`` (Alg.
1; the thesis counts from 1, seqs count from 0) and holds a Bloom filter of the event types in it. When a leaf
is complete it joins the forest of top-level nodes (the children of the thesis' root), and groups of ``F``
(the fanout) neighbouring top-level nodes are merged into a parent whose filter is their union, subject to the
two constraints of §4.1:

* **level constraint** — the ``F`` nodes are on the same level (leaves are level 0);
* **density constraint** — the union has at most ``m/2`` bits set.

Alg. 2 scans every neighbouring group of the root's children after each new leaf.  A group whose union was too
dense stays too dense (filters never change), so the only groups that can become mergeable are those at the
right end of the forest, which a new leaf or a new parent just joined; this module therefore checks only the
tail, repeatedly, until nothing merges.  A failed group releases its oldest member for good (it and everything
left of it can never merge again) and keeps the others, which may still pair with later nodes — as the
thesis' neighbouring-pair scan would.  The outcome is a function of the leaf sequence alone, so appending
events in pieces builds exactly the tree that building at once does (same :meth:`BloomTree.digest`).

The last, partly filled leaf is queryable (a top-level node that merges only once it is complete).

Each node carries its level, its seq interval, its ts interval (first and last event time, §4.1) and its
children.  Node ids are creation order, which is also seq order among top-level nodes; a complete node keeps
its id for good, and the partial leaf has the id its complete self will get.

Beyond the thesis, a node is stored folded (:func:`sketch.bloom.fold_bits`): at the smallest power-of-two size
at which it is still at most half full, which bounds its false-positive rate by the same ``2^−k`` as an
unfolded half-full node while a leaf of a few types takes a few bytes instead of ``m/8``.  Probes fold the
key's positions the same way (``position mod size``).  The unfolded bits are kept only for the nodes that may
still merge (the tail of the forest) and the partial leaf.

Building is linear in the data: types are dictionary-encoded and hashed once per distinct type; the distinct
(leaf, type) pairs are found in one pass; each leaf's bits are set in bulk from its types' precomputed
positions — as ``m``-bit rows, or, when ``m`` is large next to what a leaf holds (big vocabularies), as sets
of positions folded straight to their stored size (:func:`fold_any`).  Only Alg. 2 itself walks the leaves in
Python, one merge test per new node.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exact.errors import SeqsketchError
from exact.events import micros
from sketch.bloom import (
    HASH_SCHEME,
    MIN_BITS,
    BloomFilter,
    fold_bits,
    is_power_of_two,
    key_positions,
    sorted_unique,
)

#: Rows of leaves whose bits are materialised at once when building (bounds memory to ~64 MiB per chunk).
_CHUNK_BYTES = 64 << 20
_I64 = np.int64


_CACHED_LOCK = threading.Lock()
#: Largest bit-sliced copy :meth:`BloomTree.sliced` makes (``m`` bits per node): 32 MiB.
_SLICED_MAX_BITS = 1 << 28
#: Up to this many nodes of one size, :meth:`BloomTree.probe` reads all their needed words at once.
_PROBE_BLOCK_ROWS = 1024


@dataclass(frozen=True)
class TreeConfig:
    """The shape of a tree: what every builder must agree on to produce the same bits.

    ``leaf_size`` C, ``fanout`` F, filter size ``m`` (a power of two) and hash count ``k``; ``fold`` enables
    folded storage.  ``fpq``, ``filter_fp`` and ``query_length`` record the sizing targets (§4.4) for reports.
    """

    leaf_size: int
    m: int
    k: int
    fanout: int = 2
    fold: bool = True
    min_bits: int = MIN_BITS
    fpq: float | None = None
    filter_fp: float | None = None
    query_length: int = 2

    def __post_init__(self) -> None:
        if self.leaf_size < 1:
            raise SeqsketchError(f"leaf size must be ≥ 1, got {self.leaf_size}", where="--leaf-size")
        if not is_power_of_two(self.m) or self.m < self.min_bits or self.m > 1 << 32:
            raise SeqsketchError(f"m must be a power of two in [{self.min_bits}, 2^32], got {self.m}")
        if not is_power_of_two(self.min_bits) or self.min_bits < 8:
            raise SeqsketchError(f"min_bits must be a power of two ≥ 8, got {self.min_bits}")
        if not 1 <= self.k <= 64:
            raise SeqsketchError(f"k must be in 1..64, got {self.k}")
        if self.fanout < 2:
            raise SeqsketchError(f"fanout must be ≥ 2, got {self.fanout}")

    def canonical(self) -> dict:
        """The fields that determine the bits (and so the digest), with the hashing scheme."""
        return {"leaf_size": self.leaf_size, "m": self.m, "k": self.k, "fanout": self.fanout,
                "fold": self.fold, "min_bits": self.min_bits, "hash": HASH_SCHEME}

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TreeConfig:
        fields = cls.__dataclass_fields__
        return cls(**{key: value for key, value in d.items() if key in fields})


@dataclass(frozen=True)
class Node:
    """A node as the approximate evaluator sees it."""

    id: int
    level: int
    lo_seq: int
    hi_seq: int
    lo_ts: int  # UTC microseconds of the first event
    hi_ts: int  # UTC microseconds of the last event
    children: tuple[int, ...]
    size: int  # bits stored (m, or m folded)
    partial: bool = False

    @property
    def is_leaf(self) -> bool:
        return self.level == 0


class _Column:
    """A growable numpy column (amortised doubling), or a read-only view of a loaded file."""

    __slots__ = ("data", "n")

    def __init__(self, data: np.ndarray, n: int | None = None) -> None:
        self.data = data
        self.n = len(data) if n is None else n

    @classmethod
    def empty(cls, dtype: np.dtype, width: int | None = None) -> _Column:
        shape = (16,) if width is None else (16, width)
        return cls(np.zeros(shape, dtype=dtype), 0)

    def view(self) -> np.ndarray:
        return self.data[: self.n]

    def reserve(self, extra: int) -> None:
        need = self.n + extra
        if need > len(self.data) or not self.data.flags.writeable:
            cap = max(need, 2 * len(self.data), 16)
            grown = np.zeros((cap,) + self.data.shape[1:], dtype=self.data.dtype)
            grown[: self.n] = self.data[: self.n]
            self.data = grown

    def append(self, value) -> None:
        self.reserve(1)
        self.data[self.n] = value
        self.n += 1

    def extend(self, values: np.ndarray) -> None:
        self.reserve(len(values))
        self.data[self.n:self.n + len(values)] = values
        self.n += len(values)

    def truncate(self, n: int) -> None:
        self.n = n


def encode_types(types: pa.Array | pa.ChunkedArray | Sequence[str] | np.ndarray,
                 ) -> tuple[np.ndarray, list[str]]:
    """Dictionary-encode event types: ``(codes int32, vocabulary)``, so each distinct type is hashed once."""
    if isinstance(types, np.ndarray | list | tuple):
        types = pa.array(types, type=pa.string())
    if isinstance(types, pa.ChunkedArray):
        types = types.combine_chunks()
    if types.null_count:
        raise SeqsketchError("event types must not be null", where="type")
    encoded = pc.dictionary_encode(types)
    return encoded.indices.to_numpy(zero_copy_only=False).astype(np.int32), encoded.dictionary.to_pylist()


def _as_micros(ts: pa.Array | pa.ChunkedArray | np.ndarray | Sequence[int]) -> np.ndarray:
    if isinstance(ts, pa.Array | pa.ChunkedArray):
        return micros(ts)
    return np.asarray(ts, dtype=_I64)


#: Unfolded filter bits: a Python integer (bit b = bit b of the int), or, for a sparse filter, the sorted
#: distinct set positions as an int64 array.  Sparse leaves keep the build linear in the data, not in
#: leaves × m, when m is large (big vocabularies); nodes turn dense once they fill 1/64 of m.
Bits = int | np.ndarray


class _Open(NamedTuple):
    """A node that may still merge (Alg. 2 state): its unfolded bits and its intervals."""

    id: int
    level: int
    bits: Bits
    lo_seq: int
    hi_seq: int
    lo_ts: int
    hi_ts: int


class _Pending:
    """Rows created during one update, moved into the numpy columns at its end (one write per column).

    ``rows`` holds ``(level, lo_seq, hi_seq, lo_ts, hi_ts, log2 size)``; children and bits go alongside.
    """

    def __init__(self, first_id: int, fanout: int) -> None:
        self.first_id = first_id
        self.no_children = (-1,) * fanout
        self.rows: list[tuple[int, int, int, int, int, int]] = []
        self.children: list[tuple[int, ...]] = []
        self.bits: list[bytes] = []


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


def derive_structure(level: np.ndarray, fanout: int) -> np.ndarray:
    """Children of every node from the levels alone (nodes in creation order), as an ``(n, F)`` array.

    A parent is created right after its last child, so its last child is ``id − 1``; each earlier child is the
    node just before the previous child's subtree.  Subtree sizes are filled level by level, so the whole
    derivation is a handful of numpy operations per level.  Raises ``ValueError`` on a level sequence no
    tree can have.
    """
    n = len(level)
    level = level.astype(_I64)
    children = np.full((n, fanout), -1, dtype=_I64)
    size = np.ones(n, dtype=_I64)
    top = int(level.max()) if n else 0
    for lev in range(1, top + 1):
        parents = np.flatnonzero(level == lev)
        child = parents - 1
        for slot in range(fanout - 1, -1, -1):
            if child.size and (child.min() < 0 or (level[child] != lev - 1).any()):
                raise ValueError(f"level sequence is inconsistent at level {lev}")
            children[parents, slot] = child
            if slot:
                child = child - size[child]
        size[parents] = 1 + size[children[parents]].sum(axis=1)
    return children


class SlicedFilters:
    """The filters of a fixed list of nodes, bit-sliced: row ``p`` holds bit ``p`` of every node's filter
    (bit ``p mod size`` for a node stored folded to ``size`` bits), one bit per node.  A key is then probed
    over all the nodes at once by ANDing its ``k`` rows — ``k`` passes over one bit per node instead of
    reading each node's words — which is the classic signature-file slicing applied to the tree's filters.
    Made from the tree's bits as they are; the tree changing makes it stale (keep it with
    :meth:`BloomTree.cached`).
    """

    def __init__(self, tree: BloomTree, rows: np.ndarray, count: int) -> None:
        self._tree = tree
        self._rows = rows  # (m, words) uint64, node i at bit i % 64 of word i // 64
        self.count = count

    @property
    def nbytes(self) -> int:
        return int(self._rows.nbytes)

    def probe(self, keys: Sequence[str]) -> np.ndarray:
        """A ``(count, len(keys))`` bool array: may each node hold each key (as :meth:`BloomTree.probe`)."""
        out = np.empty((self.count, len(keys)), dtype=bool)
        for j, key in enumerate(keys):
            hit = np.bitwise_and.reduce(self._rows[self._tree.positions(key).astype(_I64)], axis=0)
            out[:, j] = np.unpackbits(hit.view(np.uint8), bitorder="little", count=self.count).view(bool)
        return out


class BloomTree:
    """The Bloom-filter tree (Baltus 2021, Alg. 1 and 2) with folded node storage.

    Build with :meth:`update` (``extend``) on event types and timestamps, or via
    :func:`sketch.build.build_tree`, which also sizes the configuration (§4.4).  Probe with
    :meth:`may_contain` / :meth:`probe`; walk with :meth:`top_nodes`, :meth:`children`, :meth:`leaves`,
    :meth:`nodes_covering`.  ``==`` compares the logical content (:meth:`digest`); ``serialize`` /
    ``deserialize`` and ``save`` / ``load`` live in :mod:`sketch.persist`.
    """

    #: Leaf filters built as position sets (True), as m-bit rows (False), or chosen per update by which is
    #: smaller (None).  The bits are the same either way; this only trades time and memory.
    sparse_leaves: bool | None = None

    def __init__(self, config: TreeConfig) -> None:
        self.config = config
        width = config.fanout
        self._level = _Column.empty(np.int8)
        self._lo_seq = _Column.empty(_I64)
        self._hi_seq = _Column.empty(_I64)
        self._lo_ts = _Column.empty(_I64)
        self._hi_ts = _Column.empty(_I64)
        self._children = _Column.empty(_I64, width)
        self._log2 = _Column.empty(np.int8)
        self._pool = _Column.empty(np.uint8)
        self._offsets = _Column.empty(_I64)
        self.n_events = 0
        # Nodes that may still merge, a suffix of the forest (Alg. 2 state), with their unfolded bits.
        self._open: list[_Open] = []
        self._pending: _Pending | None = None
        # The partly filled last leaf, if any: its unfolded bits (it is the last row of the columns).
        self._partial_bits: Bits | None = None
        self._positions: dict[str, np.ndarray] = {}
        self._cache: dict[object, object] = {}

    # ---------------------------------------------------------------------------------------- sizes
    @property
    def rows(self) -> int:
        """Rows stored, the partial leaf included."""
        return self._level.n

    @property
    def n_nodes(self) -> int:
        """Complete nodes (the partial leaf excluded)."""
        return self.rows - (1 if self.has_partial else 0)

    @property
    def has_partial(self) -> bool:
        return self._partial_bits is not None

    @property
    def n_leaves(self) -> int:
        """Leaves, the partial one included (eq. 4.9's L)."""
        return -(-self.n_events // self.config.leaf_size)

    @property
    def levels(self) -> int:
        """Levels in use (1 when there are only leaves; 0 when empty)."""
        return int(self._level.view().max()) + 1 if self.rows else 0

    def bits_bytes(self) -> int:
        return self._pool.n

    @classmethod
    def from_columns(cls, config: TreeConfig, *, n_events: int, level: np.ndarray, log2: np.ndarray,
                     leaf_ts: np.ndarray, bits: np.ndarray, opened: list[_Open],
                     partial_bits: int | None) -> BloomTree:
        """Rebuild a tree from its minimal stored form: per-node level and stored size, leaf times, bits.

        Children, seq intervals and internal nodes' time intervals are derived (:func:`derive_structure`;
        leaf ``j`` covers ``[jC, (j+1)C − 1]``, a parent spans its first to its last child).  Raises
        ``ValueError`` when the columns contradict each other.
        """
        tree = cls(config)
        rows = len(level)
        children = derive_structure(level, config.fanout)
        leaves = np.flatnonzero(level == 0)
        if leaf_ts.shape != (len(leaves), 2):
            raise ValueError(f"{len(leaves)} leaves but {leaf_ts.shape[0]} leaf time ranges")
        if len(leaves) != -(-n_events // config.leaf_size):
            raise ValueError(f"{len(leaves)} leaves cannot hold {n_events} events of leaf size "
                             f"{config.leaf_size}")
        lo_seq = np.zeros(rows, dtype=_I64)
        hi_seq = np.zeros(rows, dtype=_I64)
        lo_ts = np.zeros(rows, dtype=_I64)
        hi_ts = np.zeros(rows, dtype=_I64)
        index = np.arange(len(leaves), dtype=_I64)
        lo_seq[leaves] = index * config.leaf_size
        hi_seq[leaves] = np.minimum((index + 1) * config.leaf_size, n_events) - 1
        lo_ts[leaves], hi_ts[leaves] = leaf_ts[:, 0], leaf_ts[:, 1]
        for lev in range(1, int(level.max()) + 1 if rows else 0):
            parents = np.flatnonzero(level == lev)
            kids = children[parents]
            lo_seq[parents], hi_seq[parents] = lo_seq[kids[:, 0]], hi_seq[kids[:, -1]]
            lo_ts[parents], hi_ts[parents] = lo_ts[kids].min(axis=1), hi_ts[kids].max(axis=1)
        sizes = np.left_shift(1, log2.astype(_I64)) // 8
        offsets = np.zeros(rows, dtype=_I64)
        if rows:
            np.cumsum(sizes[:-1], out=offsets[1:])
        if int(sizes.sum()) != bits.size:
            raise ValueError(f"bits hold {bits.size} bytes, the node sizes add up to {int(sizes.sum())}")
        tree._level, tree._log2, tree._pool = _Column(level), _Column(log2), _Column(bits)
        tree._children, tree._offsets = _Column(children), _Column(offsets)
        tree._lo_seq, tree._hi_seq, tree._lo_ts, tree._hi_ts = (_Column(lo_seq), _Column(hi_seq),
                                                                _Column(lo_ts), _Column(hi_ts))
        tree.n_events = n_events
        tree._open = opened
        tree._partial_bits = partial_bits
        return tree

    def leaf_times(self) -> np.ndarray:
        """``(leaves, 2)`` first and last event time of every leaf, in seq order."""
        leaves = np.flatnonzero(self._level.view() == 0)
        return np.stack([self._lo_ts.data[leaves], self._hi_ts.data[leaves]], axis=1)

    # ---------------------------------------------------------------------------------------- building
    def update(self, types: pa.Array | pa.ChunkedArray | Sequence[str] | np.ndarray,
               ts: pa.Array | pa.ChunkedArray | np.ndarray | Sequence[int]) -> None:
        """Append events (their types and UTC-microsecond timestamps) with seqs continuing the stream.

        Alg. 1: events fill the partial leaf, then new leaves of ``C`` events; every completed leaf is added
        to the forest with Alg. 2.  Distinct types are hashed once per call, and the leaves' bits are set in
        bulk from the precomputed positions of the types present in each.
        """
        codes, vocabulary = encode_types(types)
        self.update_encoded(codes, vocabulary, _as_micros(ts))

    extend = update

    def update_encoded(self, codes: np.ndarray, vocabulary: list[str], micros: np.ndarray,
                       pairs: np.ndarray | None = None) -> None:
        """:meth:`update` on dictionary-encoded types (``vocabulary[codes[i]]`` is event i's type).

        ``pairs`` may pass :func:`leaf_type_pairs` of these events when the caller has it already.
        """
        if len(codes) != len(micros):
            raise SeqsketchError(f"{len(codes)} event types but {len(micros)} timestamps")
        if len(codes) == 0:
            return
        positions = self._vocabulary_positions(vocabulary)
        C = self.config.leaf_size
        start, end = self.n_events, self.n_events + len(codes)
        first_leaf = start // C
        n_leaves = (end - 1) // C - first_leaf + 1
        # Leaf j (local numbering) holds events [bounds[j], bounds[j+1]) of this batch.
        leaf_starts = np.arange(first_leaf, first_leaf + n_leaves + 1, dtype=_I64) * C - start
        bounds = np.clip(leaf_starts, 0, len(codes))
        lo_ts = np.minimum.reduceat(micros, bounds[:-1]).tolist()
        hi_ts = np.maximum.reduceat(micros, bounds[:-1]).tolist()
        if pairs is None:
            pairs = leaf_type_pairs(codes, len(vocabulary), start, C)
        pair_code = pairs % len(vocabulary)
        pair_bounds = np.searchsorted(pairs // len(vocabulary), np.arange(n_leaves + 1))
        self._cache.clear()
        # The partial leaf is the last row; take it back out and complete it with the new events.
        previous = self._pop_partial() if self.has_partial else None
        self._pending = _Pending(self.rows, self.config.fanout)
        m = self.config.m
        sparse = self.sparse_leaves
        if sparse is None:  # dense rows cost m/8 bytes a leaf, sparse ones ~16 bytes a position
            sparse = m // 8 > 16 * len(pairs) * self.config.k / n_leaves
        try:
            chunk = max(1, _CHUNK_BYTES // (16 * len(pairs) * self.config.k // n_leaves + 1 if sparse else m))
            for chunk_start in range(0, n_leaves, chunk):
                chunk_end = min(n_leaves, chunk_start + chunk)
                make = self._sparse_leaf_bits if sparse else self._leaf_bits
                leaf_bits = make(positions, pair_code, pair_bounds, chunk_start, chunk_end)
                for local, bits in enumerate(leaf_bits, start=chunk_start):
                    leaf = first_leaf + local
                    lo_t, hi_t = lo_ts[local], hi_ts[local]
                    if local == 0 and previous is not None:
                        bits = bits_union([bits, previous[0]], m)
                        lo_t, hi_t = min(lo_t, previous[1]), max(hi_t, previous[2])
                    if (leaf + 1) * C <= end:
                        self._add_leaf(leaf, bits, lo_t, hi_t)
                    else:
                        self._store(0, leaf * C, end - 1, lo_t, hi_t, (), bits)
                        self._partial_bits = bits
        finally:
            self._flush()
        self.n_events = end

    def add_leaves(self, first_leaf: int, leaf_bits: Sequence[int], lo_ts: Sequence[int],
                   hi_ts: Sequence[int], end: int) -> None:
        """Alg. 1's leaf step for leaf filters computed elsewhere (e.g. by Spark tasks, one window each).

        ``leaf_bits`` are the *unfolded* ``m``-bit filters (as integers, little-endian bit order) of leaves
        ``first_leaf, first_leaf + 1, …`` with their first and last event times; ``end`` is the stream's new
        length.  The first leaf must be the one holding seq ``n_events``; if that is the stored partial leaf,
        the given bits replace it and must cover its events too.  Complete leaves go through Alg. 2, a last
        incomplete one becomes the new partial leaf — the same code path as :meth:`update`, so the same bits.
        """
        C = self.config.leaf_size
        count = -(-end // C) - first_leaf
        if first_leaf != self.n_events // C or end <= self.n_events or count < 1:
            raise SeqsketchError(f"leaves must continue the tree at leaf {self.n_events // C} "
                                 f"(seq {self.n_events}); got leaf {first_leaf} up to seq {end - 1}")
        if not len(leaf_bits) == len(lo_ts) == len(hi_ts) == count:
            raise SeqsketchError(f"seqs {self.n_events}…{end - 1} take {count} leaves from leaf "
                                 f"{first_leaf}; got {len(leaf_bits)} filters and "
                                 f"{len(lo_ts)}/{len(hi_ts)} time ranges")
        self._cache.clear()
        if self.has_partial:
            self._pop_partial()
        self._pending = _Pending(self.rows, self.config.fanout)
        try:
            for j in range(count):
                leaf, bits, lo_t, hi_t = first_leaf + j, int(leaf_bits[j]), int(lo_ts[j]), int(hi_ts[j])
                if (leaf + 1) * C <= end:
                    self._add_leaf(leaf, bits, lo_t, hi_t)
                else:
                    self._store(0, leaf * C, end - 1, lo_t, hi_t, (), bits)
                    self._partial_bits = bits
        finally:
            self._flush()
        self.n_events = end

    def _vocabulary_positions(self, vocabulary: list[str]) -> np.ndarray:
        """The positions of every key of ``vocabulary``, ``(len, k)``; each key is hashed once per tree."""
        known = self._positions
        missing = [key for key in vocabulary if key not in known]
        fresh = key_positions(missing, self.config.k, self.config.m) if missing else None
        if fresh is not None and len(missing) == len(vocabulary):
            known.update(zip(missing, fresh, strict=True))
            return fresh.astype(np.int64)
        if fresh is not None:
            known.update(zip(missing, fresh, strict=True))
        return np.stack([known[key] for key in vocabulary]).astype(np.int64)

    def _leaf_bits(self, positions: np.ndarray, pair_code: np.ndarray, pair_bounds: np.ndarray,
                   lo: int, hi: int) -> list[int]:
        """The unfolded bits of leaves ``lo … hi−1`` (local numbering), as Python integers.

        One boolean row of ``m`` per leaf, set at the positions of its distinct types, packed little-endian.
        """
        m = self.config.m
        codes = pair_code[pair_bounds[lo]:pair_bounds[hi]]
        rows_of = np.repeat(np.arange(hi - lo, dtype=_I64), np.diff(pair_bounds[lo:hi + 1]))
        flat = (rows_of[:, None] * m + positions[codes]).ravel()
        table = np.zeros((hi - lo) * m, dtype=bool)
        table[flat] = True
        raw = np.packbits(table, bitorder="little").tobytes()
        row_bytes = m // 8
        return [int.from_bytes(raw[i:i + row_bytes], "little") for i in range(0, len(raw), row_bytes)]

    def _sparse_leaf_bits(self, positions: np.ndarray, pair_code: np.ndarray, pair_bounds: np.ndarray,
                          lo: int, hi: int) -> list[np.ndarray]:
        """The leaves' set positions (sorted, distinct), one array per leaf: one sort for the whole chunk."""
        m = self.config.m
        codes = pair_code[pair_bounds[lo]:pair_bounds[hi]]
        rows_of = np.repeat(np.arange(hi - lo, dtype=_I64), np.diff(pair_bounds[lo:hi + 1]))
        flat = sorted_unique((rows_of[:, None] * m + positions[codes]).ravel())
        cuts = np.searchsorted(flat, np.arange(hi - lo + 1, dtype=_I64) * m)
        return [flat[cuts[i]:cuts[i + 1]] - i * m for i in range(hi - lo)]

    def _store(self, level: int, lo_seq: int, hi_seq: int, lo_ts: int, hi_ts: int,
               children: Sequence[int], bits: Bits) -> int:
        """Add a node row (buffered until the update ends), its bits folded when enabled; returns its id."""
        cfg = self.config
        if cfg.fold:
            folded, size = fold_any(bits, cfg.m, cfg.min_bits)
        else:
            folded, size = bits_to_int(bits, cfg.m), cfg.m
        pending = self._pending
        node = pending.first_id + len(pending.rows)
        pending.rows.append((level, lo_seq, hi_seq, lo_ts, hi_ts, size.bit_length() - 1))
        pending.children.append(tuple(children) if children else pending.no_children)
        pending.bits.append(folded.to_bytes(size // 8, "little"))
        return node

    def _flush(self) -> None:
        """Move the rows buffered by :meth:`_store` into the numpy columns."""
        self._cache.clear()  # derived views (intervals, words, indexes) describe the old columns
        pending = self._pending
        self._pending = None
        if pending is None or not pending.rows:
            return
        table = np.array(pending.rows, dtype=_I64)
        for j, column in enumerate((self._level, self._lo_seq, self._hi_seq, self._lo_ts, self._hi_ts,
                                    self._log2)):
            column.extend(table[:, j].astype(column.data.dtype))
        self._children.extend(np.array(pending.children, dtype=_I64))
        sizes = np.left_shift(1, table[:, 5]) // 8
        self._offsets.extend(self._pool.n + np.concatenate(([0], np.cumsum(sizes[:-1]))).astype(_I64))
        self._pool.extend(np.frombuffer(b"".join(pending.bits), dtype=np.uint8))

    def _add_leaf(self, leaf: int, bits: Bits, lo_ts: int, hi_ts: int) -> None:
        """Alg. 2 (addLeaf): add a complete leaf to the forest; merge the tail while the constraints hold."""
        C, F, half = self.config.leaf_size, self.config.fanout, self.config.m // 2
        lo_seq, hi_seq = leaf * C, (leaf + 1) * C - 1
        node = self._store(0, lo_seq, hi_seq, lo_ts, hi_ts, (), bits)
        opened = self._open
        opened.append(_Open(node, 0, bits, lo_seq, hi_seq, lo_ts, hi_ts))
        while len(opened) >= F and opened[-F].level == opened[-1].level:
            group = opened[-F:]
            union = bits_union([member.bits for member in group], self.config.m)
            if bits_count(union) > half:  # density constraint (§4.1): this group can never merge
                del opened[: len(opened) - F + 1]
                break
            level = group[0].level + 1
            first, last = group[0], group[-1]
            lo_t, hi_t = min(g.lo_ts for g in group), max(g.hi_ts for g in group)
            parent = self._store(level, first.lo_seq, last.hi_seq, lo_t, hi_t, [g.id for g in group], union)
            del opened[-F:]
            opened.append(_Open(parent, level, union, first.lo_seq, last.hi_seq, lo_t, hi_t))

    def _pop_partial(self) -> tuple[Bits, int, int]:
        self._cache.clear()
        row = self.rows - 1
        bits = self._partial_bits
        assert bits is not None
        out = (bits, int(self._lo_ts.data[row]), int(self._hi_ts.data[row]))
        offset = int(self._offsets.data[row])
        for column in (self._level, self._lo_seq, self._hi_seq, self._lo_ts, self._hi_ts, self._children,
                       self._log2, self._offsets):
            column.truncate(row)
        self._pool.truncate(offset)
        self._partial_bits = None
        return out

    def open_node(self, node: int, level: int, bits: int) -> _Open:
        """The merge state of a stored node (used when restoring a persisted tree)."""
        return _Open(node, level, bits, int(self._lo_seq.data[node]), int(self._hi_seq.data[node]),
                     int(self._lo_ts.data[node]), int(self._hi_ts.data[node]))

    # ---------------------------------------------------------------------------------------- structure
    def _parents(self) -> np.ndarray:
        parents = self._cache.get("parents")
        if parents is None:
            parents = np.full(self.rows, -1, dtype=_I64)
            children = self._children.view()
            owners = np.repeat(np.arange(self.rows, dtype=_I64), children.shape[1]).reshape(children.shape)
            mask = children >= 0
            parents[children[mask]] = owners[mask]
            self._cache["parents"] = parents
        return parents  # type: ignore[return-value]

    def node(self, node: int) -> Node:
        if not 0 <= node < self.rows:
            raise SeqsketchError(f"no node {node} in a tree of {self.rows} nodes")
        children = tuple(int(c) for c in self._children.data[node] if c >= 0)
        return Node(node, int(self._level.data[node]), int(self._lo_seq.data[node]),
                    int(self._hi_seq.data[node]), int(self._lo_ts.data[node]), int(self._hi_ts.data[node]),
                    children, 1 << int(self._log2.data[node]), self.has_partial and node == self.rows - 1)

    def nodes(self) -> list[Node]:
        return [self.node(i) for i in range(self.rows)]

    def top_nodes(self) -> list[int]:
        """The top-level nodes (the forest's roots, §4.3), in seq order; the partial leaf is the last one."""
        return np.flatnonzero(self._parents() < 0).tolist()

    def children(self, node: int) -> list[int]:
        return [int(c) for c in self._children.data[node] if c >= 0]

    def parent(self, node: int) -> int | None:
        p = int(self._parents()[node])
        return None if p < 0 else p

    def leaves(self) -> list[int]:
        """All leaves in seq order, the partial one last."""
        return np.flatnonzero(self._level.view() == 0).tolist()

    def leaf_at(self, seq: int) -> int:
        """The id of the leaf covering ``seq``."""
        if not 0 <= seq < self.n_events:
            raise SeqsketchError(f"seq {seq} is outside the indexed stream [0, {self.n_events - 1}]")
        leaves = self._cache.get("leaves")
        if leaves is None:
            leaves = self._cache["leaves"] = np.flatnonzero(self._level.view() == 0)
        return int(leaves[seq // self.config.leaf_size])  # type: ignore[index]

    def intervals(self) -> dict[str, np.ndarray]:
        """Column views of every row: level, lo_seq, hi_seq, lo_ts, hi_ts, children, size (bits).

        Computed once per tree state (cached until the next update); treat the arrays as read-only.
        """
        cols = self._cache.get("intervals")
        if cols is None:
            cols = self._cache["intervals"] = {
                "level": self._level.view(), "lo_seq": self._lo_seq.view(), "hi_seq": self._hi_seq.view(),
                "lo_ts": self._lo_ts.view(), "hi_ts": self._hi_ts.view(), "children": self._children.view(),
                "size": np.left_shift(1, self._log2.view().astype(_I64))}
        return cols  # type: ignore[return-value]

    def nodes_covering(self, lo_seq: int, hi_seq: int) -> list[int]:
        """The fewest nodes whose intervals cover every leaf that meets ``[lo_seq, hi_seq]`` (§4.3.4).

        A node inside the range is taken whole; a node straddling its edge is opened, down to the boundary
        leaves, which are taken whole (a leaf cannot be split, so the cover may reach past the range).
        """
        lo_col, hi_col = self._lo_seq.data, self._hi_seq.data
        out: list[int] = []
        stack = list(reversed(self.top_nodes()))
        while stack:
            node = stack.pop()
            lo, hi = int(lo_col[node]), int(hi_col[node])
            if hi < lo_seq or lo > hi_seq:
                continue
            kids = self.children(node)
            if (lo >= lo_seq and hi <= hi_seq) or not kids:
                out.append(node)
            else:
                stack.extend(reversed(kids))
        return out

    # ---------------------------------------------------------------------------------------- probing
    def positions(self, key: str) -> np.ndarray:
        """The key's ``k`` positions in an ``m``-bit filter (hashed once, then cached)."""
        pos = self._positions.get(key)
        if pos is None:
            pos = self._positions[key] = key_positions([key], self.config.k, self.config.m)[0]
        return pos

    def may_contain(self, node: int, key: str) -> bool:
        """Whether ``key`` may occur in the node's interval: False is certain, True may be a false hit."""
        return bool(self.probe([node], [key])[0, 0])

    def probe(self, nodes: Sequence[int] | np.ndarray, keys: Sequence[str]) -> np.ndarray:
        """Batch probe: a ``(len(nodes), len(keys))`` bool array of :meth:`may_contain` answers."""
        ids = np.asarray(nodes, dtype=_I64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.rows):
            raise SeqsketchError(f"node ids must be in [0, {self.rows - 1}]")
        out = np.zeros((len(ids), len(keys)), dtype=bool)
        if not keys or not ids.size:
            return out
        # Nodes of one stored size share each key's bit mask (a filter folded to 2^b bits keeps position p
        # at p mod 2^b).  Filters of whole 64-bit words at word-aligned offsets (every size the default
        # configuration stores) have their words gathered once and tested against every key's mask.
        log2 = self._log2.data[ids]
        offsets = self._offsets.data[ids]
        pos = np.stack([self.positions(key) for key in keys]).astype(_I64)  # (K, k)
        sizes = np.unique(log2)
        for size in sizes.tolist():
            rows = np.arange(len(ids)) if len(sizes) == 1 else np.flatnonzero(log2 == size)
            bit = pos & ((1 << size) - 1)
            if size >= 6 and not (offsets[rows] & 7).any():
                self._probe_words(out, rows, offsets[rows] >> 3, bit, size)
            else:  # filters narrower than a word: test the bytes
                byte = offsets[rows][:, None, None] + (bit >> 3)[None, :, :]  # (n, K, k)
                got = self._pool.data[byte] & np.left_shift(1, bit & 7).astype(np.uint8)[None, :, :]
                out[rows] = (got != 0).all(axis=2)
        return out

    def _probe_words(self, out: np.ndarray, rows: np.ndarray, word_at: np.ndarray, bit: np.ndarray,
                     size: int) -> None:
        """:meth:`probe` of nodes of one size (``2^size`` bits, word-aligned at ``word_at``), the keys' bit
        positions in that size being ``bit`` (K, k).

        Per key, one of its words at a time, and only over the nodes that passed the words before: a node
        fails most keys it lacks within the first word or two, so a rare key costs little more than one
        gather over the nodes, while a key present everywhere costs one pass per word.
        """
        words = self._words()
        if len(rows) <= _PROBE_BLOCK_ROWS:
            # few nodes: one gather of every word any key needs costs fewer steps than word by word
            mask = np.zeros((bit.shape[0], (1 << size) >> 6), dtype=np.uint64)
            np.bitwise_or.at(mask, (np.arange(bit.shape[0])[:, None], bit >> 6),
                             np.left_shift(np.uint64(1), (bit & 63).astype(np.uint64)))
            used = np.flatnonzero(mask.any(axis=0))
            mask = mask[:, used]
            block = words[word_at[:, None] + used[None, :]]  # (n, W)
            for j in range(bit.shape[0]):
                out[rows, j] = ((block & mask[j]) == mask[j]).all(axis=1)
            return
        one = np.uint64(1)
        for j in range(bit.shape[0]):
            mask: dict[int, np.uint64] = {}
            for b in bit[j].tolist():
                mask[b >> 6] = mask.get(b >> 6, np.uint64(0)) | (one << np.uint64(b & 63))
            alive = np.arange(len(rows))
            at = word_at
            for w, m in mask.items():
                got = words[at + w]
                keep = (got & m) == m
                if not keep.all():
                    alive, at = alive[keep], at[keep]
                    if not alive.size:
                        break
            out[rows[alive], j] = True

    def sliced(self, nodes: Sequence[int] | np.ndarray, *, max_bits: int = _SLICED_MAX_BITS
               ) -> SlicedFilters | None:
        """The filters of ``nodes`` bit-sliced (see :class:`SlicedFilters`), or None when that would take
        more than ``max_bits`` bits (``m`` per node)."""
        ids = np.asarray(nodes, dtype=_I64)
        m = self.config.m
        if not ids.size or m * len(ids) > max_bits:
            return None
        log2 = self._log2.data[ids].astype(_I64)
        offsets = self._offsets.data[ids]
        pool = self._pool.data
        n = len(ids)
        padded = (n + 63) // 64 * 64
        rows = np.zeros((m, padded // 8), dtype=np.uint8)
        for size in np.unique(log2).tolist():
            # The nodes stored at this size: their bits node by node, packed along the nodes (8 per byte)
            # and turned into one row per bit; a row repeats every `width` bits of m (p mod width).
            width = 1 << size
            pick = np.flatnonzero(log2 == size)
            grid = np.zeros((padded, width // 8), dtype=np.uint8)  # the nodes' filter bytes, by node
            grid[pick] = pool[offsets[pick][:, None] + np.arange(width // 8)[None, :]]
            by_byte = np.ascontiguousarray(grid.T)  # (width / 8, padded): byte j of every node
            across = np.empty((width, padded // 8), dtype=np.uint8)
            for bit in range(8):  # bit p = 8 j + bit of every node, packed 8 nodes to a byte
                across[bit::8] = np.packbits((by_byte >> bit) & 1, axis=1, bitorder="little")
            rows.reshape(m // width, width, -1)[:] |= across[None, :, :]
        return SlicedFilters(self, rows.view("<u8"), n)

    def drop_cached(self) -> None:
        """Forget every derived value (as a process that just loaded the tree has none)."""
        self._cache.clear()

    def cached(self, key: object, make: Callable[[], object]) -> Any:
        """A value derived from the tree, made once (by ``make``) and kept until the tree changes."""
        value = self._cache.get(key)
        if value is None:
            with _CACHED_LOCK:
                value = self._cache.get(key)
                if value is None:
                    value = self._cache[key] = make()
        return value

    def _words(self) -> np.ndarray:
        """The bit pool's whole 64-bit words, little-endian (bit p of a word-aligned filter is bit p mod 64
        of its word p // 64, as in the byte layout)."""
        pool, n = self._pool.data, self._pool.n
        cached = self._cache.get("words")
        if cached is None or cached[0] is not pool or cached[1] != n:
            cached = self._cache["words"] = (pool, n, pool[: n - n % 8].view("<u8"))
        return cached[2]  # type: ignore[index]

    def filter(self, node: int) -> BloomFilter:
        """The node's filter as stored (possibly folded) as a :class:`BloomFilter`."""
        size = 1 << int(self._log2.data[node])
        offset = int(self._offsets.data[node])
        data = self._pool.data[offset:offset + size // 8].tobytes()
        return BloomFilter.from_bytes(data, size, self.config.k)

    def density(self, nodes: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
        """Fraction of stored bits set, per node."""
        every = self._cache.get("density")
        if every is None:
            counts = np.bitwise_count(self._pool.view()).astype(_I64)
            starts = self._offsets.view()
            per_node = np.add.reduceat(counts, starts) if len(starts) else np.zeros(0, _I64)
            every = self._cache["density"] = per_node / np.left_shift(1, self._log2.view().astype(_I64))
        return every if nodes is None else every[np.asarray(nodes, dtype=_I64)]  # type: ignore[index]

    # ---------------------------------------------------------------------------------------- accuracy
    def expected_fpq(self, query_length: int | None = None) -> float:
        """Eq. 4.3 over the actual top-level nodes: ``1 − Π (1 − ρ_i^k)^p``, ``p`` probes per node.

        ``ρ_i^k`` is eq. 4.1 expressed with node ``i``'s measured density; ``p = 2 (s − 1)`` (§4.4.1).
        """
        if self.rows == 0:
            return 0.0
        s = self.config.query_length if query_length is None else query_length
        probes = 2 * (s - 1) if s >= 2 else 1
        rates = self.density(self.top_nodes()) ** self.config.k
        return float(-np.expm1(probes * np.log1p(-np.minimum(rates, 1 - 1e-16)).sum()))

    # ---------------------------------------------------------------------------------------- identity
    def digest(self) -> str:
        """SHA-256 of the tree's logical content: config, event count, and every node's level, intervals,
        children, stored size and bits, in id order (the partial leaf last).  Independent of how the tree was
        built (at once, in pieces, on Spark) or stored."""
        h = hashlib.sha256(b"seqsketch.bloomtree/1\n")
        h.update(json.dumps(self.config.canonical(), sort_keys=True).encode())
        h.update(np.array([self.n_events, self.rows], dtype="<i8").tobytes())
        for name, column in (("level", self._level), ("lo_seq", self._lo_seq), ("hi_seq", self._hi_seq),
                             ("lo_ts", self._lo_ts), ("hi_ts", self._hi_ts), ("children", self._children),
                             ("log2", self._log2)):
            data = np.ascontiguousarray(column.view().astype(column.data.dtype.newbyteorder("<")))
            h.update(name.encode())
            h.update(data.tobytes())
        h.update(b"bits")
        h.update(self._pool.view().tobytes())
        return h.hexdigest()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BloomTree):
            return NotImplemented
        return self.digest() == other.digest()

    __hash__ = None  # type: ignore[assignment]

    def copy(self) -> BloomTree:
        twin = BloomTree(self.config)
        for name in ("_level", "_lo_seq", "_hi_seq", "_lo_ts", "_hi_ts", "_children", "_log2", "_pool",
                     "_offsets"):
            column: _Column = getattr(self, name)
            setattr(twin, name, _Column(column.view().copy()))
        twin.n_events = self.n_events
        twin._open = list(self._open)
        twin._partial_bits = self._partial_bits
        twin._positions = dict(self._positions)
        return twin

    def info(self) -> dict:
        """The ``index`` section of ``seqsketch info`` (CONTRACT §4)."""
        stored = self.stored_bytes()
        return {"leaf_size": self.config.leaf_size, "fanout": self.config.fanout, "m": self.config.m,
                "k": self.config.k, "levels": self.levels, "nodes": self.rows, "leaves": self.n_leaves,
                "top_nodes": len(self.top_nodes()), "events": self.n_events, "bytes": stored,
                "bytes_per_event": stored / self.n_events if self.n_events else 0.0,
                "fpq": self.config.fpq, "expected_fpq": self.expected_fpq(), "index_digest": self.digest()}

    def stored_bytes(self) -> int:
        """Bytes of the persisted form (bits, per-node columns, merge state) that :mod:`sketch.persist`
        writes."""
        from sketch.persist import serialized_size

        return serialized_size(self)

    def __repr__(self) -> str:
        return (f"BloomTree(events={self.n_events}, nodes={self.rows}, levels={self.levels}, "
                f"m={self.config.m}, k={self.config.k}, C={self.config.leaf_size}, F={self.config.fanout})")

