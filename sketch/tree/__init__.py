"""The Bloom-filter tree over an event stream (Baltus 2021, §4.1, Algorithms 1 and 2).

The stream is cut into count-based leaves of ``C`` events: leaf ``i`` covers seqs ``[i·C, (i+1)·C − 1]`` (Alg.
1; the thesis counts from 1, seqs count from 0) and holds a Bloom filter of the event types in it. When a leaf
is complete it joins the forest of top-level nodes (the children of the thesis' root), and groups of ``F``
(the fanout) neighbouring top-level nodes are merged into a parent whose filter is their union, subject to the
two constraints of Baltus 2021 §4.1:

* **level constraint** — the ``F`` nodes are on the same level (leaves are level 0);
* **density constraint** — the union has at most ``m/2`` bits set.

Alg. 2 scans every neighbouring group of the root's children after each new leaf.  A group whose union was too
dense stays too dense (filters never change), so the only groups that can become mergeable are those at the
right end of the forest, which a new leaf or a new parent just joined; the tree therefore checks only the
tail, repeatedly, until nothing merges.  A failed group releases its oldest member for good (it and everything
left of it can never merge again) and keeps the others, which may still pair with later nodes — as the
thesis' neighbouring-pair scan would.  The outcome is a function of the leaf sequence alone, so appending
events in pieces builds exactly the tree that building at once does (same :meth:`BloomTree.digest`).

The last, partly filled leaf is queryable (a top-level node that merges only once it is complete).

Each node carries its level, its seq interval, its ts interval (first and last event time, Baltus 2021 §4.1) and its
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

The package's modules: :mod:`~sketch.tree.config` (the shape, a node), :mod:`~sketch.tree.bits` (leaf and
node bits: Alg. 1's bulk work), :mod:`~sketch.tree.nodes` (the columns and everything that reads them:
walking, probing, densities, the digest), :mod:`~sketch.tree.probe` (probing stored filters in bulk),
:mod:`~sketch.tree.bloomtree` (:class:`BloomTree`: building, Alg. 1 and 2), :mod:`~sketch.tree.file_layout`
(where a tree's sections go in its index file, :mod:`sketch.persist`).
"""

from __future__ import annotations

from sketch.tree.bits import encode_types, leaf_type_pairs
from sketch.tree.bloomtree import BloomTree
from sketch.tree.config import Node, TreeConfig
from sketch.tree.nodes import derive_structure
from sketch.tree.probe import SlicedFilters

__all__ = ["BloomTree", "Node", "SlicedFilters", "TreeConfig", "derive_structure", "encode_types",
           "leaf_type_pairs"]
