"""The automaton of a query as flat arrays over one stream's events: what the compiled kernels run.

:func:`automaton_tables` enumerates the states the SES automaton (:mod:`exact.engine.automaton`, Cadonna 2013
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
* the SASE+ run conditions (``v[1]``, ``v[last]``, ``count(v)``, aggregates over a run or over
  ``v[..i-1]``) as *checks* on the transitions and final states that decide them (:class:`RunTables`,
  with the rules of :mod:`exact.query.operands`): per-event ones on each take of their variable, a finished
  run's on the first transition of the next element, a run of the last element's when a match is reported.
  Their operands are read from a row the kernels keep per node (each run's ends, length and accumulators).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exact.engine.automaton import Automaton, automaton_for
from exact.errors import QueryLimitError
from exact.prefilter import EventFrame
from exact.query.ast import (
    OPERATORS,
    Aggregate,
    Condition,
    Field,
    Literal,
    RunEvent,
    Strategy,
    WithinEvents,
    WithinTime,
)
from exact.query.normalize import Plan, literal_signature, normalize
from exact.query.operands import decidable, first_position, iterated

_I64 = np.int64
#: More reachable states than this (event sets of over a dozen variables) are refused.
MAX_STATES = 1 << 14


@dataclass(frozen=True)
class Tables:
    """The reachable automaton as arrays; state 0 is the start state."""

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
    #: the run conditions (``v[1]``, ``v[last]``, aggregates): see :class:`RunTables`
    runs: RunTables


#: Operand kinds of a run check (the columns ``ck[:, 3]`` and ``ck[:, 6]``).
OP_LIT, OP_EVENT, OP_FIRST, OP_LAST, OP_COUNT, OP_AGG = range(6)
#: Aggregate functions of an ``OP_AGG`` operand, and the accumulator classes of a slot.
F_SUM, F_AVG, F_MIN, F_MAX = 1, 2, 3, 4
C_SUMAVG, C_MIN, C_MAX = 0, 1, 2
#: Check modes: one comparison, or one for each event bound to a variable (∀, walking the chain).
M_ONE, M_EACH = 0, 1
#: Per run variable, three integers of a node's row: its first event, its last event, its events.
RUN_WIDTH = 3
#: Per accumulator slot, four integers (values, integer sum or extreme, flags, the extreme's kind) and one
#: float (float sum or extreme).
SLOT_WIDTH = 4


@dataclass(frozen=True)
class RunTables:
    """The run conditions of a query laid out for the kernels (see :mod:`exact.engine.kernels`).

    A node of a run's chain carries a row: for each *run variable* (one some condition reads through
    ``v[1]``, ``v[last]`` or ``count(v)``) its first and last event and its number of events, at
    ``run_base[v]``; for each *accumulator slot* — a ``(variable, attribute, class)`` with class sum/avg,
    min or max — :data:`SLOT_WIDTH` integers at ``slots[j, 2]`` and one float at column ``j``.  The slots of
    variable ``v`` are ``slots[sl_off[v]:sl_off[v + 1]]`` (columns: class, attribute column, integer base).

    A *check* is a row of ``ck``: ``op, mode, var, left kind, left a, left b, right kind, right a, right b``;
    an operand is a literal (a: index into ``literals``), the event under check (a: attribute column), the
    first or last event of a run (a: variable, b: attribute column), ``count(v)`` (a: variable) or an
    aggregate (a: slot, b: function).  Mode :data:`M_ONE` compares once, :data:`M_EACH` once per event bound
    to ``var``.  The checks of transition ``t`` are ``ck[ck_off[t]:ck_off[t + 1]]`` — those the transition
    decides (:func:`exact.query.operands.decidable` after it and not before, or ranging over the variable it
    binds); those of a final state ``q``, checked when a match in ``q`` is reported, are
    ``ck[fin_off[q]:fin_off[q + 1]]`` — the ones still undecided (they read a run of the last element).
    ``tr_begin[t]`` says whether ``t`` binds its variable's first event."""

    tr_begin: np.ndarray
    ck_off: np.ndarray
    fin_off: np.ndarray
    ck: np.ndarray
    run_base: np.ndarray
    sl_off: np.ndarray
    slots: np.ndarray
    literals: tuple
    width_int: int
    width_float: int


