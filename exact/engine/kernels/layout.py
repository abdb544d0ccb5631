"""What the kernels read and write: the named tuples of arrays they take, and the names of every slot and code.

A kernel is called as ``Found(*kernel(events, machine, runs, windows, found))``; every field of those tuples
is documented here, once, on its class.  numba compiles a named tuple of arrays into a struct: reading
``events.seq`` costs what reading an argument ``seq`` did.  The integer codes below are the ones
:mod:`exact.engine.program` writes into the tables (:mod:`exact.engine.program` imports them from here) and
the kernels compare against; numba folds them into the machine code as constants.
"""

from __future__ import annotations

from typing import Any, NamedTuple, TypeAlias

import numpy as np

#: True only in the plain-Python variant of the kernels (:func:`exact.engine.kernels.python_kernels`), where
#: the run rows hold Python's unbounded integers; the factory sets it, the modules never change it.
PYTHON = False

#: An integer as the kernels hold one: a Python int, or numpy's (numba types both as int64).
Int: TypeAlias = "int | np.integer[Any]"

# ------------------------------------------------------------------------------------------------ modes

#: What a kernel keeps (``windows.mode``): stop at the first match; count; also merge the matches' spans
#: into intervals; also keep the bindings of the first ``windows.keep`` matches.
EXISTS, COUNT, SPANS, MATCHES = 0, 1, 2, 3

# ------------------------------------------------------------------------------------------- out fields

#: Fields of ``found.out``, the counters a kernel leaves for its caller:
#: FOUND matches reported; NEXT the index in ``windows.starts`` to go on from; STEPS work done (all calls);
#: INTERVALS rows of ``found.intervals`` in use; KEPT matches kept; ROWS binding rows kept; ABORTED 1 when
#: the last window was abandoned (over ``abort_steps``) and its reports undone; DONE_FOUND matches
#: reported by the finished windows; WINDOW_NOTED the current window's matches noted for keeping;
#: INEXACT 1 when an int64 sum overflowed or an average of integers could not be rounded exactly (the
#: caller evaluates again in plain Python).
FOUND, NEXT, STEPS, INTERVALS, KEPT, ROWS, ABORTED, DONE_FOUND, WINDOW_NOTED, INEXACT = range(10)
OUT_FIELDS = 10

# ---------------------------------------------------------------------------------- nodes of the pool

#: Fields of a pool node (a row of ``nodes.pool``): the event it binds, its variable (-1: a tree's root),
#: its parent node (-1: none), the state it was taken from, its number of children (robust strategy).
POS, VAR, PARENT, SRC, KIDS = 0, 1, 2, 3, 4
NODE_FIELDS = 5

# ------------------------------------------------------------------------- instances of a strategy

#: Columns of an instance table's row (a run alive in a window: the live instances of the next-match
#: strategies, a stack of skip-till-any-match, the backtracking queue of the robust one): its automaton
#: state, the last node of its run, and the event after which it goes on (the last event it bound).
STATE, NODE, AFTER = 0, 1, 2
INSTANCE_FIELDS = 3

#: No event: later than every event of every window.
NEVER = 1 << 62

# ---------------------------------------------------------------------------------- values, operators

#: Kinds of a value (``events.kind``, a literal's, an aggregate's).  Two numbers compare as numbers
#: (integers exactly); values of different kinds are never equal; a null is never anything.
K_NULL, K_FLOAT, K_STRING, K_BOOL, K_INT = 0, 1, 2, 3, 4
#: Comparison operators, as :data:`exact.query.ast.OPERATORS` orders them: = != < <= > >=.
EQ, NE, LT, LE, GT, GE = 0, 1, 2, 3, 4, 5
#: ``x op y`` ⇔ ``y FLIP[op] x``.
FLIP = (EQ, NE, GT, GE, LT, LE)

# --------------------------------------------------------------------------- run checks (SASE+ runs)

