"""Readers and ingest on the real logs and on generated files, each checked against a reference built
straight from the format's definition; and every kind of malformed input named by file, line/record, field."""

from __future__ import annotations

import csv
import gzip
import json
import xml.etree.ElementTree as ET
import zipfile
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from exact.errors import InputError
from exact.events import ATTRS, TS, TYPE, attr_types, records_to_table, to_records
from exact.ingest import IngestOptions, ingest, order_by_time, read_inputs, with_seq
from exact.readers import detect_format, word_of
from tests.generators import scaled

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def micros(dt: datetime) -> int:
    return (dt - EPOCH) // timedelta(microseconds=1)


# ------------------------------------------------------------------------------------------ real data


def reference_xes(path: Path) -> list[dict[str, Any]]:
    """The events of an XES log in document order, parsed whole with ElementTree (fine for a small log)."""
    def local(tag: str) -> str:
        return tag.rsplit("}", 1)[-1]

    def value(el: ET.Element) -> Any:
        kind, raw = local(el.tag), el.get("value")
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
        if kind == "boolean":
            return raw.lower() == "true"
        if kind == "date":
            return datetime.fromisoformat(raw).astimezone(UTC).isoformat(timespec="microseconds")
        return raw

    out = []
    for trace in (c for c in ET.parse(path).getroot() if local(c.tag) == "trace"):
        trace_attrs = {("case" if c.get("key") == "concept:name" else c.get("key")): value(c)
                       for c in trace if local(c.tag) not in ("event",)}
        for event in (c for c in trace if local(c.tag) == "event"):
            attrs = {c.get("key"): c for c in event}
            rec = {"ts": micros(datetime.fromisoformat(attrs.pop("time:timestamp").get("value"))),
                   "type": attrs.pop("concept:name").get("value"),
                   "attrs": {**trace_attrs, **{k: value(v) for k, v in attrs.items()}}}
            out.append(rec)
    return out


def test_running_example_reads_as_its_definition(shared_data: Path) -> None:
    path = shared_data / "running-example.xes"
    raw = read_inputs([path])
    assert to_records(raw) == reference_xes(path)
    stream = ingest([path])
    assert stream.num_rows == 42
    assert len(pc.unique(stream.column(ATTRS).combine_chunks().field("case"))) == 6
    assert stream.column("seq").to_pylist() == list(range(42))
    assert stream.schema.field(TS).type == pa.timestamp("us", tz="UTC")


@pytest.fixture(scope="module")
def bpic_raw(shared_data: Path) -> pa.Table:
    return read_inputs([shared_data / "bpic2012.xes.gz"])


def test_bpic2012_counts(bpic_raw: pa.Table) -> None:
    stream = with_seq(order_by_time(bpic_raw))
    assert stream.num_rows == 262_200
    assert len(pc.unique(stream.column(ATTRS).combine_chunks().field("case"))) == 13_087
    assert len(pc.unique(stream.column(TYPE))) == 24
    assert set(attr_types(stream.schema)) == {"case", "REG_DATE", "AMOUNT_REQ", "org:resource",
                                              "lifecycle:transition"}


def test_bpic2012_is_sorted_by_ts_and_stable(bpic_raw: pa.Table) -> None:
    ts = bpic_raw.column(TS).cast(pa.int64()).to_pylist()
    expected_order = sorted(range(len(ts)), key=lambda i: ts[i])  # Python's sort is stable
    stream = with_seq(order_by_time(bpic_raw.append_column("input_pos", pa.array(range(len(ts))))))
    assert stream.column("input_pos").to_pylist() == expected_order
    assert stream.column("seq").to_pylist() == list(range(len(ts)))
    # The log really has ties, so stability is exercised, not vacuous.
    assert len(set(ts)) < len(ts)


def brown_reference(path: Path) -> list[str]:
    words = []
    with zipfile.ZipFile(path) as zf:
        for name in sorted(zf.namelist()):
            base = name.rstrip("/").rsplit("/", 1)[-1]
            if name.endswith("/") or base in ("README", "CONTENTS", "cats.txt"):
                continue
            for token in zf.read(name).decode("utf-8").split():
                words.append(token[: token.rindex("/")] if "/" in token[1:] else token)
    return words


