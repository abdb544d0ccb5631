"""The events a kernel runs over, laid out: program order, window ends, partitions, successors, values.

The kernels (:mod:`exact.engine.kernels`) read the events of an evaluation in *program order*
(:func:`program_order`): the events some positive variable can bind, grouped by partition (``PARTITION BY``
and the two-phase partitioning attributes X, Def. 5.3) with stream order inside each partition, so that a
partition is a contiguous segment and every window lies inside its first event's segment.  The contiguity
strategies keep stream order; their successor array links each event to the next one of its partition.
Per variable the sorted events that may fire it (:func:`positions_by_variable`) let a kernel jump to the next
event that can change a run (Kolchinsky & Schuster's lazy evaluation).  The attribute columns the conditions
compare are read as a kind, a float and an exact integer per event (:func:`value_columns`) — strings as
their rank among all strings compared, so that the order of ranks is the order of the strings.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exact.frame import EventFrame
from exact.query.ast import Strategy, WithinEvents, WithinTime
from exact.query.normalize import Plan

_I64 = np.int64


def program_order(ends: np.ndarray, firsts: np.ndarray, keys: np.ndarray | None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(order, window_end, starts)`` of the filtered events (stream order) whose windows end at ``ends`` and
    start at ``firsts``: the program order as filtered positions, and in program order each window's last
    event and the windows' first events.  ``keys`` are the partition codes of the segments (None: none, and
    stream order; -1: in none)."""
    n = len(ends)
    if keys is None:
        return np.arange(n), ends.astype(_I64), firsts.astype(_I64)
    # an event without a partition value is bound by no match (every bound event is related to another by the
    # partition's equality, which a null fails): it takes no part
    keyed = np.flatnonzero(keys >= 0)
    order = keyed[segment_order(keys[keyed])]
    inverse = np.full(n, -1, dtype=_I64)
    inverse[order] = np.arange(len(order))
    starts = inverse[firsts]
    return order, in_segment_ends(order, keys[order], ends), starts[starts >= 0]


def successor_links(em: np.ndarray, seq: np.ndarray, codes: np.ndarray | None, links: np.ndarray | None,
                    sparse: bool) -> np.ndarray:
    """For the contiguity strategies, per event (stream order) the next one a run may take, -1 where none can
    be: the next event of its partition (``codes``; None: the stream).  ``links`` (a filtered read's
    :attr:`EventFrame.partition_next`) give the seq of that next event, read or not; ``sparse``: the events
    are a filtered read of the store, whose seqs are positions, so a gap in seq is an event left out."""
    n = len(em)
    if links is not None:
        # a filtered read: a run goes on only to a next event that was read
        nxt = np.searchsorted(seq, links).astype(_I64)
        nxt[(links < 0) | (nxt >= n)] = n
        nxt[seq[np.minimum(nxt, max(n - 1, 0))] != links] = n
    else:
        nxt = successors(codes, n)
    if sparse and codes is None and n:
        # a gap in seq holds events no variable can bind: the run cannot cross it
        nxt[:-1][np.diff(seq) != 1] = n
    succ = np.where(nxt < n, nxt, -1).astype(_I64)
    # an event no variable can bind ends a run: it is no successor
    succ[(succ >= 0) & (em[np.maximum(succ, 0)] == 0)] = -1
    return succ