def automaton_tables(plan: Plan, dropped: frozenset[str]) -> Tables:
    """The reachable states of ``plan``'s automaton and their transitions as arrays; relations ``a.X = b.X``
    and ``prev(v.X) = v.X`` with X in ``dropped`` are left out (the caller's segments make them true)."""
    return _tables(plan.query, dropped, literal_signature(plan.query))


@functools.lru_cache(maxsize=128)
def _tables(query, dropped: frozenset[str], _signature: tuple[str, ...]) -> Tables:  # noqa: ANN001
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
    runs = _run_tables(normalize(query), aut, order, col)

    def arr(values: list[int]) -> np.ndarray:
        return np.asarray(values, dtype=_I64)

    return Tables(
        final=np.asarray([aut.is_final(q) for q in order], dtype=np.bool_),
        relevant=arr([aut.relevant_mask(q) for q in order]),
        tr_off=arr(tr_off), tr_var=arr(tr_var), tr_target=arr(tr_target),
        rc_off=arr(rc_off), rc_ax=arr(rc_ax), rc_op=arr(rc_op), rc_w=arr(rc_w), rc_ay=arr(rc_ay),
        pc_off=arr(pc_off), pc_ap=arr(pc_ap), pc_op=arr(pc_op), pc_ax=arr(pc_ax), attrs=tuple(attrs),
        runs=runs)


def _run_tables(plan: Plan, aut: Automaton, order: list[int], col) -> RunTables:  # noqa: ANN001
    """The run conditions of ``plan`` as checks on the transitions and final states of ``order`` (the
    reachable states, in table order); ``col`` numbers an attribute's column."""
    conds = plan.run_conditions
    index = plan.positive_index()
    element = [v.element for v in plan.positives]
    ops = {op: i for i, op in enumerate(OPERATORS)}
    run_vars: dict[int, int] = {}
    slot_of: dict[tuple[int, int, int], int] = {}
    literals: list = []

    def operand(o) -> tuple[int, int, int]:  # noqa: ANN001 - an Operand
        if isinstance(o, Literal):
            literals.append(o.value)
            return OP_LIT, len(literals) - 1, 0
        if isinstance(o, Field):
            return OP_EVENT, col(o.attr), 0
        v = index[o.var]
        if isinstance(o, RunEvent):
            run_vars.setdefault(v, len(run_vars))
            return (OP_FIRST if o.end == "first" else OP_LAST), v, col(o.attr)
        assert isinstance(o, Aggregate)
        if o.func == "count":
            run_vars.setdefault(v, len(run_vars))
            return OP_COUNT, v, 0
        cls = {"sum": C_SUMAVG, "avg": C_SUMAVG, "min": C_MIN, "max": C_MAX}[o.func]
        key = (v, col(o.attr), cls)
        slot = slot_of.setdefault(key, len(slot_of))
        return OP_AGG, slot, {"sum": F_SUM, "avg": F_AVG, "min": F_MIN, "max": F_MAX}[o.func]

    rows: dict[tuple[Condition, str], tuple] = {}

    def check(c: Condition, mode: int, var: int) -> list[int]:
        key = (c, repr(c))  # repr keeps True and 1 apart
        if key not in rows:
            rows[key] = (*operand(c.left), *operand(c.right))
        return [ops[c.op], mode, var, *rows[key]]

    names = [v.name for v in plan.positives]

    def bound(q: int) -> set[str]:
        return {names[i] for i in range(len(names)) if q >> i & 1}

    def finished(q: int) -> set[str]:
        last = max((element[i] for i in range(len(names)) if q >> i & 1), default=-1)
        return {names[i] for i in range(len(names)) if q >> i & 1 and element[i] < last}

    checks: list[list[int]] = []
    tr_begin, ck_off, fin_off = [], [0], []
    for q in order:
        b, f = bound(q), finished(q)
        for t in aut.transitions(q):
            tr_begin.append(0 if t.loop else 1)
            b2, f2 = bound(t.target), finished(t.target)
            v = names[t.var]
            for c in conds:
                if not decidable(c, b2, f2):
                    continue
                over = iterated(c)
                if decidable(c, b, f):
                    if v in over:  # a further event of v's run: its own comparison
                        checks.append(check(c, M_ONE, -1))
                    continue
                if not over or over == {v}:
                    # newly decided; at the first event of v only if it reads no earlier one
                    if not (over and first_position(c, v)):
                        checks.append(check(c, M_ONE, -1))
                else:
                    (u,) = over
                    assert first_position(c, u) == 0
                    checks.append(check(c, M_EACH, index[u]))
            ck_off.append(len(checks))
    for q in order:
        fin_off.append(len(checks))
        if not aut.is_final(q):
            continue
        b, f = bound(q), finished(q)
        for c in conds:
            if c.variables() <= b and not decidable(c, b, f):
                over = iterated(c)
                if over:
                    (u,) = over
                    checks.append(check(c, M_EACH, index[u]))
                else:
                    checks.append(check(c, M_ONE, -1))
    fin_off.append(len(checks))
    nvars = len(names)
    run_base = np.full(nvars, -1, dtype=_I64)
    for v, r in run_vars.items():
        run_base[v] = RUN_WIDTH * r
    first_slot = RUN_WIDTH * len(run_vars)
    by_var = sorted(slot_of.items(), key=lambda kv: (kv[0][0], kv[1]))
    renumber = {old: new for new, (_, old) in enumerate(by_var)}
    slots = np.zeros((len(by_var), 3), dtype=_I64)
    sl_off = np.zeros(nvars + 1, dtype=_I64)
    for new, ((v, ax, cls), _) in enumerate(by_var):
        slots[new] = (cls, ax, first_slot + SLOT_WIDTH * new)
        sl_off[v + 1] += 1
    sl_off = np.cumsum(sl_off).astype(_I64)
    ck = np.asarray(checks, dtype=_I64).reshape(len(checks), 9)
    for side in (3, 6):  # slots are numbered by variable: renumber the aggregate operands
        agg = ck[:, side] == OP_AGG
        ck[agg, side + 1] = [renumber[int(j)] for j in ck[agg, side + 1]]
    return RunTables(
        tr_begin=np.asarray(tr_begin, dtype=_I64), ck_off=np.asarray(ck_off, dtype=_I64),
        fin_off=np.asarray(fin_off, dtype=_I64), ck=ck, run_base=run_base, sl_off=sl_off, slots=slots,
        literals=tuple(literals), width_int=first_slot + SLOT_WIDTH * len(by_var), width_float=len(by_var))


