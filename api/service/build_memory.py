"""The memory an in-process build may take, and its refusal before it starts.

The local engine holds the whole stream in one process (Arrow columns, the stable sort's copy, the store's
writer, the trees): about :data:`LOCAL_BYTES_PER_EVENT` bytes an event at its peak (measured on a 5.2M-event
replay of BPI 2012: 2.17 GB).  Before reading anything the build estimates its inputs' events from their
sizes and formats (:func:`exact.readers.estimate.estimate_events`: Parquet footers exactly, other formats
from a sample) and refuses, in one line naming ``--engine spark``, a build that would need more than it may
take: ``--local-memory`` / ``SEQSKETCH_LOCAL_MEMORY``, by default half the memory the system has available.
The Spark engine works in bounded memory whatever the input's size.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from exact.errors import TooLarge
from exact.readers import detect_format
from exact.readers.estimate import estimate_events

#: Peak bytes an event of an in-process build (the whole stream in memory), and the process's own.
LOCAL_BYTES_PER_EVENT = 420
LOCAL_BASE_BYTES = 256 << 20


def available_memory(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """``MemAvailable`` of /proc/meminfo in bytes (None where it cannot be read)."""
    try:
        match = re.search(r"^MemAvailable:\s+(\d+)\s*kB", meminfo.read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(match.group(1)) * 1024 if match else None


def local_memory_limit(explicit: int | None = None) -> int | None:
    """What an in-process build may take: ``explicit``, else ``SEQSKETCH_LOCAL_MEMORY`` (bytes), else half
    the available memory (None: unknown, no limit)."""
    if explicit:
        return explicit
    raw = os.environ.get("SEQSKETCH_LOCAL_MEMORY")
    if raw:
        return int(raw)
    available = available_memory()
    return None if available is None else available // 2


def local_build_bytes(inputs: Sequence[str | Path], fmt: str = "auto") -> tuple[int, int]:
    """``(events, bytes)``: the inputs' estimated events and the memory an in-process build of them needs."""
    events = sum(estimate_events(p, detect_format(p) if fmt == "auto" else fmt) for p in inputs)
    return events, LOCAL_BASE_BYTES + LOCAL_BYTES_PER_EVENT * events


def check_local_build(inputs: Sequence[str | Path], fmt: str = "auto", limit: int | None = None) -> None:
    """Refuse (:class:`TooLarge`) an in-process build the inputs would make larger than ``limit``
    (:func:`local_memory_limit`)."""
    limit = local_memory_limit(limit)
    if limit is None:
        return
    try:
        events, need = local_build_bytes(inputs, fmt)
    except OSError:  # an input that cannot be read is the reader's to report, with its own message
        return
    if need > limit:
        raise TooLarge(f"an in-process build of about {events:,} events needs about {_gb(need)} of memory, "
                       f"more than the {_gb(limit)} it may take (--local-memory, SEQSKETCH_LOCAL_MEMORY); "
                       "build it with --engine spark, which works in bounded memory", where="--engine local")


def _gb(n: int) -> str:
    return f"{n / (1 << 30):.1f} GB"
