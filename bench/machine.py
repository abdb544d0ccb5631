"""This machine, as the report states it beside the seeds' hardware: CPU, cores, memory, versions."""

from __future__ import annotations

import os
import platform
import re
import subprocess
from pathlib import Path
from typing import Any


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The ``model name`` of the first processor in /proc/cpuinfo (``platform.processor()`` elsewhere)."""
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def memory_bytes(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """Total memory from /proc/meminfo's ``MemTotal`` (kB), in bytes."""
    try:
        match = re.search(r"^MemTotal:\s+(\d+)\s*kB", meminfo.read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(match.group(1)) * 1024 if match else None


def java_version() -> str | None:
    """The first line of ``java -version`` (it prints to stderr), or None without a JVM."""
    try:
        done = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (done.stderr or done.stdout).strip().splitlines()
    return lines[0].strip() if lines else None


def _version(module: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:  # a missing distribution is reported as absent, not an error
        return None


def git_commit(repo: Path) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None


def describe(repo: Path | None = None) -> dict[str, Any]:
    """Everything the report prints about where it ran."""
    mem = memory_bytes()
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {
        "load_average": load,
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "memory_gb": round(mem / 2**30, 1) if mem else None,
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "java": java_version(),
        "spark": _version("pyspark"),
        "pyarrow": _version("pyarrow"),
        "numpy": _version("numpy"),
        "commit": git_commit(repo) if repo else None,
    }
