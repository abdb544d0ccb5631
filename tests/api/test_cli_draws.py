"""What the command line shows a person: the answer drawn as a timeline (``query --plot``), the partition of
each match in the query table, and a build's progress bar on a terminal — without the JVM's start-up chatter
when the build runs on Spark."""

from __future__ import annotations

import builtins
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from api import service
from api.cli import main
from api.cli.progress import _phase, terminal_progress

PAIR = ("PATTERN SEQ('register request' r, 'pay compensation' p) PARTITION BY case "
        "STRATEGY skip_till_any_match")


@pytest.fixture
def running(home: Path, shared_data: Path) -> str:
    service.build_from_inputs(home, "running", [str(shared_data / "running-example.xes")])
    return "running"


def test_query_plot_writes_the_timeline(running: str, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "answer.png"
    assert main(["query", running, PAIR, "--plot", str(out)]) == 0
    captured = capsys.readouterr()
    assert f"drew the answer into {out}" in captured.err
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a picture with something drawn in it
    approx = tmp_path / "approx.png"
    assert main(["query", running, PAIR, "--mode", "approximate", "--plot", str(approx), "--json"]) == 0
    assert approx.read_bytes()[:4] == b"\x89PNG"


def test_query_plot_without_matplotlib_is_one_clear_line(running: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    assert main(["query", running, PAIR, "--plot", str(tmp_path / "x.png")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "seqsketch[plot]" in err
    assert not (tmp_path / "x.png").exists()


def test_the_query_table_shows_each_matchs_partition(running: str, home: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["query", running, PAIR]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines[1].split()
    assert header == ["START", "END", "START_TS", "CASE", "BINDINGS"]
    answer = service.run_query(home, running, PAIR)
    events = service.bound_events(home, running, answer["matches"])
    rows = [line.split() for line in lines[2:2 + len(answer["matches"])]]
    assert [row[3] for row in rows] == [str(e[0]["attrs"]["case"]) for e in events]
    assert main(["query", running, "PATTERN SEQ('register request' r, 'pay compensation' p)"]) == 0
    assert "CASE" not in capsys.readouterr().out  # no PARTITION BY, no partition column


def test_query_out_writes_every_match_as_a_file(running: str, home: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """``--out`` writes all rows (no default cap) in the suffix's format, each the same rows as the JSON
    answer; an unknown suffix is refused before the query runs, naming the formats."""
    import json

    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    answer = service.run_query(home, running, PAIR)
    assert answer["count"] == len(answer["matches"]) > 1
    assert main(["query", running, PAIR, "--out", str(tmp_path / "m.parquet")]) == 0
    assert f"wrote {answer['count']:,} matches" in capsys.readouterr().out
    table = pq.read_table(tmp_path / "m.parquet")
    assert table.column("r.seq").to_pylist() == [m["bindings"]["r"][0] for m in answer["matches"]]
    assert table.column("case").to_pylist() == [m["case"] for m in answer["matches"]]
    assert main(["query", running, PAIR, "--out", str(tmp_path / "m.jsonl")]) == 0
    lines = (tmp_path / "m.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == answer["matches"]
    assert main(["query", running, PAIR, "--out", str(tmp_path / "m.csv"), "--limit", "2"]) == 0
    assert pacsv.read_csv(tmp_path / "m.csv").column("start_seq").to_pylist() == [
        m["start_seq"] for m in answer["matches"][:2]]
    cases = PAIR + " RETURN cases"
    assert main(["query", running, cases, "--out", str(tmp_path / "c.parquet")]) == 0
    by_case = pq.read_table(tmp_path / "c.parquet")
    assert sum(by_case.column("matches").to_pylist()) == answer["count"]
    assert by_case.column("case").to_pylist() == list(dict.fromkeys(m["case"] for m in answer["matches"]))
    capsys.readouterr()
    assert main(["query", running, PAIR, "--out", str(tmp_path / "m.txt")]) == 1
    err = capsys.readouterr().err
    assert "'.txt'" in err and ".parquet" in err and not (tmp_path / "m.txt").exists()


def test_return_cases_as_a_table(running: str, home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["query", running, PAIR + " RETURN cases"]) == 0
    lines = capsys.readouterr().out.splitlines()
    answer = service.run_query(home, running, PAIR + " RETURN cases")
    assert f"in {answer['case_count']:,} case(s)" in lines[0]
    assert lines[1].split() == ["CASE", "MATCHES", "FIRST_START", "FIRST_END", "FIRST_START_TS"]
    assert [line.split()[:2] for line in lines[2:]] == [[str(c["case"]), str(c["matches"])]
                                                       for c in answer["cases"]]


def test_progress_phases_and_quiet_when_not_a_terminal() -> None:
    import argparse

    assert _phase("sizing the index from 262,200 events") == "sizing the index"
    assert _phase("ordering 262,200 events") == "ordering events"
    assert _phase("publishing") == "publishing"
    assert terminal_progress(argparse.Namespace(json=True)) is None
    assert terminal_progress(argparse.Namespace(json=False)) is None  # pytest's stderr is no terminal


def on_a_terminal(argv: list[str], home: Path, timeout: float) -> tuple[int, str]:
    """``seqsketch ARGV`` with stderr on a pseudo-terminal; its exit status and all it wrote there."""
    parent, child = pty.openpty()
    env = {**os.environ, "SEQSKETCH_HOME": str(home), "COLUMNS": "120", "TERM": "xterm"}
    env.pop("SEQSKETCH_DATABASE_URL", None)
    process = subprocess.Popen([sys.executable, "-m", "api.cli", *argv], env=env, stdout=subprocess.DEVNULL,
                               stderr=child, stdin=subprocess.DEVNULL)
    os.close(child)
    seen = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([parent], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(parent, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        elif process.poll() is not None:
            break
    process.wait(timeout=30)
    os.close(parent)
    return process.returncode, re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", seen.decode("utf-8", "replace"))


def test_a_local_build_shows_a_bar_on_a_terminal(home: Path, shared_data: Path) -> None:
    code, screen = on_a_terminal(["build", "bpi", str(shared_data / "bpic2012.xes.gz"), "--engine", "local"],
                                 home, 300)
    assert code == 0, screen
    assert "reading bpic2012.xes.gz" in screen and re.search(r"[\d,]+ events", screen)
    assert re.search(r"\d:\d\d:\d\d", screen)  # elapsed time


@pytest.mark.spark
def test_a_spark_build_shows_its_phases_and_none_of_the_jvms_chatter(home: Path, shared_data: Path) -> None:
    code, screen = on_a_terminal(["build", "running", str(shared_data / "running-example.xes"),
                                  "--engine", "spark"], home, 600)
    assert code == 0, screen
    for phase in ("starting Spark", "ordering events", "ETA"):
        assert phase in screen, (phase, screen[-3000:])
    assert "42 events" in screen and "━" in screen  # the count beside the bar, and the bar
    for chatter in ("Setting default log level", "NativeCodeLoader", "log4j", "incubator", "WARN"):
        assert chatter not in screen, (chatter, screen[-3000:])
