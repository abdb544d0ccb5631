"""The shape of a Bloom-filter tree, and a node as the approximate evaluator sees it.

:class:`TreeConfig` is what every builder must agree on to produce the same bits: leaf size ``C``, fanout
``F``, filter size ``m`` and hash count ``k`` (Baltus 2021, §4.1), and folded storage; it also records the
sizing targets of §4.4 for reports.
"""


from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from exact.errors import SeqsketchError
from sketch.bloom import HASH_SCHEME, MIN_BITS, is_power_of_two


@dataclass(frozen=True)
class TreeConfig:
    """The shape of a tree: what every builder must agree on to produce the same bits.

    ``leaf_size`` C, ``fanout`` F, filter size ``m`` (a power of two) and hash count ``k``; ``fold`` enables
    folded storage.  ``fpq``, ``filter_fp`` and ``query_length`` record the sizing targets (Baltus 2021 §4.4) for
    reports.
    """

    leaf_size: int
    m: int
    k: int
    fanout: int = 2
    fold: bool = True
    min_bits: int = MIN_BITS
    fpq: float | None = None
    filter_fp: float | None = None
    query_length: int = 2

    def __post_init__(self) -> None:
        if self.leaf_size < 1:
            raise SeqsketchError(f"leaf size must be ≥ 1, got {self.leaf_size}", where="--leaf-size")
        if not is_power_of_two(self.m) or self.m < self.min_bits or self.m > 1 << 32:
            raise SeqsketchError(f"m must be a power of two in [{self.min_bits}, 2^32], got {self.m}")
        if not is_power_of_two(self.min_bits) or self.min_bits < 8:
            raise SeqsketchError(f"min_bits must be a power of two ≥ 8, got {self.min_bits}")
        if not 1 <= self.k <= 64:
            raise SeqsketchError(f"k must be in 1..64, got {self.k}")
        if self.fanout < 2:
            raise SeqsketchError(f"fanout must be ≥ 2, got {self.fanout}")

    def canonical(self) -> dict[str, Any]:
        """The fields that determine the bits (and so the digest), with the hashing scheme."""
        return {"leaf_size": self.leaf_size, "m": self.m, "k": self.k, "fanout": self.fanout,
                "fold": self.fold, "min_bits": self.min_bits, "hash": HASH_SCHEME}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TreeConfig:
        fields = cls.__dataclass_fields__
        return cls(**{key: value for key, value in d.items() if key in fields})


@dataclass(frozen=True)
class Node:
    """A node as the approximate evaluator sees it."""

    id: int
    level: int
    lo_seq: int
    hi_seq: int
    lo_ts: int  # UTC microseconds of the first event
    hi_ts: int  # UTC microseconds of the last event
    children: tuple[int, ...]
    size: int  # bits stored (m, or m folded)
    partial: bool = False
