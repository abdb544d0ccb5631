"""The Spark build job against the local build, on a real local SparkSession (one per test run).

Equal means: the same event-store contents (every column, type and value, in seq order, and the manifest's
counts, attribute types and time range) and the same ``index_digest`` of both trees — on the real running
example, on bpic2012, on a generated stream of several CSV, JSON Lines and text inputs with many timestamp
ties, attribute types that differ between files, and windows small enough that many tasks write parts and
leaves, and on large generated CSV, JSON Lines and Parquet files read in many pieces.  A failing job leaves
the previous version live and queryable and no files behind; a Spark append equals a local append.
"""

from __future__ import annotations

import csv
import json
import time
import zipfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from exact.errors import Conflict, InputError, SeqsketchError
from exact.events import iso_of_micros
from exact.ingest import IngestOptions, ingest, read_inputs
from exact.store import EventStore, dataset_dir, store_dir
from exact.store.manifest import PARTS
from exact.store.seek import open_seek
from exact.store.seek_format import seek_name
from sketch.build_request import BuildRequest
from sketch.dataset import Dataset
from sketch.spark.job import append_dataset_spark, build_dataset_spark
from sketch.spark.read import collect_staged, plan_inputs, plan_pieces, shifted, stage_inputs, unified_attrs
from sketch.spark.sample_sort import ChunkRef, WindowPlan, choose_boundaries, parts_of, write_windows

pytestmark = pytest.mark.spark


# ----------------------------------------------------------------------------------------------- helpers


def local_build(home: Path, name: str, inputs: list[Path], **options) -> Dataset:
    from api.service import build_from_inputs as build_dataset

    build_dataset(home, name, [str(p) for p in inputs], BuildRequest(**options))
    return Dataset.open(home, name)


def store_table(home: Path, name: str) -> pa.Table:
    return EventStore.open(store_dir(dataset_dir(name, home))).read_table()


def manifest_facts(home: Path, name: str) -> dict:
    snap = EventStore.open(store_dir(dataset_dir(name, home))).snapshot()
    return {"events": snap.events, "first_ts": snap.first_ts, "last_ts": snap.last_ts,
            "types": dict(snap.type_counts), "attrs": dict(snap.attrs)}


def digest(home: Path, name: str) -> str:
    return Dataset.open(home, name).snapshot().tree.digest()


def partition_digest(home: Path, name: str) -> str | None:
    snap = EventStore.open(store_dir(dataset_dir(name, home))).snapshot()
    return (snap.extra.get("partition_index") or {}).get("index_digest")


def assert_same_dataset(spark, home: Path, local: str, other: str) -> None:
    """Same stored events (schema and values, in seq order), same manifest facts, same index digest, and every
    seek file of both with its value indexes."""
    from pyspark.testing import assertDataFrameEqual

    a, b = store_table(home, local), store_table(home, other)
    assert b.schema == a.schema
    assert b.equals(a)
    assertDataFrameEqual(spark.createDataFrame(b), spark.createDataFrame(a), checkRowOrder=True)
    assert manifest_facts(home, other) == manifest_facts(home, local)
    assert digest(home, other) == digest(home, local)
    assert partition_digest(home, other) == partition_digest(home, local)
    assert unindexed(home, other) == unindexed(home, local) == []


def unindexed(home: Path, name: str) -> list[tuple[str, str]]:
    """The (part, attribute) whose values a part's seek file serves but does not index (an integer, double or
    string attribute of more than one value in the part without its value index: :mod:`exact.store.seek_attrs`;
    one value's index would hold what the rows by type hold); every seek file is opened, so one the build left
    out or could not read fails here too."""
    root = store_dir(dataset_dir(name, home))
    missing = []
    for part in EventStore.open(root).snapshot().parts:
        seek = open_seek(root / PARTS / seek_name(part.file), part.rows)
        missing += [(part.file, attr) for attr, column in seek.attrs.items()
                    if column.kind in ("int64", "double", "string") and column.index is None
                    and len(pc.unique(column.values(np.arange(part.rows)).drop_null())) > 1]
    return missing


