"""Peak memory of a process tree, from ``/proc`` alone (psutil is not a dependency).

:func:`measure` starts a command and samples, every ``interval`` seconds until it exits, every process of
its tree (the command and all its descendants, found through ``/proc/*/stat``'s parent ids):

* ``sum_of_peaks_bytes`` — Σ over every process ever seen of its own peak resident set (``VmHWM``, the
  kernel's high-water mark, so a peak between two samples is not missed). An upper bound of what the tree
  needed at once: a driver's peak and an executor's peak need not fall at the same moment.
* ``peak_of_sum_bytes`` — the largest Σ ``VmRSS`` of the processes alive at one sample: what the tree held
  at once, as far as the sampling saw.
* ``cpu_seconds`` — Σ user + system CPU seconds of every process seen (as last sampled).
* ``processes`` — every process seen: pid, command (first words), its ``VmHWM`` and CPU seconds.

A process's ``VmHWM`` is read at every sample, so the value kept is the last one read before it exited
(a process that lives less than one interval may be missed or read early; Spark's JVMs and Python workers
live for the whole job).  Not a test and not a timed benchmark: it is how the memory figures of
``docs/BENCHMARKS.md`` (bench/spark.py's ``memory`` section) are taken.

``python -m bench.memtree -- COMMAND …`` prints the figures of one command as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

_PROC = Path("/proc")


def _children_map() -> dict[int, list[int]]:
    """Parent pid → child pids, of every process visible now."""
    children: dict[int, list[int]] = {}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # the command (field 2) is in parentheses and may hold spaces: the parent pid follows the last ')'
        fields = stat[stat.rfind(")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def tree_pids(root: int) -> list[int]:
    """``root`` and all its descendants alive now."""
    children = _children_map()
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds ``pid`` has used so far (None when it is gone)."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def memory_kb(pid: int) -> tuple[int, int] | None:
    """``(VmRSS, VmHWM)`` of ``pid`` in kB, or None when it is gone (or a zombie without memory)."""
    try:
        text = (_PROC / str(pid) / "status").read_text()
    except OSError:
        return None
    rss = hwm = None
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
        elif line.startswith("VmHWM:"):
            hwm = int(line.split()[1])
    return None if rss is None or hwm is None else (rss, hwm)


def _command(pid: int) -> str:
    try:
        raw = (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return "?"
    words = [w.decode(errors="replace") for w in raw.split(b"\0") if w]
    main = next((w for w in words if w.startswith("org.apache.spark.")), None)
    head = " ".join(Path(w).name if i == 0 else w for i, w in enumerate(words[:3]))
    return f"{head} … {main}" if main else head


def measure(command: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
            interval: float = 0.2, stdout: Any = None, stderr: Any = None) -> dict[str, Any]:
    """Run ``command`` to its end, sampling its process tree; the figures of the module docstring plus
    ``returncode`` and ``seconds``."""
    started = time.perf_counter()
    proc = subprocess.Popen(list(command), env=dict(env) if env is not None else None, cwd=cwd,
                            stdout=stdout, stderr=stderr)
    peaks: dict[int, int] = {}
    cpu: dict[int, float] = {}
    names: dict[int, str] = {}
    peak_of_sum = 0
    while True:
        alive = 0
        for pid in tree_pids(proc.pid):
            mem = memory_kb(pid)
            if mem is None:
                continue
            rss, hwm = mem
            alive += rss
            peaks[pid] = max(peaks.get(pid, 0), hwm)
            cpu[pid] = max(cpu.get(pid, 0.0), cpu_seconds(pid) or 0.0)
            if pid not in names:
                names[pid] = _command(pid)
        peak_of_sum = max(peak_of_sum, alive)
        if proc.poll() is not None:
            break
        time.sleep(interval)
    kib = 1024
    return {"returncode": proc.returncode, "seconds": round(time.perf_counter() - started, 2),
            "sum_of_peaks_bytes": sum(peaks.values()) * kib, "peak_of_sum_bytes": peak_of_sum * kib,
            "cpu_seconds": round(sum(cpu.values()), 2),
            "processes": sorted(({"pid": pid, "command": names.get(pid, "?"), "peak_bytes": kb * kib,
                                  "cpu_seconds": round(cpu.get(pid, 0.0), 2)}
                                 for pid, kb in peaks.items()), key=lambda p: -p["peak_bytes"])}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("usage: python -m bench.memtree -- COMMAND …", file=sys.stderr)
        return 2
    figures = measure(args, env=os.environ)
    print(json.dumps(figures, indent=2))
    return 0 if figures["returncode"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
