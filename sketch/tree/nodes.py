"""A Bloom-filter tree's nodes as numpy columns, and everything that reads them (Baltus 2021, §4.1, §4.3).

Each node carries its level, its seq interval, its ts interval (first and last event time, Baltus 2021 §4.1), its
children and its filter, stored folded (:func:`sketch.bloom.fold_bits`) in one byte pool.  Node ids are
creation order, which is also seq order among top-level nodes; the partly filled last leaf, if any, is the
last row.  :class:`TreeNodes` walks the structure (top-level nodes, children, the node cover of a seq range,
Baltus 2021 §4.3.4), probes the filters (:mod:`sketch.tree.probe`), measures their densities for eq. 4.3 and digests the
whole; building it (Alg. 1 and 2) is :class:`sketch.tree.bloomtree.BloomTree`'s.
"""


from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar, cast

import numpy as np
from numpy.typing import DTypeLike

from exact.errors import SeqsketchError
from sketch.bloom import BloomFilter, key_positions
from sketch.tree.bits import Bits
from sketch.tree.config import Node, TreeConfig
from sketch.tree.probe import SLICED_MAX_BITS, SlicedFilters, probe_words, slice_filters

_I64 = np.int64
_CACHED_LOCK = threading.Lock()
_T = TypeVar("_T")


class Column:
    """A growable numpy column (amortised doubling), or a read-only view of a loaded file."""

    __slots__ = ("data", "n")

    def __init__(self, data: np.ndarray, n: int | None = None) -> None:
        self.data = data
        self.n = len(data) if n is None else n

    @classmethod
    def empty(cls, dtype: DTypeLike, width: int | None = None) -> Column:
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

    def extend(self, values: np.ndarray) -> None:
        self.reserve(len(values))
        self.data[self.n:self.n + len(values)] = values
        self.n += len(values)

    def truncate(self, n: int) -> None:
        self.n = n


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


