"""The partition-clustered index keeps the guarantees: verified = exact and no false negatives, on random
streams with random partition values — groups larger than a leaf, tiny filters that err often, appends
interleaved with queries (a tail the layout does not cover), and ``compact`` folding them in — and the
queries it serves read no more than the groups that hold every positive type.  Spark builds the same
partition tree as the local builder."""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from pathlib import Path
from unittest.mock import patch

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from api.service import run_query
from exact.errors import QuerySemanticError
from exact.query.ast import Query, Return, Strategy
from exact.query.normalize import normalize
from exact.reference import stream_table
from exact.store.grouping import Layout
from sketch.build import BuildOptions
from sketch.dataset import Dataset
from sketch.partition import group_answers as partition_answer
from tests.generators import engine_queries, keyed_streams, scaled

COMPARED = ("exists", "count", "matches", "intervals", "truncated", "strategy")


def table_of(rows: list[dict], first_seq: int = 0) -> pa.Table:
    return stream_table([{"seq": first_seq + i, **r} for i, r in enumerate(rows)])


def partitioned(query: Query) -> Query:
    return dataclasses.replace(query, partition_by=("case",) + tuple(p for p in query.partition_by
                                                                   if p != "case"))


def check(home: Path, query: Query) -> None:
    try:
        exact = run_query(home, "d", query, mode="exact")
    except QuerySemanticError as refused:
        # a comparison of an attribute with a value of another kind holds for no event: every mode refuses
        # the query alike (docs/query-language.md, "Attribute types")
        assert "in this dataset" in str(refused), refused
        for mode in ("verified", "approximate"):
            with pytest.raises(QuerySemanticError, match="in this dataset"):
                run_query(home, "d", query, mode=mode)
        return
    verified = run_query(home, "d", query, mode="verified")
    for key in COMPARED:
        assert verified.get(key) == exact.get(key), (key, query)
    # the planner's two reads, each forced: the candidate groups' events gathered, or the store's read whole
    for share, read in ((2.0, "partition"), (-1.0, "store")):
        with patch.object(partition_answer, "STORE_SHARE", share):
            forced = run_query(home, "d", query, mode="verified")
        for key in COMPARED:
            assert forced.get(key) == exact.get(key), (key, read, query)
        assert bool(forced.get("explain")) == bool(verified.get("explain")), (read, query)
        if "plan" in forced["stats"]:  # (the planner weighs the groups' events of the types read, when typed)
            assert forced["stats"]["index"] == read, (forced["stats"], query)
    for threads in ("2", "3", "4"):  # the candidate groups read and evaluated in chunks, one per thread
        with patch.dict(os.environ, {"SEQSKETCH_QUERY_THREADS": threads}), \
                patch.object(partition_answer, "MIN_PARALLEL_ROWS", 0):
            chunked = run_query(home, "d", query, mode="verified")
        for key in COMPARED:
            assert chunked.get(key) == exact.get(key), (key, threads, query)
        assert bool(chunked.get("explain")) == bool(verified.get("explain"))
    approx = run_query(home, "d", query, mode="approximate")
    if exact["exists"]:
        assert approx["exists"], query
    if query.returns == Return.MATCHES:
        spans = [(i["start_seq"], i["end_seq"]) for i in approx.get("intervals", [])]
        for m in exact["matches"]:
            assert any(a <= m["start_seq"] and m["end_seq"] <= b for a, b in spans), (m, spans, query)
    if verified["stats"]["index"] == "statistics":  # a type no event has: decided by the counts alone
        assert not exact["exists"] and verified["explain"].endswith("never occurs in the history")
    elif query.strategy != Strategy.STRICT_CONTIGUITY:
        assert verified["stats"]["index"] in ("partition", "store"), verified["stats"]


# Tiny leaves (C = 2: partition leaves of 8 slots, so big groups span several) and filters of a few bits
# (an fpq near 1), so that the Bloom filters answer "maybe" wrongly most of the time.
TINY = BuildOptions(leaf_size=2, fpq=0.9)
SETTINGS = scaled(40, HealthCheck.function_scoped_fixture)


@SETTINGS
@given(rows=keyed_streams(), data=st.data())
def test_verified_equals_exact_on_the_partition_index(rows: list[dict], data: st.DataObject) -> None:
    home = Path(tempfile.mkdtemp(prefix="seqsketch-pidx-"))
    try:
        Dataset.build(home, "d", table_of(rows), TINY)
        for _ in range(3):
            check(home, partitioned(data.draw(engine_queries())))
    finally:
        shutil.rmtree(home, ignore_errors=True)


