"""``seqsketch build``, ``info`` and ``datasets`` end to end through the real CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from api.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    try:
        parsed = json.loads(out) if "--json" in argv and out.strip() else out
    except json.JSONDecodeError:
        parsed = out
    return code, parsed, err


def test_build_info_datasets(home: Path, shared_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, summary, err = run(capsys, "build", "running", str(shared_data / "running-example.xes"),
                             "--engine", "local", "--leaf-size", "8", "--fpq", "0.01", "--memory", "64M",
                             "--json")
    assert code == 0, err
    assert summary["name"] == "running" and summary["events"] == 42
    assert sum(summary["types"].values()) == 42 and len(summary["types"]) == 8
    assert summary["start_ts"] == "2010-12-30T10:02:00.000000+00:00"
    assert summary["store_bytes"] > 0
    assert set(summary["timings"]) == {"ingest", "index"}
    assert summary["seconds"] >= summary["timings"]["ingest"]
    store_files = list((home / "datasets" / "running" / "store" / "parts").glob("part-*.parquet"))
    assert len(store_files) == 1

    code, info, _ = run(capsys, "info", "running", "--json")
    assert code == 0
    assert {k: info[k] for k in ("name", "events", "start_ts", "end_ts", "types", "store_bytes")} == \
        {k: summary[k] for k in ("name", "events", "start_ts", "end_ts", "types", "store_bytes")}
    assert info["attrs"]["case"] == "string"

    code, text, _ = run(capsys, "info", "running")
    assert code == 0 and "42" in text and "check ticket" in text

    code, listing, _ = run(capsys, "datasets", "--json")
    assert [d["name"] for d in listing["datasets"]] == ["running"]
    code, text, _ = run(capsys, "datasets")
    assert text.splitlines()[0].split()[:2] == ["NAME", "EVENTS"] and "running" in text


def test_json_build_keeps_stderr_quiet(home: Path, shared_data: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    code, summary, err = run(capsys, "build", "r", str(shared_data / "running-example.xes"),
                             "--engine", "local", "--json")
    assert code == 0 and summary["events"] == 42
    assert err == ""


def test_existing_dataset_is_refused_unless_replace(home: Path, shared_data: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    xes = str(shared_data / "running-example.xes")
    assert run(capsys, "build", "d", xes, "--engine", "local")[0] == 0
    code, _, err = run(capsys, "build", "d", xes, "--engine", "local")
    assert code == 1 and "exists already" in err and "--replace" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    csv_path = tmp_path / "e.csv"
    csv_path.write_text("kind,at,x\nA,2020-01-01T00:00:00Z,1\nB,2020-01-01T00:00:01Z,2.5\n")
    code, summary, err = run(capsys, "build", "d", str(csv_path), "--type-field", "kind",
                             "--time-field", "at", "--replace", "--engine", "local", "--json")
    assert code == 0, err
    assert summary["events"] == 2 and summary["attrs"] == {"x": "double"}
    assert [p.name for p in (home / "datasets").iterdir()] == ["d"]


def test_failed_build_writes_nothing(home: Path, shared_data: Path, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "A", "ts": 1}\n{"type": "B", "ts": "noon"}\n')
    code, _, err = run(capsys, "build", "d", str(shared_data / "running-example.xes"), str(bad),
                       "--engine", "local")
    assert code == 1
    assert f"{bad}: line 2: field 'ts'" in err and "noon" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (home / "datasets").exists() or list((home / "datasets").iterdir()) == []
    # a failed --replace keeps the dataset that was there
    assert run(capsys, "build", "d", str(shared_data / "running-example.xes"), "--engine", "local")[0] == 0
    code, _, _ = run(capsys, "build", "d", str(bad), "--replace", "--engine", "local")
    assert code == 1
    assert run(capsys, "info", "d", "--json")[1]["events"] == 42
    assert [p.name for p in (home / "datasets").iterdir()] == ["d"]


@pytest.mark.parametrize(("argv", "message"), [
    (["build", "Bad", "x.xes"], "invalid dataset name 'Bad'"),
    (["build", "ok", "missing.xes"], "missing.xes: no such file"),
    (["build", "ok", "data.bin"], "cannot tell the format"),
    (["info", "nope"], "no dataset 'nope'"),
])
def test_user_mistakes_are_one_line_errors(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str], argv: list[str],
                                           message: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data.bin").write_bytes(b"\0")
    code, _, err = run(capsys, *argv, "--json")
    assert code == 1
    assert message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (home / "datasets").exists() or list((home / "datasets").iterdir()) == []


def test_empty_home_lists_no_datasets(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, listing, _ = run(capsys, "datasets", "--json")
    assert code == 0 and listing == {"datasets": []}
