"""The compiled kernels' disk cache never outlives their parts: numba dates a cached kernel by its own
module's file only, so that file is kept no older than :mod:`exact.engine.kernel_parts`, whose functions the kernels
inline."""

from __future__ import annotations

import os
from pathlib import Path

import exact.engine.kernel_parts as parts
from exact.engine.kernel_parts import date_after_parts


def test_kernels_older_than_their_parts_are_dated_anew(tmp_path: Path) -> None:
    parts_ns = Path(parts.__file__).stat().st_mtime_ns
    older, newer = tmp_path / "older.py", tmp_path / "newer.py"
    older.write_text("")
    newer.write_text("")
    os.utime(older, ns=(parts_ns - 10**9, parts_ns - 10**9))
    os.utime(newer, ns=(parts_ns + 10**9, parts_ns + 10**9))
    date_after_parts(older)
    date_after_parts(newer)
    assert older.stat().st_mtime_ns == parts_ns
    assert newer.stat().st_mtime_ns == parts_ns + 10**9
    date_after_parts(tmp_path / "missing.py")  # nothing to date: no error


def test_the_installed_kernels_are_no_older_than_their_parts() -> None:
    kernels = Path(parts.__file__).with_name("kernels.py")
    assert kernels.stat().st_mtime_ns >= Path(parts.__file__).stat().st_mtime_ns
