"""The Bloom-filter tree built over an event stream (Baltus 2021, §4.1, Algorithms 1 and 2).

Alg. 1: the stream is cut into count-based leaves of ``C`` events, leaf ``i`` covering seqs
``[i·C, (i+1)·C − 1]`` (the thesis counts from 1, seqs count from 0), each holding a Bloom filter of the
event types in it.  Alg. 2: a complete leaf joins the forest of top-level nodes, and groups of ``F``
neighbouring top-level nodes are merged into a parent whose filter is their union while they are on one
level and the union has at most ``m/2`` bits set (the level and density constraints of Baltus 2021 §4.1).

A group whose union was too dense stays too dense (filters never change), so only the tail of the forest,
which a new leaf or a new parent just joined, can become mergeable: :meth:`BloomTree._add_leaf` checks the
tail, repeatedly, until nothing merges.  A failed group releases its oldest member for good and keeps the
others, which may still pair with later nodes — as the thesis' neighbouring-pair scan would.  The outcome
is a function of the leaf sequence alone, so appending events in pieces builds exactly the tree that
building at once does (same :meth:`~sketch.tree.nodes.TreeNodes.digest`).  The last, partly filled leaf is
queryable (a top-level node that merges only once it is complete).  The unfolded bits are kept only for the
nodes that may still merge (the tail of the forest) and the partial leaf; every node is stored folded.
"""


from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from exact.errors import SeqsketchError
from sketch.bloom import key_positions
from sketch.tree.bits import (
    Bits,
    as_micros,
    bits_count,
    bits_to_int,
    bits_union,
    dense_leaf_bits,
    encode_types,
    fold_any,
    leaf_type_pairs,
    sparse_leaf_bits,
)
from sketch.tree.config import TreeConfig
from sketch.tree.file_layout import COLUMNS, DENSE, IN_POOL, SPARSE, file_size
from sketch.tree.nodes import Column, TreeNodes, derive_structure

#: Rows of leaves whose bits are materialised at once when building (bounds memory to ~64 MiB per chunk).
_CHUNK_BYTES = 64 << 20
_I64 = np.int64


class _Open(NamedTuple):
    """A node that may still merge (Alg. 2 state): its unfolded bits and its intervals."""

    id: int
    level: int
    bits: Bits
    lo_seq: int
    hi_seq: int
    lo_ts: int
    hi_ts: int


#: :func:`dense_leaf_bits` or :func:`sparse_leaf_bits`: (m, positions, pair_code, pair_bounds, lo, hi) → bits
_LeafBits = Callable[[int, np.ndarray, np.ndarray, np.ndarray, int, int], Sequence[Bits]]


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


