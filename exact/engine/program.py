"""The automaton of a query as flat arrays: what the compiled kernels run.

:func:`automaton_tables` enumerates the states the SES automaton (:mod:`exact.engine.automaton`, Cadonna 2013
§4.3) can reach and lays out their transitions and conditions as arrays (:class:`Tables`; the kernels take
them as a :class:`~exact.engine.kernels.layout.Machine`), over attribute columns numbered in ``Tables.attrs``
(:mod:`exact.engine.ordering` reads those columns from the events).  A condition that the caller's partition
segments make true (``a.X = b.X`` and ``prev(v.X) = v.X`` on a partition attribute X) is left out.

The SASE+ run conditions (``v[1]``, ``v[last]``, ``count(v)``, aggregates over a run or over ``v[..i-1]``)
become *checks* on the transitions and final states that decide them (:class:`RunTables`, with the rules of
:mod:`exact.query.operands`): per-event ones on each take of their variable, a finished run's on the first
transition of the next element, a run of the last element's when a match is reported.  Their operands are
read from a row the kernels keep per node (each run's ends, length and accumulators); :func:`run_program`
gives the kernels the checks with the query's literals as values.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from exact.engine.automaton import Automaton, automaton_for
from exact.engine.kernels.layout import (
    C_MAX,
    C_MIN,
    C_SUMAVG,
    CK_WIDTH,
    F_AVG,
    F_MAX,
    F_MIN,
    F_SUM,
    K_BOOL,
    K_FLOAT,
    K_INT,
    K_NULL,
    K_STRING,
    LEFT,
    M_EACH,
    M_ONE,
    OP_AGG,
    OP_COUNT,
    OP_EVENT,
    OP_FIRST,
    OP_LAST,
    OP_LIT,
    RIGHT,
    RUN_WIDTH,
    SLOT_WIDTH,
    Machine,
    RunProgram,
)
from exact.errors import QueryLimitError
from exact.query.ast import (
    OPERATORS,
    Aggregate,
    Condition,
    Field,
    Literal,
    Operand,
    Query,
    RunEvent,
    Scalar,
)
from exact.query.normalize import Plan, literal_signature, normalize
from exact.query.operands import decidable, first_position, iterated

_I64 = np.int64
#: More reachable states than this (event sets of over a dozen variables) are refused.
MAX_STATES = 1 << 14


@dataclass(frozen=True)
class Tables:
    """The reachable automaton as the kernels take it, the attributes its columns number, and the run
    conditions."""

    machine: Machine
    attrs: tuple[str, ...]
    #: the run conditions (``v[1]``, ``v[last]``, aggregates): see :class:`RunTables`
    runs: RunTables


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
    ``tr_begin[t]`` says whether ``t`` binds its variable's first event.  These arrays are held in
    ``program``, a :class:`RunProgram` whose literal columns and row shapes :func:`run_program` fills in."""

    program: RunProgram
    literals: tuple[Scalar, ...]
    width_int: int
    width_float: int


def automaton_tables(plan: Plan, dropped: frozenset[str]) -> Tables:
    """The reachable states of ``plan``'s automaton and their transitions as arrays; relations ``a.X = b.X``
    and ``prev(v.X) = v.X`` with X in ``dropped`` are left out (the caller's segments make them true)."""
    return _tables(plan.query, dropped, literal_signature(plan.query))


@functools.lru_cache(maxsize=128)
def _tables(query: Query, dropped: frozenset[str], _signature: tuple[str, ...]) -> Tables:
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

    # a transition without a relation, prev condition or run check fires on every event of its variable
    plain = ((np.diff(rc_off) == 0) & (np.diff(pc_off) == 0) & (np.diff(runs.program.ck_off) == 0)).astype(np.int8)
    machine = Machine(
        final=np.asarray([aut.is_final(q) for q in order], dtype=np.bool_),
        relevant=arr([aut.relevant_mask(q) for q in order]),
        tr_off=arr(tr_off), tr_var=arr(tr_var), tr_target=arr(tr_target),
        rc_off=arr(rc_off), rc_ax=arr(rc_ax), rc_op=arr(rc_op), rc_w=arr(rc_w), rc_ay=arr(rc_ay),
        pc_off=arr(pc_off), pc_ap=arr(pc_ap), pc_op=arr(pc_op), pc_ax=arr(pc_ax), plain=plain)
    return Tables(machine, tuple(attrs), runs)


