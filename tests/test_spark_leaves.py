"""The Spark build's tree half without Spark: leaves built per window + Alg. 2 in the driver == one update.

``window_leaves`` and ``merge_leaves`` are what the Spark tasks and the driver run; here they are fed windows
cut from a random stream and compared with :meth:`BloomTree.update` over the whole stream (the local
builder), digest for digest — for builds and for appends that start inside the stored partial leaf.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exact.events import event_schema, unify_attr_types
from sketch.spark_frames import MAX_WINDOW_EVENTS, window_geometry
from sketch.spark_leaves import merge_leaves, window_leaves
from sketch.spark_read import StagedChunk, unified_attrs
from sketch.tree import BloomTree, TreeConfig


def stream(seed: int, n: int, vocabulary: int) -> tuple[pa.Array, np.ndarray]:
    rng = np.random.default_rng(seed)
    types = pa.array([f"T{x}" for x in rng.zipf(1.5, n) % vocabulary])
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


@settings(max_examples=60, deadline=None)
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


@given(span=st.integers(1, 50_000_000), C=st.integers(1, 4096), cores=st.integers(1, 64))
def test_window_geometry_tiles_the_stream_in_whole_leaves(span: int, C: int, cores: int) -> None:
    window, count = window_geometry(span, C, cores)
    assert window % C == 0
    assert (count - 1) * window < span <= count * window
    assert window <= max(C, MAX_WINDOW_EVENTS)
    if span >= cores * C:  # enough leaves for every core: no core idles for want of a window
        assert count >= cores or window == C


_TYPES = [pa.int64(), pa.float64(), pa.bool_(), pa.string(), pa.null()]
_NAMES = {pa.int64(): "int64", pa.float64(): "double", pa.bool_(): "bool", pa.string(): "string",
          pa.null(): "null"}


@given(st.lists(st.dictionaries(st.sampled_from(["a", "b", "c", "D"]), st.sampled_from(_TYPES), max_size=4),
                min_size=1, max_size=6))
def test_unified_attrs_widen_like_concatenating_the_batches(batches: list[dict[str, pa.DataType]]) -> None:
    """The driver's widening of staged batch types equals concat_batches' widening of the batches."""
    chunks = [StagedChunk(0, i, "", 1, 0, tuple((n, _NAMES[t]) for n, t in b.items()), 0, 0)
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


def _chunk(file: int, chunk: int, lo: int, hi: int, in_order: bool = True) -> StagedChunk:
    return StagedChunk(file, chunk, "", 3, 0, (), lo, hi, in_order)


def test_already_in_order_needs_sorted_batches_that_follow_one_another() -> None:
    from sketch.spark_read import InputFile, already_in_order

    csv = [InputFile(0, "a.csv", "csv"), InputFile(1, "b.csv", "csv")]
    assert already_in_order(csv, [_chunk(0, 0, 1, 5), _chunk(0, 1, 5, 9), _chunk(1, 0, 9, 9)])  # ties
    assert not already_in_order(csv, [_chunk(0, 0, 1, 5), _chunk(1, 0, 4, 9)])  # overlap
    assert not already_in_order(csv, [_chunk(0, 0, 1, 5, in_order=False)])  # unsorted inside
    # Text inputs continue one another's positions: the second is shifted by the first's tokens (3).
    text = [InputFile(0, "a.txt", "text"), InputFile(1, "b.txt", "text")]
    assert already_in_order(text, [_chunk(0, 0, 0, 2_000_000), _chunk(1, 0, 0, 2_000_000)])
