"""Probing stored filters in bulk: whole 64-bit words gathered per key, or every node bit-sliced.

A node is stored folded to ``2^b`` bits (:func:`sketch.bloom.fold_bits`), so a key's position ``p`` is at
``p mod 2^b`` there; nodes of one stored size share each key's bit mask.  :func:`probe_words` tests the
word-aligned nodes of one size key by key, word by word, only over the nodes still alive;
:class:`SlicedFilters` transposes a fixed list of nodes so that a key is tested over all of them in ``k``
passes (the classic signature-file slicing, applied to the tree's filters).
"""


from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

_I64 = np.int64
#: Largest bit-sliced copy :meth:`BloomTree.sliced` makes (``m`` bits per node): 32 MiB.
SLICED_MAX_BITS = 1 << 28
#: Up to this many nodes of one size, :meth:`BloomTree.probe` reads all their needed words at once.
_PROBE_BLOCK_ROWS = 1024


class SlicedFilters:
    """The filters of a fixed list of nodes, bit-sliced: row ``p`` holds bit ``p`` of every node's filter
    (bit ``p mod size`` for a node stored folded to ``size`` bits), one bit per node.  A key is then probed
    over all the nodes at once by ANDing its ``k`` rows — ``k`` passes over one bit per node instead of
    reading each node's words — which is the classic signature-file slicing applied to the tree's filters.
    Made from the tree's bits as they are; the tree changing makes it stale (keep it with
    :meth:`BloomTree.cached`).
    """

    def __init__(self, positions: Callable[[str], np.ndarray], rows: np.ndarray, count: int) -> None:
        self._positions = positions  # a key's k positions in m bits (the tree's, hashed once)
        self._rows = rows  # (m, words) uint64, node i at bit i % 64 of word i // 64
        self.count = count

    def probe(self, keys: Sequence[str]) -> np.ndarray:
        """A ``(count, len(keys))`` bool array: may each node hold each key (as :meth:`BloomTree.probe`)."""
        out = np.empty((self.count, len(keys)), dtype=bool)
        for j, key in enumerate(keys):
            hit = np.bitwise_and.reduce(self._rows[self._positions(key).astype(_I64)], axis=0)
            out[:, j] = np.unpackbits(hit.view(np.uint8), bitorder="little", count=self.count).view(bool)
        return out


def probe_words(words: np.ndarray, out: np.ndarray, rows: np.ndarray, word_at: np.ndarray, bit: np.ndarray,
                size: int) -> None:
    """:meth:`BloomTree.probe <sketch.tree.nodes.TreeNodes.probe>` of nodes of one size (``2^size`` bits,
    word-aligned at ``word_at`` in ``words``, the bit pool's 64-bit words), the keys' bit positions in that
    size being ``bit`` (K, k); the answers go to ``out[rows]``.

    Per key, one of its words at a time, and only over the nodes that passed the words before: a node
    fails most keys it lacks within the first word or two, so a rare key costs little more than one
    gather over the nodes, while a key present everywhere costs one pass per word.
    """
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
        word_masks: dict[int, np.uint64] = {}  # the key's bits, per word
        for b in bit[j].tolist():
            word_masks[b >> 6] = word_masks.get(b >> 6, np.uint64(0)) | (one << np.uint64(b & 63))
        alive = np.arange(len(rows))
        at = word_at
        for w, m in word_masks.items():
            got = words[at + w]
            keep = (got & m) == m
            if not keep.all():
                alive, at = alive[keep], at[keep]
                if not alive.size:
                    break
        out[rows[alive], j] = True


def slice_filters(pool: np.ndarray, offsets: np.ndarray, log2: np.ndarray, m: int,
                  positions: Callable[[str], np.ndarray]) -> SlicedFilters:
    """The filters stored at ``offsets`` of ``pool`` (``2^log2`` bits each) bit-sliced over ``m`` rows (see
    :class:`SlicedFilters`; ``positions`` gives a key's ``k`` positions in ``m`` bits)."""
    log2 = log2.astype(_I64)
    n = len(log2)
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
    return SlicedFilters(positions, rows.view("<u8"), n)
