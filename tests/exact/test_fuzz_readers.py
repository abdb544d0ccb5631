"""Bad input at the file door: every damaged input ends in an :class:`~exact.errors.InputError` that names the
file (and the line or record when there is one), and a build that meets one writes nothing.

Damage covered: truncated and corrupt gzip, broken XML, wrong encodings (latin-1, UTF-16), BOMs (accepted),
empty files, huge lines, NaN / infinity / out-of-range timestamps (in text, JSON numbers, Parquet integer,
float and timestamp columns), deep JSON nesting — plus random byte-level mutations of valid files, which must
either read or fail with an InputError, never another exception.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from api.service import build_from_inputs as build_dataset
from exact.errors import InputError
from exact.events import MAX_MICROS, MIN_MICROS, iso_of_micros, parse_timestamp
from exact.ingest import IngestOptions, ingest
from sketch.build_request import BuildRequest
from tests.generators import scaled

JSONL = "".join(json.dumps({"type": f"T{i % 3}", "ts": 1_600_000_000 + i, "x": i}) + "\n"
                for i in range(500)).encode()
TEXT = " ".join(f"w{i}" for i in range(5000)).encode()
CSV = ("type,ts,x\n" + "".join(f"T{i % 3},{1_600_000_000 + i},{i}\n" for i in range(500))).encode()


@pytest.fixture(scope="module")
def xes(shared_data: Path) -> bytes:
    return (shared_data / "running-example.xes").read_bytes()


def read_all(path: Path, fmt: str = "auto") -> int:
    return ingest([path], IngestOptions(fmt=fmt)).num_rows


def refused(path: Path, fmt: str = "auto") -> InputError:
    """The InputError reading ``path`` raises; it must name the file."""
    with pytest.raises(InputError) as info:
        read_all(path, fmt)
    err = info.value
    assert str(path) in str(err), f"the error does not name the file: {err}"
    assert err.message
    return err


# --- compression --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name,data", [("t.jsonl.gz", JSONL), ("t.csv.gz", CSV), ("t.txt.gz", TEXT)])
@pytest.mark.parametrize("cut", [10, 200])
def test_truncated_gzip(tmp_path: Path, name: str, data: bytes, cut: int) -> None:
    path = tmp_path / name
    path.write_bytes(gzip.compress(data)[:-cut])
    assert "cannot read" in refused(path).message


def test_truncated_gzip_xes(tmp_path: Path, xes: bytes) -> None:
    path = tmp_path / "log.xes.gz"
    path.write_bytes(gzip.compress(xes)[:-40])
    refused(path)


@pytest.mark.parametrize("name", ["bad.jsonl", "bad.csv", "bad.txt", "bad.xes"])
def test_corrupt_gzip_member(tmp_path: Path, name: str) -> None:
    """The gzip magic followed by garbage: the reader must not mistake it for text."""
    path = tmp_path / name
    path.write_bytes(b"\x1f\x8b" + bytes(range(256)) * 4)
    refused(path)


def test_flipped_byte_inside_gzip(tmp_path: Path) -> None:
    data = bytearray(gzip.compress(JSONL))
    data[len(data) // 2] ^= 0xFF
    path = tmp_path / "flip.jsonl.gz"
    path.write_bytes(bytes(data))
    refused(path)


# --- XML ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cut", [0.1, 0.5, 0.99])
def test_broken_xml_names_the_line(tmp_path: Path, xes: bytes, cut: float) -> None:
    path = tmp_path / "broken.xes"
    path.write_bytes(xes[: int(len(xes) * cut)])
    err = refused(path)
    assert err.line is not None and 1 <= err.line <= xes.count(b"\n") + 1


def test_unbalanced_xml(tmp_path: Path, xes: bytes) -> None:
    path = tmp_path / "unbalanced.xes"
    path.write_bytes(xes.replace(b"</event>", b"</trace>", 1))
    assert refused(path).line is not None


def test_xes_bad_timestamp_names_line_and_field(tmp_path: Path, xes: bytes) -> None:
    first = xes.index(b'key="time:timestamp"', xes.index(b"<event"))  # not the log's <global> default
    line = xes[:first].count(b"\n") + 1
    stamp_at = xes.index(b'value="', first) + len(b'value="')
    end = xes.index(b'"', stamp_at)
    for bad in (b"yesterday", b"9999-12-31T23:59:59.000-05:00", b"0001-01-01T00:00:00+01:00"):
        path = tmp_path / "ts.xes"
        path.write_bytes(xes[:stamp_at] + bad + xes[end:])
        err = refused(path)
        assert "time:timestamp" in err.message and err.line is not None and err.line >= line - 5


# --- encodings ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["latin-1", "utf-16", "utf-16-be", "utf-32"])
@pytest.mark.parametrize("fmt", ["jsonl", "csv", "text", "xes"])
def test_wrong_encodings(tmp_path: Path, xes: bytes, encoding: str, fmt: str) -> None:
    text = {"jsonl": '{"type": "Café", "ts": 1}\n', "csv": "type,ts\nCafé,1\n", "text": "Café au lait\n",
            "xes": xes.decode("utf-8").replace("register request", "régister")}[fmt]
    path = tmp_path / f"enc.{ {'text': 'txt'}.get(fmt, fmt) }"
    path.write_bytes(text.encode(encoding))
    if fmt == "xes" and encoding.startswith("utf-16"):
        # A UTF-16 XML document with a BOM is well-formed XML; the parser may read it, or refuse its
        # declaration's encoding: either way no other exception and no wrong events.
        try:
            assert read_all(path) == 42
        except InputError as err:
            assert str(path) in str(err)
        return
    err = refused(path)
    if fmt == "jsonl":
        assert err.line == 1 and "UTF-8" in err.message


def test_latin1_on_a_later_line_names_that_line(tmp_path: Path) -> None:
    path = tmp_path / "late.jsonl"
    path.write_bytes(JSONL + '{"type": "Café", "ts": 2000000000}\n'.encode("latin-1"))
    assert refused(path).line == 501


@pytest.mark.parametrize("fmt,data", [("jsonl", JSONL), ("csv", CSV), ("text", b"a b c")])
def test_bom_is_accepted(tmp_path: Path, fmt: str, data: bytes) -> None:
    plain, bom = tmp_path / f"plain.{fmt}", tmp_path / f"bom.{fmt}"
    plain.write_bytes(data)
    bom.write_bytes(b"\xef\xbb\xbf" + data)
    assert ingest([bom], IngestOptions(fmt=fmt)).equals(ingest([plain], IngestOptions(fmt=fmt)))


def test_bom_xes(tmp_path: Path, xes: bytes) -> None:
    path = tmp_path / "bom.xes"
    path.write_bytes(b"\xef\xbb\xbf" + xes)
    assert read_all(path) == 42


# --- empty and huge -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name,data", [("e.jsonl", b""), ("e.csv", b""), ("e.xes", b""), ("e.txt", b""),
                                       ("e.parquet", b""), ("ws.jsonl", b"\n  \n\n"), ("ws.txt", b" \n\t\n"),
                                       ("hdr.csv", b"type,ts\n"), ("e.jsonl.gz", gzip.compress(b"")),
                                       ("nolog.xes", b"<?xml version='1.0'?><log/>")])
def test_empty_inputs(tmp_path: Path, name: str, data: bytes) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    refused(path)


def test_huge_csv_field_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "huge.csv"
    path.write_bytes(CSV + b"T1,1600001000," + b"x" * 300_000 + b"\n")
    assert refused(path).line == 502


def test_huge_json_line_and_token_are_read(tmp_path: Path) -> None:
    big = tmp_path / "big.jsonl"
    big.write_text(json.dumps({"type": "A", "ts": 1, "x": "y" * 2_000_000}) + "\n")
    assert read_all(big) == 1
    token = tmp_path / "token.txt"
    token.write_bytes(b"z" * 2_000_000)
    assert read_all(token) == 1


def test_deeply_nested_json_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "deep.jsonl"
    path.write_bytes(JSONL + b'{"type": "A", "ts": 1, "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n")
    err = refused(path)
    assert err.line == 501 and "nested" in err.message


# --- numbers and timestamps ---------------------------------------------------------------------------------

BAD_TS_JSON = ["NaN", "Infinity", "-Infinity", "1e300", "-1e300", "100000000000000000000000",
               "1000000000000000", '"nan"', '"inf"', '"1e400"', '"1e999999999"', '"-1e18"',
               '"9999-12-31T23:59:59-05:00"', '"0001-01-01T00:00:00+05:00"', '"2020-13-01"', '""', "null",
               "true", "[]", "{}"]


@pytest.mark.parametrize("raw", BAD_TS_JSON)
def test_bad_json_timestamps_name_line_and_field(tmp_path: Path, raw: str) -> None:
    path = tmp_path / "ts.jsonl"
    path.write_bytes(JSONL + f'{{"type": "A", "ts": {raw}}}\n'.encode())
    err = refused(path)
    assert err.line == 501 and "'ts'" in err.message


@pytest.mark.parametrize("raw", ["nan", "inf", "-inf", "1e300", "1e999999999", "99999999999999999999",
                                 "9999-12-31T23:59:59-05:00", "not a time"])
def test_bad_csv_timestamps_name_line_and_field(tmp_path: Path, raw: str) -> None:
    path = tmp_path / "ts.csv"
    path.write_bytes(CSV + f"A,{raw},1\n".encode())
    err = refused(path)
    assert err.line == 502 and "'ts'" in err.message


def test_timestamp_range_is_exactly_the_printable_years() -> None:
    """The edges are accepted and print as ISO text; one microsecond beyond either is refused."""
    assert parse_timestamp("0001-01-01T00:00:00Z") == MIN_MICROS
    assert parse_timestamp("9999-12-31T23:59:59.999999Z") == MAX_MICROS
    assert iso_of_micros(MIN_MICROS).startswith("0001-01-01") and iso_of_micros(MAX_MICROS).startswith("9999")
    for text in ("9999-12-31T23:59:59.999999-00:01", "0001-01-01T00:00:00+00:01"):
        with pytest.raises(ValueError, match="out of range"):
            parse_timestamp(text)
    with pytest.raises(ValueError):
        parse_timestamp((MAX_MICROS + 1) / 1e6 + 1)


def test_nan_and_infinite_attributes_are_kept_as_numbers(tmp_path: Path) -> None:
    path = tmp_path / "attrs.jsonl"
    path.write_bytes(b'{"type": "A", "ts": 1, "x": NaN}\n{"type": "A", "ts": 2, "x": Infinity}\n')
    table = ingest([path])
    values = table.column("attrs").combine_chunks().field("x").to_pylist()
    assert values[0] != values[0] and values[1] == float("inf")


def parquet(tmp_path: Path, ts: pa.Array, name: str = "t.parquet") -> Path:
    path = tmp_path / name
    pq.write_table(pa.table({"type": pa.array(["A"] * len(ts)), "ts": ts}), path)
    return path


@pytest.mark.parametrize("ts,record", [
    (pa.array([1, 2, 2**62], pa.int64()), 3),
    (pa.array([1, -(2**62), 3], pa.int64()), 2),
    (pa.array([1, 2**64 - 1], pa.uint64()), 2),
    (pa.array([1.0, float("nan")], pa.float64()), 2),
    (pa.array([float("inf")], pa.float32()), 1),
    (pa.array([1.0, 2.0, 1e300], pa.float64()), 3),
    (pa.array([1, 300_000_000_000], pa.timestamp("s")), 2),
    (pa.array([1, 9_000_000_000_000_000], pa.timestamp("ms", tz="UTC")), 2),
    (pa.array([1, 2**62], pa.timestamp("us")), 2),
    (pa.array(["2020-01-01", "9999-12-31T23:59:59-05:00"]), 2),
    (pa.array(["2020-01-01", None]), 2),
])
def test_bad_parquet_timestamps_name_the_record(tmp_path: Path, ts: pa.Array, record: int) -> None:
    err = refused(parquet(tmp_path, ts))
    assert f"record {record}" in str(err) and "'ts'" in err.message


def test_good_parquet_timestamps_of_every_unit(tmp_path: Path) -> None:
    second = 1_600_000_000
    for ts in (pa.array([second], pa.int64()), pa.array([float(second)]), pa.array([second], pa.int32()),
               pa.array([second], pa.timestamp("s")), pa.array([second * 1000], pa.timestamp("ms")),
               pa.array([second * 10**9], pa.timestamp("ns"))):
        table = ingest([parquet(tmp_path, ts)])
        assert table.column("ts").cast(pa.int64()).to_pylist() == [second * 10**6]


def test_garbage_parquet(tmp_path: Path) -> None:
    for data in (b"PAR1" + b"\x00" * 100 + b"PAR1", b"not parquet at all", JSONL):
        path = tmp_path / "garbage.parquet"
        path.write_bytes(data)
        refused(path)


def test_truncated_parquet(tmp_path: Path) -> None:
    path = parquet(tmp_path, pa.array(range(10_000), pa.int64()))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    refused(path)


# --- nothing written ----------------------------------------------------------------------------------------


def visible(home: Path) -> list[str]:
    root = home / "datasets"
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def test_a_bad_input_among_good_ones_writes_nothing(home: Path, tmp_path: Path, shared_data: Path) -> None:
    good = shared_data / "running-example.xes"
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(JSONL + b'{"type": "A", "ts": "1e999"}\n')
    with pytest.raises(InputError) as info:
        build_dataset(home, "mixed", [str(good), str(bad)])
    assert str(bad) in str(info.value) and info.value.line == 501
    assert visible(home) == []  # no dataset, no staging remnant


def test_a_failed_rebuild_keeps_the_old_dataset(home: Path, tmp_path: Path, shared_data: Path) -> None:
    good = shared_data / "running-example.xes"
    build_dataset(home, "keep", [str(good)])
    manifest = (home / "datasets" / "keep" / "store" / "manifest.json").read_bytes()
    bad = tmp_path / "bad.csv.gz"
    bad.write_bytes(gzip.compress(CSV)[:-20])
    with pytest.raises(InputError):
        build_dataset(home, "keep", [str(bad)], BuildRequest(replace=True))
    assert visible(home) == ["keep"]
    assert (home / "datasets" / "keep" / "store" / "manifest.json").read_bytes() == manifest


# --- random damage ------------------------------------------------------------------------------------------


def damage(data: bytes, draw: st.DataObject) -> bytes:
    """Flip, delete, insert or truncate bytes at random places."""
    out = bytearray(data)
    for _ in range(draw.draw(st.integers(1, 4), label="hits")):
        if not out:
            break
        at = draw.draw(st.integers(0, len(out) - 1), label="at")
        action = draw.draw(st.sampled_from(["flip", "delete", "insert", "truncate"]), label="action")
        if action == "flip":
            out[at] ^= draw.draw(st.integers(1, 255), label="mask")
        elif action == "delete":
            del out[at: at + draw.draw(st.integers(1, 64), label="n")]
        elif action == "insert":
            out[at:at] = draw.draw(st.binary(min_size=1, max_size=16), label="bytes")
        else:
            del out[at:]
    return bytes(out)


@scaled(150, HealthCheck.function_scoped_fixture, derandomize=True)  # the same examples in every CI run
@given(data=st.data(), kind=st.sampled_from(["jsonl", "csv", "xes", "jsonl.gz", "xes.gz", "parquet"]))
def test_random_damage_reads_or_is_refused(tmp_path: Path, xes: bytes, data: st.DataObject,
                                           kind: str) -> None:
    folder = tmp_path / "damage"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    if kind == "parquet":
        source = folder / "src.parquet"
        pq.write_table(pa.table({"type": ["A", "B"] * 50, "ts": pa.array(range(100), pa.int64())}), source)
        original = source.read_bytes()
    else:
        original = {"jsonl": JSONL, "csv": CSV, "xes": xes}[kind.removesuffix(".gz")]
        if kind.endswith(".gz"):
            original = gzip.compress(original)
    path = folder / f"damaged.{kind}"
    path.write_bytes(damage(original, data))
    try:
        table = ingest([path])
    except InputError as err:
        assert str(path) in str(err)
        return
    ts = table.column("ts").cast(pa.int64())
    assert table.num_rows > 0 and all(MIN_MICROS <= v <= MAX_MICROS for v in ts.to_pylist())


# --- the command line ---------------------------------------------------------------------------------------


def test_the_cli_reports_a_damaged_input_in_one_line(home: Path, tmp_path: Path, shared_data: Path) -> None:
    """``seqsketch build``/``append`` with a damaged input: exit status 1, one line on stderr naming the file
    and line, no traceback, and the dataset as it was."""
    import os
    import subprocess
    import sys

    build_dataset(home, "cli", [str(shared_data / "running-example.xes")])
    manifest = (home / "datasets" / "cli" / "store" / "manifest.json").read_bytes()
    truncated = tmp_path / "t.jsonl.gz"
    truncated.write_bytes(gzip.compress(JSONL)[:-30])
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(JSONL + '{"type": "Café", "ts": 2000000000}\n'.encode("latin-1"))
    future = tmp_path / "future.jsonl"
    future.write_bytes(b'{"type": "A", "ts": "2030-01-01"}\n{"type": "B", "ts": 1e300}\n')
    script = Path(sys.executable).with_name("seqsketch")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "api.cli"]
    # this repository first on the path: the console script lives elsewhere, the code under test here
    repo = str(Path(__file__).resolve().parents[2])
    code = os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "SEQSKETCH_HOME": str(home), "PYTHONPATH": code}
    for args, path, line in ((["append", "cli", str(truncated)], truncated, None),
                             (["append", "cli", str(future)], future, 2),
                             (["build", "other", str(latin), "--engine", "local"], latin, 501)):
        done = subprocess.run(command + args, env=env, capture_output=True, text=True, timeout=120)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 1, done.stderr
        assert len(lines) == 1 and lines[0].startswith("seqsketch: error: ") and str(path) in lines[0], lines
        assert line is None or f"line {line}" in lines[0]
        assert "Traceback" not in done.stderr
    assert (home / "datasets" / "cli" / "store" / "manifest.json").read_bytes() == manifest
    assert visible(home) == ["cli"]


@pytest.mark.parametrize("encoding", [b"TTF-8", b"no-such-codec", b"utf-7"])
def test_xes_declaring_an_unknown_or_odd_encoding(tmp_path: Path, xes: bytes, encoding: bytes) -> None:
    path = tmp_path / "enc.xes"
    body = xes[xes.index(b"?>") + 2:] if xes.startswith(b"<?xml") else xes  # our own declaration instead
    path.write_bytes(b'<?xml version="1.0" encoding="' + encoding + b'"?>' + body)
    try:
        assert read_all(path) == 42  # a codec Python knows that reads these bytes alike
    except InputError as err:
        assert str(path) in str(err)
