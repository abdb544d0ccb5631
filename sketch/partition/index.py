"""The partition-clustered Bloom-filter tree: candidates are groups (cases), not time slices.

Leaves cut from the interleaved stream hold a bit of every case, so every leaf holds every frequent type and
a per-case question prunes nothing (the Bloom-tree thesis names the limit, §6).  With a partition layout
(:mod:`exact.store.grouping`) the events are clustered by their key — by group, groups in order of their first
event, stream order within a group — and the tree is built over that order instead:

* **Leaves at group boundaries.** The clustered events are laid out in *slots*: a group that does not fit
  the rest of the current leaf starts a new one (the slots left are padding, in no filter), so a leaf
  holds whole groups, and a group larger than a leaf spans several leaves of its own.  One Bloom filter per
  leaf over its types; merged bottom-up by Alg. 1–2 with the thesis' sizing (§4.4) — the same builder as
  the stream tree, on the slot sequence.
* **Candidates.** For a query whose partition includes the key, a match lies inside one group, so a group
  can hold one only if every positive position of the pattern may occur in one of its leaves: each
  position's leaves are found top-down on the tree (Baltus 2021 §4.3), a group's leaves are a run, and a bisection per
  group and position decides.  The groups left are then held to the layout's exact type sets per group:
  the candidates are exactly the groups that hold every positive type.  Events appended after the layout
  (the *tail*) are found by their key values, their groups joining the candidates when the group's types,
  old and new, hold the pattern's.
* **Verification** reads only the candidate groups' events (from the seek files, in place) and runs the
  exact engine over them as segments, the groups known by their numbers rather than their values.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exact.arrays import distinct_ints
from exact.query.normalize import Plan
from exact.store.grouping import Layout, key_values
from sketch.build import BuildOptions, _plan, config_from
from sketch.evaluate import TreeIndex
from sketch.evaluate.explain import positions_of
from sketch.tree import BloomTree

_I64 = np.int64


def slot_starts(sizes: np.ndarray, leaf_size: int) -> tuple[np.ndarray, int]:
    """Per group (in order) its first slot, and the number of slots: a group that does not fit the rest of
    the current leaf starts the next one."""
    starts = np.empty(len(sizes), dtype=_I64)
    pos = 0
    C = leaf_size
    for g, size in enumerate(sizes.tolist()):
        used = pos % C
        if used and used + size > C:
            pos += C - used
        starts[g] = pos
        pos += size
    return starts, pos


def slot_of_clustered(layout: Layout, starts: np.ndarray) -> np.ndarray:
    """The slot of each clustered position (``layout.order``'s index)."""
    sizes = layout.sizes()
    group = np.repeat(np.arange(layout.groups, dtype=_I64), sizes)
    slots: np.ndarray = starts[group] + np.arange(len(layout.order), dtype=_I64) - layout.group_off[group]
    return slots


def build_partition_tree(layout: Layout, type_codes: np.ndarray, micros: np.ndarray,
                         options: BuildOptions, *, base: int = 0) -> BloomTree:
    """The partition tree of a stream: ``type_codes`` (per seq from ``base``, into ``layout.types``) and
    ``micros`` (per seq from ``base``) laid out in slots (see the module docstring)."""
    C = options.leaf_size
    starts, total = slot_starts(layout.sizes(), C)
    slot = slot_of_clustered(layout, starts)
    order = layout.order.astype(_I64) - base
    codes = np.full(total, -1, dtype=np.int32)
    codes[slot] = type_codes[order]
    filled = np.zeros(total, dtype=bool)
    filled[slot] = True
    ts = np.zeros(total, dtype=_I64)
    ts[slot] = micros[order]
    # padding takes the time of the slot before it, so a leaf's time span is its events'
    last = np.maximum.accumulate(np.where(filled, np.arange(total), 0)) if total else np.zeros(0, dtype=_I64)
    ts = ts[last]
    width = max(len(layout.types), 1)
    pairs = distinct_ints((slot // C) * width + codes[slot]) if total else np.zeros(0, dtype=_I64)
    tree = BloomTree(config_from(_plan(codes, len(layout.types), options, pairs), options))
    tree.update_encoded(codes, list(layout.types), ts, pairs)
    return tree


def position_types(plan: Plan) -> list[frozenset[str]]:
    """The types of each positive position of ``plan`` (an OR's alternatives' together), ``ANY`` left out:
    a group can hold a match only if it holds an event of each."""
    return [p.types for element in positions_of(plan) for p in element if p.types is not None]


@dataclass(frozen=True)
class Candidates:
    """The groups a partitioned query may match in: layout group numbers (sorted) and tail keys."""

    groups: np.ndarray
    nodes_probed: int
    explain: str | None


class PartitionIndex:
    """A partition tree over its layout: which groups may hold a match (see the module docstring)."""

    def __init__(self, tree: BloomTree, layout: Layout) -> None:
        self.tree = tree
        self.layout = layout
        self.key = layout.key

    @functools.cached_property
    def _index(self) -> TreeIndex:
        return TreeIndex.shared(self.tree, 0)  # the one the dataset load prepared

    @functools.cached_property
    def _group_units(self) -> tuple[np.ndarray, np.ndarray]:
        """Per group, the first and last unit (leaf) holding its slots."""
        starts, _ = slot_starts(self.layout.sizes(), self.tree.config.leaf_size)
        lo = self._index.units.lo_seq
        last_slot = starts + np.maximum(self.layout.sizes(), 1) - 1
        return (np.searchsorted(lo, starts, "right") - 1, np.searchsorted(lo, last_slot, "right") - 1)

    def candidates(self, plan: Plan) -> Candidates:
        """The layout's groups that may hold a match of ``plan``: each positive position may occur in one of
        the group's leaves (the tree), and the group holds an event of each (its exact type set).  Where the
        layout keeps every group's type set as a bitmap (up to 64 types), those decide alone."""
        positions = [p for element in positions_of(plan) for p in element]
        typed = position_types(plan)
        index = self._index
        before = index.probes()
        groups = np.arange(self.layout.groups, dtype=_I64)
        if typed and self.layout.knows_type_sets:
            # every group's exact type set at hand (a bitmap each): it decides alone, and the tree could
            # only keep groups it rules out (the tree never misses a type) — one pass instead of a walk
            groups = self.layout.groups_holding(typed)
        elif typed:
            # (no BETWEEN here: the tree's units are in clustered order, not in time order, which the
            # occurrence walk's BETWEEN cut assumes; the engine applies BETWEEN to the groups read)
            found = index.occurrences(typed, None)
            g_lo, g_hi = self._group_units
            n_units = len(index.units)
            for units in sorted(found, key=len):
                if not len(groups):
                    break
                # units holding the position, counted up to each unit: a group's run of units holds it
                # when the count grows across the run
                seen = np.zeros(n_units + 1, dtype=np.int64)
                seen[units + 1] = 1
                np.cumsum(seen, out=seen)
                groups = groups[seen[g_hi[groups] + 1] > seen[g_lo[groups]]]
            groups = self.layout.groups_holding(typed, among=groups)
        explain = None
        if not len(groups):
            labels = " and ".join(p.label for p in positions if p.types is not None)
            explain = f"no {self.key} holds {'both ' if len(typed) == 2 else ''}{labels}"
        return Candidates(groups, index.probes() - before, explain)


# ------------------------------------------------------------------------------------------------ the tail


@dataclass(frozen=True)
class Tail:
    """The events appended after the layout: per event its group number (a layout group, or a new one
    numbered from ``layout.groups`` on; -1 without a key), and per group number the types they add."""

    seq: np.ndarray
    group: np.ndarray
    types: list[str]
    codes: np.ndarray

    def groups_with(self, type_sets: list[frozenset[str]], layout: Layout) -> np.ndarray:
        """The group numbers (layout or new) with tail events that, with the group's layout types, hold an
        event of every type set."""
        touched = distinct_ints(self.group[self.group >= 0])
        if not len(touched):
            return touched
        ok = np.ones(len(touched), dtype=bool)
        layout_index = {t: i for i, t in enumerate(layout.types)}
        for types in type_sets:
            in_tail = np.isin(self.codes, [i for i, t in enumerate(self.types) if t in types])
            has = np.isin(touched, distinct_ints(self.group[in_tail & (self.group >= 0)]))
            old = touched[(touched < layout.groups) & ~has]
            if len(old):
                wanted = {layout_index[t] for t in types if t in layout_index}
                held = layout.groups_holding([frozenset(layout.types[i] for i in wanted)], among=old) \
                    if wanted else old[:0]
                has |= np.isin(touched, held)
            ok &= has
        return touched[ok]


def read_tail(layout: Layout, table: pa.Table) -> Tail:
    """The tail (``table``: the events from seq ``layout.events`` on, with ``type`` and the key) mapped onto
    the layout's groups."""
    values = key_values(table, layout.key).combine_chunks()
    group = pc.fill_null(pc.index_in(values, value_set=layout.keys), -1).to_numpy(
        zero_copy_only=False).astype(_I64)
    fresh = (group < 0) & np.asarray(values.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    if fresh.any():
        new = pc.dictionary_encode(values.filter(pa.array(fresh))).indices.to_numpy(zero_copy_only=False)
        group[fresh] = layout.groups + new.astype(_I64)
    enc = pc.dictionary_encode(table.column("type").combine_chunks().cast(pa.string()))
    return Tail(table.column("seq").to_numpy(), group, enc.dictionary.to_pylist(),
                enc.indices.to_numpy(zero_copy_only=False).astype(_I64))

