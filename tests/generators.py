"""What the property tests draw, in one place: random streams, random queries and random input files.

Two families of streams and queries are kept apart on purpose, as their tests need them:

* the engine's (:func:`engine_streams`, :func:`engine_queries`, :func:`run_queries`, :func:`keyed_streams`):
  tiny streams with ``seq`` gaps and two attributes, and queries over the whole language, held to the
  brute-force reference;
* the index's (:func:`index_streams`, :func:`index_queries`): gap-free streams with a type no query names,
  and queries on one attribute, held to the exact answer through the Bloom-filter tree.

Seeded generators (:func:`zipf_codes`, :func:`zipf_types`, :func:`write_csv`, :func:`write_jsonl`) draw from a
``numpy`` generator, so a seed always gives the same stream.  :func:`examples` and :func:`scaled` scale a
test's example count by the Hypothesis profile in use (``HYPOTHESIS_PROFILE``, registered in
``tests/conftest.py``).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from exact.query.ast import (
    Absent,
    Aggregate,
    AnyOf,
    Between,
    Condition,
    EventSet,
    Field,
    Literal,
    Query,
    RunEvent,
    Single,
    Strategy,
    Var,
    WithinEvents,
    WithinTime,
)

#: The example count of the ``ci`` profile, which :func:`examples` scales from.
CI_EXAMPLES = 100


def examples(ci: int, least: int = 1) -> int:
    """The example count for a test that draws ``ci`` examples under the ``ci`` profile, scaled as the
    profile in use scales its own count (``quick`` fewer, ``thorough`` more); never below ``least`` (a test
    that counts what its examples reached needs enough of them under every profile)."""
    return max(least, round(ci * settings.default.max_examples / CI_EXAMPLES))


def scaled(ci: int, *suppress: HealthCheck, least: int = 1, **overrides: Any) -> settings:
    """The profile in use, with ``ci`` examples scaled by :func:`examples` (never fewer than ``least``), the
    health checks ``suppress`` suppressed besides the profile's own, and any other setting ``overrides``
    names (``derandomize``, a ``deadline`` of its own, ...).  A decorator, or the parent of a test's own
    ``settings``."""
    return settings(max_examples=examples(ci, least),
                    suppress_health_check=[*settings.default.suppress_health_check, *suppress], **overrides)


#: Comparison operators of conditions.
OPS = ("=", "!=", "<", "<=", ">", ">=")

# ------------------------------------------------------------------------------------------ the engine's

#: Event types of the engine's streams and queries.
ENGINE_TYPES = ("A", "B", "C")


@st.composite
def engine_streams(draw: st.DrawFn, max_events: int = 10) -> list[dict]:
    """Small streams as the engine sees them: ``seq`` from 0–3 with gaps (a caller may pass a subset),
    ``ts`` with ties, types A, B, C, an attribute ``x`` sometimes null, ``y``, and a partition key ``k``."""
    n = draw(st.integers(0, max_events))
    rows = []
    seq, ts = draw(st.integers(0, 3)), draw(st.integers(0, 5))
    for _ in range(n):
        row = {"seq": seq, "ts": ts, "type": draw(st.sampled_from(ENGINE_TYPES)),
               "x": draw(st.one_of(st.none(), st.integers(0, 3))) if draw(st.booleans())
               else draw(st.integers(0, 3)),
               "y": draw(st.integers(0, 3)),
               "k": draw(st.sampled_from((1, 2)))}
        rows.append(row)
        seq += draw(st.sampled_from((1, 1, 1, 2)))  # gaps: a caller may pass a subset
        ts += draw(st.sampled_from((0, 1, 1, 2, 3)))  # ties in ts included
    return rows


def _pattern(draw: st.DrawFn, counter: Iterator[int], types: tuple[str, ...], negated: tuple[str | None, ...],
             trailing: tuple[str, ...], longest: tuple[int, int]) -> tuple[list, WithinTime | WithinEvents | None]:
    """One to three elements (single variables of ``types`` or any type, some Kleene; event sets of two; ORs
    of two), a NOT of one of ``negated`` before some, and a window (none, time or events, at most
    ``longest``) that a trailing NOT of one of ``trailing`` sometimes follows."""

    def var(kleene_ok: bool = True) -> Var:
        typ = draw(st.sampled_from(types + (None,)))
        kleene = kleene_ok and draw(st.integers(0, 3)) == 0
        return Var(f"v{next(counter)}", typ, kleene)

    elements: list = []
    for i in range(draw(st.integers(1, 3))):
        if i > 0 and draw(st.integers(0, 4)) == 0:
            elements.append(Absent((Var(f"n{next(counter)}", draw(st.sampled_from(negated))),)))
        kind = draw(st.sampled_from(("single", "single", "set", "or")))
        if kind == "single":
            elements.append(Single(var()))
        elif kind == "set":
            elements.append(EventSet((var(), var())))
        else:
            elements.append(AnyOf((var(False), var(False))))
    kind = draw(st.sampled_from(("none", "time", "events")))
    within = (WithinTime(draw(st.integers(0, longest[0]))) if kind == "time"
              else WithinEvents(draw(st.integers(1, longest[1]))) if kind == "events" else None)
    if within is not None and draw(st.integers(0, 4)) == 0:
        elements.append(Absent((Var(f"n{next(counter)}", draw(st.sampled_from(trailing))),)))
    return elements, within


@st.composite
def engine_queries(draw: st.DrawFn, strategy: Strategy | None = None) -> Query:
    """Queries over :func:`engine_streams` covering the whole language the engine evaluates: SEQ of single
    variables (some Kleene), event sets and OR; NOT between elements and trailing (under a window); property,
    relational, ``prev``, negated-variable, built-in (``type``/``ts``/``seq``) and same-event conditions on
    ``x`` and ``y``; PARTITION BY k, WITHIN time or events, BETWEEN, and every strategy unless one is given."""
    counter = iter(range(100))
    elements, within = _pattern(draw, counter, ENGINE_TYPES, ENGINE_TYPES, ENGINE_TYPES, longest=(8, 7))
    q = Query(tuple(elements))
    positives = list(q.positive_variables())
    negated = [v for e in elements if isinstance(e, Absent) for v in e.vars]
    conds = []
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(("prop", "rel", "rel", "prev", "neg", "builtin", "self")))
        v = draw(st.sampled_from(positives))
        attr = draw(st.sampled_from(("x", "y")))
        op = draw(st.sampled_from(OPS))
        if kind == "prop":
            # mostly numbers; sometimes another kind (never equal to a number) or a boolean
            lit = draw(st.one_of(st.integers(0, 3), st.integers(0, 3), st.sampled_from(("1", True))))
            conds.append(Condition(Field(v.name, attr), op, Literal(lit)))
        elif kind == "builtin":
            field = draw(st.sampled_from(("type", "ts", "seq")))
            if field == "type":
                conds.append(Condition(Field(v.name, "type"), draw(st.sampled_from(("=", "!="))),
                                       Literal(draw(st.sampled_from(ENGINE_TYPES)))))
            elif len(positives) > 1 and draw(st.booleans()):
                w = draw(st.sampled_from([p for p in positives if p != v]))
                conds.append(Condition(Field(v.name, field), op, Field(w.name, field)))
            else:
                conds.append(Condition(Field(v.name, field), op, Literal(draw(st.integers(0, 8)))))
        elif kind == "self":
            conds.append(Condition(Field(v.name, "x"), op, Field(v.name, "y")))
        elif kind == "rel" and len(positives) > 1:
            w = draw(st.sampled_from([p for p in positives if p != v]))
            conds.append(Condition(Field(v.name, attr), op, Field(w.name, draw(st.sampled_from(("x", "y"))))))
        elif kind == "prev":
            ks = [p for p in positives if p.kleene]
            if ks:
                k = draw(st.sampled_from(ks))
                conds.append(Condition(Field(k.name, attr, prev=True), op, Field(k.name, attr)))
        elif kind == "neg" and negated:
            nv = draw(st.sampled_from(negated))
            if draw(st.booleans()):
                conds.append(Condition(Field(nv.name, attr), op, Literal(draw(st.integers(0, 3)))))
            else:
                conds.append(Condition(Field(nv.name, attr), op, Field(v.name, attr)))
    partition = ("k",) if draw(st.integers(0, 2)) == 0 else ()
    between = None
    if draw(st.integers(0, 5)) == 0:
        lo = draw(st.integers(0, 10))
        between = Between(lo, lo + draw(st.integers(0, 15)))
    strat = strategy if strategy is not None else draw(st.sampled_from(list(Strategy)))
    return Query(tuple(elements), tuple(conds), partition, within, between, strat)


@st.composite
def run_queries(draw: st.DrawFn, strategy: Strategy, more: bool = False) -> Query:
    """Small queries with at least one Kleene variable and one condition over its run; ``more`` adds OR
    elements (Kleene alternatives too), conditions of negated variables on runs, run ends against other
    variables and BETWEEN."""
    names = iter(f"v{i}" for i in range(10))
    elements: list = []
    for k in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(("single", "single", "set", "or") if more and k else ("single", "single",
                                                                                             "set")))
        make = [Var(next(names), draw(st.sampled_from(("A", "B", "C", None))), draw(st.booleans()))
                for _ in range(1 if kind == "single" else 2)]
        if k == 0:
            make[0] = replace(make[0], kleene=True)
        elements.append(Single(make[0]) if kind == "single" else EventSet(tuple(make)) if kind == "set"
                        else AnyOf(tuple(make)))
    negated = None
    if draw(st.booleans()) and len(elements) > 1:
        negated = Var(next(names), draw(st.sampled_from(("A", "B", "C"))))
        elements.insert(draw(st.integers(1, len(elements) - 1)) if more else 1, Absent((negated,)))
    query = Query(tuple(elements))
    positives = list(query.positive_variables())
    kleene = [v for v in positives if v.kleene]
    conds = []
    shapes = ("count", "agg", "end", "before", "relation") + (("negated", "first") if more else ())
    for _ in range(draw(st.integers(1, 3))):
        v = draw(st.sampled_from(kleene))
        op = draw(st.sampled_from(("=", "!=", "<", "<=", ">", ">=")))
        shape = draw(st.sampled_from(shapes))
        if shape == "count":
            conds.append(Condition(Aggregate("count", v.name), op, Literal(draw(st.integers(1, 3)))))
        elif shape == "agg":
            func = draw(st.sampled_from(("sum", "avg", "min", "max")))
            conds.append(Condition(Aggregate(func, v.name, "x"), op, Literal(draw(st.integers(0, 6)))))
        elif shape == "end":
            end = draw(st.sampled_from(("first", "last")))
            conds.append(Condition(RunEvent(v.name, "x", end), op, Literal(draw(st.integers(0, 3)))))
        elif shape == "before":
            func = draw(st.sampled_from(("sum", "avg", "min", "max")))
            conds.append(Condition(Field(v.name, "x"), op, Aggregate(func, v.name, "x", before=True)))
        elif shape == "negated" and negated is not None:
            run = draw(st.sampled_from((RunEvent(v.name, "x", "last"), RunEvent(v.name, "y", "first"),
                                        Aggregate("count", v.name), Aggregate("max", v.name, "x"),
                                        Aggregate("avg", v.name, "y"))))
            conds.append(Condition(Field(negated.name, "x"), op, run))
        elif shape == "first":  # each event of w against the first of v (w before, after or v itself)
            w = draw(st.sampled_from(positives))
            conds.append(Condition(Field(w.name, draw(st.sampled_from(("x", "y")))), op,
                                   RunEvent(v.name, "x", "first")))
        else:
            w = draw(st.sampled_from(positives))
            conds.append(Condition(Field(w.name, "x"), op, RunEvent(v.name, "x", "last"))
                         if w.name != v.name else Condition(Aggregate("max", v.name, "x"), op, Literal(2)))
    within = draw(st.sampled_from((None, WithinEvents(6), WithinTime(8))))
    if isinstance(elements[-1], Absent) or within is None and draw(st.booleans()):
        within = WithinEvents(6)
    partition = ("k",) if strategy is Strategy.PARTITION_CONTIGUITY or draw(st.booleans()) else ()
    between = None
    if more and draw(st.integers(0, 4)) == 0:
        lo = draw(st.integers(0, 10))
        between = Between(lo, lo + draw(st.integers(0, 15)))
    return Query(tuple(elements), tuple(conds), partition, within, between, strategy=strategy)


@st.composite
def keyed_streams(draw: st.DrawFn, max_events: int = 14) -> list[dict]:
    """Events with a case each (a few cases, one of them often larger than a partition leaf), attributes x,
    y, k as :func:`engine_streams` has, and timestamps that tie.  Short, as there: skip-till-any-match
    over a Kleene variable has exponentially many matches."""
    n = draw(st.integers(1, max_events))
    cases = draw(st.integers(1, 5))
    rows, ts = [], 0
    for _ in range(n):
        big = draw(st.integers(0, 2)) == 0
        rows.append({"ts": ts, "type": draw(st.sampled_from(ENGINE_TYPES)),
                     "case": "c0" if big else f"c{draw(st.integers(0, cases))}",
                     "x": draw(st.integers(0, 3)), "y": draw(st.integers(0, 3)),
                     "k": draw(st.sampled_from((1, 2)))})
        ts += draw(st.sampled_from((0, 1, 1, 2)))
    return rows


# ------------------------------------------------------------------------------------------- the index's

#: Event types of the index's streams: D is never named by a query.
INDEX_TYPES = ("A", "B", "C", "D")
#: Event types the index's queries name.
QUERY_TYPES = ("A", "B", "C")


@st.composite
def index_streams(draw: st.DrawFn, max_events: int = 16) -> list[dict]:
    """Streams for the index: ``seq`` from 0 without gaps (as a stored dataset numbers its events), ``ts``
    with ties, types A–D (D never named by :func:`index_queries`: noise the tree must see past), an attribute
    ``x`` sometimes null and a partition key ``k``."""
    n = draw(st.integers(0, max_events))
    rows = []
    ts = draw(st.integers(0, 5))
    for seq in range(n):
        rows.append({"seq": seq, "ts": ts, "type": draw(st.sampled_from(INDEX_TYPES)),
                     "x": draw(st.one_of(st.none(), st.integers(0, 3))),
                     "k": draw(st.sampled_from((1, 2)))})
        ts += draw(st.sampled_from((0, 1, 1, 2, 3)))
    return rows


@st.composite
def index_queries(draw: st.DrawFn, strategy: Strategy | None = None) -> Query:
    """Queries over :func:`index_streams` for the approximate index and verification: the constructs of
    :func:`engine_queries` on ``x`` only (types A–C, a NOT of any type), a type condition narrowing ANY, wider
    windows and BETWEEN, and every strategy unless one is given."""
    counter = iter(range(100))
    elements, within = _pattern(draw, counter, QUERY_TYPES, QUERY_TYPES + (None,), QUERY_TYPES,
                               longest=(10, 8))
    q = Query(tuple(elements))
    positives = list(q.positive_variables())
    negated = [v for e in elements if isinstance(e, Absent) for v in e.vars]
    conds = []
    for _ in range(draw(st.integers(0, 2))):
        kind = draw(st.sampled_from(("prop", "rel", "prev", "neg", "type")))
        v = draw(st.sampled_from(positives))
        op = draw(st.sampled_from(OPS))
        if kind == "prop":
            conds.append(Condition(Field(v.name, "x"), op, Literal(draw(st.integers(0, 3)))))
        elif kind == "rel" and len(positives) > 1:
            w = draw(st.sampled_from([p for p in positives if p != v]))
            conds.append(Condition(Field(v.name, "x"), op, Field(w.name, "x")))
        elif kind == "prev" and any(p.kleene for p in positives):
            k = draw(st.sampled_from([p for p in positives if p.kleene]))
            conds.append(Condition(Field(k.name, "x", prev=True), op, Field(k.name, "x")))
        elif kind == "neg" and negated:
            conds.append(Condition(Field(draw(st.sampled_from(negated)).name, "x"), op, Field(v.name, "x")))
        elif kind == "type":  # narrows ANY (or contradicts a declared type) through v.type
            conds.append(Condition(Field(v.name, "type"), draw(st.sampled_from(("=", "!="))),
                                   Literal(draw(st.sampled_from(QUERY_TYPES)))))
    partition = ("k",) if draw(st.integers(0, 2)) == 0 else ()
    between = None
    if draw(st.integers(0, 4)) == 0:
        lo = draw(st.integers(0, 15))
        between = Between(lo, lo + draw(st.integers(0, 20)))
    strat = strategy if strategy is not None else draw(st.sampled_from(list(Strategy)))
    return Query(tuple(elements), tuple(conds), partition, within, between, strat)


# ------------------------------------------------------------------------------------------------ seeded


def zipf_codes(rng: np.random.Generator, n: int, vocabulary: int, a: float) -> np.ndarray:
    """``n`` type codes below ``vocabulary``, Zipf-distributed with exponent ``a`` (a few frequent, a long
    tail of rare ones), as real event logs and corpora are."""
    return rng.zipf(a, n) % vocabulary


def zipf_types(rng: np.random.Generator, n: int, vocabulary: int, a: float, prefix: str) -> list[str]:
    """:func:`zipf_codes` as type names: ``prefix`` followed by the code."""
    return [f"{prefix}{x}" for x in zipf_codes(rng, n, vocabulary, a)]


#: Text fields of the generated input files: empty, commas, doubled quotes, multi-byte UTF-8, padding.
NOTES = ["", "plain", "with, comma", 'a "quoted" word', "日本語 é ü 🎉", "  padded  ", "x;y"]


def write_csv(path: Path, rows: int, seed: int = 1, *, multiline: int = 0) -> Path:
    """A CSV with CRLF line ends whose ``amount`` is integer in the first half and decimal after (so only
    the whole file says double), a bool column, an empty column and text with quotes and UTF-8 (and with
    ``multiline``, every so many rows a note over three lines)."""
    rng = np.random.default_rng(seed)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\r\n")
        w.writerow(["ts", "type", "case", "amount", "flag", "note", "empty"])
        for i in range(rows):
            note = NOTES[int(rng.integers(0, len(NOTES)))]
            if multiline and i % multiline == multiline // 2:
                note = "first line\nsecond line, with a comma\r\nthird"
            amount = str(i) if i < rows // 2 else f"{i}.25"
            ts = 1_600_000_000 + int(rng.integers(0, 500)) if i % 3 else f"2020-09-13T12:{i % 60:02d}:00Z"
            w.writerow([ts, f"T{int(rng.integers(0, 12))}é", int(rng.integers(0, 40)), amount,
                        ["true", "FALSE", ""][i % 3], note, ""])
    return path


def write_jsonl(path: Path, rows: int, seed: int = 2) -> Path:
    """JSON Lines with a UTF-8 byte-order mark, CRLF line ends, blank lines, text escaped and not, an
    ``amount`` in every fourth record and a nested ``attrs`` in every seventh."""
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(rows):
        record = {"ts": 1_600_000_000 + int(rng.integers(0, 500)), "type": f"Ü{int(rng.integers(0, 9))}",
                  "case": int(rng.integers(0, 40)), "note": NOTES[i % len(NOTES)]}
        if i % 4 == 0:
            record["amount"] = float(rng.random())
        if i % 7 == 0:
            record["attrs"] = {"nested": [1, {"a": "ß"}]}
        lines.append(json.dumps(record, ensure_ascii=i % 2 == 0))
        if i % 50 == 0:
            lines.append("")
    path.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(lines).encode("utf-8") + b"\n")
    return path


@st.composite
def chain_queries(draw: st.DrawFn, longest: int = 4) -> Query:
    """Skip-till-next-match over a SEQ of single variables with properties only, in one stream or per
    partition: the queries the engine answers with a chain instead of windows (``_Evaluation._chains``):
    linear passes when no variable is a Kleene one, else bisections, whose starts are searched in key order
    per partition."""
    n = draw(st.integers(1, longest))
    kleene = draw(st.sampled_from((False, False, True)))
    elements = tuple(Single(Var(f"v{i}", draw(st.sampled_from(ENGINE_TYPES + (None,))),
                                kleene and draw(st.booleans()))) for i in range(n))
    conds = tuple(Condition(Field(f"v{draw(st.integers(0, n - 1))}", draw(st.sampled_from(("x", "y")))),
                            draw(st.sampled_from(OPS)), Literal(draw(st.integers(0, 3))))
                  for _ in range(draw(st.integers(0, 2))))
    within = draw(st.sampled_from((None, WithinTime(draw(st.integers(0, 8))),
                                   WithinEvents(draw(st.integers(1, 7))))))
    partition_by = draw(st.sampled_from(((), ("k",), ("x",))))
    return Query(elements, conds, partition_by, within, None, Strategy.SKIP_TILL_NEXT_MATCH)
