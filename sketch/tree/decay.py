"""The decayed summary of retired history: coarse Bloom filters of what retention took, coarser the older.

Baltus' thesis leaves the structure's unbounded growth open (§6: "it would therefore be interesting to
incorporate time-decay models, such as the sliding-window model").  When retention retires the oldest events
(:mod:`exact.store.retention`), their stretch of the stream tree is not dropped whole: its nodes that lie
inside the retired seqs — the forest's top nodes there, opened where one reaches past it — become **units**
of a summary, each its seq and ts range, how many leaves it stands for (its weight) and its filter (unfolded
to ``m`` bits: a folded filter is its own halves OR-ed, so tiling it back answers every probe alike).

The summary then decays as an exponential histogram (Datar et al.'s sliding-window counts): whenever a
weight class (the leaves a unit stands for, to the power of two below) holds more than :data:`PER_CLASS`
units, its two oldest neighbours are merged — their filters OR-ed, their ranges joined — into one of the next
class.  Old history is thus held by few wide units and recent history by many narrow ones, and the summary
keeps ``O(PER_CLASS · log(retired leaves))`` units; :data:`MOST_UNITS` caps it besides (the oldest merged
first).

**No false negatives.**  A unit's filter is the union of every retired leaf's below it, so a type that occurred
in its range is never answered "no": an approximate answer over the retired history (:class:`DecayedIndex`,
the same evaluation as over the live tree, :func:`sketch.evaluate.candidates.approximate`) misses no match
that occurred there.  **False positives.**  A probe of a filter whose ``ρ m`` of ``m`` bits are set answers a
false "maybe" with probability ``ρ^k`` (Baltus eq. 4.1 in the fill's terms).  The live tree keeps ``ρ ≤ 1/2``
(merge and fold constraint, so ``fp ≤ 2^-k``); a decayed unit is a union beyond that constraint, so its fill
grows with the distinct types of its range: after ``j`` merges of units at fill ρ it is at most
``1 − (1 − ρ)^(2^j)``, and its false-positive rate ``(1 − (1 − ρ)^(2^j))^k``.  Each answer states the rate
of the units it probed (:meth:`DecayedIndex.top_level_false_positive_rate`), and the answer over retired
history is marked unverifiable: its events are gone.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from exact.errors import IndexCorrupt
from exact.query.ast import Between
from sketch.bloom import key_positions
from sketch.evaluate.units import Runs, Units, clip_runs, in_runs, union
from sketch.tree.nodes import TreeNodes

#: The store manifest's ``extra`` key naming the live summary file.
DECAY_KEY = "decay"
#: units a weight class may hold before its two oldest merge
PER_CLASS = 4
#: the most units a summary keeps (a setting: ``SEQSKETCH_DECAY_UNITS``)
MOST_UNITS = 1024
MAGIC = b"SQSKDECY"
_PREFIX = struct.Struct("<8sII")
_I64 = np.int64


@dataclass(frozen=True)
class Decayed:
    """A decayed summary (see the module docstring); immutable, each step makes a new one."""

    m: int
    k: int
    lo_seq: np.ndarray
    hi_seq: np.ndarray
    lo_ts: np.ndarray
    hi_ts: np.ndarray
    weight: np.ndarray
    #: ``(units, m // 8)`` uint8: each unit's filter, bit p of a filter is bit ``p % 8`` of byte ``p // 8``
    bits: np.ndarray

    @classmethod
    def empty(cls, m: int, k: int) -> Decayed:
        z = np.zeros(0, dtype=_I64)
        return cls(m, k, z, z, z, z, z, np.zeros((0, m // 8), dtype=np.uint8))

    def __len__(self) -> int:
        return len(self.lo_seq)

    @property
    def end_seq(self) -> int:
        """The first seq after the summarised history."""
        return int(self.hi_seq[-1]) + 1 if len(self) else 0

    @property
    def nbytes(self) -> int:
        return int(self.bits.nbytes + 5 * 8 * len(self))

    def absorb(self, tree: TreeNodes, upto: int) -> Decayed:
        """This summary with the stretch ``[end_seq, upto)`` of ``tree`` added (both ends on leaf bounds)."""
        lo = self.end_seq
        if upto <= lo:
            return self
        if tree.config.m != self.m or tree.config.k != self.k:
            raise ValueError("a summary holds filters of one size and hash count")
        cols = tree.intervals()
        chosen: list[int] = []
        stack = list(reversed(tree.top_nodes()))
        while stack:
            node = stack.pop()
            a, b = int(cols["lo_seq"][node]), int(cols["hi_seq"][node])
            if b < lo or a >= upto:
                continue
            if a >= lo and b < upto:
                chosen.append(node)
            else:
                kids = [int(c) for c in cols["children"][node] if c >= 0]
                if not kids:
                    raise ValueError(f"seq {upto} is not on a leaf bound of the tree")
                stack.extend(reversed(kids))
        chosen.sort(key=lambda n: int(cols["lo_seq"][n]))
        nodes = np.asarray(chosen, dtype=_I64)
        C = tree.config.leaf_size
        spans = (cols["hi_seq"][nodes] - cols["lo_seq"][nodes]) // C + 1
        filters = np.stack([_unfolded(tree, n, self.m) for n in chosen]) if chosen else \
            np.zeros((0, self.m // 8), dtype=np.uint8)
        return replace(self, lo_seq=np.concatenate([self.lo_seq, cols["lo_seq"][nodes]]),
                       hi_seq=np.concatenate([self.hi_seq, cols["hi_seq"][nodes]]),
                       lo_ts=np.concatenate([self.lo_ts, cols["lo_ts"][nodes]]),
                       hi_ts=np.concatenate([self.hi_ts, cols["hi_ts"][nodes]]),
                       weight=np.concatenate([self.weight, spans.astype(_I64)]),
                       bits=np.concatenate([self.bits, filters]))

    def decayed(self, *, per_class: int = PER_CLASS, most: int = MOST_UNITS) -> Decayed:
        """The summary with old units merged: a weight class holding more than ``per_class`` units has its
        two oldest merged (again and again), then the oldest pair while there are more than ``most``."""
        lo, hi, lts, hts = (list(a.tolist()) for a in (self.lo_seq, self.hi_seq, self.lo_ts, self.hi_ts))
        weight = list(self.weight.tolist())
        bits = [row for row in self.bits]
        changed = True
        while changed:
            changed = False
            classes: dict[int, list[int]] = {}
            for i, w in enumerate(weight):
                classes.setdefault(int(w).bit_length(), []).append(i)
            for members in classes.values():
                if len(members) > per_class and members[1] == members[0] + 1:
                    _merge_at(members[0], lo, hi, lts, hts, weight, bits)
                    changed = True
                    break
        while len(weight) > max(most, 1):
            _merge_at(0, lo, hi, lts, hts, weight, bits)
        return replace(self, lo_seq=np.asarray(lo, dtype=_I64), hi_seq=np.asarray(hi, dtype=_I64),
                       lo_ts=np.asarray(lts, dtype=_I64), hi_ts=np.asarray(hts, dtype=_I64),
                       weight=np.asarray(weight, dtype=_I64),
                       bits=np.stack(bits) if bits else np.zeros((0, self.m // 8), dtype=np.uint8))

    def density(self) -> np.ndarray:
        """Each unit's fill: the share of its ``m`` bits set."""
        return np.unpackbits(self.bits, axis=1).sum(axis=1) / self.m if len(self) else np.zeros(0)

    def index(self) -> DecayedIndex:
        return DecayedIndex(self)