@SETTINGS
@given(rows=keyed_streams(), more=st.lists(keyed_streams(6), min_size=1, max_size=3), data=st.data())
def test_appends_and_compact_keep_the_answers(rows: list[dict], more: list[list[dict]],
                                              data: st.DataObject) -> None:
    """Appends go to a tail the layout does not cover — with new cases and cases the layout knows, whose
    matches cross the boundary — and compact folds them in; every answer stays the exact one."""
    home = Path(tempfile.mkdtemp(prefix="seqsketch-pidx-"))
    try:
        Dataset.build(home, "d", table_of(rows), TINY)
        dataset = Dataset.open(home, "d")
        last_ts = rows[-1]["ts"]
        for batch in more:
            shifted = [{**r, "ts": r["ts"] + last_ts + 1} for r in batch]
            last_ts = shifted[-1]["ts"]
            dataset.append(table_of(shifted).drop_columns(["seq"]))
            check(home, partitioned(data.draw(engine_queries())))
        info = dataset.snapshot().store
        assert info.extra["layout"]["events"] == len(rows) < info.events
        dataset.compact()
        assert dataset.snapshot().store.extra["layout"]["events"] == dataset.snapshot().store.events
        check(home, partitioned(data.draw(engine_queries())))
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_compact_equals_a_build_of_all_the_events(home: Path, shared_data: Path) -> None:
    from exact.ingest import ingest

    stream = ingest([shared_data / "running-example.xes"])
    half = stream.num_rows // 2
    Dataset.build(home, "d", stream.slice(0, half))
    dataset = Dataset.open(home, "d")
    dataset.append(stream.slice(half).drop_columns(["seq"]))
    compacted = dataset.compact().store.extra["partition_index"]["index_digest"]
    Dataset.build(home, "whole", stream)
    whole = Dataset.open(home, "whole").snapshot().store.extra["partition_index"]["index_digest"]
    assert compacted == whole


def test_candidates_are_the_groups_holding_every_type(home: Path, shared_data: Path) -> None:
    """On BPI 2012: verification of a rare per-case question reads the events of the cases that hold every
    positive type (the least a type-only index can read) — at most twice as many — and the answer names
    them when there are none."""
    from exact.ingest import ingest
    from exact.store.grouping import key_values

    stream = ingest([shared_data / "bpic2012.xes.gz"])
    Dataset.build(home, "d", stream)
    case = key_values(stream, "case").to_numpy(zero_copy_only=False)
    kinds = stream.column("type").to_numpy(zero_copy_only=False)
    pairs = (("W_Beoordelen fraude", "A_DECLINED"), ("O_DECLINED", "W_Wijzigen contractgegevens"),
             ("A_APPROVED", "O_SENT_BACK"))
    for first, then in pairs:
        holding = set(case[kinds == first]) & set(case[kinds == then])
        least = int(np.isin(case, list(holding)).sum())
        query = f"PATTERN SEQ('{first}' a, '{then}' b) PARTITION BY case WITHIN 30 days"
        verified = run_query(home, "d", query, mode="verified")
        assert verified == {**verified, **{k: v for k, v in run_query(home, "d", query, mode="exact").items()
                                           if k in COMPARED}}
        assert verified["stats"]["candidate_groups"] == len(holding)
        assert verified["stats"]["events_scanned"] <= max(2 * least, 1), (query, least)
    none = run_query(home, "d", "PATTERN SEQ(O_DECLINED a, 'W_Wijzigen contractgegevens' b, A_REGISTERED c) "
                              "PARTITION BY case", mode="verified")
    holding = (set(case[kinds == "O_DECLINED"]) & set(case[kinds == "W_Wijzigen contractgegevens"])
               & set(case[kinds == "A_REGISTERED"]))
    if not holding:
        assert not none["exists"] and none["stats"]["events_scanned"] == 0
        assert none["explain"].startswith("no case holds")


@pytest.mark.spark
def test_spark_builds_the_same_partition_tree(spark, tmp_path: Path, home: Path, shared_data: Path) -> None:
    from api.service import build_from_inputs
    from sketch.spark.job import build_dataset_spark

    log = shared_data / "running-example.xes"
    build_from_inputs(home, "local", [str(log)], engine="local")
    build_dataset_spark(home, "spark", [str(log)], spark=spark)
    local = Dataset.open(home, "local").snapshot().store.extra
    remote = Dataset.open(home, "spark").snapshot().store.extra
    assert local["partition_index"]["index_digest"] == remote["partition_index"]["index_digest"]
    assert local["index"]["index_digest"] == remote["index"]["index_digest"]
    assert local["layout"]["groups"] == remote["layout"]["groups"] == 6


@SETTINGS
@given(rows=keyed_streams(), data=st.data())
def test_the_groups_type_sets_find_what_the_tree_and_they_find(rows: list[dict], data: st.DataObject) -> None:
    """With every group's type set at hand the tree's walk is skipped: the tree never misses a type, so it
    could keep no group the type sets rule out (a dataset of more than 64 types walks it)."""
    home = Path(tempfile.mkdtemp(prefix="seqsketch-pidx-"))
    try:
        Dataset.build(home, "d", table_of(rows), TINY)
        dataset = Dataset.open(home, "d")
        index = dataset.partition(dataset.snapshot().store)
        assert index is not None and index.layout.knows_type_sets
        for _ in range(3):
            try:
                plan = normalize(partitioned(data.draw(engine_queries())))
            except QuerySemanticError:
                continue  # (a drawn query the definitions refuse has no plan)
            by_sets = index.candidates(plan)
            with patch.object(Layout, "knows_type_sets", False):
                walked = index.candidates(plan)
            assert by_sets.groups.tolist() == walked.groups.tolist()
            assert (by_sets.explain is None) == (walked.explain is None)
    finally:
        shutil.rmtree(home, ignore_errors=True)