class BloomTree(TreeNodes):
    """The Bloom-filter tree (Baltus 2021, Alg. 1 and 2) with folded node storage.

    Build with :meth:`update` on event types and timestamps, or via :func:`sketch.build.build_tree`, which
    also sizes the configuration (Baltus 2021 §4.4).  Probe with :meth:`may_contain` / :meth:`probe`; walk with
    :meth:`top_nodes`, :meth:`children`, :meth:`leaves`, :meth:`nodes_covering` (those are
    :class:`~sketch.tree.nodes.TreeNodes`').  ``==`` compares the logical content (:meth:`digest`);
    ``serialize`` / ``deserialize`` and ``save`` / ``load`` live in :mod:`sketch.persist`.
    """

    #: Leaf filters built as position sets (True), as m-bit rows (False), or chosen per update by which is
    #: smaller (None).  The bits are the same either way; this only trades time and memory.
    sparse_leaves: bool | None = None

    def __init__(self, config: TreeConfig, *, first_leaf: int = 0) -> None:
        super().__init__(config)
        # Nodes that may still merge, a suffix of the forest (Alg. 2 state), with their unfolded bits.
        self._open: list[_Open] = []
        self._pending: _Pending | None = None
        # a tree kept from leaf ``first_leaf`` on (retention): its events start at that leaf's first seq
        self.first_leaf = first_leaf
        self.n_events = first_leaf * config.leaf_size

    @classmethod
    def from_columns(cls, config: TreeConfig, *, n_events: int, level: np.ndarray, log2: np.ndarray,
                     leaf_ts: np.ndarray, bits: np.ndarray, opened: list[_Open],
                     partial_bits: int | None, first_leaf: int = 0) -> BloomTree:
        """Rebuild a tree from its minimal stored form: per-node level and stored size, leaf times, bits.

        Children, seq intervals and internal nodes' time intervals are derived (:func:`derive_structure`;
        leaf ``j`` covers ``[jC, (j+1)C − 1]``, a parent spans its first to its last child).  Raises
        ``ValueError`` when the columns contradict each other.
        """
        tree = cls(config, first_leaf=first_leaf)
        rows = len(level)
        children = derive_structure(level, config.fanout)
        leaves = np.flatnonzero(level == 0)
        if leaf_ts.shape != (len(leaves), 2):
            raise ValueError(f"{len(leaves)} leaves but {leaf_ts.shape[0]} leaf time ranges")
        if len(leaves) != -(-n_events // config.leaf_size) - first_leaf:
            raise ValueError(f"{len(leaves)} leaves from leaf {first_leaf} cannot hold {n_events} events of "
                             f"leaf size {config.leaf_size}")
        lo_seq = np.zeros(rows, dtype=_I64)
        hi_seq = np.zeros(rows, dtype=_I64)
        lo_ts = np.zeros(rows, dtype=_I64)
        hi_ts = np.zeros(rows, dtype=_I64)
        index = np.arange(first_leaf, first_leaf + len(leaves), dtype=_I64)
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
        tree._level, tree._log2, tree._pool = Column(level), Column(log2), Column(bits)
        tree._children, tree._offsets = Column(children), Column(offsets)
        tree._lo_seq, tree._hi_seq, tree._lo_ts, tree._hi_ts = (Column(lo_seq), Column(hi_seq),
                                                                Column(lo_ts), Column(hi_ts))
        tree.n_events = n_events
        tree._open = opened
        tree._partial_bits = partial_bits
        return tree

    # ---------------------------------------------------------------------------------------- building
    def update(self, types: pa.Array | pa.ChunkedArray | Sequence[str] | np.ndarray,
               ts: pa.Array | pa.ChunkedArray | np.ndarray | Sequence[int]) -> None:
        """Append events (their types and UTC-microsecond timestamps) with seqs continuing the stream.

        Alg. 1: events fill the partial leaf, then new leaves of ``C`` events; every completed leaf is added
        to the forest with Alg. 2.  Distinct types are hashed once per call, and the leaves' bits are set in
        bulk from the precomputed positions of the types present in each.
        """
        codes, vocabulary = encode_types(types)
        self.update_encoded(codes, vocabulary, as_micros(ts))

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
                make: _LeafBits = sparse_leaf_bits if sparse else dense_leaf_bits
                leaf_bits = make(m, positions, pair_code, pair_bounds, chunk_start, chunk_end)
                for local, bits in enumerate(leaf_bits, start=chunk_start):
                    leaf = first_leaf + local
                    lo_t, hi_t = lo_ts[local], hi_ts[local]
                    if local == 0 and previous is not None:
                        bits = bits_union([bits, previous[0]], m)
                        lo_t, hi_t = min(lo_t, previous[1]), max(hi_t, previous[2])
                    self._place_leaf(leaf, bits, lo_t, hi_t, end)
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
                self._place_leaf(leaf, bits, lo_t, hi_t, end)
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

    def _store(self, level: int, lo_seq: int, hi_seq: int, lo_ts: int, hi_ts: int,
               children: Sequence[int], bits: Bits) -> int:
        """Add a node row (buffered until the update ends), its bits folded when enabled; returns its id."""
        cfg = self.config
        if cfg.fold:
            folded, size = fold_any(bits, cfg.m, cfg.min_bits)
        else:
            folded, size = bits_to_int(bits, cfg.m), cfg.m
        pending = self._pending
        assert pending is not None, "nodes are stored during an update"
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

    def _place_leaf(self, leaf: int, bits: Bits, lo_ts: int, hi_ts: int, end: int) -> None:
        """Leaf ``leaf`` of a stream ``end`` events long: through Alg. 2 if complete, else the partial one."""
        C = self.config.leaf_size
        if (leaf + 1) * C <= end:
            self._add_leaf(leaf, bits, lo_ts, hi_ts)
        else:
            self._store(0, leaf * C, end - 1, lo_ts, hi_ts, (), bits)
            self._partial_bits = bits

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
            if bits_count(union) > half:  # density constraint (Baltus 2021 §4.1): this group can never merge
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

    def open_node(self, node: int, level: int, bits: Bits) -> _Open:
        """The merge state of a stored node (used when restoring a persisted tree)."""
        return _Open(node, level, bits, int(self._lo_seq.data[node]), int(self._hi_seq.data[node]),
                     int(self._lo_ts.data[node]), int(self._hi_ts.data[node]))

    # ---------------------------------------------------------------------------------------- identity
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BloomTree):
            return NotImplemented
        return self.digest() == other.digest()

    __hash__ = None  # type: ignore[assignment]

    def copy(self) -> BloomTree:
        twin = BloomTree(self.config, first_leaf=self.first_leaf)
        for name in ("_level", "_lo_seq", "_hi_seq", "_lo_ts", "_hi_ts", "_children", "_log2", "_pool",
                     "_offsets"):
            column: Column = getattr(self, name)
            setattr(twin, name, Column(column.view().copy()))
        twin.n_events = self.n_events
        twin._open = list(self._open)
        twin._partial_bits = self._partial_bits
        twin._positions = dict(self._positions)
        return twin

    def info(self) -> dict[str, Any]:
        """The ``index`` section of ``seqsketch info`` (docs/contract.md §4)."""
        stored = self.stored_bytes()
        return {"leaf_size": self.config.leaf_size, "fanout": self.config.fanout, "m": self.config.m,
                "k": self.config.k, "levels": self.levels, "nodes": self.rows, "leaves": self.n_leaves,
                "top_nodes": len(self.top_nodes()), "events": self.n_events, "bytes": stored,
                "bytes_per_event": stored / self.n_events if self.n_events else 0.0,
                "fpq": self.config.fpq, "expected_fpq": self.expected_fpq(), "index_digest": self.digest()}

    def stored_bytes(self) -> int:
        """Bytes of the persisted form (bits, per-node columns, merge state) that :mod:`sketch.persist`
        writes."""
        return file_size(*self.stored_form())

    def stored_form(self) -> tuple[list[tuple[str, np.ndarray]], dict[str, Any]]:
        """The tree as an index file stores it (:mod:`sketch.tree.file_layout`): its sections' arrays, in file
        order, and the header's fields about it (configuration, counts, the merge state)."""
        listed, extra, positions = self._open_state()
        arrays = []
        for name, dtype in COLUMNS:
            if name == "open_bits":
                data = np.frombuffer(extra, dtype=np.uint8)
            elif name == "open_positions":
                data = positions
            elif name == "leaf_ts":
                data = self.leaf_times()
            else:
                data = {"level": self._level, "log2": self._log2, "bits": self._pool}[name].view()
            arrays.append((name, np.ascontiguousarray(data, dtype=np.dtype(dtype))))
        head = {"config": self.config.to_dict(), "events": self.n_events, "rows": self.rows,
                "partial": self.has_partial, "open": listed,
                **({"first_leaf": self.first_leaf} if self.first_leaf else {})}
        return arrays, head

    def _open_state(self) -> tuple[list[list[int]], bytes, np.ndarray]:
        """The merge state: open nodes (and the partial leaf) with their unfolded bits unless stored
        unfolded."""
        m = self.config.m
        entries = [(o.id, o.level, o.bits) for o in self._open]
        if self._partial_bits is not None:
            entries.append((self.rows - 1, 0, self._partial_bits))
        listed: list[list[int]] = []
        extra = bytearray()
        sparse: list[np.ndarray] = []
        log2m = m.bit_length() - 1
        for node, level, bits in entries:
            if not isinstance(bits, int):
                listed.append([node, level, SPARSE, int(bits.size)])
                sparse.append(bits)
            elif int(self._log2.data[node]) == log2m:
                listed.append([node, level, IN_POOL, 0])
            else:
                listed.append([node, level, DENSE, 0])
                extra += bits.to_bytes(m // 8, "little")
        positions = np.concatenate(sparse).astype("<u4") if sparse else np.zeros(0, dtype="<u4")
        return listed, bytes(extra), positions

    def __repr__(self) -> str:
        return (f"BloomTree(events={self.n_events}, nodes={self.rows}, levels={self.levels}, "
                f"m={self.config.m}, k={self.config.k}, C={self.config.leaf_size}, F={self.config.fanout})")
