"""``seqsketch build`` builds the index with the events; ``seqsketch info`` reports it (docs/contract.md §4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from api.cli import main
from exact.ingest import ingest
from sketch.build import BuildOptions, build_from_table

INDEX_FIELDS = {"leaf_size", "fanout", "m", "k", "levels", "nodes", "bytes", "bytes_per_event",
                "expected_fpq", "index_digest"}


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict, str]:
    code = main([*argv, "--json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else {}), err


def test_build_then_info_report_the_index(home: Path, shared_data: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    source = shared_data / "running-example.xes"
    code, summary, err = run_json(capsys, "build", "running", str(source), "--engine", "local",
                                  "--leaf-size", "8", "--fpq", "0.01")
    assert code == 0, err
    index = summary["index"]
    assert INDEX_FIELDS <= set(index)
    assert index["leaf_size"] == 8 and index["events"] == 42 and index["levels"] >= 1
    # The same bits as building in-process from the same events with the same options.
    expected, _ = build_from_table(ingest([source]), BuildOptions(leaf_size=8, fpq=0.01))
    assert index["index_digest"] == expected.digest()
    assert index["bytes"] == (home / "datasets" / "running" / index["file"]).stat().st_size
    assert index["bytes_per_event"] == pytest.approx(index["bytes"] / 42)
    assert index["expected_fpq"] <= 0.01
    code, info, _ = run_json(capsys, "info", "running")
    assert code == 0 and info["index"] == index
    assert main(["info", "running"]) == 0
    assert "index " in capsys.readouterr().out


def test_an_impossible_memory_budget_is_one_clear_error_and_no_dataset(home: Path, shared_data: Path,
                                                                       capsys: pytest.CaptureFixture[str]
                                                                       ) -> None:
    code = main(["build", "running", str(shared_data / "running-example.xes"), "--engine", "local",
                 "--memory", "100"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.count("\n") == 1 and "--memory" in err and "needs about" in err
    assert not (home / "datasets" / "running").exists()
