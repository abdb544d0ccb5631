"""Why a verified answer is empty: the part of the query that rules the candidates out (``explain``).

When the candidates of a query (the stream tree's candidate intervals, or the partition tree's candidate
groups) hold no exact match and every type of the pattern does occur, :func:`why_empty` finds which part of
the query rules them out. It relaxes the query **one part at a time** and runs the exact engine again on the
events verification already read (:class:`Read`), within a budget of a quarter of what verification took (at
least 10 ms). The parts, in this order — from the narrowest, one condition, to the broadest, the strategy —
except that those the events read already can judge come before those that need the candidates read again (a
variable's own condition on attributes, which the read's row filter tested, and a ``NOT`` element): such a
read costs about what verification's did:

1. each ``WHERE`` condition, in query order (not those of a negated variable: dropping one only forbids
   more); quoted as the query text writes it, e.g. ``a.amount > 50000``;
2. ``PARTITION BY`` (on the stream path only; not under ``partition_contiguity``, whose contiguity is the
   partition's);
3. each ``NOT`` element, in pattern order, with the conditions of its variables;
4. ``WITHIN`` (unless the pattern ends with a ``NOT``, which needs it);
5. the strategy: a contiguity strategy relaxed to ``skip_till_next_match`` first (linear, where any-match
   can explode), then any strategy to ``skip_till_any_match``.

The first relaxation under which the candidates hold a match names the cause, with the number of matches
the relaxed query has there: "they hold 12 matches of O_SENT then O_DECLINED within 30 days, but none in the
same case".  When none does, the pattern itself is tried with every part above dropped at once (the window
kept on the stream path, whose candidates are cut to it): either that finds matches ("no single part of the
query rules them all out") or the elements never occur in this order there.

**What the counts mean, path by path.**  The relaxed query is judged on the candidates, as if they were the
stream:

* *Partition path* (the candidates are whole groups, read whole): a relaxation keeps ``PARTITION BY``, so
  each of its matches lies in one group, and a group holding one holds every positive type: the counts are
  the relaxed query's on the whole history (unless dropping a ``v.type`` condition lets a variable bind
  another type that was read: then they count what the candidate groups hold).  The partition itself is
  not relaxed there: matches across groups would need the events of groups that were never read.
* *Stream path* (candidate intervals, read for the types some variable can bind): dropping a condition, the
  partition or a ``NOT``, or going from ``skip_till_next_match`` to ``skip_till_any_match``, leaves the
  approximation unchanged (the tree sees only types, the window and contiguity), so the relaxed query's own
  verification would read the same events: the counts are again those of the whole history.  Dropping the
  window or strict contiguity (or ``partition_contiguity`` without ``PARTITION BY``) widens the candidates
  the relaxed query would have; then only the matches that lie inside one candidate interval are counted
  (there every event of the types read is at hand, so each is a match of the relaxed query in the whole
  history), and the window's relaxation finds matches a little longer than the window, not much longer
  ones.  A pattern that ends with a Kleene element its strategy extends with every later event of the
  type (any strategy but skip-till-any-match) is not judged there: a match inside an interval may be the
  start of a longer one beyond it.  (``tests/sketch/test_explain_cause.py`` holds both claims to the whole
  stream.)

A relaxation that would let a variable bind types verification did not read (dropping ``w.type = 'X'`` on
an ``ANY`` variable) cannot be judged on these events and is left out (and said so).

**Cost.** The relaxations share one engine :class:`~exact.engine.Budget`
(:func:`sketch.answer.relaxed.search_budget`: a quarter of what verification took, between a floor and a
ceiling, or the query's own deadline when it ends sooner), so an empty answer costs little more than a found
one; a read again is not begun when it would end past the deadline (it takes about what verification's read
took); a relaxed query whose windows explode (skip-till-any-match with no window) is given up as soon as it
would overrun. A relaxed query runs on the events read, or — when it drops a condition the read's row filter
tested — on the candidates read again with its own filter. They run only when the candidates without the
filter hold at most :data:`MAX_EVENTS` events; otherwise the text says the cause was not looked for, or not
found in time.
The answer itself is never changed: only its ``explain``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from exact.engine import Budget
from exact.errors import SeqsketchError
from exact.query.ast import Absent, Condition, Query, Strategy, WithinEvents
from exact.query.language import condition_text, element_text, window_text
from exact.query.language.lexical import attribute
from exact.query.normalize import Plan, VarPlan, normalize
from exact.store.rowfilter import filter_tests
from sketch.answer.relaxed import Found, Search, TimedOut, search_budget
from sketch.answer.relaxed import Read as Read  # (where verification's callers find it)
from sketch.answer.unbindable import unbindable
from sketch.evaluate.explain import Position
from sketch.evaluate.explain import window_text as window_phrase

#: The relaxations run only when verification handed the engine at most this many events.
MAX_EVENTS = 2_000_000

_I64 = np.int64
_CONTIGUOUS = (Strategy.STRICT_CONTIGUITY, Strategy.PARTITION_CONTIGUITY)


@dataclass(frozen=True)
class _Relaxation:
    kind: str  # condition | partition | not | window | strategy
    part: str  # the part as the query text writes it
    query: Query  # the query without it
    subject: Condition | Absent | None = None


def why_empty(query: Query, read: Read | None, *, spans: np.ndarray | None, group_key: str | None = None,
              type_counts: Mapping[str, int] | None = None, budget: Budget | None = None,
              spent_ms: float | None = None) -> str:
    """Why ``query`` has no match in the candidates verification ``read``: the part of it that rules them out
    (a clause to follow "… hold no match: "; see the module docstring).

    ``spent_ms``: what verification took, which sets the search's budget (see :func:`_budget`);
    ``spans``: the candidate intervals (an ``(n, 2)`` array of inclusive seqs) on the stream path;
    ``group_key``: the partition key on the partition path, whose candidates are whole groups (``spans``
    None)."""
    if read is None:
        return _GENERIC
    plan = normalize(query)
    if read.reread is not None and read.unfiltered_events <= MAX_EVENTS:
        # each relaxed query gets the read its own row filter asks for: the events read already, unless it
        # drops a condition the filter tested
        return _relaxed_search(query, plan, read, spans, group_key, type_counts, search_budget(budget, spent_ms),
                               spent_ms)
    if read.unfiltered is not None:
        # the events read again without the filter: only when they are few enough to search, and there is
        # time left; else what the filtered read's own counts tell
        limit = search_budget(budget, spent_ms)
        if read.unfiltered_events > MAX_EVENTS or (
                limit.deadline is not None and time.monotonic() > limit.deadline):
            return _told(plan, read) or (
                f"{_GENERIC} (the {read.unfiltered_events:,} events to search are more than the "
                f"{MAX_EVENTS:,} the search for which one looks through, or its time ran out)")
        read = read.unfiltered()
    if read.events > MAX_EVENTS:
        return _told(plan, read) or (
            f"{_GENERIC} (the {read.events:,} events read are more than the {MAX_EVENTS:,} the search for "
            "which one looks through)")
    return _relaxed_search(query, plan, read, spans, group_key, type_counts, search_budget(budget, spent_ms),
                               spent_ms)


def _engine_s(read: Read, spent_ms: float | None) -> float:
    """What the query's own run of the engine took (s): verification less its read — what a relaxed query's
    run over the same events is first expected to take."""
    return 0.0 if spent_ms is None else max(0.0, spent_ms - read.read_ms) / 1000.0


def _relaxed_search(query: Query, plan: Plan, read: Read, spans: np.ndarray | None, group_key: str | None,
                    type_counts: Mapping[str, int] | None, budget: Budget, spent_ms: float | None) -> str:
    """The first relaxation of ``query`` with matches in ``read`` (see :func:`why_empty`)."""
    search = Search(query, read, spans, type_counts, budget, MAX_EVENTS, run_s=_engine_s(read, spent_ms))
    # those the events read already can judge first: the others read the candidates again
    relaxations = sorted(_relaxations(query, plan, group_key), key=lambda r: _reads_again(r, read))
    tried: list[_Relaxation] = []
    unread: list[_Relaxation] = []
    try:
        for relaxation in relaxations:
            if not _valid(relaxation.query):
                continue  # nothing the engine would take: no part to blame
            if not judgeable(relaxation.query, search):
                unread.append(relaxation)
                continue
            found = search.run(relaxation.query, shortest=relaxation.kind == "window")
            if found is None:
                continue
            if found.count:
                return _cause(query, plan, relaxation, found)
            tried.append(relaxation)
        return _told_counted(plan, search) or _nothing_single(query, plan, search, tried, unread)
    except TimedOut:
        told = _told_counted(plan, search, read_more=False)
        if told is not None:
            return told
        done = f" ({_without(tried, 'or')}, they hold no match)" if tried else ""
        return f"{_GENERIC}; the search for which one ran out of time{done}"


_GENERIC = "conditions, negation, the window or the strategy rule them out"


def _told_counted(plan: Plan, search: Search, read_more: bool = True) -> str | None:
    """:func:`_told`, with the counts of the candidates read again without the row filter when the filtered
    read tells a position no event fits (else it tells nothing: the filter keeps every row a variable can
    bind) and — ``read_more`` — there is time left."""
    if _told(plan, search.read) is None:
        return None
    return _told(plan, search.unfiltered(read_more))


def _told(plan: Plan, read: Read) -> str | None:
    """What the events read tell at once (:func:`sketch.answer.unbindable.unbindable`)."""
    return unbindable(plan, [e for e, _ in read.pieces], read.types, filtered=read.unfiltered is not None)


# ------------------------------------------------------------------------------------------ relaxations


def _relaxations(query: Query, plan: Plan, group_key: str | None) -> list[_Relaxation]:
    """The query with one part dropped, for each part in the order of the module docstring."""
    parts: list[tuple[str, str, Condition | Absent | None]] = []
    negated = {v.name for v in plan.negatives}
    parts += [("condition", f"`{condition_text(c)}`", c) for c in query.where if not c.variables() & negated]
    if query.partition_by and group_key is None and query.strategy != Strategy.PARTITION_CONTIGUITY:
        parts.append(("partition", "PARTITION BY " + ", ".join(map(attribute, query.partition_by)), None))
    parts += [("not", element_text(e), e) for e in query.pattern if isinstance(e, Absent)]
    if query.within is not None and not isinstance(query.pattern[-1], Absent):
        parts.append(("window", window_text(query.within), None))
    if query.strategy in _CONTIGUOUS:  # first the plain skip: linear, where any-match can explode
        parts.append(("contiguity", f"STRATEGY {query.strategy.value}", None))
    if query.strategy != Strategy.SKIP_TILL_ANY_MATCH:
        parts.append(("strategy", f"STRATEGY {query.strategy.value}", None))
    return [_Relaxation(kind, text, _drop(query, kind, subject), subject) for kind, text, subject in parts]


def _drop(query: Query, kind: str, subject: Condition | Absent | None) -> Query:
    """``query`` without one part: a condition, the partition, a NOT element (with its variables'
    conditions), the window; or with a contiguity strategy relaxed to skip_till_next_match, or any strategy
    to skip_till_any_match."""
    if kind == "condition":
        return dataclasses.replace(query, where=tuple(c for c in query.where if c != subject))
    if kind == "partition":
        return dataclasses.replace(query, partition_by=())
    if kind == "not":
        assert isinstance(subject, Absent)
        names = {v.name for v in subject.vars}
        return dataclasses.replace(query, pattern=tuple(e for e in query.pattern if e != subject),
                                   where=tuple(c for c in query.where if not c.variables() & names))
    if kind == "window":
        return dataclasses.replace(query, within=None)
    if kind == "contiguity":
        return dataclasses.replace(query, strategy=Strategy.SKIP_TILL_NEXT_MATCH)
    return dataclasses.replace(query, strategy=Strategy.SKIP_TILL_ANY_MATCH)


def _reads_again(relaxation: _Relaxation, read: Read) -> bool:
    """Does ``relaxation`` need the candidates read again (with a row filter of its own)?  When it drops a
    condition the read's filter tested (a variable's own, on attributes), or a NOT element (whose variables'
    clauses the filter has)."""
    if read.reread is None or read.keep is None:
        return False
    if relaxation.kind == "not":
        return True
    return (relaxation.kind == "condition" and isinstance(relaxation.subject, Condition)
            and filter_tests(relaxation.subject))


def judgeable(relaxed: Query, search: Search) -> bool:
    """Can ``relaxed`` be judged on the events ``search`` looks through (:func:`_readable`), its matches there
    being matches in the whole stream (not those of an open-ended pattern on widened candidates)?"""
    return _readable(relaxed, search.read.types) and not (
        _open_ended(relaxed) and not search.same_candidates(relaxed))


def _open_ended(query: Query) -> bool:
    """Does ``query`` end with a Kleene element that its strategy extends with every later event of its type
    (any but skip-till-any-match)?  Then a match found inside a candidate interval may be the start of a
    longer one beyond it: a relaxation that widens the candidates cannot be judged on the events read."""
    plan = normalize(query)
    last = plan.elements[-1] if plan.elements else ()
    return query.strategy != Strategy.SKIP_TILL_ANY_MATCH and any(
        plan.positives[i].kleene for g in last for i in plan.group_members[g])


def _valid(query: Query) -> bool:
    try:
        normalize(query)
    except SeqsketchError:
        return False
    return True


def _readable(query: Query, types: frozenset[str] | None) -> bool:
    """Can ``query`` be judged on events read for ``types`` (None: every type)?  Every type one of its
    variables can bind must have been read (every type, under ``partition_contiguity`` with ``PARTITION BY``;
    a read leaves types out under strict contiguity only where its seqs show the gaps)."""
    if types is None:
        return True
    if query.strategy == Strategy.PARTITION_CONTIGUITY and query.partition_by:
        return False
    plan = normalize(query)
    needed = [v.types for v in plan.positives + plan.negatives]
    return all(t is not None and t <= types for t in needed)


# ------------------------------------------------------------------------------------------------ texts


def _cause(query: Query, plan: Plan, relaxation: _Relaxation, found: Found) -> str:
    """The sentence naming the cause: how many matches the candidates hold without the part, and that the
    part rules out each of them."""
    relaxed = relaxation.query
    what = _matches(found.count) + " of " + pattern_label(plan)
    kind = relaxation.kind
    if kind == "condition":
        return (f"they hold {what}{_kept(relaxed, conditions='other')}, "
                f"but {relaxation.part} holds for none of them")
    if kind == "partition":
        return f"they hold {what}{_kept(relaxed)}, but none {_same(query.partition_by)}"
    if kind == "not":
        return f"they hold {what}{_kept(relaxed)}, but {_forbidden(plan, relaxation)}"
    if kind == "window":
        least = ""
        if found.shortest is not None and isinstance(query.within, WithinEvents):
            least = f" (the shortest spans {found.shortest:,} events)"
        elif found.shortest is not None:
            least = f" (the shortest takes {about(found.shortest)})"
        return f"they hold {what}{_kept(relaxed)}, but none{window_phrase(query)}{least}"
    return (f"they hold {what}{_kept(relaxed)}, but none under "
            f"{query.strategy.value}{_strategy_gloss(query)}")


def _nothing_single(query: Query, plan: Plan, search: Search, tried: list[_Relaxation],
                    unread: list[_Relaxation]) -> str:
    """No single relaxation finds a match: drop every part tried at once."""
    label = pattern_label(plan)
    everything = query
    for relaxation in tried:
        everything = _drop(everything, relaxation.kind, relaxation.subject)
    order = f"none of them holds {label}{_kept(everything, strategy=False)}"
    if not tried and not unread:
        return order  # the query is its own pattern: nothing to relax
    unjudged = f"dropping {_parts(unread)} cannot be judged on the events read"
    if not tried:
        return f"{_GENERIC}; {unjudged}"
    not_tried = f" ({unjudged})" if unread else ""
    single = f"no single part of the query rules them all out: {_without(tried, 'or')}, they hold no match"
    try:
        found = (search.run(everything, exists=True)
                 if _valid(everything) and _readable(everything, search.read.types) else None)
    except TimedOut:
        found = None
    if found is None:
        return single + not_tried
    if found.count:
        return f"{single}, but without all of them they do{not_tried}"
    return f"{order}, even {_without(tried, 'and')}{not_tried}"


def _parts(relaxations: Sequence[_Relaxation], last: str = "or") -> str:
    return _joined([r.part for r in relaxations], last)


def _joined(names: Sequence[str], last: str) -> str:
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + f" {last} " + names[-1]


def _without(tried: Sequence[_Relaxation], conj: str) -> str:
    """``without `a.x > 5` or NOT(B b), or under skip_till_any_match`` (``conj`` "or": any one of them;
    "and": all of them)."""
    dropped = [r.part for r in tried if r.kind not in ("contiguity", "strategy")]
    out = []
    if dropped:
        one = "any one of " if conj == "or" and len(dropped) > 1 else ""
        out.append(f"without {one}{_joined(dropped, conj)}")
    if any(r.kind == "strategy" for r in tried):  # the broader: no match under it, none under the other
        out.append(f"under {Strategy.SKIP_TILL_ANY_MATCH.value}")
    elif any(r.kind == "contiguity" for r in tried):
        out.append(f"under {Strategy.SKIP_TILL_NEXT_MATCH.value}")
    return f", {conj} ".join(out)


def _matches(n: int) -> str:
    return "1 match" if n == 1 else f"{n:,} matches"


def pattern_label(plan: Plan) -> str:
    """The positive elements, e.g. ``O_SENT then O_DECLINED``, ``A then {B, C+}``, ``A then B | C``."""
    return " then ".join(_element_label(plan, groups) for groups in plan.elements)


def _element_label(plan: Plan, groups: tuple[int, ...]) -> str:
    labels = [" | ".join(_var_label(plan.positives[i]) for i in plan.group_members[g]) for g in groups]
    return labels[0] if len(labels) == 1 else "{" + ", ".join(labels) + "}"


def _var_label(var: VarPlan) -> str:
    return Position([var.types]).label + ("+" if var.kleene else "")


def _same(attrs: Sequence[str]) -> str:
    if list(attrs) == ["case"]:
        return "in the same case"
    return "with the same " + " and ".join(attrs)


def _kept(relaxed: Query, conditions: str = "", strategy: bool = True) -> str:
    """What the counted matches of ``relaxed`` still satisfy: its partition, its window, its strategy
    (unless the default, or ``strategy`` is false) and its (``conditions``: other) conditions, if any."""
    out = ""
    if relaxed.partition_by:
        out += " " + _same(relaxed.partition_by)
    out += window_phrase(relaxed)
    if strategy and relaxed.strategy != Strategy.SKIP_TILL_NEXT_MATCH:
        out += f" under {relaxed.strategy.value}"
    if relaxed.where:
        out += f" meeting the {conditions + ' ' if conditions else ''}conditions"
    return out


def _forbidden(plan: Plan, relaxation: _Relaxation) -> str:
    """Each match of the query without the NOT has a forbidden event: where, and of which types."""
    element = relaxation.subject
    assert isinstance(element, Absent)
    names = {v.name for v in element.vars}
    negated = [v for v in plan.negatives if v.name in names]
    kinds = " or ".join(_a(v) for v in negated)
    gap = negated[0].element
    labels = [_element_label(plan, groups) for groups in plan.elements]
    text = f"`{relaxation.part}` forbids"
    if gap >= len(labels):
        return (f"each is followed{window_phrase(plan.query)} by {kinds}, which {text}")
    return f"each has {kinds} between {labels[gap - 1]} and {labels[gap]}, which {text}"


def _a(var: VarPlan) -> str:
    if var.types is None:
        return "an event"
    label = Position([var.types]).label
    return ("an " if label[:1].upper() in "AEIOU" else "a ") + label


def _strategy_gloss(query: Query) -> str:
    if query.strategy == Strategy.PARTITION_CONTIGUITY and query.partition_by:
        where = "case" if list(query.partition_by) == ["case"] else "partition"
        return f", which binds every event of the match's {where} between its first and last"
    if query.strategy in _CONTIGUOUS:
        return ", which binds every event between a match's first and last"
    if query.strategy == Strategy.SKIP_TILL_NEXT_MATCH:
        return ", whose runs take the first event that can extend them"
    return ""


def about(micros: int) -> str:
    """A duration to about three digits: ``41 s``, ``2.5 h``, ``31.2 days``."""
    for unit, size in (("days", 86_400_000_000), ("h", 3_600_000_000), ("min", 60_000_000), ("s", 1_000_000),
                       ("ms", 1000)):
        if micros >= size:
            value = micros / size
            text = f"{value:.1f}".removesuffix(".0") if value < 100 else f"{value:,.0f}"
            return f"{text} {'day' if unit == 'days' and text == '1' else unit}"
    return f"{micros} µs"
