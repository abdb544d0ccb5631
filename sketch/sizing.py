"""Configuring the Bloom-filter tree from a target false-positive rate (Baltus 2021, §4.4.1, eq. 4.1–4.18).

Inputs (thesis Table 4.1): the target false-positive rate of a query ``fpq``, the leaf size ``C``, the memory
budget ``M`` (here in bytes of the persisted index), the stream size ``N`` and the query length ``s``
(default 2), plus the tree's fanout ``F`` (the thesis assumes 2).  Outputs: the height ``h`` of the fully
merged sub-trees, the bits per filter ``m`` and the number of hash functions ``k``.

The equations, generalised from fanout 2 to fanout ``F``:

* (4.1)  ``fp = (1 − (1 − 1/m)^(k n))^k`` — one filter holding ``n`` distinct keys.
* (4.3)  ``fpq = 1 − (1 − fp)^q`` — a query probing ``q`` filters;
  (4.5) inverts it: ``fp = 1 − (1 − fpq)^(1/q)``.
  ``q`` is the number of top-level nodes ``t`` times the probes per node: twice per pair of consecutive query
  elements, ``2 (s − 1)`` (end of Baltus 2021 §4.4.1), or once for a single-element query.
* (4.6)  ``T · m ≤ M``;  (4.7) ``T = t · d``;  (4.8) ``t = L / l``;  (4.9) ``L = N / C``;
  (4.10) ``l = F^(h−1)``;  (4.11) ``d = (F^h − 1) / (F − 1)``;  (4.12) ``T = d · L / F^(h−1)``.
  ``L`` and the per-level node counts are rounded up, so ``T`` counts the nodes of the real forest;
  ``t`` counts the partial sub-trees too (:func:`top_level_nodes`).
* (4.13) ``m ≥ −n ln fp / (ln 2)^2`` and (4.18) ``k = ln 2 · m / n``.  Together they give
  ``k = log2(1/fp)``; we take ``k = ⌈log2(1/fp)⌉`` and round ``m`` up to a power of two ≥ ``1.2 n k / ln 2``
  (the 1.2 is headroom so that planned merges pass the density constraint, see ``MERGE_HEADROOM``).  Then
  a filter whose density is at most 1/2 — the merge constraint of Baltus 2021 §4.1, which the tree enforces for every
  merged node and every folded node — has ``fp ≤ 2^−k ≤ fp`` target whatever its key count.
* (4.16) Heaps' law ``n = K n̂^β`` (K = 60, β = 0.5) estimates the distinct keys of a top-level node covering
  ``n̂ = F^(h−1) C`` events.  The thesis names guessing ``N`` and the vocabulary as a weakness (ch. 6); when
  the data is at hand we *measure* instead: :func:`measure_distinct` counts the distinct keys of every aligned
  window of ``F^j C`` events, and sizing uses the largest count per level (:class:`DistinctProfile`).
* (4.14)/(4.15)/(4.17): the memory constraint as a function of ``h`` alone, solved by trying every ``h``.

Choosing ``h``: with a budget ``M`` the thesis maximises ``q = L / F^(h−1)`` (the number of top-level nodes)
under (4.15), i.e. takes the smallest ``h`` that fits.  Without a budget we take the deepest tree (fewest
top-level nodes, so that an absent key is ruled out with the fewest probes) whose estimated size is at most
twice that of the cheapest ``h``.  A budget no configuration meets is refused with a message naming the
smallest budget that fits and the best ``fpq`` reachable within the given one.

Going beyond the thesis, nodes are stored folded (see :func:`sketch.bloom.fold_bits`): a node whose keys fill
less than half of a smaller power-of-two size is kept at that size.  The memory estimate therefore sizes each
level by its own distinct-key count, not by the top level's ``m`` (folding off: the thesis' ``T·m``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from exact.errors import SeqsketchError
from sketch.bloom import MIN_BITS, sorted_unique

LN2 = math.log(2)
#: Heaps' law constants of eq. 4.16.
HEAPS_K = 60.0
HEAPS_BETA = 0.5
#: Bytes per node besides its bits in the persisted format (level and stored size; sizes are derived on load).
NODE_OVERHEAD_BYTES = 2
#: Bytes per leaf besides its bits (its first and last event time; internal nodes' times are derived).
LEAF_OVERHEAD_BYTES = 16
#: Bytes of an index file besides its nodes: the 64-byte prefix, the JSON header, section alignment.
FILE_OVERHEAD_BYTES = 2048
#: ``m`` is sized for this many times the distinct keys a top-level node is measured to hold, so that the
#: planned merges pass the density constraint with room to spare: at exactly ``n k / ln 2`` bits a union would
#: sit at density 1/2 on average and fail the constraint about half of the time.
MERGE_HEADROOM = 1.2
#: The default policy accepts a deeper tree while its size stays within this factor of the cheapest one.
DEFAULT_DEPTH_SLACK = 2.0


# ----------------------------------------------------------------------------------------------------------
# The equations of Baltus 2021 §4.4.1
# ----------------------------------------------------------------------------------------------------------

def filter_false_positive_rate(m: int, k: int, n: int) -> float:
    """Eq. 4.1: the false-positive rate of one ``m``-bit filter with ``k`` hashes holding ``n`` keys."""
    return (1.0 - (1.0 - 1.0 / m) ** (k * n)) ** k


def query_false_positive_rate(fp: float, q: int) -> float:
    """Eq. 4.3: the probability that at least one of ``q`` probed filters answers a false positive."""
    return -math.expm1(q * math.log1p(-fp)) if fp < 1 else 1.0


def filter_rate_for_query(fpq: float, q: int) -> float:
    """Eq. 4.5: the per-filter rate ``fp = 1 − (1 − fpq)^(1/q)`` that keeps a ``q``-probe query at ``fpq``
    (never above ``fpq``, which rounding could otherwise give by an ulp when ``q`` is 1)."""
    return min(fpq, -math.expm1(math.log1p(-fpq) / q))


def probes_per_node(query_length: int) -> int:
    """Probes of each top-level node by a query of ``s`` elements: 2 per consecutive pair (end of Baltus 2021
    §4.4.1)."""
    return 2 * (query_length - 1) if query_length >= 2 else 1


def leaf_count(events: int, leaf_size: int) -> int:
    """Eq. 4.9: ``L = N / C``, rounded up (the last leaf may be partly filled)."""
    return max(1, -(-events // leaf_size))


def leaves_per_subtree(h: int, fanout: int) -> int:
    """Eq. 4.10 for fanout F: ``l = F^(h−1)``."""
    leaves: int = fanout ** (h - 1)  # (h ≥ 1: an int; typeshed's int ** int allows a float)
    return leaves


def nodes_per_subtree(h: int, fanout: int) -> int:
    """Eq. 4.11 for fanout F: ``d = Σ_{i<h} F^i = (F^h − 1)/(F − 1)``."""
    nodes: int = (fanout**h - 1) // (fanout - 1)
    return nodes


def total_nodes(leaves: int, h: int, fanout: int) -> int:
    """Eq. 4.7/4.12: nodes of a forest of sub-trees of height ``h`` over ``L`` leaves, counted per level."""
    return sum(-(-leaves // fanout**j) for j in range(h))


def bits_for(n: int, fp: float) -> float:
    """Eq. 4.13: ``m ≥ −n ln fp / (ln 2)^2``."""
    return -n * math.log(fp) / (LN2 * LN2)


def heaps_distinct(events: float, K: float = HEAPS_K, beta: float = HEAPS_BETA) -> float:
    """Eq. 4.16: Heaps' law ``n = K n̂^β``, the expected distinct keys among ``n̂`` events."""
    distinct: float = K * events**beta
    return distinct