def write_generated_inputs(folder: Path, seed: int = 7, seconds: int = 1_600_000_000) -> list[Path]:
    """Three CSV and two JSON Lines files with heavy ts ties (40 distinct seconds from ``seconds``),
    attribute types that differ between files (int / double / text / bool / empty, nested JSON), two text
    inputs and a zip corpus whose positions continue one another, and a Parquet file."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for f in range(3):
        path = folder / f"part{f}.csv"
        with open(path, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["ts", "type", "case", "amount", "flag", "note", "empty"])
            for _ in range(int(rng.integers(250, 400))):
                ts = seconds + int(rng.integers(0, 40))  # 40 distinct seconds: many ties within and across
                amount = {0: str(int(rng.integers(0, 100))), 1: f"{rng.random() * 100:.3f}",
                          2: rng.choice(["low", "12", "high"])}[f]
                w.writerow([ts, f"T{int(rng.zipf(1.6)) % 12}", int(rng.integers(0, 30)), amount,
                            rng.choice(["true", "false", "TRUE"]), rng.choice(["", "x, y", "z"]), ""])
        paths.append(path)
    for f in range(2):
        path = folder / f"part{f}.jsonl"
        with open(path, "w", encoding="utf-8") as fh:
            for i in range(int(rng.integers(250, 400))):
                record = {"ts": iso_of_micros((seconds + int(rng.integers(0, 40))) * 1_000_000 + i % 3),
                          "type": f"T{int(rng.zipf(1.6)) % 12}", "case": int(rng.integers(0, 30))}
                if i % 3 == 0:
                    record["amount"] = float(rng.random())
                if i % 5 == 0:
                    record["attrs"] = {"nested": {"b": [1, 2], "a": None}, "flag": bool(i % 2)}
                if f == 1 and i % 7 == 0:
                    record["case"] = "c-" + str(i)  # case widens to text across files
                if i % 11 == 0:
                    record["Case"] = i  # another attribute than "case": names are case-sensitive
                fh.write(json.dumps(record) + "\n")
        paths.append(path)
    for f in range(2):
        path = folder / f"words{f}.txt"
        words = [f"w{int(x) % 9}" for x in rng.zipf(1.4, 150)]
        lines = [" ".join(words[i:i + 10]) for i in range(0, len(words), 10)]
        path.write_text("\n".join(lines), encoding="utf-8")
        paths.append(path)
    corpus = folder / "corpus.zip"  # members in name order, the README skipped, word/tag tokens
    with zipfile.ZipFile(corpus, "w") as archive:
        archive.writestr("b/second.txt", "the/at cat/nn sat/vbd")
        archive.writestr("a/first.txt", "a/at dog/nn\nran/vbd")
        archive.writestr("README", "not words")
    paths.append(corpus)
    table = pa.table({"ts": pa.array((seconds + rng.integers(0, 40, 120)) * 1_000_000, pa.timestamp("us")),
                      "type": pa.array([f"T{x % 12}" for x in rng.integers(0, 50, 120)]),
                      "case": pa.array(rng.integers(0, 30, 120), pa.int32()),
                      "amount": pa.array(rng.random(120))})
    pq.write_table(table, folder / "extra.parquet")  # a naive timestamp column is read as UTC
    paths.append(folder / "extra.parquet")
    return paths


# ------------------------------------------------------------------------------------- DataFrame steps


def test_staged_chunks_ordered_by_windows_equal_local_ingest(spark, tmp_path: Path) -> None:
    """The DataFrame steps alone: inputs staged in small sorted chunks, cut into windows from their samples
    and merged per window — the windows' parts hold the local ingest's stream, seq for seq, and start on
    leaf boundaries."""
    inputs = write_generated_inputs(tmp_path)
    options = IngestOptions(batch_rows=40)
    files = plan_inputs(inputs, options)
    pieces = plan_pieces(files)
    staging = tmp_path / "staging"
    rows = [r.asDict() for r in stage_inputs(spark, pieces, options, staging, chunk_rows=97).collect()]
    staged = collect_staged(rows, pieces)
    assert len(staged.chunks) > 2 * len(files)  # the test means something only over many chunks
    located = shifted(staged.chunks, files)
    store = EventStore.create(tmp_path / "store")
    plan = WindowPlan(store_root=str(store.root), row_group_size=64,
                      attrs=tuple(unified_attrs(staged.chunks).items()),
                      chunks=tuple(ChunkRef(c.path, c.rows, shift, c.text_types) for c, shift in located),
                      bounds=choose_boundaries(located, 9), first_seq=0, leaf_size=8)
    windows = sorted((r.asDict() for r in write_windows(spark, plan).collect()), key=lambda r: r["window"])
    assert not [w["error"] for w in windows if w["error"]]
    parts = [p for w in windows for p in parts_of(w)]
    assert len(parts) >= 5 and all(p.first_seq % 8 == 0 for p in parts)
    with store.writing():
        store.commit(parts)
    expected = ingest(inputs, options)
    assert store.read_table().equals(expected)


# -------------------------------------------------------------------------------- builds: local == Spark


def test_running_example_equals_local_build(spark, shared_data: Path, home: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Through the CLI, as a user runs it (the fixture's session is the one the command finds)."""
    from api.cli import main

    source = str(shared_data / "running-example.xes")
    assert main(["build", "spark", source, "--engine", "spark", "--json", "--index-attrs", "case"]) == 0
    summary = json.loads(capsys.readouterr().out)
    local_build(home, "local", [Path(source)])
    assert_same_dataset(spark, home, "local", "spark")
    assert summary["events"] == 42 and summary["index"]["index_digest"] == digest(home, "local")
    assert summary["timings"]["ingest"] >= 0 and summary["timings"]["index"] >= 0
    # the executors' parts serve the attributes the build named, and only them
    section = summary["attr_index"]
    assert section["chosen"] == ["case"] and list(section["attributes"]) == ["case"]
    assert section["attributes"]["case"]["parts"] == section["parts"] > 0
    assert main(["build", "spark2", source, "--engine", "spark", "--index-attrs", "cas"]) == 1
    assert "no event has the attribute 'cas'" in capsys.readouterr().err