def test_brown_zip_as_text(shared_data: Path) -> None:
    path = shared_data / "brown.zip"
    stream = ingest([path], IngestOptions(fmt="text"))
    words = brown_reference(path)
    assert stream.num_rows == len(words) > 1_000_000
    assert stream.column(TYPE).to_pylist() == words
    assert stream.column(TS).cast(pa.int64()).to_pylist()[:3] == [0, 1_000_000, 2_000_000]
    assert stream.column(TS).cast(pa.int64())[-1].as_py() == (len(words) - 1) * 1_000_000
    assert ATTRS not in stream.column_names


def test_word_of_keeps_the_part_before_the_last_slash() -> None:
    assert word_of("The/at") == "The"
    assert word_of("./.") == "."
    assert word_of("1/2/cd") == "1/2"
    assert word_of("plain") == "plain"
    assert word_of("/x") == "/x"


def test_several_text_inputs_continue_positions(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("x/nn y\n z")
    b.write_text("w v/vb")
    stream = ingest([a, b])
    assert stream.column(TYPE).to_pylist() == ["x", "y", "z", "w", "v"]
    assert stream.column(TS).cast(pa.int64()).to_pylist() == [i * 1_000_000 for i in range(5)]


# ---------------------------------------------------------------------------------- generated inputs

_OFFSETS = st.sampled_from([0, 60, -300, 330, 14 * 60])
_TS = st.integers(min_value=-(10**15), max_value=4 * 10**15)
_TYPES = st.sampled_from(["A", "B", "C", "Σ one"])
_TEXT = st.from_regex(r"[a-z]{0,4}q", fullmatch=True)


def iso(us: int, offset_min: int) -> str:
    tz = timezone(timedelta(minutes=offset_min))
    return (EPOCH + timedelta(microseconds=us)).astimezone(tz).isoformat()


@st.composite
def csv_rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    n = draw(st.integers(1, 25))
    kinds = {"n": st.integers(-(2**62), 2**62), "f": st.floats(allow_nan=False, allow_infinity=False),
             "b": st.booleans(), "s": _TEXT}
    rows = []
    for _ in range(n):
        rows.append({"type": draw(_TYPES), "ts": draw(_TS), "off": draw(_OFFSETS),
                     **{k: draw(st.none() | s) for k, s in kinds.items()}})
    return rows


def csv_cell(column: str, value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if column == "f" else str(value)


@scaled(40, HealthCheck.function_scoped_fixture)
@given(rows=csv_rows())
def test_csv_round_trip_types_columns(tmp_path: Path, rows: list[dict[str, Any]]) -> None:
    path = tmp_path / "events.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["kind", "when", "n", "f", "b", "s"])
        for r in rows:
            w.writerow([r["type"], iso(r["ts"], r["off"]), *(csv_cell(k, r[k]) for k in "nfbs")])
    got = to_records(read_inputs([path], IngestOptions(type_field="kind", time_field="when")))
    expected_type = {"n": int, "f": float, "b": bool, "s": str}
    for r, g in zip(rows, got, strict=True):
        assert (g["ts"], g["type"]) == (r["ts"], r["type"])
        want = {k: r[k] for k in "nfbs" if r[k] is not None}
        # a float column whose every value is integral still reads as double
        want = {k: float(v) if k == "f" else v for k, v in want.items()}
        assert g["attrs"] == want
        for k, v in g["attrs"].items():
            assert type(v) is expected_type[k]


def test_csv_column_inference_over_the_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "mixed.csv"
    lines = ["type,ts,a,b,c,d"] + [f"T,{i},{i},{i},TRUE,{i}" for i in range(70_000)]
    lines += ["T,70000,1.5,x,false,"]
    path.write_text("\n".join(lines) + "\n")
    table = read_inputs([path])
    types = attr_types(table.schema)
    assert types == {"a": pa.float64(), "b": pa.string(), "c": pa.bool_(), "d": pa.int64()}
    last = to_records(table.slice(table.num_rows - 1))[0]
    assert last["attrs"] == {"a": 1.5, "b": "x", "c": False}
    assert to_records(table.slice(5, 1))[0]["attrs"] == {"a": 5.0, "b": "5", "c": True, "d": 5}


_JSON_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1),
                         st.floats(allow_nan=False, allow_infinity=False), _TEXT)