def value_columns(frame: EventFrame, attrs: tuple[str, ...], positions: np.ndarray,
                  values_of: frozenset[str] = frozenset(), strings: tuple[str, ...] = ()
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(kind, value, integer, ranks)`` of each attribute at the frame ``positions``: kind 0 null, 1 float,
    4 integer (exact in ``integer``, rounded in ``value``), 2 string (value: its rank among every string of
    these columns and ``strings``, so ranks order as the strings do, by code point), 3 boolean; ``ranks``
    are those of ``strings``.  An attribute the frame knows only by codes (a partition layout's) is read as
    codes unless it is in ``values_of`` (codes tell equal values apart, not their order or sum)."""
    n = len(positions)
    rows = max(len(attrs), 1)
    kind = np.zeros((rows, n), dtype=np.int8)
    value = np.zeros((rows, n), dtype=np.float64)
    integer = np.zeros((rows, n), dtype=np.int64)
    columns: list[tuple[int, pa.Array]] = []
    take = pa.array(positions, pa.int64())
    for a, attr in enumerate(attrs):
        if attr in ("seq", "ts"):
            raw = frame.seq[positions] if attr == "seq" else frame.ts_at(positions)
            kind[a] = 4
            integer[a] = raw
            value[a] = raw
            continue
        if attr in frame.keys and not frame.has_attribute(attr) and attr not in values_of:
            # known only by codes (a partition layout's): equal codes are equal values, which is all the
            # partition's conditions ask
            codes = frame.keys[attr][positions]
            kind[a][codes >= 0] = 4
            integer[a] = codes
            value[a] = codes
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
            columns.append((a, arr))
    ranks = np.zeros(len(strings), dtype=np.float64)
    if columns or strings:
        every = pa.chunked_array([a for _, a in columns] + [pa.array(list(strings), pa.string())],
                                 type=pa.string()).unique().drop_null()
        ranked = every.take(pc.sort_indices(every))
        for a, arr in columns:
            codes = pc.index_in(arr, value_set=ranked)
            value[a] = pc.fill_null(codes, -1).to_numpy(zero_copy_only=False).astype(np.float64)
        if strings:
            ranks = pc.index_in(pa.array(list(strings), pa.string()), value_set=ranked).to_numpy(
                zero_copy_only=False).astype(np.float64)
    return kind, value, integer, ranks


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
    base = int(order.max()) + 2 if len(order) else 1
    enc = keys_sorted * base + order  # sorted: by key, then stream position
    ends: np.ndarray = np.searchsorted(enc, keys_sorted * base + ends_stream[order], "right") - 1
    return ends


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
    top = int(codes.max(initial=-1))
    if top < max(4 * n, 1 << 16):
        # codes numbered densely (dictionary indices, group numbers): one backward pass, linear, where a
        # sort of the codes with their positions was most of a scan's time
        return _next_same_compiled()(np.ascontiguousarray(codes, dtype=_I64), top + 1)
    order = np.lexsort((np.arange(n), codes))
    nxt = np.full(n, n, dtype=_I64)
    same = codes[order[:-1]] == codes[order[1:]]
    nxt[order[:-1][same]] = order[1:][same]
    nxt[codes < 0] = n
    return nxt


@functools.cache
def _next_same_compiled() -> Callable[[np.ndarray, int], np.ndarray]:
    """:func:`_next_same` compiled (cached on disk) on first use: importing the engine loads no numba, so a
    question the vectorised paths answer never does."""
    import numba

    compiled: Callable[[np.ndarray, int], np.ndarray] = numba.njit(cache=True, nogil=True)(_next_same)
    return compiled


def _next_same(codes: np.ndarray, distinct: int) -> np.ndarray:
    """Per event, the next event with its code (codes in [-1, distinct); -1: none), or n."""
    n = len(codes)
    nxt = np.full(n, n, dtype=np.int64)
    last = np.full(distinct, n, dtype=np.int64)
    for i in range(n - 1, -1, -1):
        c = codes[i]
        if c >= 0:
            nxt[i] = last[c]
            last[c] = i
    return nxt


def partition_links(full: EventFrame, attrs: tuple[str, ...], seqs: np.ndarray) -> np.ndarray:
    """For events ``seqs`` (sorted, all in ``full``): the seq of the next event of their partition (the tuple
    of ``attrs``) in ``full``, -1 for none (a null value is in no partition) — an
    :attr:`EventFrame.partition_next` for a filtered read of ``full``'s stream."""
    codes = partition_codes(full, attrs)
    n = len(full)
    nxt = successors(codes, n)
    nxt_seq = np.where(nxt < n, full.seq[np.minimum(nxt, max(n - 1, 0))], -1) if n else np.zeros(0, _I64)
    return nxt_seq[np.searchsorted(full.seq, seqs)].astype(_I64)


def contiguity(strategy: Strategy) -> bool:
    return strategy in (Strategy.STRICT_CONTIGUITY, Strategy.PARTITION_CONTIGUITY)


def partition_codes(frame: EventFrame, attrs: tuple[str, ...]) -> np.ndarray:
    """An int64 code per event for the tuple of ``attrs`` values (-1 when one of them is null).  Floats are
    keyed on their value with -0.0 taken as 0.0, as they compare."""
    n = len(frame)
    if len(attrs) == 1 and attrs[0] in frame.keys:
        return frame.keys[attrs[0]]
    code = np.zeros(n, dtype=_I64)
    null = np.zeros(n, dtype=bool)
    for attr in attrs:
        if attr in frame.keys:
            known = frame.keys[attr]
            null |= known < 0
            code = code * (int(known.max(initial=0)) + 1) + np.maximum(known, 0)
            continue
        arr = frame.array(attr)
        if pa.types.is_null(arr.type):
            null[:] = True
            continue
        if pa.types.is_floating(arr.type):
            arr = pc.add(arr, pa.scalar(0.0, arr.type))
        enc = pc.dictionary_encode(arr)
        idx = enc.indices
        if idx.null_count:
            null |= pc.is_null(idx).to_numpy(zero_copy_only=False)
            idx = pc.fill_null(idx, 0)
        codes = idx.to_numpy(zero_copy_only=False).astype(_I64)
        radix = max(len(enc.dictionary), 1)
        code = code * radix + codes
    code[null] = -1
    return code
