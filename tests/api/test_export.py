"""``seqsketch export``: the stored events back out in seq order with every attribute, read back as the same
events by the project's own readers (export → build → equal events, ``index_digest`` and answers)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from api import service
from api.cli import main
from exact.events import to_records
from exact.store import EventStore, dataset_dir, store_dir

QUERIES = (
    "PATTERN SEQ('check ticket' c, decide d) PARTITION BY case WITHIN 10 days",
    "PATTERN SEQ('register request' r, 'examine thoroughly'+ x, 'reject request' j) PARTITION BY case",
    "PATTERN SEQ(ANY a, ANY b) WHERE a.Costs > b.Costs PARTITION BY case RETURN count",
)


def stored(home: Path, name: str) -> list[dict[str, Any]]:
    return to_records(EventStore.open(store_dir(dataset_dir(name, home))).read_table())


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def mixed_records() -> list[dict[str, Any]]:
    """Events with every attribute type, nulls, missing attributes, equal timestamps and odd text."""
    out = []
    for i in range(40):
        attrs: dict[str, Any] = {"n": i * 7 - 100, "x": i / 3, "ok": i % 3 == 0,
                                 "who": f"k{i % 5}\u00e9,\"q\""}
        if i % 4 == 0:
            attrs["n"] = None
        if i % 6 == 0:
            del attrs["who"]
        out.append({"type": "ABC"[i % 3], "ts": f"2024-01-01T00:00:{i // 2:02d}+00:00", "attrs": attrs})
    return out


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_export_round_trip_keeps_every_event_and_attribute(home: Path, tmp_path: Path, fmt: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "mixed.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in mixed_records()))
    service.build_from_inputs(home, "mixed", [str(source)], engine="local")
    out = tmp_path / f"out.{fmt}"
    code, text, err = cli(capsys, "export", "mixed", "--format", fmt, "--out", str(out), "--json")
    assert code == 0, err
    assert json.loads(text)["events"] == 40 and out.stat().st_size == json.loads(text)["bytes"]
    service.build_from_inputs(home, "again", [str(out)], engine="local")
    assert stored(home, "again") == stored(home, "mixed")
    a, b = service.dataset_info(home, "mixed"), service.dataset_info(home, "again")
    assert a["attrs"] == b["attrs"] == {"n": "int64", "x": "double", "ok": "bool", "who": "string"}
    assert a["index"]["index_digest"] == b["index"]["index_digest"]


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "csv"])
def test_export_build_gives_the_same_index_and_answers(home: Path, shared_data: Path, tmp_path: Path,
                                                       fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    service.build_from_inputs(home, "run", [str(shared_data / "running-example.xes")], engine="local")
    out = tmp_path / f"run.{fmt}"
    assert cli(capsys, "export", "run", "--format", fmt, "--out", str(out))[0] == 0
    service.build_from_inputs(home, "back", [str(out)], engine="local")
    # the XES costs are strings made of digits: CSV infers numbers for them, the typed formats keep text
    assert service.dataset_info(home, "back")["index"]["index_digest"] == \
        service.dataset_info(home, "run")["index"]["index_digest"]
    if fmt != "csv":
        assert stored(home, "back") == stored(home, "run")
    for query in QUERIES[:2]:
        for mode in ("verified", "exact"):
            a = service.run_query(home, "run", query, mode=mode)
            b = service.run_query(home, "back", query, mode=mode)
            if fmt == "csv":  # the case ids come back as numbers too: each match's case, as text, is the same
                for m in (*a["matches"], *b["matches"]):
                    m["case"] = str(m["case"])
            assert a["matches"] == b["matches"] and a["count"] > 0


def test_export_between_and_to_stdout(home: Path, shared_data: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    service.build_from_inputs(home, "run", [str(shared_data / "running-example.xes")], engine="local")
    code, text, _ = cli(capsys, "export", "run", "--between", "2010-12-30T11:00", "2011-01-05T00:00:00+00:00")
    assert code == 0
    lines = [json.loads(line) for line in text.splitlines()]
    everything = stored(home, "run")
    lo, hi = 1293706800 * 10**6, 1294185600 * 10**6
    expected = [r for r in everything if lo <= r["ts"] <= hi]
    assert 0 < len(lines) == len(expected) < len(everything)
    assert [r["seq"] for r in lines] == [r["seq"] for r in expected]
    assert lines[0]["attrs"] == expected[0]["attrs"]


def test_export_mistakes_are_one_line_and_leave_nothing(home: Path, shared_data: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    service.build_from_inputs(home, "run", [str(shared_data / "running-example.xes")], engine="local")
    for argv, says in ((["--format", "parquet"], "--out"),
                       (["--out", str(tmp_path / "no" / "such" / "dir.jsonl")], "directory does not exist"),
                       (["--between", "2011-02-01", "2011-01-01"], "after its end"),
                       (["--between", "yesterday", "2011-01-01"], "--between")):
        code, out, err = cli(capsys, "export", "run", *argv)
        assert code == 1 and err.count("\n") == 1 and says in err, err
    assert cli(capsys, "export", "nosuch")[0] == 1
    assert list(tmp_path.rglob("*.jsonl*")) == []


def test_a_closed_pipe_ends_the_export_quietly(home: Path, shared_data: Path) -> None:
    service.build_from_inputs(home, "bpi", [str(shared_data / "bpic2012.xes.gz")], engine="local")
    done = subprocess.run(f"{sys.executable} -m api.cli export bpi | head -c 300", shell=True,
                          capture_output=True, text=True, timeout=300, cwd=Path(__file__).parents[2])
    assert len(done.stdout) == 300 and done.stderr == ""
