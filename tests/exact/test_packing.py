"""Bit-packed columns (:mod:`exact.store.packing`) give back exactly what was packed — whole, by any slice and
by any gather — on random columns: empty, one value, constant, huge gaps, the extremes of every width,
sorted runs of row numbers (the delta form's purpose) and arbitrary ones, under several block sizes; and their
bytes read in place come back equal, a truncated or foreign section refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from exact.store.packing import PackedFormatError, from_buffer, pack, to_bytes

DTYPES = (np.uint8, np.uint16, np.uint32, np.int64, np.uint64, np.int32)


@st.composite
def columns(draw: st.DrawFn) -> np.ndarray:
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    info = np.iinfo(dtype)
    n = draw(st.integers(0, 700))
    shape = draw(st.sampled_from(("any", "constant", "small", "extremes", "runs", "gaps")))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if shape == "constant":
        values = np.full(n, draw(st.integers(int(info.min), int(info.max))), dtype=object)
    elif shape == "small":
        lo = draw(st.integers(int(info.min), int(info.max)))
        values = np.asarray([min(int(info.max), lo + int(x)) for x in rng.integers(0, 9, n)], dtype=object)
    elif shape == "extremes":
        values = np.asarray([(int(info.min), int(info.max), 0)[int(x)] if info.min < 0 or x != 0 else 0
                             for x in rng.integers(0, 3, n)], dtype=object)
        values = np.asarray([max(int(info.min), min(int(info.max), v)) for v in values], dtype=object)
    elif shape == "runs":  # row numbers grouped by a key, increasing within each group
        keys = rng.integers(0, 5, n)
        values = np.argsort(keys, kind="stable").astype(object)
        values = np.asarray([min(int(info.max), int(v)) for v in values], dtype=object)
    elif shape == "gaps":
        steps = rng.choice([0, 1, 7, 1 << 20, 1 << 40], n)
        values = np.asarray([min(int(info.max), int(v)) for v in np.cumsum(steps)], dtype=object)
    else:
        values = np.asarray([draw(st.integers(int(info.min), int(info.max))) if i < 3 else
                             int(rng.integers(int(info.min), int(info.max), endpoint=True, dtype=np.int64
                                             if dtype != np.uint64 else np.uint64))
                             for i in range(n)], dtype=object)
    return np.asarray(values.tolist() if n else [], dtype=dtype)


@given(columns(), st.booleans(), st.sampled_from((1, 3, 64, 256)), st.data())
def test_a_packed_column_gives_back_every_value_whole_by_slice_and_by_gather(
        values: np.ndarray, delta: bool, block: int, data: st.DataObject) -> None:
    packed = pack(values, delta=delta, block=block)
    assert len(packed) == len(values) and packed.dtype == values.dtype
    whole = np.asarray(packed)
    assert whole.dtype == values.dtype and np.array_equal(whole, values)
    n = len(values)
    lo = data.draw(st.integers(-3, n + 3))
    hi = data.draw(st.integers(-3, n + 3))
    assert np.array_equal(packed[lo:hi], values[lo:hi])
    if n:
        positions = np.asarray(data.draw(st.lists(st.integers(-n, n - 1), max_size=50)), dtype=np.int64)
        assert np.array_equal(packed[positions], values[positions])
        assert packed[int(positions[0]) if len(positions) else 0] == values[int(positions[0]) if len(positions)
                                                                             else 0]
        mask = np.asarray(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
        assert np.array_equal(packed[mask], values[mask])
    again = from_buffer(b"\0" * 8 + to_bytes(packed), offset=8)  # (in place, at an offset, as in a file)
    assert np.array_equal(np.asarray(again), values) and again.delta == delta
    if n:
        assert np.array_equal(again[::-1], values[::-1])


@given(st.lists(st.integers(0, 3000), max_size=900), st.sampled_from((1, 4, 256)), st.booleans(), st.data())
def test_a_search_in_a_sorted_run_finds_what_numpy_finds(draws: list[int], block: int, delta: bool,
                                                         data: st.DataObject) -> None:
    """Runs of row numbers by key (sorted within each run), searched within one run or a piece of it."""
    rng = np.random.default_rng(len(draws))
    keys = rng.integers(0, 4, len(draws))
    values = np.concatenate([np.sort(np.asarray(draws, dtype=np.int64)[keys == k]) for k in range(4)])
    values = values.astype(np.uint32) if data.draw(st.booleans()) else values
    packed = pack(values, delta=delta, block=block)
    runs = np.concatenate([[0], np.cumsum([int((keys == k).sum()) for k in range(4)])])
    k = data.draw(st.integers(0, 3))
    lo = data.draw(st.integers(int(runs[k]), int(runs[k + 1])))
    hi = data.draw(st.integers(lo, int(runs[k + 1])))
    probes = np.asarray(data.draw(st.lists(st.integers(-5, 3005), max_size=30)), dtype=np.int64)
    for side in ("left", "right"):
        want = lo + np.searchsorted(values[lo:hi].astype(np.int64), probes, side)
        assert packed.searchsorted(lo, hi, probes, side).tolist() == want.tolist()


def test_sorted_rows_take_a_few_bits_and_small_codes_their_range() -> None:
    rng = np.random.default_rng(3)
    rows = np.argsort(rng.integers(0, 20, 1 << 16), kind="stable").astype(np.uint32)  # rows by one of 20 types
    assert pack(rows, delta=True).nbytes < rows.nbytes / 3.5  # (a step of ~20 in 7 bits, a block's widest)
    codes = rng.integers(0, 50, 1 << 16).astype(np.uint8)  # 50 types: 6 bits
    assert pack(codes).nbytes < codes.nbytes * 0.8


def test_a_damaged_or_foreign_section_is_refused() -> None:
    data = to_bytes(pack(np.arange(1000, dtype=np.uint32), delta=True))
    for bad in (data[:20], data[:-3], b"X" * len(data), b""):
        with pytest.raises(PackedFormatError):
            from_buffer(bad)
    with pytest.raises(ValueError):
        pack(np.zeros(3, dtype=np.float64))
    with pytest.raises(IndexError):
        pack(np.arange(5, dtype=np.int64))[np.asarray([5])]



def test_the_helpers_and_kernels_are_compiled_once_whichever_threads_ask() -> None:
    """The first reads of a server's threads (a query and an append) may ask for the kernels at once: the
    helpers they call are wrapped once (a compiled helper handed to the compiler again fails), and every
    thread gets the same kernels."""
    import threading

    from numba.core.registry import CPUDispatcher

    from exact.store import packing

    got: list[object] = []
    failed: list[BaseException] = []
    start = threading.Barrier(8)

    def ask() -> None:
        try:
            start.wait()
            packing.jitted()
            got.append(packing._kernels())
        except BaseException as err:  # (reported below, not lost in the thread)
            failed.append(err)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    packing.jitted()  # (and again, once done)
    assert not failed, failed
    assert isinstance(packing.search_one, CPUDispatcher) and isinstance(packing._bits, CPUDispatcher)
    assert all(k is got[0] for k in got) and len(got) == 8
