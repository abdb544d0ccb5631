"""The typed, frozen pattern AST shared by the parser, the exact engine and the index.

One query in the language of docs/contract.md §2 becomes one :class:`Query`.  Every node is a frozen dataclass, so
ASTs are hashable, comparable and safe to cache by value (the exact engine caches automata per AST).

Shape::

    Query
      pattern:      tuple[Element, ...]    SEQ(e1, ..., en); a one-element pattern is a 1-tuple
      where:        tuple[Condition, ...]  conjunction
      partition_by: tuple[str, ...]        attribute names
      within:       WithinTime | WithinEvents | None
      between:      Between | None
      strategy:     Strategy
      returns:      Return

    Element = Single(var) | EventSet(vars) | AnyOf(alternatives) | Absent(vars)
                 var        {a, b+, c}        OR(a, b)                NOT(b, ...)

Variables are named; the parser fills in default names (type lower-cased, ``_2``, ``_3`` ... on repeats), so
every ``Var.name`` in a ``Query`` is set and unique.  ``Var.type is None`` means ``ANY``.

Operands of conditions: ``Field(var, attr)`` reads attribute ``attr`` of the event(s) bound to ``var``;
the names in :data:`BUILTIN_FIELDS` (``type``, ``ts``, ``seq``) read the event's own fields instead of an
attribute.  ``Field(var, attr, prev=True)`` is ``prev(var.attr)`` (only on Kleene variables).  ``ts`` values
and ``Between`` bounds are UTC microseconds since the epoch.

SASE+ operands over the run of a Kleene variable ``v`` (Agrawal et al. 2008, §2 and Fig. 5; their meaning is
docs/query-language.md, "Kleene runs and aggregates"):

    v[i].x, v.x        Field(v, x)                   the current event of the run
    v[i-1].x, prev(v.x) Field(v, x, prev=True)       the previous event of the run
    v[1].x             RunEvent(v, x, "first")       the run's first event
    v[last].x          RunEvent(v, x, "last")        the run's last event
    count(v)           Aggregate("count", v)         the number of events of the run
    avg(v.x)           Aggregate("avg", v, x)        sum, avg, min, max over the whole run
    avg(v[..i-1].x)    Aggregate("avg", v, x, True)  … over the run's events before the current one

The text forms on the left of each line are one AST each (``v[i].x`` *is* ``v.x``), so the canonical text
writes the short forms.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from enum import Enum

#: Version of the JSON form of this AST (see ``exact.query.language``); bump on incompatible changes.
AST_VERSION = 1

#: Operand attribute names that denote the event's own fields rather than one of its ``attrs``.
BUILTIN_FIELDS = frozenset({"type", "ts", "seq"})

#: Comparison operators of conditions.
OPERATORS = ("=", "!=", "<", "<=", ">", ">=")

#: The ends of a Kleene run an operand can name: ``v[1]`` and ``v[last]``.
RUN_ENDS = ("first", "last")

#: Aggregate functions over a Kleene run (SASE+, Agrawal et al. 2008, App. A: count, max, min, avg; sum).
AGGREGATES = ("count", "sum", "avg", "min", "max")

Scalar = str | int | float | bool | None


class Strategy(str, Enum):
    """Event selection strategies (docs/semantics.md §3; Cadonna 2013 ch. 1, 3, 6; Agrawal et al. 2008)."""

    STRICT_CONTIGUITY = "strict_contiguity"
    PARTITION_CONTIGUITY = "partition_contiguity"
    SKIP_TILL_NEXT_MATCH = "skip_till_next_match"
    ROBUST_SKIP_TILL_NEXT_MATCH = "robust_skip_till_next_match"
    SKIP_TILL_ANY_MATCH = "skip_till_any_match"


class Return(str, Enum):
    MATCHES = "matches"
    INTERVALS = "intervals"
    EXISTS = "exists"
    COUNT = "count"
    #: the partitions (cases) holding a match, each with its number of matches and its first match's interval
    CASES = "cases"
    #: how far the partitions (or windows) get along the SEQ's steps (docs/semantics.md §7.1)
    FUNNEL = "funnel"
    #: the events that follow each match's last event, by type and offset (docs/semantics.md §7.2)
    NEXT = "next"
    #: the time between consecutive steps of the matches, and from first to last (docs/semantics.md §7.3)
    DURATIONS = "durations"


#: the answers summarised from every match (docs/semantics.md §7), rather than the matches themselves
SUMMARIES = frozenset({Return.FUNNEL, Return.NEXT, Return.DURATIONS})
#: ``RETURN next k``: the most following events one may ask for, and the default
MAX_FOLLOWING = 10
#: ``RETURN count BY … TOP k``: the most groups listed, and the default
MAX_TOP, DEFAULT_TOP = 1000, 10


@dataclass(frozen=True)
class Var:
    """A pattern variable: binds one event, or one or more events in stream order when ``kleene``."""

    name: str
    type: str | None  # None = ANY
    kleene: bool = False


@dataclass(frozen=True)
class Single:
    """One variable as a SEQ position."""

    var: Var

    @property
    def vars(self) -> tuple[Var, ...]:
        return (self.var,)


@dataclass(frozen=True)
class EventSet:
    """``{a, b+, c}`` / ``AND(a, b+, c)``: an SES event set — all bound, in any order among themselves."""

    vars: tuple[Var, ...]


@dataclass(frozen=True)
class AnyOf:
    """``OR(a, b)``: one position bound by exactly one of the alternatives."""

    alternatives: tuple[Var, ...]

    @property
    def vars(self) -> tuple[Var, ...]:
        return self.alternatives


@dataclass(frozen=True)
class Absent:
    """``NOT(b, ...)``: no event satisfying any of ``vars`` (with their conditions and the partition) lies
    strictly between the neighbouring positive elements (or, last, within the window after the last one)."""

    vars: tuple[Var, ...]


Element = Single | EventSet | AnyOf | Absent


@dataclass(frozen=True)
class Field:
    """``var.attr``, ``var.type`` (attr in BUILTIN_FIELDS) or ``prev(var.attr)``."""

    var: str
    attr: str
    prev: bool = False

    @property
    def builtin(self) -> bool:
        return self.attr in BUILTIN_FIELDS


@dataclass(frozen=True)
class RunEvent:
    """``var[1].attr`` (``end="first"``) or ``var[last].attr`` (``end="last"``): one end of a Kleene run."""

    var: str
    attr: str
    end: str  # one of RUN_ENDS

    @property
    def builtin(self) -> bool:
        return self.attr in BUILTIN_FIELDS


@dataclass(frozen=True)
class Aggregate:
    """``count(var)``, or ``func(var.attr)`` over a Kleene run; ``before=True`` is ``func(var[..i-1].attr)``,
    over the run's events before the current one.  ``attr`` is None exactly for ``count``."""

    func: str  # one of AGGREGATES
    var: str
    attr: str | None = None
    before: bool = False

    @property
    def builtin(self) -> bool:
        return self.attr in BUILTIN_FIELDS


