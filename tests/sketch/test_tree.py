"""The Bloom-filter tree against brute force: bits, Alg. 2's merges, no false negatives, appends, covers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from exact.errors import SeqsketchError
from sketch.bloom import BloomFilter, fold_bits
from sketch.tree import BloomTree, TreeConfig, derive_structure
from tests.generators import scaled, zipf_codes

# Small filters and vocabularies, so that merges fail the density constraint often and folding happens.
configs = st.builds(
    TreeConfig,
    leaf_size=st.integers(1, 9),
    m=st.sampled_from([64, 128, 256]),
    k=st.integers(1, 5),
    fanout=st.integers(2, 4),
    fold=st.booleans(),
)


def seeded_stream(seed: int, n: int, vocabulary: int) -> list[int]:
    """A Zipf-like random stream: hypothesis shrinks lists towards few distinct values, which rarely makes
    merges fail, so half of the examples come from seeded draws instead."""
    rng = np.random.default_rng(seed)
    return zipf_codes(rng, n, vocabulary, 1.3).tolist()


streams = st.one_of(
    st.lists(st.integers(0, 40), min_size=0, max_size=160),
    st.builds(seeded_stream, st.integers(0, 2**32 - 1), st.integers(0, 200), st.integers(1, 80)),
)


def make_types(codes: list[int]) -> list[str]:
    return [f"type-{c}" for c in codes]


def build(config: TreeConfig, types: list[str], sparse: bool | None = None) -> BloomTree:
    tree = BloomTree(config)
    tree.sparse_leaves = sparse
    tree.update(types, np.arange(len(types), dtype=np.int64) * 10)
    return tree


#: Leaves built as m-bit rows, as position sets, or whichever is smaller: the same bits every way.
leaf_forms = st.sampled_from([None, True, False])


def reference_bits(config: TreeConfig, types: list[str]) -> int:
    f = BloomFilter(config.m, config.k)
    f.update(types)
    return f.to_int()


def reference_forest(config: TreeConfig, types: list[str]) -> set[tuple[int, int, int]]:
    """Alg. 1 and 2 as the thesis states them: after each complete leaf, scan the root's children left to
    right for ``F`` neighbours on one level whose union has ≤ m/2 bits set, merge the first such group, and
    rescan until nothing merges.  Returns every node as ``(level, lo_seq, hi_seq)``."""
    C, F, half = config.leaf_size, config.fanout, config.m // 2
    roots: list[tuple[int, int, int, int]] = []  # level, lo, hi, unfolded bits
    nodes: set[tuple[int, int, int]] = set()
    for start in range(0, len(types) - len(types) % C, C):
        leaf = (0, start, start + C - 1, reference_bits(config, types[start:start + C]))
        roots.append(leaf)
        nodes.add(leaf[:3])
        merged = True
        while merged:
            merged = False
            for i in range(len(roots) - F + 1):
                group = roots[i:i + F]
                union = 0
                for node in group:
                    union |= node[3]
                if len({node[0] for node in group}) == 1 and union.bit_count() <= half:
                    parent = (group[0][0] + 1, group[0][1], group[-1][2], union)
                    roots[i:i + F] = [parent]
                    nodes.add(parent[:3])
                    merged = True
                    break
    if len(types) % C:
        nodes.add((0, len(types) - len(types) % C, len(types) - 1))
    return nodes


@scaled(150)
@given(configs, streams, leaf_forms)
def test_tree_is_alg_2_with_the_right_bits_and_no_false_negatives(config: TreeConfig, codes: list[int],
                                                                  sparse: bool | None) -> None:
    types = make_types(codes)
    tree = build(config, types, sparse)
    assert tree.n_events == len(types)
    assert {(n.level, n.lo_seq, n.hi_seq) for n in tree.nodes()} == reference_forest(config, types)
    half = config.m // 2
    for node in tree.nodes():
        window = types[node.lo_seq:node.hi_seq + 1]
        unfolded = reference_bits(config, window)
        # Stored bits are the node's filter, folded by the rule (or not at all).
        expected, size = fold_bits(unfolded, config.m, min_bits=config.min_bits) if config.fold \
            else (unfolded, config.m)
        stored = tree.filter(node.id)
        assert (stored.m, stored.to_int()) == (size, expected)
        # No false negatives: every type of the window is found in the node (hence in the leaf and every
        # ancestor, which are nodes too).
        present = sorted(set(window))
        if present:
            assert tree.probe([node.id], present).all()
        if node.children:
            # Level and fanout constraints, contiguity, and the density constraint on the merged filter.
            kids = [tree.node(c) for c in node.children]
            assert len(kids) == config.fanout
            assert all(kid.level == node.level - 1 for kid in kids)
            assert [kid.lo_seq for kid in kids[1:]] == [kid.hi_seq + 1 for kid in kids[:-1]]
            assert (kids[0].lo_seq, kids[-1].hi_seq) == (node.lo_seq, node.hi_seq)
            assert unfolded.bit_count() <= half
            assert node.lo_ts == min(k.lo_ts for k in kids) and node.hi_ts == max(k.hi_ts for k in kids)
        else:
            assert node.level == 0 and node.lo_seq % config.leaf_size == 0
            assert node.lo_ts == node.lo_seq * 10 and node.hi_ts == node.hi_seq * 10
        if not node.partial:
            assert node.hi_seq - node.lo_seq + 1 == config.leaf_size * config.fanout ** node.level
    assert list(derive_structure(tree._level.view(), config.fanout).ravel()) == \
        list(tree._children.view().ravel())


@given(configs, streams, st.lists(st.integers(0, 160), max_size=4), leaf_forms, leaf_forms)
def test_appending_in_pieces_equals_building_at_once(config: TreeConfig, codes: list[int],
                                                     cuts: list[int], sparse_whole: bool | None,
                                                     sparse_pieces: bool | None) -> None:
    types = make_types(codes)
    ts = np.arange(len(types), dtype=np.int64) * 10
    whole = build(config, types, sparse_whole)
    pieces = BloomTree(config)
    pieces.sparse_leaves = sparse_pieces
    bounds = sorted({0, len(types), *(c for c in cuts if c <= len(types))})
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        pieces.update(types[lo:hi], ts[lo:hi])
    assert pieces.digest() == whole.digest()
    assert pieces == whole


@scaled(60)
@given(configs, streams, st.integers(0, 170), st.integers(0, 170))
def test_nodes_covering_is_a_minimal_cover(config: TreeConfig, codes: list[int], a: int, b: int) -> None:
    types = make_types(codes)
    tree = build(config, types)
    lo, hi = min(a, b), max(a, b)
    cover = tree.nodes_covering(lo, hi)
    nodes = [tree.node(i) for i in cover]
    if not types or lo >= len(types):
        assert cover == []
        return
    wanted = set(range(lo - lo % config.leaf_size, min(hi, len(types) - 1) + 1))
    covered = [s for n in nodes for s in range(n.lo_seq, n.hi_seq + 1)]
    assert len(covered) == len(set(covered))  # disjoint, in seq order
    assert covered == sorted(covered)
    assert wanted <= set(covered)
    for n in nodes:  # nothing needless: a node is whole inside the range, or a leaf at its edge
        assert (lo <= n.lo_seq and n.hi_seq <= hi) or n.level == 0
        parent = tree.parent(n.id)
        if parent is not None:
            p = tree.node(parent)
            assert not (lo <= p.lo_seq and p.hi_seq <= hi)


@scaled(40)
@given(configs, streams, st.lists(st.integers(0, 60), min_size=1, max_size=6))
def test_batch_probe_agrees_with_single_probes_and_filters(config: TreeConfig, codes: list[int],
                                                            probe_codes: list[int]) -> None:
    types = make_types(codes)
    tree = build(config, types)
    keys = make_types(probe_codes)
    ids = list(range(tree.rows))
    answers = tree.probe(ids, keys)
    assert answers.shape == (len(ids), len(keys))
    for i in ids:
        f = tree.filter(i)
        for j, key in enumerate(keys):
            assert answers[i, j] == tree.may_contain(i, key) == (key in f)


@scaled(40)
@given(configs, streams, st.lists(st.integers(0, 60), min_size=1, max_size=6), st.data())
def test_sliced_filters_answer_as_the_filters(config: TreeConfig, codes: list[int], probe_codes: list[int],
                                              data: st.DataObject) -> None:
    """A bit-sliced copy of any list of nodes (of every stored size, the partial leaf included) probes
    exactly as the nodes' own filters."""
    tree = build(config, make_types(codes))
    if not tree.rows:
        assert tree.sliced([]) is None
        return
    nodes = data.draw(st.lists(st.integers(0, tree.rows - 1), min_size=1, max_size=3 * tree.rows))
    keys = make_types(probe_codes)
    sliced = tree.sliced(nodes)
    assert sliced is not None and sliced.count == len(nodes)
    assert np.array_equal(sliced.probe(keys), tree.probe(nodes, keys))
    assert tree.sliced(nodes, max_bits=config.m * len(nodes) - 1) is None  # over its budget: not made