#: Columns of a run check (a row of ``runs.ck``): operator, mode, the variable a ∀ check ranges over, then
#: the left operand's three columns (kind, a, b) from LEFT and the right one's from RIGHT.
CK_OP, CK_MODE, CK_VAR, LEFT, RIGHT = 0, 1, 2, 3, 6
CK_WIDTH = 9
#: Operand kinds of a run check: a literal (a: index), the event under check (a: attribute column), a
#: run's first or last event (a: variable, b: attribute column), ``count(v)`` (a: variable), an
#: aggregate (a: slot, b: function).
OP_LIT, OP_EVENT, OP_FIRST, OP_LAST, OP_COUNT, OP_AGG = range(6)
#: Aggregate functions of an ``OP_AGG`` operand, and the accumulator classes of a slot.
F_SUM, F_AVG, F_MIN, F_MAX = 1, 2, 3, 4
C_SUMAVG, C_MIN, C_MAX = 0, 1, 2
#: Check modes: one comparison, or one for each event bound to a variable (∀, walking the chain).
M_ONE, M_EACH = 0, 1
#: Columns of an accumulator slot (a row of ``runs.slots``): its class, its attribute column, where its
#: integers begin in a node's integer row.
SL_CLASS, SL_ATTR, SL_BASE = 0, 1, 2
#: Per run variable, three integers of a node's row (from ``runs.run_base[v]``): its first event, its
#: last event, its number of events.
R_FIRST, R_LAST, R_COUNT = 0, 1, 2
RUN_WIDTH = 3
#: Per accumulator slot, four integers of a node's row (from ``slots[j, SL_BASE]``) — the values folded
#: in, the integer sum or the extreme, the flags, the extreme's kind — and one float (column ``j`` of the
#: float row: the float sum or extreme).
S_COUNT, S_VALUE, S_FLAGS, S_KIND = 0, 1, 2, 3
SLOT_WIDTH = 4
#: Flags of a slot: a non-number was summed, floats were, an int64 sum overflowed, a NaN was seen; and
#: the kinds a min/max has seen.
NONNUM, FLOATS, OVERFLOW, NAN = 1, 2, 4, 8
SEEN_NUMBER, SEEN_STRING, SEEN_BOOL = 16, 32, 64
TWO53 = 9007199254740992
I64_MAX = 9223372036854775807
I64_MIN = -9223372036854775808


class Events(NamedTuple):
    """The events of one evaluation, in *program order* (partition by partition, stream order inside; the
    contiguity strategies keep stream order), and their attribute values."""

    #: per event, bit ``v`` set when variable ``v``'s properties hold on it (int64)
    mask: np.ndarray
    #: per event, its seq (stream position), which match spans are made of
    seq: np.ndarray
    #: per event that may start a window, the last event of that window (program order)
    window_end: np.ndarray
    #: per variable ``v``, ``var_pos[var_off[v]:var_off[v + 1]]`` are the sorted events that may fire it
    var_off: np.ndarray
    var_pos: np.ndarray
    #: per event, the next one of its partition a contiguous run may take (-1: none; contiguity only)
    successor: np.ndarray
    #: per attribute column and event: the value's kind (``K_*``, int8), its float (strings: their rank)
    #: and its exact integer (``K_INT``)
    kind: np.ndarray
    value: np.ndarray
    integer: np.ndarray


class Machine(NamedTuple):
    """The automaton's reachable states and transitions (:func:`exact.engine.program.automaton_tables`); state
    0 is the start state."""

    #: per state: is it final; the variables of the transitions leaving it (a bit mask)
    final: np.ndarray
    relevant: np.ndarray
    #: the transitions of state ``q`` are ``tr_off[q]:tr_off[q + 1]``; each binds ``tr_var[t]`` and goes to
    #: ``tr_target[t]``
    tr_off: np.ndarray
    tr_var: np.ndarray
    tr_target: np.ndarray
    #: relations of transition ``t``, ``rc_off[t]:rc_off[t + 1]``: the new event's attribute ``rc_ax``
    #: compared by ``rc_op`` with attribute ``rc_ay`` of every event bound to variable ``rc_w``
    rc_off: np.ndarray
    rc_ax: np.ndarray
    rc_op: np.ndarray
    rc_w: np.ndarray
    rc_ay: np.ndarray
    #: ``prev`` conditions of transition ``t``, ``pc_off[t]:pc_off[t + 1]``: attribute ``pc_ap`` of the
    #: variable's last event compared by ``pc_op`` with attribute ``pc_ax`` of the new one
    pc_off: np.ndarray
    pc_ap: np.ndarray
    pc_op: np.ndarray
    pc_ax: np.ndarray
    #: per transition: 1 when it has no condition at all (no relation, ``prev`` condition or run check), so
    #: that it fires on every event its variable may bind — a kernel then skips
    #: :func:`exact.engine.kernels.transitions.holds`
    plain: np.ndarray