@dataclass(frozen=True)
class Literal:
    value: Scalar


#: Operands that name a variable (everything but a literal).
VarOperand = Field | RunEvent | Aggregate
Operand = Field | RunEvent | Aggregate | Literal


def is_run_operand(operand: Operand) -> bool:
    """An operand over a Kleene run as a whole (``v[1]``, ``v[last]``, an aggregate), not one event."""
    return isinstance(operand, RunEvent | Aggregate)


@dataclass(frozen=True)
class Condition:
    left: Operand
    op: str  # one of OPERATORS
    right: Operand

    def variables(self) -> frozenset[str]:
        return frozenset(o.var for o in (self.left, self.right) if not isinstance(o, Literal))

    def attributes(self) -> frozenset[str]:
        """The event attributes the condition reads (not the builtin fields ``type``, ``ts``, ``seq``)."""
        return frozenset(o.attr for o in (self.left, self.right) if not isinstance(o, Literal)
                         and o.attr is not None and o.attr not in BUILTIN_FIELDS)

    def has_run_operand(self) -> bool:
        return is_run_operand(self.left) or is_run_operand(self.right)

    def unnamed(self) -> Condition:
        """The condition with its variables' names left out: two variables' properties (conditions on one
        variable alone) that are equal so unnamed hold for the same events."""
        return Condition(_unnamed(self.left), self.op, _unnamed(self.right))


def _unnamed(operand: Operand) -> Operand:
    return operand if isinstance(operand, Literal) else replace(operand, var="")


@dataclass(frozen=True)
class WithinTime:
    """``WITHIN d``: last ts − first ts ≤ micros (inclusive)."""

    micros: int


@dataclass(frozen=True)
class WithinEvents:
    """``WITHIN n EVENTS``: last seq − first seq < count."""

    count: int


@dataclass(frozen=True)
class Between:
    """``BETWEEN t1 AND t2``: only events with start ≤ ts ≤ end (UTC microseconds) take part."""

    start: int
    end: int


@dataclass(frozen=True)
class Query:
    pattern: tuple[Element, ...]
    where: tuple[Condition, ...] = ()
    partition_by: tuple[str, ...] = ()
    within: WithinTime | WithinEvents | None = None
    between: Between | None = None
    strategy: Strategy = Strategy.SKIP_TILL_NEXT_MATCH
    returns: Return = Return.MATCHES
    #: ``RETURN count BY v.attr`` / ``RETURN cases BY v.attr``: the bound event's field the answer groups by
    group_by: Field | None = None
    #: ``… TOP k``: how many groups are listed (the rest summed); None: :data:`DEFAULT_TOP`
    top: int | None = None
    #: ``RETURN next k``: how many following events; None: one
    following: int | None = None
    #: ``RETURN next k WITHIN d``: only the events within ``d`` µs after the match's last event
    following_within: int | None = None

    @property
    def summarised(self) -> bool:
        """Is the answer a summary of every match, not the matches (docs/semantics.md §7: funnel, next,
        durations, counts BY)?"""
        return self.returns in SUMMARIES or self.group_by is not None

    def variables(self) -> Iterator[Var]:
        """Every variable, positive and negated, in pattern order."""
        for element in self.pattern:
            yield from element.vars

    def positive_elements(self) -> tuple[Element, ...]:
        return tuple(e for e in self.pattern if not isinstance(e, Absent))

    def positive_variables(self) -> Iterator[Var]:
        for element in self.positive_elements():
            yield from element.vars

    def has_run_operands(self) -> bool:
        """Whether a condition reads a Kleene run as a whole (``v[1]``, ``v[last]``, an aggregate)."""
        return any(c.has_run_operand() for c in self.where)

    def var(self, name: str) -> Var:
        for v in self.variables():
            if v.name == name:
                return v
        raise KeyError(name)