def test_density_is_each_stored_filter_s_fill() -> None:
    rng = np.random.default_rng(11)
    tree = build(TreeConfig(leaf_size=64, m=4096, k=3), make_types(zipf_codes(rng, 4000, 900, 1.2).tolist()))
    expected = [tree.filter(i).density() for i in range(tree.rows)]
    assert tree.density().tolist() == pytest.approx(expected)
    assert max(tree.filter(i).popcount() for i in range(tree.rows)) > 255  # beyond a byte-sized count


@scaled(40)
@given(configs, streams, st.integers(0, 200))
def test_leaves_computed_elsewhere_give_the_same_tree(config: TreeConfig, codes: list[int], cut: int) -> None:
    """add_leaves (the entry of leaf filters built outside, e.g. on Spark) is update's own leaf step."""
    types = make_types(codes)
    cut = min(cut, len(types))
    whole = build(config, types)
    tree = build(config, types[:cut])
    if cut == len(types):
        assert tree == whole
        return
    C = config.leaf_size
    first = cut // C
    bits, lo, hi = [], [], []
    for leaf in range(first, -(-len(types) // C)):
        window = types[leaf * C:min((leaf + 1) * C, len(types))]
        bits.append(reference_bits(config, window))
        lo.append(leaf * C * 10)
        hi.append((leaf * C + len(window) - 1) * 10)
    tree.add_leaves(first, bits, lo, hi, len(types))
    assert tree.digest() == whole.digest()
    with pytest.raises(SeqsketchError, match="continue the tree"):
        tree.add_leaves(first, bits, lo, hi, len(types))


def test_partial_last_leaf_is_queryable_and_completes_in_place() -> None:
    config = TreeConfig(leaf_size=4, m=256, k=3)
    tree = BloomTree(config)
    tree.update(["a", "b", "c", "d", "e", "f"], [1, 2, 3, 4, 5, 6])
    last = tree.node(tree.top_nodes()[-1])
    assert last.partial and (last.lo_seq, last.hi_seq) == (4, 5)
    assert tree.may_contain(last.id, "f") and tree.leaf_at(5) == last.id
    tree.update(["g", "h"], [7, 8])
    same = tree.node(last.id)
    assert not same.partial and (same.lo_seq, same.hi_seq) == (4, 7)
    assert tree.probe([same.id], ["e", "f", "g", "h"]).all()
    assert tree.top_nodes() == [tree.rows - 1] and tree.node(tree.rows - 1).level == 1


def test_bad_inputs_are_refused() -> None:
    tree = BloomTree(TreeConfig(leaf_size=4, m=256, k=3))
    with pytest.raises(SeqsketchError, match="timestamps"):
        tree.update(["a", "b"], [1])
    tree.update(["a"], [1])
    with pytest.raises(SeqsketchError, match="node ids"):
        tree.probe([5], ["a"])
    with pytest.raises(SeqsketchError, match="outside"):
        tree.leaf_at(1)
    with pytest.raises(SeqsketchError, match="power of two"):
        TreeConfig(leaf_size=4, m=100, k=3)
    with pytest.raises(SeqsketchError, match="fanout"):
        TreeConfig(leaf_size=4, m=128, k=3, fanout=1)


def test_copy_is_independent() -> None:
    tree = build(TreeConfig(leaf_size=2, m=128, k=2), make_types([1, 2, 3]))
    twin = tree.copy()
    assert twin == tree
    twin.update(["z"], [99])
    assert twin != tree and tree.n_events == 3


def test_expected_fpq_follows_eq_4_3_over_the_top_nodes() -> None:
    tree = build(TreeConfig(leaf_size=3, m=64, k=2, query_length=3), make_types(list(range(40))))
    rates = tree.density(tree.top_nodes()) ** 2
    assert tree.expected_fpq() == pytest.approx(1 - np.prod((1 - rates) ** 4))
    assert tree.expected_fpq(query_length=1) == pytest.approx(1 - np.prod(1 - rates))