def test_generated_multi_file_stream_equals_local_build(spark, tmp_path: Path, home: Path) -> None:
    inputs = write_generated_inputs(tmp_path)
    local_build(home, "local", inputs, leaf_size=8)
    reports: list[tuple[float, str]] = []
    summary = build_dataset_spark(home, "spark", inputs, BuildRequest(leaf_size=8), spark=spark, window_events=320,
                                  progress=lambda f, m: reports.append((f, m)))
    assert_same_dataset(spark, home, "local", "spark")
    parts = EventStore.open(store_dir(dataset_dir("spark", home))).snapshot().parts
    assert len(parts) >= summary["events"] // 640  # a part per window of ~40 leaves, written by its task
    assert all(p.first_seq % 8 == 0 for p in parts)  # windows hold whole leaves
    fractions = [f for f, _ in reports]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert any(f"{summary['events']:,} events" in m for _, m in reports)
    attrs = manifest_facts(home, "spark")["attrs"]
    assert attrs["amount"] == "string" and attrs["case"] == "string" and attrs["nested"] == "string"
    assert attrs["Case"] == "int64" and attrs["empty"] == "string"  # a column no value filled is text


@pytest.mark.slow
def test_bpic2012_equals_local_build(spark, shared_data: Path, home: Path) -> None:
    source = shared_data / "bpic2012.xes.gz"
    local_build(home, "local", [source])
    build_dataset_spark(home, "spark", [source], spark=spark)
    assert_same_dataset(spark, home, "local", "spark")


# ------------------------------------------------------------------------------------------- failures


def test_malformed_input_among_good_ones_names_it_and_keeps_the_live_version(
        spark, shared_data: Path, tmp_path: Path, home: Path) -> None:
    good = write_generated_inputs(tmp_path)[:2]
    local_build(home, "d", good)
    before = live_state(home, "d")
    bad = tmp_path / "bad.csv"
    bad.write_text("ts,type\n1600000000,A\nnot a time,B\n", encoding="utf-8")
    with pytest.raises(InputError) as caught:
        build_dataset_spark(home, "d", [*good, bad, shared_data / "running-example.xes"], BuildRequest(replace=True),
                            spark=spark)
    assert "bad.csv" in str(caught.value) and "line 3" in str(caught.value) and "'ts'" in str(caught.value)
    assert_untouched(home, "d", before)
    assert sorted(p.name for p in (home / "datasets").iterdir()) == ["d"]  # no staging left behind

    with pytest.raises(InputError, match="bad.csv"):
        append_dataset_spark(home, "d", [bad], spark=spark)
    assert_untouched(home, "d", before)


