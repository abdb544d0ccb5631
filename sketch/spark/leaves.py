"""Leaves built in parallel, levels merged in one place: the Bloom-tree half of the Spark build.

Baltus 2021 builds the tree in two steps that parallelise differently.  Alg. 1 (a leaf is the Bloom filter of
the types of ``C`` consecutive events) is independent per leaf, so each Spark task builds the leaves of its
window of whole leaves.  Alg. 2 (merge neighbouring top-level nodes of equal level while the union stays
at most half full) is a fold over the leaf sequence, so the driver runs it, leaf after leaf, in seq order.

Both halves give the bits of the in-process builder:

* a task knows its leaves' distinct types as (leaf, type) pairs; :func:`leaf_bits` sets each leaf's
  unfolded ``m`` bits at its types' positions (the positions :meth:`BloomTree.update` hashes), once the
  driver has sized ``m`` and ``k`` from every window's pairs (or at once, in an append, from the tree's
  configuration).  :func:`window_leaves` does the same through :meth:`BloomTree.update` itself, on an
  *unfolded* twin of the configuration (folding changes how a node is stored, not which bits a leaf has);
* the driver adds the leaves to the dataset's tree with the tree's own leaf-adding step (Alg. 2), exactly as
  :meth:`BloomTree.update` does after it has computed a chunk of leaf bits.

A window starts on a leaf boundary.  When an append starts inside the stored partial leaf, the task that owns
that leaf also reads the leaf's stored events, so it returns the leaf whole; the driver replaces the stored
partial leaf with it (the same union ``update`` forms when it completes a partial leaf).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from sketch.bloom import key_positions
from sketch.tree import BloomTree, TreeConfig
from sketch.tree.bloomtree import _Pending

#: Booleans of leaf rows set at once by :func:`leaf_bits` (bounds its memory to 64 MiB).
_CHUNK_BITS = 64 << 20


@dataclass(frozen=True)
class LeafRun:
    """Consecutive leaves ``first_leaf, first_leaf + 1, …`` of one window: unfolded bits and time ranges.

    ``bits`` holds ``m / 8`` little-endian bytes per leaf; ``lo_ts``/``hi_ts`` are the first and last event
    time (UTC µs) of each leaf (Baltus 2021 §4.1); ``end_seq`` is one past the window's last event.
    """

    first_leaf: int
    bits: bytes
    lo_ts: np.ndarray
    hi_ts: np.ndarray
    end_seq: int

    @property
    def count(self) -> int:
        return len(self.lo_ts)

    def leaf_bits(self, j: int, m: int) -> int:
        width = m // 8
        return int.from_bytes(self.bits[j * width:(j + 1) * width], "little")


def window_leaves(config: TreeConfig, types: pa.Array | pa.ChunkedArray, ts: pa.Array | pa.ChunkedArray,
                  first_seq: int) -> LeafRun:
    """Alg. 1 on one window: the leaves of the events ``first_seq, first_seq + 1, …`` (``first_seq`` is the
    first seq of a leaf, ``first_seq % C == 0``), built by :meth:`BloomTree.update` itself."""
    C = config.leaf_size
    if first_seq % C:
        raise ValueError(f"a window must start on a leaf boundary: seq {first_seq} with leaf size {C}")
    twin = BloomTree(replace(config, fold=False))
    twin.update(types, ts)
    leaves = twin.leaves()
    bits = b"".join(twin.filter(leaf).bits.tobytes() for leaf in leaves)
    times = twin.leaf_times()
    return LeafRun(first_leaf=first_seq // C, bits=bits, lo_ts=times[:, 0].copy(), hi_ts=times[:, 1].copy(),
                   end_seq=first_seq + twin.n_events)


def leaf_bits(config: TreeConfig, vocabulary: Sequence[str], pairs: np.ndarray, leaves: int) -> bytes:
    """Alg. 1's filters of ``leaves`` consecutive leaves from their distinct types: ``pairs`` lists each
    (leaf, type) once as ``leaf * V + code`` (``V`` = ``len(vocabulary)``, at least 1; leaf 0 = the first),
    sorted.  Answers the unfolded ``m``-bit filter of every leaf, ``m / 8`` little-endian bytes each — the
    bits :meth:`BloomTree.update` sets for the same events (the same positions of the same types)."""
    m, k = config.m, config.k
    width = max(len(vocabulary), 1)
    positions = (key_positions(list(vocabulary), k, m).astype(np.int64) if len(vocabulary)
                 else np.zeros((0, k), dtype=np.int64))
    code = pairs % width
    bounds = np.searchsorted(pairs // width, np.arange(leaves + 1, dtype=np.int64))
    out = []
    step = max(1, _CHUNK_BITS // m)
    for lo in range(0, leaves, step):
        hi = min(leaves, lo + step)
        rows_of = np.repeat(np.arange(hi - lo, dtype=np.int64), np.diff(bounds[lo:hi + 1]))
        table = np.zeros((hi - lo) * m, dtype=bool)
        table[(rows_of[:, None] * m + positions[code[bounds[lo]:bounds[hi]]]).ravel()] = True
        out.append(np.packbits(table, bitorder="little").tobytes())
    return b"".join(out)


def merge_leaves(tree: BloomTree, runs: Iterable[LeafRun]) -> BloomTree:
    """Alg. 2 in the driver: add the runs' leaves to ``tree`` in seq order, merging the forest's tail.

    The runs must continue ``tree``'s stream: the first run starts at the leaf that holds seq
    ``tree.n_events`` (the stored partial leaf, returned whole by its window, replaces it), and each next run
    starts where the previous ended.  This is the leaf-adding loop of :meth:`BloomTree.update`, fed with
    leaves whose bits the tasks computed.
    """
    C, m = tree.config.leaf_size, tree.config.m
    expected_leaf = tree.n_events // C
    ordered = sorted(runs, key=lambda r: r.first_leaf)
    if not ordered:
        return tree
    if ordered[0].first_leaf != expected_leaf:
        raise ValueError(f"the leaves continue the tree at leaf {expected_leaf}, not {ordered[0].first_leaf}")
    tree._cache.clear()
    if tree.has_partial:
        tree._pop_partial()  # its window rebuilt it whole, from the stored events and the new ones
    end = ordered[-1].end_seq
    next_leaf = expected_leaf
    # The tree buffers the rows one update creates and writes them to its columns at the end (_flush).
    tree._pending = _Pending(tree.rows, tree.config.fanout)
    try:
        for run in ordered:
            if run.first_leaf != next_leaf:
                raise ValueError(f"leaf runs leave a gap: expected leaf {next_leaf}, got {run.first_leaf}")
            for j in range(run.count):
                leaf = run.first_leaf + j
                bits, lo_t, hi_t = run.leaf_bits(j, m), int(run.lo_ts[j]), int(run.hi_ts[j])
                if (leaf + 1) * C <= end:
                    tree._add_leaf(leaf, bits, lo_t, hi_t)
                else:
                    tree._store(0, leaf * C, end - 1, lo_t, hi_t, (), bits)
                    tree._partial_bits = bits
            next_leaf = run.first_leaf + run.count
    finally:
        tree._flush()
    tree.n_events = end
    return tree
