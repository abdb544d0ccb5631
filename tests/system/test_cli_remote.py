"""``seqsketch query`` through a running server (``SEQSKETCH_URL``): the same text, JSON, files, errors and exit
status as in process — with a home of its own that holds nothing, so every answer came from the server — and
none of the engine, the store or pyarrow imported to give them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from api import service
from bench.load import served

REPO = Path(__file__).resolve().parents[2]
PAIRS = "PATTERN SEQ('register request' r, 'pay compensation' p) PARTITION BY case STRATEGY skip_till_any_match"
FUNNEL = "PATTERN SEQ('register request' r, decide d, 'pay compensation' p) PARTITION BY case RETURN funnel"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Iterator[tuple[str, Path, Path]]:
    """A server over a home with the running example; and an empty home for the commands sent to it."""
    home = tmp_path_factory.mktemp("remote") / "home"
    home.mkdir()
    service.build_from_inputs(home, "running", [str(shared_data / "running-example.xes")], engine="local")
    empty = tmp_path_factory.mktemp("remote") / "empty"
    empty.mkdir()
    with served(home, workers=1) as url:
        yield url, home, empty


def cli(*args: str, home: Path, url: str | None = None, importtime: bool = False
        ) -> subprocess.CompletedProcess[str]:
    env = {"SEQSKETCH_HOME": str(home), "PATH": "/usr/bin:/bin", **({"SEQSKETCH_URL": url} if url else {})}
    flags = ["-X", "importtime"] if importtime else []
    return subprocess.run([sys.executable, *flags, "-m", "api.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env=env)


def same_text(text: str) -> str:
    return re.sub(r"\d[\d.,]* ms", "# ms", text)


@pytest.mark.parametrize("args", [
    ("query", "running", PAIRS),
    ("query", "running", PAIRS + " RETURN cases"),
    ("query", "running", PAIRS, "--mode", "approximate"),
    ("query", "running", PAIRS, "--limit", "2"),
    ("query", "running", FUNNEL),
    ("query", "running", "PATTERN SEQ(decide d) PARTITION BY case RETURN next 2"),
])
def test_answers_through_the_server_are_printed_as_in_process(server: tuple[str, Path, Path],
                                                              args: tuple[str, ...]) -> None:
    url, home, empty = server
    local, remote = cli(*args, home=home), cli(*args, home=empty, url=url)
    assert local.returncode == remote.returncode == 0, (local.stderr, remote.stderr)
    assert same_text(remote.stdout) == same_text(local.stdout) and remote.stdout.strip()
    as_json = [json.loads(cli(*args, "--json", home=h, url=u).stdout) for h, u in ((home, None), (empty, url))]
    for answer in as_json:
        answer.pop("stats")
    assert as_json[0] == as_json[1]


@pytest.mark.parametrize("args", [
    ("query", "running", "PATTERN SEQ('register request' r,\n  'decide' d 'pay compensation' p)"),
    ("query", "nowhere", PAIRS),
    ("query", "running", "PATTERN SEQ(decide d) RETURN count BY d.nope"),
    ("query", "running", PAIRS, "--mode", "sideways"),
])
def test_errors_through_the_server_are_the_same_and_exit_alike(server: tuple[str, Path, Path],
                                                               args: tuple[str, ...]) -> None:
    url, home, empty = server
    local, remote = cli(*args, home=home), cli(*args, home=empty, url=url)
    assert local.returncode == remote.returncode != 0
    assert remote.stderr == local.stderr and "Traceback" not in remote.stderr, (local.stderr, remote.stderr)
    assert remote.stdout == local.stdout == ""


def test_files_through_the_server_hold_the_same_rows(server: tuple[str, Path, Path], tmp_path: Path) -> None:
    url, home, empty = server
    for name, h, u in (("local", home, None), ("remote", empty, url)):
        done = cli("query", "running", PAIRS, "--out", str(tmp_path / f"{name}.parquet"), home=h, url=u)
        assert done.returncode == 0, done.stderr
    assert pq.read_table(tmp_path / "local.parquet").equals(pq.read_table(tmp_path / "remote.parquet"))


def test_an_unreachable_server_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    done = cli("query", "running", PAIRS, home=tmp_path, url="http://127.0.0.1:9")
    assert done.returncode == 1 and done.stderr.startswith("seqsketch: error: cannot reach the server at ")
    assert "Traceback" not in done.stderr


def test_a_query_through_the_server_loads_no_engine(server: tuple[str, Path, Path]) -> None:
    url, _, empty = server
    done = cli("query", "running", PAIRS, home=empty, url=url, importtime=True)
    assert done.returncode == 0, done.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time")}
    assert "api.cli.remote" in imported
    assert not imported & {"numba", "pyarrow", "numpy", "api.service", "exact.engine", "sketch", "lark"}, \
        sorted(imported & {"numba", "pyarrow", "numpy", "api.service", "exact.engine", "sketch", "lark"})