def run_attributes(tables: Tables) -> frozenset[str]:
    """The attributes the run checks read: their values are needed (not codes standing for them)."""
    ck = tables.runs.ck
    cols: set[int] = set()
    for side in (3, 6):
        for kind, a, b in ck[:, side:side + 3].tolist():
            if kind == OP_EVENT:
                cols.add(a)
            elif kind in (OP_FIRST, OP_LAST):
                cols.add(b)
    cols.update(int(x) for x in tables.runs.slots[:, 1])
    return frozenset(tables.attrs[c] for c in cols)


# ------------------------------------------------------------------------------------------- values


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
            raw = frame.seq[positions] if attr == "seq" else frame.ts[positions]
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
    base = int(order.max()) + 2 if len(order) else 1
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
    top = int(codes.max(initial=-1))
    if top < max(4 * n, 1 << 16):
        # codes numbered densely (dictionary indices, group numbers): one backward pass, linear, where a
        # sort of the codes with their positions was most of a scan's time
        return _next_same(np.ascontiguousarray(codes, dtype=_I64), top + 1)
    order = np.lexsort((np.arange(n), codes))
    nxt = np.full(n, n, dtype=_I64)
    same = codes[order[:-1]] == codes[order[1:]]
    nxt[order[:-1][same]] = order[1:][same]
    nxt[codes < 0] = n
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


@numba.njit(cache=True, nogil=True)
def _next_same(codes: np.ndarray, distinct: int) -> np.ndarray:  # pragma: no cover - compiled
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


def contiguity(strategy: Strategy) -> bool:
    return strategy in (Strategy.STRICT_CONTIGUITY, Strategy.PARTITION_CONTIGUITY)
