"""The answers summarised from every match — ``RETURN funnel``, ``next k``, ``durations``, ``count BY`` and
``cases BY`` (docs/semantics.md §7) — held to a brute-force computation from their definitions on random keyed
streams and random queries of the whole language, under every strategy, in the verified and exact modes,
through a stored dataset with an appended tail.

The expected answers are made here from the reference's matches (:func:`exact.reference.reference_matches`)
and the raw events; nothing of :mod:`exact.engine.summarise` is used to make them."""

from __future__ import annotations

import dataclasses
import math
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from api.service import run_query
from exact.errors import QuerySemanticError, QuerySyntaxError
from exact.query.ast import (
    Absent,
    AnyOf,
    EventSet,
    Field,
    Query,
    Return,
    Single,
    Strategy,
    Var,
    WithinEvents,
    WithinTime,
)
from exact.query.language import load, parse, to_json, to_text
from exact.reference import reference_matches, stream_table
from sketch.build import BuildOptions
from sketch.dataset import Dataset
from tests.generators import ENGINE_TYPES, engine_queries, keyed_streams, scaled

TINY = BuildOptions(leaf_size=2, fpq=0.9)
SETTINGS = scaled(25, HealthCheck.function_scoped_fixture)


def table_of(rows: list[dict]) -> Any:
    return stream_table([{"seq": i, **r} for i, r in enumerate(rows)])


# ------------------------------------------------------------------------------------- the definitions


