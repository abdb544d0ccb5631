"""A fresh ``seqsketch query`` process pays for no import it does not use: pyarrow's once-per-process probe
for pandas (about 150 ms, more than a small query) is answered without importing pandas, and pandas stays
importable for whoever asks for it explicitly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from api import service

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def running(home: Path, shared_data: Path) -> Path:
    service.build_from_inputs(home, "running", [str(shared_data / "running-example.xes")], engine="local")
    return home


def imported_by(home: Path, *args: str) -> tuple[str, set[str]]:
    """The command's output, and the modules it imported (from ``-X importtime``)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "api.cli", *args], capture_output=True,
                          text=True, timeout=120, cwd=REPO,
                          env={"SEQSKETCH_HOME": str(home), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    modules = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            self_us, _, name = line.removeprefix("import time:").split("|")
            if self_us.strip().isdigit() and int(self_us) > 100:  # a refused import takes a few µs
                modules.add(name.strip())
    return done.stdout, modules


def test_a_query_imports_no_pandas(running: Path) -> None:
    out, modules = imported_by(running, "query", "running",
                               "PATTERN SEQ('register request' a, 'decide' b) PARTITION BY case", "--json")
    assert '"exists": true' in out
    assert "pyarrow" in modules  # the probe would have run: the command built arrays
    assert not {m for m in modules if m == "pandas" or m.startswith("pandas.")}
    # nor what builds, the catalog and the server need (api.service imports its catalog work lazily)
    heavy = {"sqlalchemy", "alembic", "flask", "werkzeug", "pyspark"}
    assert not {m for m in modules if m.split(".")[0] in heavy}


def test_pandas_stays_importable_after_the_probe() -> None:
    code = ("import sys, pyarrow as pa\n"
            "from api.cli import _answer_pyarrows_pandas_probe\n"
            "_answer_pyarrows_pandas_probe()\n"
            "assert 'pandas' not in sys.modules and pa.array(['x']).to_pylist() == ['x']\n"
            "frame = pa.table({'a': [1, 2]}).to_pandas()\n"
            "print(type(frame).__module__, list(frame['a']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["pandas.core.frame", "[1,", "2]"]
