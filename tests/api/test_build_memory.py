"""The local engine's memory check: inputs' events estimated before reading, a build that would need more
memory than it may take refused at once in one line that names ``--engine spark``, and nothing written."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from api.service.build_memory import LOCAL_BYTES_PER_EVENT, check_local_build, local_build_bytes
from exact.errors import TooLarge
from exact.readers.estimate import SAMPLE_BYTES, estimate_events


def test_estimates_are_exact_for_parquet_and_small_files_and_close_for_large_ones(tmp_path: Path,
                                                                                 shared_data: Path) -> None:
    rng = np.random.default_rng(1)
    n = 300_000
    pq.write_table(pa.table({"ts": rng.integers(0, 10**9, n), "type": [f"T{i % 7}" for i in range(n)]}),
                   tmp_path / "a.parquet")
    assert estimate_events(tmp_path / "a.parquet", "parquet") == n
    notes = rng.integers(0, 60, n).tolist()
    lines = [json.dumps({"ts": 1_600_000_000 + i, "type": f"T{i % 9}", "note": "x" * notes[i]})
             for i in range(n)]
    (tmp_path / "b.jsonl").write_text("\n".join(lines) + "\n")
    assert (tmp_path / "b.jsonl").stat().st_size > 2 * SAMPLE_BYTES  # scaled from a sample
    assert abs(estimate_events(tmp_path / "b.jsonl", "jsonl") / n - 1) < 0.05
    (tmp_path / "c.jsonl.gz").write_bytes(gzip.compress((tmp_path / "b.jsonl").read_bytes()))
    assert abs(estimate_events(tmp_path / "c.jsonl.gz", "jsonl") / n - 1) < 0.1
    (tmp_path / "d.csv").write_text("ts,type\n" + "".join(f"{i},T{i % 5}\n" for i in range(1000)))
    assert estimate_events(tmp_path / "d.csv", "csv") == 1000
    assert estimate_events(shared_data / "running-example.xes", "xes") == 42
    # BPI 2012: megabytes of log metadata before the first trace, then 262,200 events
    assert abs(estimate_events(shared_data / "bpic2012.xes.gz", "xes") / 262_200 - 1) < 0.3


def test_a_build_too_large_for_one_process_is_refused_before_reading(tmp_path: Path, home: Path,
                                                                     capsys: pytest.CaptureFixture[str]
                                                                     ) -> None:
    from api.cli import main

    n = 400_000
    pq.write_table(pa.table({"ts": np.arange(n), "type": ["A"] * n}), tmp_path / "big.parquet")
    events, need = local_build_bytes([tmp_path / "big.parquet"])
    assert events == n and need >= n * LOCAL_BYTES_PER_EVENT
    started = time.perf_counter()
    assert main(["build", "big", str(tmp_path / "big.parquet"), "--engine", "local",
                 "--local-memory", "64M"]) == 1
    assert time.perf_counter() - started < 5
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--engine spark" in err and "400,000 events" in err
    assert not (home / "datasets" / "big").exists()
    with pytest.raises(TooLarge):
        check_local_build([tmp_path / "big.parquet"], limit=need - 1)
    check_local_build([tmp_path / "big.parquet"], limit=need)  # within its limit: no refusal


def test_the_limit_comes_from_the_environment_or_the_machine(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from api.service import build_memory
    from api.service.build_memory import available_memory, local_memory_limit

    monkeypatch.setenv("SEQSKETCH_LOCAL_MEMORY", "12345")
    assert local_memory_limit() == 12345 and local_memory_limit(99) == 99
    monkeypatch.delenv("SEQSKETCH_LOCAL_MEMORY")
    # the machine's: MemAvailable of /proc/meminfo, and nothing where it cannot be read (so no limit)
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16384000 kB\nMemFree:         1024000 kB\nMemAvailable:    8192000 kB\n")
    assert available_memory(meminfo) == 8_192_000 * 1024
    assert available_memory(tmp_path / "missing") is None
    meminfo.write_text("MemTotal:       16384000 kB\n")
    assert available_memory(meminfo) is None
    monkeypatch.setattr(build_memory, "available_memory", lambda: 8_192_000 * 1024)
    assert local_memory_limit() == 4_096_000 * 1024 and local_memory_limit(99) == 99
    monkeypatch.setattr(build_memory, "available_memory", lambda: None)
    assert local_memory_limit() is None