def _merge_at(i: int, lo: list[int], hi: list[int], lts: list[int], hts: list[int], weight: list[int],
              bits: list[np.ndarray]) -> None:
    """Merge units ``i`` and ``i + 1`` (neighbours in seq) into one, in place."""
    hi[i], lts[i], hts[i] = hi[i + 1], min(lts[i], lts[i + 1]), max(hts[i], hts[i + 1])
    weight[i] += weight[i + 1]
    bits[i] = bits[i] | bits[i + 1]
    for column in (lo, hi, lts, hts, weight, bits):
        del column[i + 1]


def _unfolded(tree: TreeNodes, node: int, m: int) -> np.ndarray:
    """Node ``node``'s filter as ``m`` bits (a folded filter tiled back: it answers every probe alike)."""
    offsets = tree._offsets.data  # (the nodes' stored filters: a summary is made beside the tree, of it)
    size = 1 << int(tree._log2.data[node])
    raw = np.asarray(tree._pool.data[int(offsets[node]): int(offsets[node]) + size // 8], dtype=np.uint8)
    return np.tile(raw, m // size)


class DecayedIndex:
    """Where event types may have occurred in the retired history: a :class:`~sketch.evaluate.units.
    TypeIndex` over the summary's units, for the same approximate evaluation as the live tree's."""

    def __init__(self, summary: Decayed) -> None:
        self.summary = summary
        n = len(summary)
        self.units = Units(nodes=np.arange(n, dtype=_I64), level=np.zeros(n, dtype=_I64),
                           lo_seq=summary.lo_seq, hi_seq=summary.hi_seq, lo_ts=summary.lo_ts,
                           hi_ts=summary.hi_ts, granularity=0)
        self._probes = 0

    def _of_type(self, typ: str) -> np.ndarray:
        pos = key_positions([typ], self.summary.k, self.summary.m)[0].astype(_I64)
        got = self.summary.bits[:, pos >> 3] & np.left_shift(1, pos & 7).astype(np.uint8)[None, :]
        return np.flatnonzero((got != 0).all(axis=1)).astype(_I64)

    def occurrence(self, types: frozenset[str], between: Between | None) -> np.ndarray:
        return self.occurrences([types], between)[0]

    def occurrences(self, type_sets: Sequence[frozenset[str]], between: Between | None, *,
                    required: int | None = None, allowed: Runs | None = None) -> list[np.ndarray]:
        ok = clip_runs(allowed, *self.units.between_range(between))
        out = []
        for types in type_sets:
            self._probes += len(self.summary) * max(len(types), 1)
            found = [self._of_type(t) for t in sorted(types)]
            out.append(in_runs(union(found) if found else np.zeros(0, dtype=_I64), ok))
        return out

    def probes(self) -> int:
        return self._probes

    def top_level_false_positive_rate(self, keys: int, between: Between | None) -> float:
        """The chance some probe of ``keys`` types into the units asked answered a false "maybe"."""
        if not len(self.summary):
            return 0.0
        lo, hi = self.units.between_range(between)
        rho = self.summary.density()[lo:hi]
        miss = np.prod((1.0 - np.power(rho, self.summary.k)) ** max(keys, 1))
        return float(1.0 - miss)


# --------------------------------------------------------------------------------------------------- files

def save(summary: Decayed, path: Path) -> int:
    """Write ``summary`` to ``path`` (temporary name, fsync, rename); returns its size."""
    arrays = [("lo_seq", summary.lo_seq), ("hi_seq", summary.hi_seq), ("lo_ts", summary.lo_ts),
              ("hi_ts", summary.hi_ts), ("weight", summary.weight)]
    body = b"".join(np.ascontiguousarray(a, dtype="<i8").tobytes() for _, a in arrays)
    body += np.ascontiguousarray(summary.bits, dtype=np.uint8).tobytes()
    header = json.dumps({"m": summary.m, "k": summary.k, "units": len(summary), "crc32": zlib.crc32(body)}).encode()
    data = _PREFIX.pack(MAGIC, 1, len(header)) + header + body
    tmp = path.with_name(f".{path.name}.tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return len(data)


def load(path: Path) -> Decayed:
    """A summary written by :func:`save`; a damaged one is :class:`~exact.errors.IndexCorrupt`."""
    from exact.store.fetch import fetched

    try:
        if not path.exists():
            fetched(path)  # (a replica's file is fetched on first use)
        data = path.read_bytes()
        magic, _version, hlen = _PREFIX.unpack_from(data)
        if magic != MAGIC:
            raise ValueError("not a decayed summary")
        header: dict[str, Any] = json.loads(data[_PREFIX.size:_PREFIX.size + hlen])
        body = data[_PREFIX.size + hlen:]
        if zlib.crc32(body) != header["crc32"]:
            raise ValueError("checksum mismatch")
        n, m = int(header["units"]), int(header["m"])
        cols = np.frombuffer(body[: 5 * 8 * n], dtype="<i8").reshape(5, n).astype(_I64)
        bits = np.frombuffer(body[5 * 8 * n:], dtype=np.uint8).reshape(n, m // 8).copy()
    except (OSError, ValueError, KeyError, struct.error) as err:
        raise IndexCorrupt(f"unreadable decayed summary: {err}", where=str(path)) from None
    return Decayed(m, int(header["k"]), cols[0], cols[1], cols[2], cols[3], cols[4], bits)