def nearest_rank(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def steps_of(query: Query) -> list[Any]:
    return [e for e in query.pattern if not isinstance(e, Absent)]


def label(element: Any) -> str:
    names = ", ".join(v.name for v in element.vars)
    return "{" + names + "}" if isinstance(element, EventSet) else f"OR({names})" if isinstance(element, AnyOf) \
        else names


def matches_of(query: Query, rows: list[dict]) -> list[Any]:
    return sorted(reference_matches(dataclasses.replace(query, returns=Return.MATCHES, group_by=None, top=None,
                                                        following=None, following_within=None), table_of(rows)))


def first_last(match: Any, element: Any, rows: list[dict]) -> tuple[int, int]:
    bound = dict(match.bindings)
    ts = [rows[s]["ts"] for v in element.vars for s in bound.get(v.name, ())]
    return min(ts), max(ts)


def expected_durations(query: Query, rows: list[dict]) -> list[tuple]:
    found = matches_of(query, rows)
    steps = steps_of(query)
    out = []
    for k in range(len(steps) - 1):
        gaps = [first_last(m, steps[k + 1], rows)[0] - first_last(m, steps[k], rows)[1] for m in found]
        out.append((label(steps[k]), label(steps[k + 1]), spread(gaps)))
    whole = [rows[m.end_seq]["ts"] - rows[m.start_seq]["ts"] for m in found]
    out.append((label(steps[0]), label(steps[-1]), spread(whole)))
    return out


def spread(micros: list[int]) -> tuple:
    if not micros:
        return (0, None, None, None, None)
    ms = [v / 1000.0 for v in micros]
    return (len(ms), min(ms), nearest_rank(ms, 0.5), nearest_rank(ms, 0.9), max(ms))


def prefix_query(query: Query, j: int) -> Query:
    positions = [k for k, e in enumerate(query.pattern) if not isinstance(e, Absent)]
    end = len(query.pattern) if j == len(positions) else positions[j - 1] + 1
    kept = query.pattern[:end]
    names = {v.name for e in kept for v in e.vars}
    return dataclasses.replace(query, pattern=kept, where=tuple(c for c in query.where if c.variables() <= names),
                               returns=Return.MATCHES)


def unit_of(query: Query, match: Any, rows: list[dict]) -> Any:
    if not query.partition_by:
        return match.start_seq
    return tuple(rows[match.start_seq].get(a) for a in query.partition_by)


def expected_funnel(query: Query, rows: list[dict]) -> tuple[list[tuple], int]:
    steps = steps_of(query)
    furthest: dict[Any, int] = {}
    conversions = []
    for j in range(1, len(steps) + 1):
        earliest: dict[Any, Any] = {}
        for m in matches_of(prefix_query(query, j), rows):
            unit = unit_of(query, m, rows)
            if unit not in earliest or m.end_seq < earliest[unit].end_seq:
                earliest[unit] = m
            furthest[unit] = max(furthest.get(unit, 0), j)
        conversions.append([(rows[m.end_seq]["ts"] - rows[m.start_seq]["ts"]) / 1000.0 for m in earliest.values()])
    out = []
    for j, element in enumerate(steps, start=1):
        took = conversions[j - 1]
        out.append((j, label(element), sum(1 for f in furthest.values() if f >= j),
                    sum(1 for f in furthest.values() if f == j),
                    nearest_rank(took, 0.5) if took else None, nearest_rank(took, 0.9) if took else None))
    return out, len(furthest)


def expected_next(query: Query, rows: list[dict], k: int, within: int | None = None) -> list[tuple]:
    counted: dict[tuple[int, str | None], list[float]] = {}
    for m in matches_of(query, rows):
        end = m.end_seq
        key = tuple(rows[end].get(a) for a in query.partition_by)
        after = [i for i in range(end + 1, len(rows))
                 if tuple(rows[i].get(a) for a in query.partition_by) == key
                 and (within is None or rows[i]["ts"] - rows[end]["ts"] <= within)][:k]
        for offset in range(1, k + 1):
            if offset <= len(after):
                i = after[offset - 1]
                counted.setdefault((offset, rows[i]["type"]), []).append((rows[i]["ts"] - rows[end]["ts"]) / 1000.0)
            else:
                counted.setdefault((offset, None), []).append(math.nan)
    out = []
    for offset in range(1, k + 1):
        named = sorted(((t, w) for (o, t), w in counted.items() if o == offset and t is not None),
                       key=lambda tw: (-len(tw[1]), tw[0]))
        out += [(offset, t, len(w), nearest_rank(w, 0.5), nearest_rank(w, 0.9)) for t, w in named]
        if (offset, None) in counted:
            out.append((offset, None, len(counted[(offset, None)]), None, None))
    return out


def expected_groups(query: Query, rows: list[dict]) -> tuple[list[tuple], tuple[int, int]]:
    by = query.group_by
    assert by is not None
    values: dict[Any, Any] = {}
    for m in matches_of(query, rows):
        seqs = dict(m.bindings).get(by.var)
        value = rows[seqs[0]].get(by.attr) if seqs else None
        slot = values.setdefault(value, [])
        slot.append(unit_of(query, m, rows))
    counts = [(v, len(u) if query.returns is Return.COUNT else len(set(u))) for v, u in values.items()]
    ranked = sorted(counts, key=lambda vc: -vc[1])  # (stable: in the order the values first occur)
    top = query.top or 10
    return ranked[:top], (len(ranked[top:]), sum(c for _, c in ranked[top:]))


# ----------------------------------------------------------------------------------------------- checks


def answered(home: Path, query: Query, mode: str) -> dict[str, Any] | None:
    try:
        return run_query(home, "d", query, mode=mode)
    except QuerySemanticError as refused:
        assert "in this dataset" in str(refused), refused
        return None


def check(home: Path, base: Query, rows: list[dict], k: int, by_attr: str, top: int) -> None:
    runnable = [base] + ([dataclasses.replace(base, partition_by=())]
                         if base.strategy is not Strategy.PARTITION_CONTIGUITY else [])
    for query in runnable:
        for mode in ("exact", "verified"):
            got = answered(home, dataclasses.replace(query, returns=Return.DURATIONS), mode)
            if got is None:
                return
            want = expected_durations(query, rows)
            assert [(d["from"], d["to"], (d["count"], d["min_ms"], d["p50_ms"], d["p90_ms"], d["max_ms"]))
                    for d in got["durations"]] == want, (mode, to_text(query))
            for d in got["durations"]:
                assert sum(b["count"] for b in d["histogram"]) == d["count"]
            assert got["count"] == len(matches_of(query, rows))

            got = answered(home, dataclasses.replace(query, returns=Return.FUNNEL), mode)
            assert got is not None
            steps, units = expected_funnel(query, rows)
            assert [(s["step"], s["label"], s["reached"], s["stopped"], s["median_ms"], s["p90_ms"])
                    for s in got["funnel"]] == steps, (mode, to_text(query))
            assert got["unit_count"] == units
            assert got["count"] == len(matches_of(query, rows)), (mode, to_text(query))

            for within in (None, 2):
                asked = dataclasses.replace(query, returns=Return.NEXT, following=k, following_within=within)
                got = answered(home, asked, mode)
                assert got is not None
                assert [(r["offset"], r["type"], r["count"], r["median_ms"], r["p90_ms"]) for r in got["next"]] \
                    == expected_next(query, rows, k, within), (mode, to_text(asked))

            grouped = [Return.COUNT] + ([Return.CASES] if query.partition_by else [])
            var = next(iter(query.positive_variables())).name
            for returns in grouped:
                asked = dataclasses.replace(query, returns=returns, group_by=Field(var, by_attr), top=top)
                got = answered(home, asked, mode)
                assert got is not None
                listed, rest = expected_groups(asked, rows)
                assert [(g["value"], g["count"]) for g in got["groups"]] == listed, (mode, to_text(asked))
                assert (got["other"]["groups"], got["other"]["count"]) == rest


@SETTINGS
@given(rows=keyed_streams(), more=keyed_streams(6), data=st.data())
def test_summaries_equal_their_definitions(rows: list[dict], more: list[dict], data: st.DataObject) -> None:
    home = Path(tempfile.mkdtemp(prefix="seqsketch-summaries-"))
    try:
        Dataset.build(home, "d", table_of(rows), TINY)
        query = data.draw(engine_queries())
        query = dataclasses.replace(query, partition_by=("case",) + tuple(p for p in query.partition_by
                                                                          if p != "case"))
        k = data.draw(st.integers(1, 3))
        by_attr = data.draw(st.sampled_from(("x", "k", "type")))
        top = data.draw(st.integers(1, 4))
        check(home, query, rows, k, by_attr, top)
        # appended events: a tail the partition layout does not cover
        shifted = [{**r, "ts": r["ts"] + rows[-1]["ts"] + 1} for r in more]
        Dataset.open(home, "d").append(table_of(shifted).drop_columns(["seq"]))
        check(home, query, rows + shifted, k, by_attr, top)
    finally:
        shutil.rmtree(home, ignore_errors=True)


@st.composite
def funnels(draw: st.DrawFn) -> Query:
    """SEQs of two to four steps over three types — single variables (some Kleene), an event set, an OR, a
    NOT between — under any strategy, with a window or none: long prefixes that match on short streams."""
    names = iter(f"v{i}" for i in range(20))
    pattern: list[Any] = []
    for k in range(draw(st.integers(2, 4))):
        if k and draw(st.integers(0, 5)) == 0:
            pattern.append(Absent((Var(next(names), draw(st.sampled_from(ENGINE_TYPES))),)))
        kind = draw(st.sampled_from(("single", "single", "single", "kleene", "set", "or")))
        if kind in ("single", "kleene"):
            pattern.append(Single(Var(next(names), draw(st.sampled_from(ENGINE_TYPES)), kind == "kleene")))
        else:
            pair = tuple(Var(next(names), t) for t in draw(st.lists(st.sampled_from(ENGINE_TYPES), min_size=2,
                                                                      max_size=2)))
            pattern.append(EventSet(pair) if kind == "set" else AnyOf(pair))
    within = draw(st.sampled_from((None, None, WithinTime(4), WithinTime(10))))
    strategy = draw(st.sampled_from(list(Strategy)))
    return Query(tuple(pattern), partition_by=("case",), within=within, strategy=strategy)


@scaled(25, HealthCheck.function_scoped_fixture)
@given(rows=keyed_streams(max_events=12), query=funnels(), data=st.data())
def test_long_funnels_and_their_neighbours_equal_their_definitions(rows: list[dict], query: Query,
                                                                 data: st.DataObject) -> None:
    home = Path(tempfile.mkdtemp(prefix="seqsketch-funnels-"))
    rows = [{**r, "case": "c0" if r["case"] in ("c0", "c1", "c2") else "c1"} for r in rows]  # (long cases)
    try:
        Dataset.build(home, "d", table_of(rows), TINY)
        check(home, query, rows, data.draw(st.integers(1, 3)), data.draw(st.sampled_from(("x", "type"))), 2)
    finally:
        shutil.rmtree(home, ignore_errors=True)


@st.composite
def chains(draw: st.DrawFn) -> Query:
    """Funnels of typed single steps — the one-pass path (:func:`exact.engine.summarise.chains_apply`) — a
    type often repeated, partitioned or not, with a window of time or events or none."""
    types = draw(st.lists(st.sampled_from(ENGINE_TYPES), min_size=2, max_size=5))
    pattern = tuple(Single(Var(f"v{i}", t)) for i, t in enumerate(types))
    within = draw(st.sampled_from((None, WithinTime(3), WithinTime(8), WithinEvents(4), WithinEvents(9))))
    strategy = draw(st.sampled_from((Strategy.SKIP_TILL_NEXT_MATCH, Strategy.SKIP_TILL_ANY_MATCH)))
    return Query(pattern, partition_by=draw(st.sampled_from(((), ("case",), ("case", "k")))), within=within,
                 strategy=strategy, returns=Return.FUNNEL)


@scaled(40, HealthCheck.function_scoped_fixture)
@given(rows=keyed_streams(max_events=14), query=chains(), more=keyed_streams(5))
def test_a_funnel_in_one_pass_equals_its_definition(rows: list[dict], query: Query, more: list[dict]) -> None:
    from exact.engine.summarise import chains_apply

    assert chains_apply(query)
    home = Path(tempfile.mkdtemp(prefix="seqsketch-chains-"))
    rows = [{**r, "case": "c0" if r["case"] in ("c0", "c1", "c2") else "c1"} for r in rows]
    try:
        Dataset.build(home, "d", table_of(rows), TINY)
        for every in (rows, rows + [{**r, "ts": r["ts"] + rows[-1]["ts"] + 1} for r in more]):
            if len(every) > len(rows):
                Dataset.open(home, "d").append(table_of(every[len(rows):]).drop_columns(["seq"]))
            steps, units = expected_funnel(query, every)
            for mode in ("exact", "verified"):
                got = run_query(home, "d", query, mode=mode)
                assert [(s["step"], s["label"], s["reached"], s["stopped"], s["median_ms"], s["p90_ms"])
                        for s in got["funnel"]] == steps, (mode, to_text(query))
                assert got["unit_count"] == units
                assert got["count"] == len(matches_of(query, every))
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_the_language_carries_the_summaries_both_ways() -> None:
    for text in ("PATTERN SEQ(A a, B b)\nPARTITION BY case\nRETURN funnel",
                 "PATTERN SEQ(A a, B b)\nRETURN next 3",
                 "PATTERN SEQ(A a, B b)\nPARTITION BY case\nRETURN next 2 WITHIN 1 hour",
                 "PATTERN SEQ(A a, B+ b)\nRETURN durations",
                 "PATTERN SEQ(A a, B b)\nPARTITION BY case\nRETURN cases BY b.'org:resource' TOP 5",
                 "PATTERN SEQ(A a, B b)\nRETURN count BY a.x"):
        query = parse(text)
        assert query.summarised
        assert parse(to_text(query)) == query and load(to_json(query)) == query


@pytest.mark.parametrize(("text", "error", "words"), [
    ("PATTERN SEQ(A a, B b) RETURN next 11", QuerySemanticError, "k from 1 to 10"),
    ("PATTERN SEQ(A a, B b) RETURN count 2", QuerySemanticError, "RETURN next k"),
    ("PATTERN SEQ(A a, B b) RETURN matches BY a.x", QuerySemanticError, "BY groups RETURN count"),
    ("PATTERN SEQ(A a, NOT(C c), B b) RETURN count BY c.x", QuerySemanticError, "negated variable"),
    ("PATTERN SEQ(A a, B b) RETURN count BY z.x", QuerySemanticError, "unknown variable 'z'"),
    ("PATTERN SEQ(A a, B b) RETURN count BY a.x TOP 0", QuerySemanticError, "TOP k takes k from 1"),
    ("PATTERN SEQ(A a, B b) RETURN count BY a.x LIMIT 3", QuerySyntaxError, "expected TOP k"),
    ("PATTERN SEQ(A a, B b) RETURN cases BY a.x", QuerySemanticError, "RETURN cases needs PARTITION BY"),
])
def test_a_summary_asked_wrongly_is_refused_where_it_stands(text: str, error: type, words: str) -> None:
    with pytest.raises(error, match=words) as err:
        parse(text)
    assert err.value.line == 1 and err.value.column is not None


def test_summaries_are_refused_in_the_approximate_mode_and_for_a_missing_attribute(tmp_path: Path) -> None:
    rows = [{"ts": i, "type": t, "case": "c", "x": i} for i, t in enumerate("ABAB")]
    Dataset.build(tmp_path, "d", table_of(rows), TINY)
    with pytest.raises(QuerySemanticError, match="verified or exact mode"):
        run_query(tmp_path, "d", "PATTERN SEQ(A a, B b) RETURN durations", mode="approximate")
    with pytest.raises(QuerySemanticError, match="no attribute 'amount'") as err:
        run_query(tmp_path, "d", "PATTERN SEQ(A a, B b) RETURN count BY a.amount")
    assert err.value.column is not None
    got = run_query(tmp_path, "d", {"version": 1, "pattern": [{"kind": "var", "vars": [{"name": "a", "type": "A"}]},
                                                              {"kind": "var", "vars": [{"name": "b", "type": "B"}]}],
                                    "returns": "count", "group_by": {"var": "a", "attr": "x"}})
    assert [(g["value"], g["count"]) for g in got["groups"]] == [(0, 1), (2, 1)]


def test_a_partition_the_dataset_cannot_have_gives_empty_summaries(tmp_path: Path) -> None:
    """PARTITION BY an attribute no event holds (here a dataset without attributes): no match, no unit, no
    error — in both funnel paths and for what comes next."""
    rows = [{"ts": i, "type": t} for i, t in enumerate("ABABAB")]
    Dataset.build(tmp_path, "d", table_of(rows), TINY)
    for text in ("PATTERN SEQ(A a, B b) PARTITION BY x RETURN funnel",
                 "PATTERN SEQ(A a, B+ b) PARTITION BY x RETURN funnel",
                 "PATTERN SEQ(A a, B b) PARTITION BY x RETURN next 2"):
        for mode in ("exact", "verified"):
            try:
                got = run_query(tmp_path, "d", text, mode=mode)
            except QuerySemanticError as refused:  # (or refused as naming what the dataset lacks)
                assert "in this dataset" in str(refused)
                continue
            assert got["count"] == 0 and not got["exists"], (text, mode)
            assert all(s["reached"] == 0 for s in got.get("funnel", [])) and got.get("next", []) == []