class RunProgram(NamedTuple):
    """A query's run conditions (SASE+ ``v[1]``, ``v[last]``, ``count``, aggregates) for the kernels: the
    arrays :class:`exact.engine.program.RunTables` lays out, the literals as values, and the shape of a node's
    rows (:func:`exact.engine.program.run_program`)."""

    #: per transition, 1 when it binds its variable's first event (a run begins anew)
    tr_begin: np.ndarray
    #: the checks transition ``t`` decides are ``ck[ck_off[t]:ck_off[t + 1]]``; those left for final
    #: state ``q``, checked when a match is reported, ``ck[fin_off[q]:fin_off[q + 1]]``
    ck_off: np.ndarray
    fin_off: np.ndarray
    #: the checks, one a row (columns ``CK_*``, ``LEFT``, ``RIGHT``)
    ck: np.ndarray
    #: per variable, where its run's ``R_*`` integers begin in a node's row (-1: not a run variable)
    run_base: np.ndarray
    #: the accumulator slots of variable ``v`` are ``slots[sl_off[v]:sl_off[v + 1]]`` (columns ``SL_*``)
    sl_off: np.ndarray
    slots: np.ndarray
    #: per literal: kind, float and integer (strings: their rank among the compared strings)
    lit_kind: np.ndarray
    lit_value: np.ndarray
    lit_int: np.ndarray
    #: empty rows whose width and dtype a node's integer and float rows take (integers: int64, or Python's
    #: own in the plain-Python variant); width 0 when the query has no run conditions
    int_row: np.ndarray
    float_row: np.ndarray


class Windows(NamedTuple):
    """The windows of one kernel call and what it keeps of them."""

    #: the first events of the windows worth running, program order
    starts: np.ndarray
    #: the index in ``starts`` to begin at (the last call's ``out[NEXT]``)
    first: int
    #: what to keep (``EXISTS``, ``COUNT``, ``SPANS``, ``MATCHES``) and how many matches (``MATCHES``)
    mode: int
    keep: int
    #: return after the window in which this call's work passes ``max_steps`` (the caller reads its clock);
    #: abandon a window whose own work passes ``abort_steps``
    max_steps: int
    abort_steps: int


#: What a kernel returns: the arrays of its :class:`Found`, in its order.
Arrays: TypeAlias = "tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]"


class Found(NamedTuple):
    """What the kernels report, carried from call to call (arrays grow: a kernel returns the new tuple)."""

    #: the counters (``OUT_FIELDS`` of them: ``FOUND``, ``NEXT``, …)
    out: np.ndarray
    #: the merged match spans as (first seq, last seq) rows, ``out[INTERVALS]`` of them
    intervals: np.ndarray
    #: kept match ``m`` starts at event ``m_start[m]`` and binds ``b_var[r]`` to event ``b_pos[r]`` for the
    #: rows ``r`` in ``m_off[m]:m_off[m + 1]`` (stream order)
    m_start: np.ndarray
    m_off: np.ndarray
    b_var: np.ndarray
    b_pos: np.ndarray


class Nodes(NamedTuple):
    """A kernel call's working memory, reset per window: the nodes the runs' bindings are chained through."""

    #: one row per node (fields ``POS``, ``VAR``, ``PARENT``, ``SRC``, ``KIDS``)
    pool: np.ndarray
    #: per node, the state of every run of its chain after it (SASE+ Fig. 5's vector V): integers (``R_*``
    #: per run variable, ``S_*`` per slot) and floats (one per slot); no columns without run conditions
    ri: np.ndarray
    rf: np.ndarray
    #: the window's matches noted for keeping (``MATCHES``): (node, last seq) rows, ``out[WINDOW_NOTED]``
    noted: np.ndarray


class Step(NamedTuple):
    """What a run check is checked on: a transition binding event ``x`` to variable ``var`` (its first event
    when ``begin``) after node ``row``, or (``x`` = ``var`` = -1) the match ending at node ``row`` when it
    is reported."""

    x: int
    var: int
    begin: bool
    #: the node whose row holds the runs as they were before ``x`` (-1: none yet)
    row: int


class Mark(NamedTuple):
    """The counters as a window began, to undo what it reported when it is abandoned."""

    found: int
    intervals: int
    kept: int
    rows: int
    #: the last interval's end (-1: no interval yet), which the window may have stretched
    last_end: int
    #: ``out[STEPS]`` as the window began, to measure the work of its reports
    steps: int