class TreeNodes:
    """The nodes of a Bloom-filter tree (see the module docstring): what reading a tree needs, whoever
    built it.  :class:`~sketch.tree.bloomtree.BloomTree` adds the building."""

    def __init__(self, config: TreeConfig) -> None:
        self.config = config
        width = config.fanout
        self._level = Column.empty(np.int8)
        self._lo_seq = Column.empty(_I64)
        self._hi_seq = Column.empty(_I64)
        self._lo_ts = Column.empty(_I64)
        self._hi_ts = Column.empty(_I64)
        self._children = Column.empty(_I64, width)
        self._log2 = Column.empty(np.int8)
        self._pool = Column.empty(np.uint8)
        self._offsets = Column.empty(_I64)
        self.n_events = 0
        #: the first leaf the tree holds: 0, or the first one kept after retention retired the events before
        #: it (their seqs are never reused, so leaf ``j`` still covers ``[jC, (j+1)C − 1]``)
        self.first_leaf = 0
        # The partly filled last leaf, if any: its unfolded bits (it is the last row of the columns).
        self._partial_bits: Bits | None = None
        self._positions: dict[str, np.ndarray] = {}
        # derived values by key; each key always holds the same kind of value (hence the casts that read it)
        self._cache: dict[object, object] = {}

    # ---------------------------------------------------------------------------------------- sizes
    @property
    def rows(self) -> int:
        """Rows stored, the partial leaf included."""
        return self._level.n

    @property
    def has_partial(self) -> bool:
        return self._partial_bits is not None

    @property
    def n_leaves(self) -> int:
        """Leaves, the partial one included (eq. 4.9's L)."""
        return -(-self.n_events // self.config.leaf_size) - self.first_leaf

    @property
    def first_seq(self) -> int:
        """The first seq the tree covers (0 unless retention retired the events before it)."""
        return self.first_leaf * self.config.leaf_size

    @property
    def levels(self) -> int:
        """Levels in use (1 when there are only leaves; 0 when empty)."""
        return int(self._level.view().max()) + 1 if self.rows else 0

    def leaf_times(self) -> np.ndarray:
        """``(leaves, 2)`` first and last event time of every leaf, in seq order."""
        leaves = np.flatnonzero(self._level.view() == 0)
        return np.stack([self._lo_ts.data[leaves], self._hi_ts.data[leaves]], axis=1)

    # ---------------------------------------------------------------------------------------- structure
    def _parents(self) -> np.ndarray:
        parents = cast("np.ndarray | None", self._cache.get("parents"))
        if parents is None:
            parents = np.full(self.rows, -1, dtype=_I64)
            children = self._children.view()
            owners = np.repeat(np.arange(self.rows, dtype=_I64), children.shape[1]).reshape(children.shape)
            mask = children >= 0
            parents[children[mask]] = owners[mask]
            self._cache["parents"] = parents
        return parents

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
        """The top-level nodes (the forest's roots, Baltus 2021 §4.3), in seq order; the partial leaf is the last
        one."""
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
        if not self.first_seq <= seq < self.n_events:
            raise SeqsketchError(f"seq {seq} is outside the indexed stream [{self.first_seq}, {self.n_events - 1}]")
        leaves = cast("np.ndarray | None", self._cache.get("leaves"))
        if leaves is None:
            leaves = self._cache["leaves"] = np.flatnonzero(self._level.view() == 0)
        return int(leaves[seq // self.config.leaf_size - self.first_leaf])

    def intervals(self) -> dict[str, np.ndarray]:
        """Column views of every row: level, lo_seq, hi_seq, lo_ts, hi_ts, children, size (bits).

        Computed once per tree state (cached until the next update); treat the arrays as read-only.
        """
        cols = cast("dict[str, np.ndarray] | None", self._cache.get("intervals"))
        if cols is None:
            cols = self._cache["intervals"] = {
                "level": self._level.view(), "lo_seq": self._lo_seq.view(), "hi_seq": self._hi_seq.view(),
                "lo_ts": self._lo_ts.view(), "hi_ts": self._hi_ts.view(), "children": self._children.view(),
                "size": np.left_shift(1, self._log2.view().astype(_I64))}
        return cols

    def nodes_covering(self, lo_seq: int, hi_seq: int) -> list[int]:
        """The fewest nodes whose intervals cover every leaf that meets ``[lo_seq, hi_seq]`` (Baltus 2021 §4.3.4).

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
                probe_words(self._words(), out, rows, offsets[rows] >> 3, bit, size)
            else:  # filters narrower than a word: test the bytes
                byte = offsets[rows][:, None, None] + (bit >> 3)[None, :, :]  # (n, K, k)
                got = self._pool.data[byte] & np.left_shift(1, bit & 7).astype(np.uint8)[None, :, :]
                out[rows] = (got != 0).all(axis=2)
        return out

    def sliced(self, nodes: Sequence[int] | np.ndarray, *, max_bits: int = SLICED_MAX_BITS
               ) -> SlicedFilters | None:
        """The filters of ``nodes`` bit-sliced (see :class:`SlicedFilters`), or None when that would take
        more than ``max_bits`` bits (``m`` per node)."""
        ids = np.asarray(nodes, dtype=_I64)
        m = self.config.m
        if not ids.size or m * len(ids) > max_bits:
            return None
        return slice_filters(self._pool.data, self._offsets.data[ids], self._log2.data[ids], m,
                             self.positions)

    def drop_cached(self) -> None:
        """Forget every derived value (as a process that just loaded the tree has none)."""
        self._cache.clear()

    def cached(self, key: object, make: Callable[[], _T]) -> _T:
        """A value derived from the tree, made once (by ``make``) and kept until the tree changes."""
        value = self._cache.get(key)
        if value is None:
            with _CACHED_LOCK:
                value = self._cache.get(key)
                if value is None:
                    value = self._cache[key] = make()
        return cast(_T, value)  # (a key is always made by the same ``make``)

    def _words(self) -> np.ndarray:
        """The bit pool's whole 64-bit words, little-endian (bit p of a word-aligned filter is bit p mod 64
        of its word p // 64, as in the byte layout)."""
        pool, n = self._pool.data, self._pool.n
        cached = cast("tuple[np.ndarray, int, np.ndarray] | None", self._cache.get("words"))
        if cached is None or cached[0] is not pool or cached[1] != n:
            cached = self._cache["words"] = (pool, n, pool[: n - n % 8].view("<u8"))
        return cached[2]

    def filter(self, node: int) -> BloomFilter:
        """The node's filter as stored (possibly folded) as a :class:`BloomFilter`."""
        size = 1 << int(self._log2.data[node])
        offset = int(self._offsets.data[node])
        data = self._pool.data[offset:offset + size // 8].tobytes()
        return BloomFilter.from_bytes(data, size, self.config.k)

    def density(self, nodes: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
        """Fraction of stored bits set, per node."""
        every = cast("np.ndarray | None", self._cache.get("density"))
        if every is None:
            counts = np.bitwise_count(self._pool.view()).astype(_I64)
            starts = self._offsets.view()
            per_node = np.add.reduceat(counts, starts) if len(starts) else np.zeros(0, _I64)
            every = self._cache["density"] = per_node / np.left_shift(1, self._log2.view().astype(_I64))
        return every if nodes is None else every[np.asarray(nodes, dtype=_I64)]

    # ---------------------------------------------------------------------------------------- accuracy
    def expected_fpq(self, query_length: int | None = None) -> float:
        """Eq. 4.3 over the actual top-level nodes: ``1 − Π (1 − ρ_i^k)^p``, ``p`` probes per node.

        ``ρ_i^k`` is eq. 4.1 expressed with node ``i``'s measured density; ``p = 2 (s − 1)`` (Baltus 2021 §4.4.1).
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
        base = self.first_seq  # (a tree kept from a later leaf on is told by its content, as a build of those events)
        h.update(np.array([self.n_events - base, self.rows], dtype="<i8").tobytes())
        for name, column in (("level", self._level), ("lo_seq", self._lo_seq), ("hi_seq", self._hi_seq),
                             ("lo_ts", self._lo_ts), ("hi_ts", self._hi_ts), ("children", self._children),
                             ("log2", self._log2)):
            values = column.view()
            if base and name in ("lo_seq", "hi_seq"):
                values = values - base
            data = np.ascontiguousarray(values.astype(column.data.dtype.newbyteorder("<")))
            h.update(name.encode())
            h.update(data.tobytes())
        h.update(b"bits")
        h.update(self._pool.view().tobytes())
        return h.hexdigest()
