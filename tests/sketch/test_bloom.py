"""The Bloom filter: no false negatives, the union/fold algebra, serialisation, and eq. 4.1 on real draws."""

from __future__ import annotations

import math

import numpy as np
import pytest
from bitarray import bitarray
from hypothesis import given
from hypothesis import strategies as st

from exact.errors import SeqsketchError
from sketch.bloom import BloomFilter, fold_bits, fold_int, key_positions, sorted_unique
from tests.generators import scaled

keys = st.text(min_size=0, max_size=12)
key_sets = st.lists(keys, max_size=40)
sizes = st.sampled_from([8, 16, 64, 256, 1024])


def brute_filter(m: int, k: int, items: list[str]) -> bitarray:
    """A filter built straight from the definition: bit (mmh3_32(key, seed=i) mod m) for i < k."""
    import mmh3

    bits = bitarray(m, endian="little")
    bits.setall(0)
    for item in items:
        for seed in range(k):
            bits[mmh3.hash(item.encode("utf-8"), seed, signed=False) % m] = 1
    return bits


@given(key_sets, sizes, st.integers(1, 8))
def test_filter_equals_the_definition_and_has_no_false_negatives(items: list[str], m: int, k: int) -> None:
    f = BloomFilter(m, k)
    f.update(items)
    assert f.bits == brute_filter(m, k, items)
    assert all(item in f for item in items)


@given(key_sets, key_sets, sizes, st.integers(1, 6))
def test_union_is_the_filter_of_the_union(a: list[str], b: list[str], m: int, k: int) -> None:
    fa, fb, fab = BloomFilter(m, k), BloomFilter(m, k), BloomFilter(m, k)
    fa.update(a)
    fb.update(b)
    fab.update(a + b)
    assert fa.union(fb) == fab == (fa | fb)
    both = fa & fb
    assert all(item in both for item in set(a) & set(b))
    assert both.popcount() <= min(fa.popcount(), fb.popcount())


@given(key_sets, st.sampled_from([64, 256, 2048]), st.integers(1, 6), st.data())
def test_folding_equals_building_at_the_smaller_size(items: list[str], m: int, k: int,
                                                     data: st.DataObject) -> None:
    small = data.draw(st.sampled_from([s for s in (8, 16, 32, 64, 128, 256, 1024) if s <= m]))
    f = BloomFilter(m, k)
    f.update(items)
    direct = BloomFilter(small, k)
    direct.update(items)
    assert f.fold(small) == direct
    assert BloomFilter.from_int(fold_int(f.to_int(), m, small), small, k) == direct


@given(st.integers(0, (1 << 1024) - 1))
def test_fold_bits_stops_at_the_first_size_over_half_full(value: int) -> None:
    folded, size = fold_bits(value, 1024, min_bits=64)
    assert size >= 64 and folded == fold_int(value, 1024, size)
    # Every size from m down to the chosen one is at most half full; the next fold would not be (or is floor).
    s = 1024
    while s >= size:
        assert fold_int(value, 1024, s).bit_count() <= s // 2 or s == 1024
        s //= 2
    if size > 64:
        assert fold_int(value, 1024, size // 2).bit_count() > size // 4


@given(key_sets, sizes, st.integers(1, 8))
def test_serialize_round_trip_copy_and_equality(items: list[str], m: int, k: int) -> None:
    f = BloomFilter(m, k)
    f.update(items)
    g = BloomFilter.deserialize(f.serialize())
    assert g == f and g is not f
    h = f.copy()
    h.add("a key added to the copy only" * 3)
    assert f == g  # the copy is independent
    assert BloomFilter.from_int(f.to_int(), m, k) == f


def test_bad_shapes_and_serializations_are_refused() -> None:
    with pytest.raises(SeqsketchError, match="power of two"):
        BloomFilter(100, 3)
    with pytest.raises(SeqsketchError, match="hash functions"):
        BloomFilter(64, 0)
    with pytest.raises(SeqsketchError, match="share m and k"):
        BloomFilter(64, 3).union(BloomFilter(128, 3))
    with pytest.raises(SeqsketchError, match="truncated"):
        BloomFilter.deserialize(b"\x00")
    data = BloomFilter(64, 3).serialize()
    with pytest.raises(SeqsketchError, match="bytes of bits"):
        BloomFilter.deserialize(data[:-1])


def test_measured_false_positive_rate_matches_eq_4_1() -> None:
    """Fill a filter with n distinct keys, probe 40,000 absent ones: eq. 4.1 holds within 4 sigma."""
    m, k, n = 4096, 4, 800
    f = BloomFilter(m, k)
    f.update(f"present-{i}" for i in range(n))
    probes = 40_000
    hits = sum(f"absent-{i}" in f for i in range(probes))
    expected = BloomFilter.expected_false_positive_rate(m, k, n)
    sigma = math.sqrt(expected * (1 - expected) / probes)
    assert abs(hits / probes - expected) < 4 * sigma
    # With the measured fill, density^k is the same rate up to the randomness of the fill itself.
    assert abs(f.false_positive_rate() - expected) < 0.2 * expected


def test_key_positions_reduce_by_masking() -> None:
    words = ["A_SUBMITTED", "W_Completeren aanvraag", "the", ""]
    raw = key_positions(words, 5)
    assert raw.dtype == np.uint32 and raw.shape == (4, 5)
    assert (key_positions(words, 5, 1024) == raw % 1024).all()


@given(st.lists(st.integers(-(2**62), 2**62), max_size=200))
def test_sorted_unique_is_numpy_unique(values: list[int]) -> None:
    array = np.array(values, dtype=np.int64)
    assert sorted_unique(array).tolist() == sorted(set(values))


@scaled(30)
@given(key_sets, st.integers(1, 6))
def test_probing_by_positions_matches_membership(items: list[str], k: int) -> None:
    f = BloomFilter(512, k)
    f.update(items)
    for item in [*items, "x", "y", "zz"]:
        assert f.contains_positions(f.positions(item)) == (item in f)