def _run_tables(plan: Plan, aut: Automaton, order: list[int], col: Callable[[str], int]) -> RunTables:
    """The run conditions of ``plan`` as checks on the transitions and final states of ``order`` (the
    reachable states, in table order); ``col`` numbers an attribute's column."""
    conds = plan.run_conditions
    index = plan.positive_index()
    element = [v.element for v in plan.positives]
    ops = {op: i for i, op in enumerate(OPERATORS)}
    run_vars: dict[int, int] = {}
    slot_of: dict[tuple[int, int, int], int] = {}
    literals: list[Scalar] = []

    def operand(o: Operand) -> tuple[int, int, int]:
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
        assert o.attr is not None  # only count() has none
        cls = {"sum": C_SUMAVG, "avg": C_SUMAVG, "min": C_MIN, "max": C_MAX}[o.func]
        key = (v, col(o.attr), cls)
        slot = slot_of.setdefault(key, len(slot_of))
        return OP_AGG, slot, {"sum": F_SUM, "avg": F_AVG, "min": F_MIN, "max": F_MAX}[o.func]

    rows: dict[tuple[Condition, str], tuple[int, ...]] = {}

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
    for rv, r in run_vars.items():
        run_base[rv] = RUN_WIDTH * r
    first_slot = RUN_WIDTH * len(run_vars)
    by_var = sorted(slot_of.items(), key=lambda kv: (kv[0][0], kv[1]))
    renumber = {old: new for new, (_, old) in enumerate(by_var)}
    slots = np.zeros((len(by_var), 3), dtype=_I64)
    sl_off = np.zeros(nvars + 1, dtype=_I64)
    for new, ((sv, ax, cls), _) in enumerate(by_var):
        slots[new] = (cls, ax, first_slot + SLOT_WIDTH * new)
        sl_off[sv + 1] += 1
    sl_off = np.cumsum(sl_off).astype(_I64)
    ck = np.asarray(checks, dtype=_I64).reshape(len(checks), CK_WIDTH)
    for side in (LEFT, RIGHT):  # slots are numbered by variable: renumber the aggregate operands
        agg = ck[:, side] == OP_AGG
        ck[agg, side + 1] = [renumber[int(j)] for j in ck[agg, side + 1]]
    empty_i, empty_f = np.zeros(0, dtype=_I64), np.zeros(0, dtype=np.float64)
    program = RunProgram(
        tr_begin=np.asarray(tr_begin, dtype=_I64), ck_off=np.asarray(ck_off, dtype=_I64),
        fin_off=np.asarray(fin_off, dtype=_I64), ck=ck, run_base=run_base, sl_off=sl_off, slots=slots,
        lit_kind=empty_i, lit_value=empty_f, lit_int=empty_i, int_row=np.zeros((0, 0), dtype=_I64),
        float_row=np.zeros((0, 0), dtype=np.float64))
    return RunTables(program=program, literals=tuple(literals), width_int=first_slot + SLOT_WIDTH * len(by_var),
                     width_float=len(by_var))


def run_program(runs: RunTables, ranks: Mapping[str, float], python: bool) -> RunProgram | None:
    """The run program the kernels take: the run tables, the literals as kind, float and integer (strings by
    ``ranks``), and empty rows of a node's integers and floats — Python integers (``python``) or int64;
    None when an integer literal does not fit int64 and ``python`` is false."""
    lk, lf, li = [], [], []
    for v in runs.literals:
        if v is None:
            k, f, i = K_NULL, 0.0, 0
        elif isinstance(v, bool):
            k, f, i = K_BOOL, float(v), 0
        elif isinstance(v, int):
            if not python and not -2**63 <= v < 2**63:
                return None
            k, f, i = K_INT, float(v), v
        elif isinstance(v, float):
            k, f, i = K_FLOAT, v, 0
        else:
            k, f, i = K_STRING, ranks[v], 0
        lk.append(k)
        lf.append(f)
        li.append(i)
    ints = object if python else _I64
    return runs.program._replace(
        lit_kind=np.asarray(lk, dtype=_I64), lit_value=np.asarray(lf, dtype=np.float64),
        lit_int=np.asarray(li, dtype=ints), int_row=np.zeros((0, runs.width_int), dtype=ints),
        float_row=np.zeros((0, runs.width_float), dtype=np.float64))


def run_attributes(tables: Tables) -> frozenset[str]:
    """The attributes the run checks read: their values are needed (not codes standing for them)."""
    ck = tables.runs.program.ck
    cols: set[int] = set()
    for side in (LEFT, RIGHT):
        for kind, a, b in ck[:, side:side + 3].tolist():
            if kind == OP_EVENT:
                cols.add(a)
            elif kind in (OP_FIRST, OP_LAST):
                cols.add(b)
    cols.update(int(x) for x in tables.runs.program.slots[:, 1])
    return frozenset(tables.attrs[c] for c in cols)