def hashes_for(fp: float) -> int:
    """Eq. 4.13 with 4.18: ``k = ln2 · m / n = log2(1/fp)``, rounded up so that density ≤ 1/2 ⇒ rate ≤ fp."""
    return max(1, math.ceil(-math.log2(fp) - 1e-12))


def next_power_of_two(x: float) -> int:
    return 1 << max(0, math.ceil(math.log2(max(x, 1.0))))


# ----------------------------------------------------------------------------------------------------------
# The distinct-key profile: measured from the data, or Heaps' law
# ----------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DistinctProfile:
    """Distinct keys per aligned window of ``C · F^j`` events, for ``j = 0, 1, …`` (level ``j`` of the tree).

    ``maximum[j]`` is the largest count over the windows of level ``j`` (sizes ``m``), ``mean[j]`` the average
    (estimates memory); ``vocabulary`` is the number of distinct keys of the whole stream.  Levels beyond the
    measured ones are extrapolated with Heaps' law (β = 0.5) from the last measured level.
    """

    leaf_size: int
    fanout: int
    maximum: tuple[int, ...]
    mean: tuple[float, ...]
    vocabulary: int
    measured: bool = True

    def _extrapolate(self, values: tuple[float, ...], level: int) -> float:
        if level < len(values):
            return float(values[level])
        last = len(values) - 1
        growth: float = self.fanout ** ((level - last) * HEAPS_BETA)
        return float(values[last]) * growth

    def max_at(self, level: int) -> int:
        return max(1, math.ceil(self._extrapolate(self.maximum, level)))

    def mean_at(self, level: int) -> float:
        return max(1.0, self._extrapolate(self.mean, level))

    @classmethod
    def heaps(cls, leaf_size: int, fanout: int, levels: int,
              vocabulary: int | None = None) -> DistinctProfile:
        """The thesis' assumption (eq. 4.16), capped by the vocabulary when it is known."""
        cap = float(vocabulary) if vocabulary else math.inf
        values = tuple(min(cap, heaps_distinct(leaf_size * fanout**j), leaf_size * fanout**j)
                       for j in range(max(1, levels)))
        return cls(leaf_size, fanout, tuple(math.ceil(v) for v in values), values,
                   vocabulary or math.ceil(values[-1]), measured=False)


