"""The Spark build's tree half without Spark: leaves built per window + Alg. 2 in the driver == one update.

``window_leaves`` and ``merge_leaves`` are what the Spark tasks and the driver run; here they are fed windows
cut from a random stream and compared with :meth:`BloomTree.update` over the whole stream (the local
builder), digest for digest — for builds and for appends that start inside the stored partial leaf.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from exact.events import event_schema, unify_attr_types
from sketch.spark.leaves import leaf_bits, merge_leaves, window_leaves
from sketch.spark.read import StagedChunk, unified_attrs
from sketch.spark.sample_sort import Boundaries, aligned_starts, part_slices, rows_below, window_count
from sketch.tree import BloomTree, TreeConfig, encode_types, leaf_type_pairs
from tests.generators import scaled, zipf_types


def stream(seed: int, n: int, vocabulary: int) -> tuple[pa.Array, np.ndarray]:
    rng = np.random.default_rng(seed)
    types = pa.array(zipf_types(rng, n, vocabulary, 1.5, "T"))
    ts = np.sort(rng.integers(0, 10_000, n)).astype(np.int64)
    return types, ts


def extend_by_windows(tree: BloomTree, types: pa.Array, ts: np.ndarray, start: int, stop: int,
                      window_leaves_count: int) -> BloomTree:
    """What run_job does for events [start, stop): windows from the leaf holding ``start``, merged."""
    C = tree.config.leaf_size
    base = (start // C) * C
    width = window_leaves_count * C
    runs = [window_leaves(tree.config, types[lo:min(lo + width, stop)], ts[lo:min(lo + width, stop)], lo)
            for lo in range(base, stop, width)]
    return merge_leaves(tree, runs)


@scaled(60)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 700), C=st.sampled_from([1, 3, 8, 16]),
       per_window=st.integers(1, 9), cut=st.floats(0, 1), m=st.sampled_from([64, 256, 1024]),
       k=st.integers(1, 4), fanout=st.sampled_from([2, 3]))
def test_windows_then_merge_equal_one_update(seed: int, n: int, C: int, per_window: int, cut: float, m: int,
                                              k: int, fanout: int) -> None:
    types, ts = stream(seed, n, 40)
    config = TreeConfig(leaf_size=C, m=m, k=k, fanout=fanout)
    whole = BloomTree(config)
    whole.update(types, ts)
    built = extend_by_windows(BloomTree(config), types, ts, 0, n, per_window)
    assert built.digest() == whole.digest()
    # An append that starts anywhere, also inside a partial leaf, continues the same tree.
    split = int(cut * n)
    first = BloomTree(config)
    if split:
        first.update(types[:split], ts[:split])
    appended = extend_by_windows(first, types, ts, split, n, per_window)
    assert appended.digest() == whole.digest()
    assert appended.n_events == n


def test_a_window_must_start_on_a_leaf() -> None:
    types, ts = stream(1, 20, 5)
    with pytest.raises(ValueError, match="leaf boundary"):
        window_leaves(TreeConfig(leaf_size=8, m=64, k=2), types, ts, 3)


def test_runs_with_a_gap_are_refused() -> None:
    types, ts = stream(2, 64, 5)
    config = TreeConfig(leaf_size=8, m=64, k=2)
    runs = [window_leaves(config, types[:16], ts[:16], 0), window_leaves(config, types[32:], ts[32:], 32)]
    with pytest.raises(ValueError, match="gap"):
        merge_leaves(BloomTree(config), runs)


@scaled(60)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 500), C=st.sampled_from([1, 3, 8]),
       m=st.sampled_from([64, 256]), k=st.integers(1, 4), vocabulary=st.sampled_from([1, 5, 40]))
def test_leaf_bits_from_pairs_equal_the_leaves_update_builds(seed: int, n: int, C: int, m: int, k: int,
                                                            vocabulary: int) -> None:
    """A window's leaves as the second Spark pass builds them (from its (leaf, type) pairs) are the bits
    BloomTree.update sets for the same events."""
    types, ts = stream(seed, n, vocabulary)
    config = TreeConfig(leaf_size=C, m=m, k=k)
    run = window_leaves(config, types, ts, 0)
    codes, names = encode_types(types)
    pairs = leaf_type_pairs(codes, max(len(names), 1), 0, C)
    assert leaf_bits(config, names, pairs, run.count) == run.bits


def stream_ranks(chunks: list[np.ndarray]) -> list[tuple[int, int, int]]:
    """The stream order of sorted chunks by brute force: (ts, chunk, row) of every event, sorted."""
    return sorted((int(t), c, r) for c, ts in enumerate(chunks) for r, t in enumerate(ts.tolist()))


@scaled(80)
@given(seed=st.integers(0, 10_000), sizes=st.lists(st.integers(0, 60), min_size=1, max_size=6),
       spread=st.sampled_from([1, 3, 50]), picks=st.lists(st.integers(0, 10_000), max_size=6),
       first_seq=st.integers(0, 40), C=st.sampled_from([1, 4, 16]))
def test_window_ranks_tile_the_stream_in_whole_leaves(seed: int, sizes: list[int], spread: int,
                                                      picks: list[int], first_seq: int, C: int) -> None:
    """Rows below a boundary, summed over the chunks, are its rank in the (ts, chunk, row) order; window
    starts moved to leaf starts stay in order, and every window but the first starts on a leaf."""
    rng = np.random.default_rng(seed)
    chunks = [np.sort(rng.integers(0, spread, size)) for size in sizes]
    order = stream_ranks(chunks)
    if not order:
        return
    triples = sorted({order[p % len(order)] for p in picks})
    bounds = Boundaries(tuple(t for t, _, _ in triples), tuple(c for _, c, _ in triples),
                        tuple(r for _, _, r in triples))
    below = np.stack([rows_below(ts, c, bounds) for c, ts in enumerate(chunks)])
    assert below.sum(axis=0).tolist() == [order.index(t) for t in triples]
    ranks = np.concatenate(([0], below.sum(axis=0), [len(order)]))
    starts = aligned_starts(ranks, first_seq, C)
    assert starts[0] == 0 and starts[-1] == len(order) and np.all(np.diff(starts) >= 0)
    assert all((first_seq + s) % C == 0 for s in starts[1:-1] if s < len(order))
    assert np.all(starts >= ranks) and np.all(starts - ranks < C)


@given(events=st.integers(1, 50_000_000), cores=st.integers(1, 64))
def test_window_count_keeps_every_core_busy_and_windows_bounded(events: int, cores: int) -> None:
    from sketch.spark.sample_sort import MAX_WINDOW_EVENTS

    windows = window_count(events, cores)
    assert 1 <= windows <= events
    assert windows >= min(events, 2 * cores)
    assert -(-events // windows) <= max(MAX_WINDOW_EVENTS, -(-events // (2 * cores)))
    if windows > 2 * cores:  # sized by the cap: planned below it, so a sampled boundary's error fits
        assert events / windows <= 0.9 * MAX_WINDOW_EVENTS


@given(rows=st.integers(1, 10_000_000), part_rows=st.integers(1, 2_000_000))
def test_a_window_is_cut_into_the_fewest_parts_of_even_size(rows: int, part_rows: int) -> None:
    slices = part_slices(rows, part_rows)
    assert [a for a, _ in slices] == [0] + list(np.cumsum([n for _, n in slices])[:-1])
    assert sum(n for _, n in slices) == rows
    assert len(slices) == -(-rows // part_rows)
    assert max(n for _, n in slices) <= part_rows
    assert max(n for _, n in slices) - min(n for _, n in slices) <= 1


_TYPES = [pa.int64(), pa.float64(), pa.bool_(), pa.string(), pa.null()]
_NAMES = {pa.int64(): "int64", pa.float64(): "double", pa.bool_(): "bool", pa.string(): "string",
          pa.null(): "null"}


@given(st.lists(st.dictionaries(st.sampled_from(["a", "b", "c", "D"]), st.sampled_from(_TYPES), max_size=4),
                min_size=1, max_size=6))
def test_unified_attrs_widen_like_concatenating_the_batches(batches: list[dict[str, pa.DataType]]) -> None:
    """The driver's widening of staged batch types equals concat_batches' widening of the batches."""
    chunks = [StagedChunk(0, 0, i, "", 1, tuple((n, _NAMES[t]) for n, t in b.items()), 0, 0)
              for i, b in enumerate(batches)]
    tables = []
    for b in batches:
        fields = [pa.field(n, t) for n, t in b.items()]
        cols = [pa.nulls(1, t) for t in b.values()]
        struct = pa.StructArray.from_arrays(cols, fields=fields) if b else None
        arrays = [pa.array([0], pa.timestamp("us", tz="UTC")), pa.array(["x"])]
        names = ["ts", "type"] + (["attrs"] if b else [])
        tables.append(pa.Table.from_arrays(arrays + ([struct] if b else []), names=names))
    from exact.events import attr_types, concat_batches

    expected = attr_types(concat_batches(tables).schema)
    assert unified_attrs(chunks) == expected == unify_attr_types(*batches)
    assert list(unified_attrs(chunks)) == list(expected)  # names in first-seen order
    event_schema(unified_attrs(chunks))  # every type settled to one the stream schema allows


@given(sizes=st.lists(st.integers(0, 1_000), max_size=40), count=st.integers(1, 8))
def test_reading_tasks_share_the_pieces_by_size(sizes: list[int], count: int) -> None:
    from sketch.spark.read import balanced_groups

    groups = balanced_groups(sizes, count)
    assert sorted(i for g in groups for i in g) == list(range(len(sizes)))
    assert len(groups) == min(count, len(sizes)) and all(list(g) == sorted(g) for g in groups)
    loads = [sum(sizes[i] for i in g) for g in groups]
    assert not loads or max(loads) <= sum(sizes) / len(groups) + max(sizes)  # greedy: within one piece
