"""The automaton of a query as flat arrays over one stream's events: what the compiled kernels run.

:func:`automaton_tables` enumerates the states the SES automaton (:mod:`exact.automaton`, Cadonna 2013
§4.3) can reach and lays out their transitions and conditions as arrays.  :func:`compile_program` binds
them to the events of a frame:

* **events** in *program order*: the events some positive variable can bind, grouped by partition
  (``PARTITION BY`` and the two-phase partitioning attributes X, Def. 5.3) with stream order inside each
  partition, so that a partition is a contiguous segment and every window lies inside its first event's
  segment.  The contiguity strategies keep stream order (their successor array links each event to the
  next one of its partition).
* per event: the variables whose properties it satisfies (``em``), its seq, the last event of the window
  it would start (``wend``), and per variable the sorted events that may fire it (``vpos``), so a kernel
  jumps to the next event that can change a run (Kolchinsky & Schuster's lazy evaluation);
* the attribute columns that relations and ``prev`` conditions compare, as a kind (null, number, string,
  boolean) and a float value per event — strings as their rank among all strings compared, so that the
  order of ranks is the order of the strings.  A condition that the segments make true (``a.X = b.X`` and
  ``prev(v.X) = v.X`` on a partition attribute X) is not checked again.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exact.ast import OPERATORS, Strategy, WithinEvents, WithinTime
from exact.automaton import Automaton, automaton_for
from exact.errors import QueryLimitError
from exact.normalize import Plan
from exact.prefilter import EventFrame

_I64 = np.int64
#: More reachable states than this (event sets of over a dozen variables) are refused.
MAX_STATES = 1 << 14


@dataclass(frozen=True)
class Tables:
    """The reachable automaton as arrays; state 0 is the start state."""

    state_mask: np.ndarray
    final: np.ndarray
    relevant: np.ndarray
    tr_off: np.ndarray
    tr_var: np.ndarray
    tr_target: np.ndarray
    rc_off: np.ndarray
    rc_ax: np.ndarray
    rc_op: np.ndarray
    rc_w: np.ndarray
    rc_ay: np.ndarray
    pc_off: np.ndarray
    pc_ap: np.ndarray
    pc_op: np.ndarray
    pc_ax: np.ndarray
    attrs: tuple[str, ...]


def automaton_tables(plan: Plan, dropped: frozenset[str]) -> Tables:
    """The reachable states of ``plan``'s automaton and their transitions as arrays; relations ``a.X = b.X``
    and ``prev(v.X) = v.X`` with X in ``dropped`` are left out (the caller's segments make them true)."""
    return _tables(plan.query, dropped)


@functools.lru_cache(maxsize=128)
def _tables(query, dropped: frozenset[str]) -> Tables:  # noqa: ANN001 - a frozen Query
    aut: Automaton = automaton_for(query)
    index = {0: 0}
    order = [0]
    k = 0
    while k < len(order):
        for t in aut.transitions(order[k]):
            if t.target not in index:
                if len(order) >= MAX_STATES:
                    raise QueryLimitError(f"the pattern's automaton has over {MAX_STATES:,} states; split "
                                          "its event sets (at most 13 variables each)")
                index[t.target] = len(order)
                order.append(t.target)
        k += 1
    attrs: dict[str, int] = {}

    def col(name: str) -> int:
        return attrs.setdefault(name, len(attrs))

    ops = {op: i for i, op in enumerate(OPERATORS)}
    tr_off, tr_var, tr_target = [0], [], []
    rc_off, rc_ax, rc_op, rc_w, rc_ay = [0], [], [], [], []
    pc_off, pc_ap, pc_op, pc_ax = [0], [], [], []
    for q in order:
        for t in aut.transitions(q):
            tr_var.append(t.var)
            tr_target.append(index[t.target])
            for r in t.relations:
                if r.op == "=" and r.attr == r.other_attr and r.attr in dropped:
                    continue
                rc_ax.append(col(r.attr))
                rc_op.append(ops[r.op])
                rc_w.append(r.other)
                rc_ay.append(col(r.other_attr))
            rc_off.append(len(rc_ax))
            for p in t.prevs:
                if p.op == "=" and p.prev_attr == p.attr and p.attr in dropped:
                    continue
                pc_ap.append(col(p.prev_attr))
                pc_op.append(ops[p.op])
                pc_ax.append(col(p.attr))
            pc_off.append(len(pc_ap))
        tr_off.append(len(tr_var))

    def arr(values: list[int]) -> np.ndarray:
        return np.asarray(values, dtype=_I64)

    return Tables(
        state_mask=arr(order), final=np.asarray([aut.is_final(q) for q in order], dtype=np.bool_),
        relevant=arr([aut.relevant_mask(q) for q in order]),
        tr_off=arr(tr_off), tr_var=arr(tr_var), tr_target=arr(tr_target),
        rc_off=arr(rc_off), rc_ax=arr(rc_ax), rc_op=arr(rc_op), rc_w=arr(rc_w), rc_ay=arr(rc_ay),
        pc_off=arr(pc_off), pc_ap=arr(pc_ap), pc_op=arr(pc_op), pc_ax=arr(pc_ax), attrs=tuple(attrs))


# ------------------------------------------------------------------------------------------- values


def value_columns(frame: EventFrame, attrs: tuple[str, ...], positions: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(kind, value, integer)`` of each attribute at the frame ``positions``: kind 0 null, 1 float,
    4 integer (exact in ``integer``, rounded in ``value``), 2 string (value: its rank among every string of
    these columns), 3 boolean."""
    n = len(positions)
    rows = max(len(attrs), 1)
    kind = np.zeros((rows, n), dtype=np.int8)
    value = np.zeros((rows, n), dtype=np.float64)
    integer = np.zeros((rows, n), dtype=np.int64)
    strings: list[tuple[int, pa.Array]] = []
    take = pa.array(positions, pa.int64())
    for a, attr in enumerate(attrs):
        if attr in ("seq", "ts"):
            raw = frame.seq[positions] if attr == "seq" else frame.ts[positions]
            kind[a] = 4
            integer[a] = raw
            value[a] = raw
            continue
        arr = frame.array(attr).take(take)
        typ = arr.type
        if pa.types.is_null(typ) or n == 0:
            continue
        valid = ~np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        if pa.types.is_boolean(typ):
            kind[a][valid] = 3
            value[a] = pc.fill_null(arr, False).to_numpy(zero_copy_only=False).astype(np.float64)
        elif pa.types.is_integer(typ) or pa.types.is_timestamp(typ):
            raw = pc.fill_null(arr.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)
            kind[a][valid] = 4
            integer[a] = raw
            value[a] = raw
        elif pa.types.is_floating(typ):
            kind[a][valid] = 1
            value[a] = pc.fill_null(arr, 0.0).to_numpy(zero_copy_only=False).astype(np.float64)
        elif pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_dictionary(typ):
            if pa.types.is_dictionary(typ):
                arr = arr.cast(typ.value_type)
            kind[a][valid] = 2
            strings.append((a, arr))
    if strings:
        every = pa.chunked_array([a for _, a in strings], type=pa.string()).unique().drop_null()
        ranked = every.take(pc.sort_indices(every))
        for a, arr in strings:
            codes = pc.index_in(arr, value_set=ranked)
            value[a] = pc.fill_null(codes, -1).to_numpy(zero_copy_only=False).astype(np.float64)
    return kind, value, integer


# ------------------------------------------------------------------------------------------- windows


def window_ends(plan: Plan, seq: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Per event (stream order), the index of the last event of the window it starts."""
    w = plan.query.within
    n = len(seq)
    if isinstance(w, WithinTime):
        return ts.searchsorted(ts + w.micros, "right") - 1
    if isinstance(w, WithinEvents):
        return seq.searchsorted(seq + (w.count - 1), "right") - 1
    return np.full(n, n - 1, dtype=_I64)


def segment_order(keys: np.ndarray) -> np.ndarray:
    """Positions sorted by partition key, stream order within a key (a stable sort)."""
    return np.argsort(keys, kind="stable")


def in_segment_ends(order: np.ndarray, keys_sorted: np.ndarray, ends_stream: np.ndarray) -> np.ndarray:
    """Window ends in program order: for the event at program index i, the last program index of its
    segment whose stream position is at most the stream window end of that event."""
    n = len(order)
    base = n + 1
    enc = keys_sorted * base + order  # sorted: by key, then stream position
    return np.searchsorted(enc, keys_sorted * base + ends_stream[order], "right") - 1


def positions_by_variable(em: np.ndarray, nvars: int) -> tuple[np.ndarray, np.ndarray]:
    """Per variable bit, the sorted indices of the events that have it, as one array with offsets."""
    lists = [np.flatnonzero((em >> v) & 1) for v in range(nvars)]
    off = np.zeros(nvars + 1, dtype=_I64)
    off[1:] = np.cumsum([len(x) for x in lists])
    flat = np.concatenate(lists).astype(_I64) if lists else np.zeros(0, dtype=_I64)
    return off, flat


def successors(codes: np.ndarray | None, n: int) -> np.ndarray:
    """Per event (stream order), the next event of its partition (codes; None = the whole stream), or n."""
    if codes is None:
        return np.arange(1, n + 1, dtype=_I64)
    order = np.lexsort((np.arange(n), codes))
    nxt = np.full(n, n, dtype=_I64)
    same = codes[order[:-1]] == codes[order[1:]]
    nxt[order[:-1][same]] = order[1:][same]
    nxt[codes < 0] = n
    return nxt


def contiguity(strategy: Strategy) -> bool:
    return strategy in (Strategy.STRICT_CONTIGUITY, Strategy.PARTITION_CONTIGUITY)