def test_injected_failure_after_parts_were_written_leaves_nothing(spark, tmp_path: Path, home: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    inputs = write_generated_inputs(tmp_path)
    local_build(home, "d", inputs[:3])
    before = live_state(home, "d")

    def broken(*args, **kwargs):
        raise SeqsketchError("injected failure while merging")

    monkeypatch.setattr("sketch.spark.job.merge_leaves", broken)
    later = tmp_path / "later.csv"
    later.write_text("ts,type\n1700000000,A\n1700000001,B\n", encoding="utf-8")
    with pytest.raises(SeqsketchError, match="injected"):
        append_dataset_spark(home, "d", [later], spark=spark)
    assert_untouched(home, "d", before)


def test_append_going_back_in_time_is_refused_before_writing(spark, tmp_path: Path, home: Path) -> None:
    inputs = write_generated_inputs(tmp_path)
    local_build(home, "d", inputs[:2])
    before = live_state(home, "d")
    old = tmp_path / "old.csv"
    old.write_text("ts,type\n1500000000,A\n", encoding="utf-8")
    with pytest.raises(Conflict, match="back in time"):
        append_dataset_spark(home, "d", [old], spark=spark)
    assert_untouched(home, "d", before)


def live_state(home: Path, name: str) -> tuple[pa.Table, str, dict]:
    """What a reader sees: the stored events, the index digest, and an exact query's answer."""
    return store_table(home, name), digest(home, name), query_answer(home, name)


def query_answer(home: Path, name: str) -> dict:
    from api.service import run_query

    out = run_query(home, name, "PATTERN SEQ(ANY a, ANY b) WITHIN 2 EVENTS", mode="exact")
    return {"count": out["count"], "matches": out["matches"]}


def assert_untouched(home: Path, name: str, before: tuple[pa.Table, str, dict]) -> None:
    root = store_dir(dataset_dir(name, home))
    snap = EventStore.open(root).snapshot()
    assert store_table(home, name).equals(before[0]) and digest(home, name) == before[1]
    assert query_answer(home, name) == before[2] and before[2]["count"] > 0  # live and queryable
    assert Dataset.open(home, name).snapshot().tree.n_events == snap.events
    on_disk = sorted(p.name for p in (root / "parts").iterdir())
    assert on_disk == sorted(f for p in snap.parts for f in p.files)
    live = [Path(snap.extra[k]["file"]).name for k in ("index", "partition_index") if k in snap.extra]
    assert sorted(p.name for p in (dataset_dir(name, home) / "index").iterdir()) == sorted(live)
    assert not [p for p in dataset_dir(name, home).iterdir() if p.name.startswith(".spark")]


# ------------------------------------------------------------------------------------------- appends


def test_spark_append_equals_local_append(spark, tmp_path: Path, home: Path) -> None:
    csvs = write_generated_inputs(tmp_path / "first")[:3]
    jsonls = write_generated_inputs(tmp_path / "later", seed=8, seconds=1_600_003_600)[3:5]  # an hour on
    for name in ("local", "spark"):
        local_build(home, name, csvs, leaf_size=8)  # 1,000-odd events: the last leaf is partial
    Dataset.open(home, "local").append(read_inputs([str(p) for p in jsonls]))
    summary = append_dataset_spark(home, "spark", jsonls, spark=spark, window_events=40)
    assert_same_dataset(spark, home, "local", "spark")
    assert summary["events"] == store_table(home, "local").num_rows


def test_missing_input_fails_before_spark_runs(home: Path, tmp_path: Path) -> None:
    started = time.perf_counter()
    with pytest.raises(InputError, match="no such file"):
        build_dataset_spark(home, "d", [tmp_path / "absent.csv"], spark=object())
    assert time.perf_counter() - started < 5
    assert not (home / "datasets" / "d").exists()


def test_existing_dataset_is_refused_before_spark_runs(home: Path, shared_data: Path) -> None:
    source = shared_data / "running-example.xes"
    local_build(home, "d", [source])
    before = store_table(home, "d")
    with pytest.raises(Conflict, match="exists already"):
        build_dataset_spark(home, "d", [source], spark=object())  # no session is needed to refuse
    assert store_table(home, "d").equals(before)


def test_service_build_reports_the_jobs_stages(spark, shared_data: Path, home: Path) -> None:
    """An HTTP build job with engine spark: its progress (fraction, message) reaches the jobs table's hook."""
    from api.service import build_dataset

    reports: list[tuple[float, str | None]] = []
    summary = build_dataset(home, "run", [shared_data / "running-example.xes"], {"engine": "spark"},
                            progress=lambda fraction, message=None: reports.append((fraction, message)))
    assert summary["events"] == 42
    messages = [m or "" for _, m in reports]
    assert any(m.startswith("ordering 42 events") for m in messages)
    assert any("merging" in m for m in messages) and reports[-1][0] == 1.0


def test_cli_append_locally(shared_data: Path, tmp_path: Path, home: Path,
                            capsys: pytest.CaptureFixture[str]) -> None:
    """``seqsketch append`` without Spark: the same result as Dataset.append, reported as seqs."""
    from api.cli import main

    local_build(home, "d", [shared_data / "running-example.xes"])
    later = tmp_path / "later.csv"
    later.write_text("ts,type,case\n2031-01-01T00:00:00Z,A,7\n2031-01-01T00:00:00Z,B,7\n", encoding="utf-8")
    assert main(["append", "d", str(later), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["appended"], out["first_seq"], out["last_seq"], out["events"]) == (2, 42, 43, 44)
    assert out["index"]["index_digest"] == digest(home, "d")
    assert store_table(home, "d").column("type").to_pylist()[-2:] == ["A", "B"]
    assert main(["append", "d", str(shared_data / "running-example.xes")]) == 1  # back in time: refused
    assert "back in time" in capsys.readouterr().err and store_table(home, "d").num_rows == 44


def test_inputs_already_in_time_order_equal_local(spark, tmp_path: Path, home: Path) -> None:
    """Time-ordered files (ties within and across file boundaries): the stable order keeps input order
    among equal times, across windows too, as the local build does."""
    rng = np.random.default_rng(3)
    ts = np.sort(1_600_000_000 + rng.integers(0, 60, 600))
    ts[200], ts[400] = ts[199], ts[399]  # ties across the file boundaries
    inputs = []
    for f, rows in enumerate(np.split(np.arange(600), [200, 400])):
        path = tmp_path / f"sorted{f}.csv"
        lines = ["ts,type,case"] + [f"{ts[i]},T{int(rng.integers(0, 9))},{int(rng.integers(0, 5))}"
                                    for i in rows]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        inputs.append(path)
    local_build(home, "local", inputs, leaf_size=8)
    build_dataset_spark(home, "spark", inputs, BuildRequest(leaf_size=8), spark=spark, window_events=80)
    assert_same_dataset(spark, home, "local", "spark")


# ---------------------------------------------------------------------------------- inputs in pieces


def test_large_inputs_read_in_pieces_equal_local_build(spark, tmp_path: Path, home: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """One CSV (CRLF, quotes, UTF-8, a column only the whole file types), one JSON Lines and one Parquet
    file, each read by many tasks, and a CSV whose quoted newlines straddle the cuts (read again whole):
    the dataset equals the local build's."""
    from tests.generators import write_csv, write_jsonl

    monkeypatch.setenv("SEQSKETCH_SPLIT_BYTES", "20000")
    rng = np.random.default_rng(9)
    n = 6_000
    table = pa.table({"ts": pa.array(1_600_000_000 + rng.integers(0, 900, n), pa.int64()),
                      "type": pa.array([f"P{x}" for x in rng.integers(0, 15, n)]),
                      "case": pa.array(rng.integers(0, 40, n), pa.int64())})
    pq.write_table(table, tmp_path / "c.parquet", row_group_size=700)
    inputs = [write_csv(tmp_path / "a.csv", 3_000), write_jsonl(tmp_path / "b.jsonl", 3_000),
              tmp_path / "c.parquet", write_csv(tmp_path / "d.csv", 1_500, seed=4, multiline=3)]
    files = plan_inputs(inputs, IngestOptions())
    pieces = plan_pieces(files, 20_000)
    assert [sum(p.file == i for p in pieces) for i in range(4)] >= [5, 5, 3, 5]
    rows = [r.asDict() for r in stage_inputs(spark, pieces, IngestOptions(), tmp_path / "staging").collect()]
    assert collect_staged(rows, pieces).reread == (3,)  # only the file cut inside quoted newlines
    # (a footprint budget that binds nowhere: the local build's one part and Spark's windows would each give
    # up different value indexes under the default, and every seek file is checked to index its attributes)
    local_build(home, "local", inputs, leaf_size=16, footprint=100)
    build_dataset_spark(home, "spark", inputs, BuildRequest(leaf_size=16, footprint=100), spark=spark,
                        window_events=2_000)
    assert_same_dataset(spark, home, "local", "spark")


def test_malformed_record_in_a_pieced_input_names_its_line(spark, tmp_path: Path, home: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A bad record deep inside a file read in pieces: the error is the whole-file reader's, naming the
    file and the line."""
    from tests.generators import write_csv

    monkeypatch.setenv("SEQSKETCH_SPLIT_BYTES", "10000")
    path = write_csv(tmp_path / "bad.csv", 2_000)
    lines = path.read_bytes().split(b"\r\n")
    lines[1_500] = b"not a time,T1,3,4,true,x,"
    path.write_bytes(b"\r\n".join(lines))
    with pytest.raises(InputError) as caught:
        build_dataset_spark(home, "d", [path], spark=spark)
    assert "bad.csv" in str(caught.value) and "line 1501" in str(caught.value)
    assert not (home / "datasets" / "d").exists()


# -------------------------------------------------------------------------------------- object storage


def test_a_spark_build_to_a_bucket_equals_the_local_build_and_its_tasks_upload_the_parts(
        spark, seaweed, tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--store s3://…`` on Spark: the same dataset as the local build (events, facts, digests, seek files),
    each window's task uploads the parts it wrote — the driver puts none of them — and a server that has not
    served it reads it from the bucket alone."""
    import uuid

    from exact.store import objects
    from exact.store.fetch import location_of
    from exact.store.replica import attach

    inputs = write_generated_inputs(tmp_path)
    local_build(home, "local", inputs, leaf_size=8)
    driver_puts: list[str] = []
    real_put = objects.ObjectStore.put_if_absent

    def watched(self: objects.ObjectStore, key: str, data: bytes) -> bool:
        driver_puts.append(key)
        return real_put(self, key, data)

    monkeypatch.setattr(objects.ObjectStore, "put_if_absent", watched)
    build_dataset_spark(home, "spark", inputs,
                        BuildRequest(leaf_size=8, store=f"s3://seqsketch-test/spark-{uuid.uuid4().hex[:8]}"),
                        spark=spark, window_events=320)
    assert_same_dataset(spark, home, "local", "spark")
    uri = location_of(dataset_dir("spark", home))
    assert uri is not None
    snap = EventStore.open(store_dir(dataset_dir("spark", home))).snapshot()
    assert len(snap.parts) >= 2 and not [k for k in driver_puts if k.startswith("store/parts/")]
    assert any(k.startswith("index/") for k in driver_puts)  # (the driver's own files: the trees)
    other = tmp_path / "other"
    attach(dataset_dir("spark", other), uri)
    assert store_table(other, "spark").equals(store_table(home, "local"))
    assert digest(other, "spark") == digest(home, "local")


def test_inputs_on_a_bucket_are_read_by_the_tasks_in_pieces_and_equal_local_ones(
        spark, seaweed, tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``s3://`` inputs: the tasks read their pieces of large CSV, JSON Lines and Parquet objects by ranges
    (small pieces here, so every file is cut), the rest whole; the dataset equals the one built from the same
    files on disk, on Spark and in process."""
    import uuid

    from api.service import build_from_inputs
    from exact.store.objects import ObjectStore
    from sketch.spark.read import plan_pieces

    inputs = write_generated_inputs(tmp_path)
    prefix = f"s3://seqsketch-test/inputs-{uuid.uuid4().hex[:8]}"
    bucket = ObjectStore(prefix, create_bucket=True)
    for path in inputs:
        bucket.put(path.name, path.read_bytes())
    remote = [f"{prefix}/{p.name}" for p in inputs]
    monkeypatch.setenv("SEQSKETCH_SPLIT_BYTES", "4096")
    files = plan_inputs(remote, IngestOptions())
    assert sum(1 for p in plan_pieces(files, 4096) if p.split.pieces > 1) >= 3  # (objects cut in pieces)
    local_build(home, "local", inputs, leaf_size=8)
    build_dataset_spark(home, "spark", remote, BuildRequest(leaf_size=8), spark=spark, window_events=320)
    assert_same_dataset(spark, home, "local", "spark")
    build_from_inputs(home, "inproc", remote, BuildRequest(leaf_size=8), engine="local")
    assert store_table(home, "inproc").equals(store_table(home, "local"))
    assert digest(home, "inproc") == digest(home, "local")
    with pytest.raises(InputError, match="no such"):
        build_from_inputs(home, "missing", [f"{prefix}/absent.csv"], engine="local")