def expected_column(values: list[Any]) -> tuple[str, list[Any]]:
    """The attribute type and values the definition (docs/contract.md §1 widening) gives a JSON column."""
    kinds = {type(v) for v in values if v is not None}
    if not kinds or kinds == {str}:
        return "string", values
    if kinds in ({bool}, {int}):
        return ("bool" if kinds == {bool} else "int"), values
    if kinds <= {int, float}:
        return "double", [None if v is None else float(v) for v in values]

    def text(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, float) and v.is_integer() and abs(v) < 1e16:
            return str(int(v))
        return repr(v) if isinstance(v, float) else str(v)

    return "string", [None if v is None else text(v) for v in values]


@scaled(60, HealthCheck.function_scoped_fixture)
@given(data=st.data(), n=st.integers(1, 20))
def test_jsonl_round_trip_keeps_json_types(tmp_path: Path, data: st.DataObject, n: int) -> None:
    columns = {name: data.draw(st.lists(_JSON_SCALAR, min_size=n, max_size=n)) for name in ("p", "q")}
    ts = data.draw(st.lists(_TS, min_size=n, max_size=n))
    epoch_form = data.draw(st.booleans())
    path = tmp_path / "events.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(n):
            rec: dict[str, Any] = {"type": "E", "ts": ts[i] // 1_000_000 if epoch_form else iso(ts[i], 90)}
            rec.update({k: v[i] for k, v in columns.items() if v[i] is not None})
            fh.write(json.dumps(rec) + "\n\n")
    table = read_inputs([path])
    got = to_records(table)
    for name, values in columns.items():
        if all(v is None for v in values):
            continue
        kind, want = expected_column(values)
        assert {"int": pa.int64(), "double": pa.float64(), "bool": pa.bool_(), "string": pa.string()}[kind] \
            == attr_types(table.schema)[name]
        assert [g["attrs"].get(name) for g in got] == want
    assert [g["ts"] for g in got] == [(t // 1_000_000) * 1_000_000 if epoch_form else t for t in ts]


def test_jsonl_nested_values_and_attrs_object(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    path.write_text('{"type": "A", "ts": 1.25, "attrs": {"x": 1}, "tags": ["a", 1], "seq": 99}\n')
    assert to_records(read_inputs([path])) == [
        {"ts": 1_250_000, "type": "A", "attrs": {"x": 1, "tags": '["a",1]'}}]


def test_parquet_round_trip_of_a_stream(shared_data: Path, tmp_path: Path) -> None:
    stream = ingest([shared_data / "running-example.xes"])
    path = tmp_path / "stream.parquet"
    pq.write_table(stream, path)
    assert ingest([path]).equals(stream)


def test_parquet_column_types(tmp_path: Path) -> None:
    path = tmp_path / "typed.parquet"
    naive = pa.array([0, 1_500_000], pa.timestamp("us"))
    table = pa.table({"kind": pa.array(["A", "B"]).dictionary_encode(), "at": naive,
                      "i32": pa.array([1, None], pa.int32()), "f32": pa.array([0.5, 2.0], pa.float32()),
                      "when": pa.array([86_400_000, 0], pa.timestamp("ms", tz="Europe/Amsterdam"))})
    pq.write_table(table, path)
    got = read_inputs([path], IngestOptions(type_field="kind", time_field="at"))
    assert to_records(got) == [
        {"ts": 0, "type": "A", "attrs": {"i32": 1, "f32": 0.5, "when": "1970-01-02T00:00:00.000000+00:00"}},
        {"ts": 1_500_000, "type": "B", "attrs": {"f32": 2.0, "when": "1970-01-01T00:00:00.000000+00:00"}}]
    nanos = tmp_path / "nanos.parquet"
    pq.write_table(pa.table({"type": ["A"], "ts": pa.array([1_000_001_999], pa.timestamp("ns", tz="UTC")),
                             "at": pa.array([5_999], pa.timestamp("ns"))}), nanos)
    assert to_records(read_inputs([nanos])) == [
        {"ts": 1_000_001, "type": "A", "attrs": {"at": "1970-01-01T00:00:00.000005+00:00"}}]
    epoch = tmp_path / "epoch.parquet"
    pq.write_table(pa.table({"type": ["A"], "ts": pa.array([2.5])}), epoch)
    assert to_records(read_inputs([epoch]))[0]["ts"] == 2_500_000


@pytest.mark.parametrize(("text", "us"), [
    ("2011-10-01T00:38:44.546+02:00", micros(datetime(2011, 9, 30, 22, 38, 44, 546000, UTC))),
    ("2011-10-01T00:38:44Z", micros(datetime(2011, 10, 1, 0, 38, 44, tzinfo=UTC))),
    ("2011-10-01 00:38:44", micros(datetime(2011, 10, 1, 0, 38, 44, tzinfo=UTC))),  # naive = UTC
    ("1317422324.5", 1_317_422_324_500_000),  # epoch seconds
    ("-1", -1_000_000),
])
def test_csv_timestamp_forms(tmp_path: Path, text: str, us: int) -> None:
    path = tmp_path / "t.csv"
    path.write_text(f"type,ts\nA,{text}\n")
    assert to_records(read_inputs([path]))[0]["ts"] == us


def test_detect_format_by_extension() -> None:
    assert [detect_format(p) for p in ("a.xes", "a.XES.gz", "b.csv", "c.jsonl", "d.parquet", "e.zip",
                                       "f.txt")] == ["xes", "xes", "csv", "jsonl", "parquet", "text", "text"]
    with pytest.raises(InputError, match="a.bin"):
        detect_format("a.bin")


def test_records_to_table_and_back() -> None:
    recs = [{"ts": 5, "type": "A", "attrs": {"x": 1}}, {"ts": 7, "type": "B", "attrs": {"x": 2.5, "y": "z"}}]
    table = records_to_table(recs)
    assert to_records(table) == [{"seq": 0, "ts": 5, "type": "A", "attrs": {"x": 1.0}},
                                 {"seq": 1, "ts": 7, "type": "B", "attrs": {"x": 2.5, "y": "z"}}]


# --------------------------------------------------------------------------------------------- errors

_EVENT = ('<event><string key="concept:name" value="A"/>'
          '<date key="time:timestamp" value="2020-01-01T00:00:00+01:00"/></event>')
_XES_HEAD = '<?xml version="1.0"?>\n<log xmlns="http://www.xes-standard.org/">\n<trace>\n'

# (file name, content, format, expected pieces of the message: file, position, field)
BAD_INPUTS = [
    ("no-type.xes", _XES_HEAD + _EVENT
     + '\n<event>\n<date key="time:timestamp" value="2020-01-01T00:00:00Z"/></event></trace></log>',
     "xes", ["line 5", "concept:name"]),
    ("no-time.xes", _XES_HEAD + '<event><string key="concept:name" value="A"/></event></trace></log>', "xes",
     ["line 4", "time:timestamp"]),
    ("bad-time.xes", _XES_HEAD + "\n" + _EVENT.replace("2020-01-01T00:00:00+01:00", "yesterday")
     + "</trace></log>", "xes", ["line 5", "time:timestamp", "yesterday"]),
    ("bad-int.xes", _XES_HEAD + '<event>\n<int key="n" value="x1"/></event></trace></log>', "xes",
     ["line 5", "'n'"]),
    ("broken.xes", _XES_HEAD + _EVENT + "\n<event>\n</trace></log>", "xes", ["line 6", "malformed XML"]),
    ("no-events.xes", '<?xml version="1.0"?>\n<log></log>', "xes", ["empty"]),
    ("empty.xes", "", "xes", ["empty"]),
    ("no-field.csv", "kind,ts\nA,1\n", "csv", ["line 1", "'type'"]),
    ("bad-time.csv", "type,ts\nA,1\nB,tuesday\n", "csv", ["line 3", "'ts'", "tuesday"]),
    ("no-time.csv", "type,ts,x\nA,1,2\nB,,3\n", "csv", ["line 3", "'ts'", "missing"]),
    ("no-type.csv", "type,ts\nA,1\n,2\n", "csv", ["line 3", "'type'"]),
    ("ragged.csv", "type,ts\nA,1\nB,2,3\n", "csv", ["line 3", "3 fields"]),
    ("empty.csv", "", "csv", ["empty"]),
    ("header-only.csv", "type,ts\n", "csv", ["empty"]),
    ("broken.jsonl", '{"type": "A", "ts": 1}\n{"type": "A", "ts": 1\n', "jsonl",
     ["line 2", "malformed JSON"]),
    ("no-type.jsonl", '{"type": "A", "ts": 1}\n\n{"ts": 1}\n', "jsonl", ["line 3", "'type'"]),
    ("no-time.jsonl", '{"type": "A"}\n', "jsonl", ["line 1", "'ts'"]),
    ("bad-time.jsonl", '{"type": "A", "ts": "soon"}\n', "jsonl", ["line 1", "'ts'", "soon"]),
    ("bool-time.jsonl", '{"type": "A", "ts": true}\n', "jsonl", ["line 1", "'ts'"]),
    ("array.jsonl", "[1, 2]\n", "jsonl", ["line 1", "JSON object"]),
    ("empty.jsonl", "\n\n", "jsonl", ["empty"]),
    ("empty.txt", " \n\t\n", "text", ["empty"]),
]


@pytest.mark.parametrize(("name", "content", "fmt", "pieces"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_malformed_input_is_named(tmp_path: Path, name: str, content: str, fmt: str,
                                  pieces: list[str]) -> None:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError) as err:
        read_inputs([path])
    message = str(err.value)
    assert str(path) in message
    for piece in pieces:
        assert piece in message
    assert detect_format(path) == fmt


def test_malformed_gzip_xes_is_named(tmp_path: Path) -> None:
    path = tmp_path / "log.xes.gz"
    path.write_bytes(gzip.compress((_XES_HEAD + _EVENT + "<event>").encode())[:-12])
    with pytest.raises(InputError, match=str(path)):
        read_inputs([path])


def parquet_error(tmp_path: Path, table: pa.Table) -> str:
    path = tmp_path / "bad.parquet"
    pq.write_table(table, path)
    with pytest.raises(InputError) as err:
        read_inputs([path])
    assert str(path) in str(err.value)
    return str(err.value)


def test_malformed_parquet_is_named(tmp_path: Path) -> None:
    msg = parquet_error(tmp_path, pa.table({"type": ["A", None, "C"], "ts": [1, 2, 3]}))
    assert "record 2" in msg and "'type'" in msg
    msg = parquet_error(tmp_path, pa.table({"type": ["A", "B"], "ts": pa.array([1, None], pa.int64())}))
    assert "record 2" in msg and "'ts'" in msg
    msg = parquet_error(tmp_path, pa.table({"type": ["A", "B"], "ts": ["2020-01-01", "later"]}))
    assert "record 2" in msg and "'ts'" in msg and "later" in msg
    msg = parquet_error(tmp_path, pa.table({"kind": ["A"], "ts": [1]}))
    assert "'type'" in msg
    assert "empty" in parquet_error(tmp_path, pa.table({"type": pa.array([], pa.string()),
                                                        "ts": pa.array([], pa.int64())}))


def test_zip_with_only_documentation_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "corpus.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("c/README", "not part of the corpus")
    with pytest.raises(InputError, match="empty"):
        read_inputs([path])


@scaled(30, HealthCheck.function_scoped_fixture)
@given(files=st.lists(st.lists(st.tuples(st.integers(0, 6), _TYPES), min_size=1, max_size=15),
                      min_size=1, max_size=3))
def test_ingest_orders_several_inputs_stably(tmp_path: Path, files: list[list[tuple[int, str]]]) -> None:
    """Stream order = ts order, ties in input order across inputs in the order given (a stable sort)."""
    paths, flat = [], []
    for f, events in enumerate(files):
        path = tmp_path / f"in{f}.jsonl"
        path.write_text("".join(json.dumps({"type": t, "ts": s, "src": f, "pos": i}) + "\n"
                                for i, (s, t) in enumerate(events)))
        paths.append(path)
        flat += [(s * 1_000_000, t, f, i) for i, (s, t) in enumerate(events)]
    expected = sorted(flat, key=lambda e: e[0])
    got = [(r["ts"], r["type"], r["attrs"]["src"], r["attrs"]["pos"]) for r in to_records(ingest(paths))]
    assert got == expected


def test_progress_hears_every_batch(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.jsonl"
    a.write_text("\n".join(f"w{i}" for i in range(25)))
    b.write_text("".join(json.dumps({"type": "T", "ts": i}) + "\n" for i in range(7)))
    heard: list[tuple[str, int]] = []
    stream = ingest([a, b], IngestOptions(batch_rows=10), progress=lambda p, n: heard.append((p.name, n)))
    assert heard == [("a.txt", 10), ("a.txt", 20), ("a.txt", 25), ("b.jsonl", 32)]
    assert stream.num_rows == 32