def measure_distinct(leaf_ids: np.ndarray, codes: np.ndarray, leaf_size: int, fanout: int) -> DistinctProfile:
    """Measure the distinct keys of every aligned window of ``C F^j`` events from (leaf, key-code) pairs.

    ``leaf_ids`` and ``codes`` list each distinct (leaf, key) pair once (the builder has them anyway); windows
    of level ``j`` are groups of ``F^j`` consecutive leaves, as in a fully merged tree.
    """
    if len(codes) == 0:
        return DistinctProfile(leaf_size, fanout, (1,), (1.0,), 0)
    vocabulary = int(sorted_unique(codes).size)
    n_codes = int(codes.max()) + 1
    maximum: list[int] = []
    mean: list[float] = []
    groups = leaf_ids.astype(np.int64)
    keys = sorted_unique(groups * n_codes + codes.astype(np.int64))
    while True:
        group_of = keys // n_codes
        counts = np.bincount(group_of - group_of.min()) if keys.size else np.zeros(1, np.int64)
        counts = counts[counts > 0]
        maximum.append(int(counts.max()))
        mean.append(float(counts.mean()))
        if counts.size <= 1:
            break
        keys = sorted_unique((group_of // fanout) * n_codes + keys % n_codes)
    return DistinctProfile(leaf_size, fanout, tuple(maximum), tuple(mean), vocabulary)


# ----------------------------------------------------------------------------------------------------------
# Solving for h, m, k
# ----------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Candidate:
    """One height ``h`` and what it implies (eq. 4.5–4.18)."""

    h: int
    top_nodes: int  # t (eq. 4.8, 4.10; see top_level_nodes)
    probes: int  # q = probes per node · t
    fp: float  # eq. 4.5
    n_top: int  # distinct keys of a top-level node (measured or eq. 4.16)
    m: int
    k: int
    nodes: int  # T (eq. 4.12)
    bits_unfolded: int  # T · m (eq. 4.6)
    bytes_estimate: int  # persisted size: folded bits (or T·m/8 unfolded) + per-node metadata

    @property
    def expected_fpq(self) -> float:
        """Eq. 4.3 at the guaranteed per-filter rate 2^−k of a filter at density ≤ 1/2."""
        return query_false_positive_rate(2.0 ** -self.k, self.probes)


@dataclass(frozen=True)
class Sizing:
    """The chosen configuration and the candidates it was chosen from."""

    fpq: float
    leaf_size: int
    fanout: int
    events: int
    leaves: int
    query_length: int
    memory_bytes: int | None
    fold: bool
    chosen: Candidate
    candidates: tuple[Candidate, ...] = field(repr=False)
    policy: str = "default"

    @property
    def m(self) -> int:
        return self.chosen.m

    @property
    def k(self) -> int:
        return self.chosen.k

    @property
    def h(self) -> int:
        return self.chosen.h

    @property
    def filter_fp(self) -> float:
        return self.chosen.fp

    def to_dict(self) -> dict[str, Any]:
        c = self.chosen
        return {"fpq": self.fpq, "leaf_size": self.leaf_size, "fanout": self.fanout, "events": self.events,
                "leaves": self.leaves, "query_length": self.query_length, "memory_bytes": self.memory_bytes,
                "fold": self.fold, "policy": self.policy, "h": c.h, "m": c.m, "k": c.k, "filter_fp": c.fp,
                "top_nodes": c.top_nodes, "probes": c.probes, "n_top": c.n_top, "nodes": c.nodes,
                "bytes_estimate": c.bytes_estimate, "expected_fpq": c.expected_fpq}


def top_level_nodes(leaves: int, h: int, fanout: int) -> int:
    """Eq. 4.8 made exact for a stream that does not fill its last sub-tree: ``⌊L / l⌋`` full sub-trees plus
    the partial ones the rest of the leaves form (one per non-zero base-F digit of ``L mod l``, Fig. 4.3)."""
    full, rest = divmod(leaves, leaves_per_subtree(h, fanout))
    digits = 0
    while rest:
        rest, digit = divmod(rest, fanout)
        digits += digit
    return full + digits


def _candidate(h: int, fpq: float, leaves: int, fanout: int, query_length: int,
               profile: DistinctProfile, fold: bool) -> Candidate:
    top = top_level_nodes(leaves, h, fanout)
    probes = probes_per_node(query_length) * top
    fp = filter_rate_for_query(fpq, probes)
    k = hashes_for(fp)
    n_top = profile.max_at(h - 1)
    m = max(MIN_BITS, next_power_of_two(MERGE_HEADROOM * n_top * k / LN2))
    nodes = total_nodes(leaves, h, fanout)
    if fold:
        # A node folds to the smallest power of two that keeps it at density ≤ 1/2: about n k / ln 2 bits.
        bits = sum(-(-leaves // fanout**j)
                   * min(m, max(MIN_BITS, next_power_of_two(profile.mean_at(j) * k / LN2)))
                   for j in range(h))
    else:
        bits = nodes * m
    return Candidate(h, top, probes, fp, n_top, m, k, nodes, nodes * m,
                     bits // 8 + nodes * NODE_OVERHEAD_BYTES + leaves * LEAF_OVERHEAD_BYTES
                     + FILE_OVERHEAD_BYTES)


def _candidates(fpq: float, leaves: int, fanout: int, query_length: int, profile: DistinctProfile,
                fold: bool) -> list[Candidate]:
    top_h = 1
    while fanout ** (top_h - 1) < leaves:
        top_h += 1
    return [_candidate(h, fpq, leaves, fanout, query_length, profile, fold) for h in range(1, top_h + 1)]


def _check_inputs(fpq: float, leaf_size: int, fanout: int, events: int, query_length: int,
                  memory_bytes: int | None) -> None:
    if not 0.0 < fpq < 1.0:
        raise SeqsketchError(f"fpq (target false-positive rate of a query) must be in (0, 1), got {fpq}",
                             where="--fpq")
    if leaf_size < 1:
        raise SeqsketchError(f"leaf size C must be ≥ 1 event, got {leaf_size}", where="--leaf-size")
    if fanout < 2:
        raise SeqsketchError(f"fanout must be ≥ 2, got {fanout}", where="fanout")
    if events < 0:
        raise SeqsketchError(f"expected number of events must be ≥ 0, got {events}", where="events")
    if query_length < 1:
        raise SeqsketchError(f"query length s must be ≥ 1, got {query_length}", where="query_length")
    if memory_bytes is not None and memory_bytes <= 0:
        raise SeqsketchError(f"memory budget must be a positive number of bytes, got {memory_bytes}",
                             where="--memory")


def size_index(*, fpq: float = 1e-3, leaf_size: int = 256, events: int,
               profile: DistinctProfile | None = None, memory_bytes: int | None = None, query_length: int =
               2, fanout: int = 2,
               fold: bool = True) -> Sizing:
    """Solve eq. 4.17 for ``h``, then ``m`` (eq. 4.14) and ``k`` (eq. 4.18); refuse budgets nothing fits."""
    _check_inputs(fpq, leaf_size, fanout, events, query_length, memory_bytes)
    leaves = leaf_count(events, leaf_size)
    if profile is None:
        levels = 1
        while fanout ** (levels - 1) < leaves:
            levels += 1
        profile = DistinctProfile.heaps(leaf_size, fanout, levels)
    candidates = _candidates(fpq, leaves, fanout, query_length, profile, fold)
    if memory_bytes is None:
        cheapest = min(c.bytes_estimate for c in candidates)
        fitting = [c for c in candidates if c.bytes_estimate <= DEFAULT_DEPTH_SLACK * cheapest]
        chosen, policy = max(fitting, key=lambda c: c.h), "default"
    else:
        fitting = [c for c in candidates if c.bytes_estimate <= memory_bytes]
        if not fitting:
            raise _budget_error(fpq, leaf_size, fanout, events, leaves, query_length, profile, fold,
                                memory_bytes, candidates)
        chosen, policy = min(fitting, key=lambda c: c.h), "thesis: largest q within the budget"
    return Sizing(fpq, leaf_size, fanout, events, leaves, query_length, memory_bytes, fold, chosen,
                  tuple(candidates), policy)


def _budget_error(fpq: float, leaf_size: int, fanout: int, events: int, leaves: int, query_length: int,
                  profile: DistinctProfile, fold: bool, memory_bytes: int,
                  candidates: list[Candidate]) -> SeqsketchError:
    need = min(candidates, key=lambda c: c.bytes_estimate)

    def fits(rate: float) -> bool:
        return any(c.bytes_estimate <= memory_bytes
                   for c in _candidates(rate, leaves, fanout, query_length, profile, fold))

    advice = ""
    if fits(0.5):
        lo, hi = math.log(fpq), math.log(0.5)
        for _ in range(40):  # bisection on log(fpq): memory only shrinks as the target loosens
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if fits(math.exp(mid)) else (mid, hi)
        advice = f"; within {memory_bytes} bytes the best reachable fpq is about {math.exp(hi):.3g}"
    else:
        advice = "; no false-positive target fits that budget: raise --memory or --leaf-size"
    return SeqsketchError(
        f"memory budget of {memory_bytes} bytes is too small for fpq={fpq:g} with leaf size {leaf_size} over "
        f"{events} events: the smallest index needs about {need.bytes_estimate} bytes "
        f"(h={need.h}, m={need.m}, k={need.k}){advice}", where="--memory")
