"""A Bloom filter over MurmurHash3 and bitarray (Bloom 1970; Baltus 2021 §2 and §4.4, eq. 4.1).

The filter has ``m`` bits and ``k`` hash functions.  Hash ``i`` of a key is MurmurHash3 x86 32-bit of its
UTF-8 bytes with seed ``i`` (``i = 0 … k-1``), reduced modulo ``m``.  ``m`` is a power of two, so reducing
modulo ``m`` is masking, and a filter can be *folded* to any smaller power of two ``m'``: bit ``b`` of the
folded filter is the OR of bits ``b, b + m', b + 2m', …``, which is exactly the filter one would have built
with ``m'`` bits from the start (``(h mod m) mod m' = h mod m'`` when ``m'`` divides ``m``).  The tree stores
sparse nodes folded (see :func:`fold_bits`), and a probe folds the key's positions the same way.

Bits are little-endian throughout: bit ``b`` is bit ``b % 8`` of byte ``b // 8``, which is also bit ``b`` of
the Python integer ``int.from_bytes(data, "little")``; the tree keeps bits of nodes still being merged as
Python integers because OR and popcount on them are fast.

Keys are hashed once per distinct key: :func:`key_positions` returns the ``k`` positions of many keys as one
numpy array, and both the filter and the tree probe with precomputed positions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from itertools import repeat

import mmh3
import numpy as np
from bitarray import bitarray
from numpy.typing import NDArray

from exact.errors import SeqsketchError

#: Name of the hashing scheme, recorded in persisted indexes and in the digest: changing it changes every bit.
HASH_SCHEME = "mmh3_x86_32/seeds=0..k-1/mod_m"

#: Smallest filter size in bits (one 64-bit word); filters are never folded below it.
MIN_BITS = 64


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """The distinct values of an integer array, ascending.

    Sort-based: numpy 2.4's ``np.unique`` takes a hash path that is orders of magnitude slower on large int64
    arrays (14 s against 0.2 s for 5 million values on the build machine).
    """
    if values.size == 0:
        return values.copy()
    ordered = np.sort(values)  # not kind="stable": distinct values need no stability, and it is 10x slower
    keep = np.empty(ordered.size, dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def key_positions(keys: Sequence[str], k: int, m: int = 1 << 32) -> NDArray[np.uint32]:
    """The ``k`` bit positions of every key, as a ``uint32`` array of shape ``(len(keys), k)``.

    With the default ``m = 2**32`` the raw 32-bit hashes are returned; a filter of any power-of-two size
    ``m`` uses ``positions & (m - 1)``.  Hashing costs ``k`` MurmurHash3 calls per key, done once per distinct
    key (the thesis' insertion cost O(k) per event, §4.4.2, becomes O(k) per distinct type).
    """
    encoded = [key.encode("utf-8") for key in keys]
    out = np.empty((len(keys), k), dtype=np.uint32)
    for seed in range(k):
        out[:, seed] = np.fromiter(map(mmh3.hash, encoded, repeat(seed), repeat(False)), dtype=np.uint32,
                                   count=len(encoded))
    if m != 1 << 32:
        out &= np.uint32(m - 1)
    return out


def fold_int(bits: int, size: int, target: int) -> int:
    """Fold a ``size``-bit filter held as an integer down to ``target`` bits (both powers of two)."""
    while size > target:
        size //= 2
        bits = (bits & ((1 << size) - 1)) | (bits >> size)
    return bits


def fold_bits(bits: int, m: int, *, min_bits: int = MIN_BITS, max_density: float = 0.5) -> tuple[int, int]:
    """Fold an ``m``-bit filter to the smallest power-of-two size whose density stays ≤ ``max_density``.

    Returns ``(folded_bits, size)``.  The density bound is the same as the thesis' merge constraint
    (D ≤ m/2, §4.1): a filter at density ρ answers a false positive with probability ρ^k (eq. 4.1 written in
    terms of the fill), so a filter folded only while ρ ≤ 1/2 keeps the guarantee fp ≤ 2^-k that sizing
    relies on, while a sparse leaf shrinks to a size proportional to the keys it actually holds.
    """
    size = m
    while size > min_bits:
        half = size // 2
        folded = (bits & ((1 << half) - 1)) | (bits >> half)
        if folded.bit_count() > max_density * half:
            break
        bits, size = folded, half
    return bits, size


class BloomFilter:
    """A Bloom filter with ``m`` bits (a power of two) and ``k`` MurmurHash3 hash functions.

    The algebra follows the datasketch style: ``update`` adds keys, ``union``/``|`` and ``intersection``/``&``
    combine filters of equal shape (bitwise OR / AND, Baltus 2021 §4.1: the union of two filters is the filter of the
    union of their key sets, which is how the tree's internal nodes are made), ``copy``, ``==``, ``serialize``
    / ``deserialize``.  ``key in f`` never answers False for an added key.
    """

    __slots__ = ("m", "k", "bits")

    def __init__(self, m: int, k: int, bits: bitarray | None = None) -> None:
        if not is_power_of_two(m) or m < 8:
            raise SeqsketchError(f"Bloom filter size m must be a power of two ≥ 8, got {m}")
        if not 1 <= k <= 64:
            raise SeqsketchError(f"number of hash functions k must be in 1..64, got {k}")
        self.m = m
        self.k = k
        if bits is None:
            bits = bitarray(m, endian="little")
            bits.setall(0)
        elif len(bits) != m or bits.endian != "little":
            raise SeqsketchError(f"bit array of {len(bits)} bits ({bits.endian}) does not fit a "
                                 f"filter of {m}")
        self.bits = bits

    # -- construction -------------------------------------------------------------------------------------
    def positions(self, key: str) -> NDArray[np.uint32]:
        row: NDArray[np.uint32] = key_positions([key], self.k, self.m)[0]
        return row

    def add(self, key: str) -> None:
        self.add_positions(self.positions(key))

    def update(self, keys: Iterable[str]) -> None:
        """Add many keys; each distinct key is hashed once."""
        distinct = sorted(set(keys))
        if distinct:
            self.add_positions(key_positions(distinct, self.k, self.m).ravel())

    def add_positions(self, positions: np.ndarray) -> None:
        """Set the given bit positions (already reduced modulo ``m``) in bulk."""
        for p in sorted_unique(np.asarray(positions, dtype=np.int64)).tolist():
            self.bits[p] = 1

    # -- queries -------------------------------------------------------------------------------------------
    def __contains__(self, key: str) -> bool:
        return self.contains_positions(self.positions(key))

    def contains_positions(self, positions: np.ndarray) -> bool:
        bits = self.bits
        return all(bits[p & (self.m - 1)] for p in positions.tolist())

    def popcount(self) -> int:
        return self.bits.count(1)

    def density(self) -> float:
        """Fraction of bits set; the thesis' density constraint asks D = popcount ≤ m/2 (§4.1)."""
        return self.popcount() / self.m

    def false_positive_rate(self) -> float:
        """The probability that an absent key is reported present: density^k (eq. 4.1 given the fill)."""
        return self.density() ** self.k

    @staticmethod
    def expected_false_positive_rate(m: int, k: int, n: int) -> float:
        """Eq. 4.1: ``fp = (1 − (1 − 1/m)^(kn))^k`` for ``n`` distinct keys."""
        return (1.0 - (1.0 - 1.0 / m) ** (k * n)) ** k

    # -- algebra -------------------------------------------------------------------------------------------
    def _check_compatible(self, other: BloomFilter) -> None:
        if not isinstance(other, BloomFilter) or (self.m, self.k) != (other.m, other.k):
            raise SeqsketchError("Bloom filters must share m and k to be combined")

    def union(self, other: BloomFilter) -> BloomFilter:
        self._check_compatible(other)
        return BloomFilter(self.m, self.k, self.bits | other.bits)

    def intersection(self, other: BloomFilter) -> BloomFilter:
        self._check_compatible(other)
        return BloomFilter(self.m, self.k, self.bits & other.bits)

    __or__ = union
    __and__ = intersection

    def fold(self, size: int) -> BloomFilter:
        """The same keys in a ``size``-bit filter (a power of two ≤ m), by OR-ing the halves together."""
        if not is_power_of_two(size) or size > self.m or size < 8:
            raise SeqsketchError(f"cannot fold a {self.m}-bit filter to {size} bits")
        return BloomFilter.from_int(fold_int(self.to_int(), self.m, size), size, self.k)

    def copy(self) -> BloomFilter:
        return BloomFilter(self.m, self.k, self.bits.copy())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BloomFilter):
            return NotImplemented
        return (self.m, self.k) == (other.m, other.k) and self.bits == other.bits

    def __hash__(self) -> int:  # pragma: no cover - mutable; hashing a filter is a mistake
        raise TypeError("BloomFilter is mutable and unhashable")

    def __repr__(self) -> str:
        return f"BloomFilter(m={self.m}, k={self.k}, popcount={self.popcount()})"

    # -- conversions ---------------------------------------------------------------------------------------
    def to_int(self) -> int:
        return int.from_bytes(self.bits.tobytes(), "little")

    @classmethod
    def from_int(cls, value: int, m: int, k: int) -> BloomFilter:
        return cls.from_bytes(value.to_bytes(m // 8, "little"), m, k)

    @classmethod
    def from_bytes(cls, data: bytes, m: int, k: int) -> BloomFilter:
        bits = bitarray(endian="little")
        bits.frombytes(bytes(data))
        return cls(m, k, bits)

    def serialize(self) -> bytes:
        """``m`` (u64 little-endian), ``k`` (u8), then the ``m/8`` bytes of bits."""
        return self.m.to_bytes(8, "little") + bytes([self.k]) + self.bits.tobytes()

    @classmethod
    def deserialize(cls, data: bytes) -> BloomFilter:
        if len(data) < 9:
            raise SeqsketchError("serialized Bloom filter is truncated")
        m = int.from_bytes(data[:8], "little")
        k = data[8]
        if not is_power_of_two(m) or len(data) != 9 + m // 8:
            raise SeqsketchError(f"serialized Bloom filter has {len(data) - 9} bytes of bits, m={m}")
        return cls.from_bytes(data[9:], m, k)


def optimal_k(m: int, n: int) -> int:
    """Eq. 4.18: ``k = ln 2 · m / n`` rounded to the nearest integer ≥ 1."""
    return max(1, round(math.log(2) * m / max(n, 1)))
