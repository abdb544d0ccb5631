"""Every door has a budget: the CLI and the SDK have the server's time and match limits, and a query whose
matches explode (a Kleene variable over a frequent type, unpartitioned) ends in time — with a clear one-line
error when its limit passes — and never holds the machine.  The CLI prints no traceback for a closed pipe.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from api import service

REPO = Path(__file__).resolve().parents[2]
#: The runaway query of the issue: on n events of one type, n²/2 matches whose Kleene bindings are O(n) each.
RUNAWAY = "PATTERN SEQ('Assign seriousness'+ v0, 'Assign seriousness' v1)"


def seqsketch(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "api.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env=env_of(home))


def env_of(home: Path) -> dict[str, str]:
    return {"SEQSKETCH_HOME": str(home), "PATH": "/usr/bin:/bin"}


@pytest.fixture
def helpdesk(home: Path, tmp_path: Path) -> Path:
    """A helpdesk-like log: 4,000 tickets' events, half of them 'Assign seriousness'."""
    path = tmp_path / "helpdesk.jsonl"
    with path.open("w") as f:
        for i in range(8000):
            kind = ("Assign seriousness" if i % 2 == 0
                    else ("Take in charge ticket", "Resolve ticket")[i % 4 // 2])
            f.write(json.dumps({"type": kind, "ts": 1_600_000_000 + i * 60, "case": f"c{i // 8}"}) + "\n")
    service.build_from_inputs(home, "helpdesk", [str(path)], engine="local")
    return home


def test_the_cli_stops_a_runaway_query_at_its_timeout(helpdesk: Path) -> None:
    started = time.monotonic()
    done = seqsketch(helpdesk, "query", "helpdesk", RUNAWAY, "--mode", "exact", "--timeout", "1")
    took = time.monotonic() - started
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "longer than the limit of 1000 ms" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert took < 30


def test_cli_limits_are_checked_like_the_servers(helpdesk: Path) -> None:
    for args, says in ((["--limit", "2.0"], "not an integer"), (["--limit", "0"], "positive"),
                       (["--timeout", "-1"], "positive"), (["--timeout", "soon"], "not a number")):
        done = seqsketch(helpdesk, "query", "helpdesk", RUNAWAY, *args)
        assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr, done.stderr
    done = seqsketch(helpdesk, "query", "helpdesk", "PATTERN SEQ(\udcff a)")
    assert done.returncode == 1 and "invalid Unicode" in done.stderr and "column 13" in done.stderr


def test_a_closed_pipe_is_no_error(helpdesk: Path, tmp_path: Path) -> None:
    more = tmp_path / "more.jsonl"
    more.write_text("".join(json.dumps({"type": "Resolve ticket", "ts": 1_700_000_000 + i, "case": "z"})
                            + "\n" for i in range(10)))
    done = subprocess.run(f"{sys.executable} -m api.cli append helpdesk {more} --json | head -c 300",
                          shell=True, capture_output=True, text=True, timeout=120, cwd=REPO,
                          env=env_of(helpdesk))
    assert len(done.stdout) == 300 and done.stderr == ""
    done = subprocess.run(f"{sys.executable} -m api.cli query helpdesk \"PATTERN 'Resolve ticket' r\" "
                          "--json | head -c 100", shell=True, capture_output=True, text=True, timeout=120,
                          cwd=REPO, env=env_of(helpdesk))
    assert len(done.stdout) == 100 and done.stderr == ""


def test_the_runaway_query_answers_exists_count_and_a_limit(helpdesk: Path) -> None:
    """exists stops at the first match; count keeps no match; limit keeps the first matches only — each in
    both modes alike, well inside the CLI's time limit (which would end the command with an error)."""
    n = 4000  # 'Assign seriousness' events, unpartitioned: n(n-1)/2 matches, runs up to n events long
    for mode in ("exact", "verified"):
        done = seqsketch(helpdesk, "query", "helpdesk", RUNAWAY + " RETURN exists", "--mode", mode, "--json",
                         "--timeout", "20")
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        assert answer["exists"] is True and answer["count"] is None
        done = seqsketch(helpdesk, "query", "helpdesk", RUNAWAY + " RETURN count", "--mode", mode, "--json",
                         "--timeout", "60")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["count"] == n * (n - 1) // 2
        done = seqsketch(helpdesk, "query", "helpdesk", RUNAWAY, "--mode", mode, "--json", "--limit", "5",
                         "--timeout", "60")
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        assert answer["truncated"] is True and answer["count"] is None  # the limit stopped the search
        first = answer["matches"]
        assert [len(m["bindings"]["v0"]) for m in first] == [1, 2, 3, 4, 5]  # the shortest runs first
        assert all(m["start_seq"] == 0 for m in first)
