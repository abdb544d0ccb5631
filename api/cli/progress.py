"""Progress of a build or append on a terminal: one bar on stderr with the phase, the share done, the events
seen, the time elapsed and the time left (``rich``); nothing when stderr is not a terminal or with --json.

The bar writes to its own copy of the terminal's file descriptor: a Spark build points descriptor 2 at a log
file while its JVM starts (to keep the JVM's start-up chatter off the terminal), and the bar must stay on the
terminal meanwhile.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from types import TracebackType
from typing import Any

_EVENTS = re.compile(r"([\d,]+) events")


def _phase(message: str) -> str:
    """The phase a progress message names, without the count the bar shows beside it: ``sizing the index
    from 262,200 events`` → ``sizing the index``, ``ordering 262,200 events`` → ``ordering events``."""
    text = re.sub(r"(?:\s+from|:)\s+[\d,]+ events", "", message)
    return re.sub(r"[\d,]+ events", "events", text).strip() or message


class TerminalProgress:
    """A context manager holding the bar; :meth:`job` takes the Spark job's ``(fraction, message)`` reports,
    :meth:`reading` the local reader's ``(path, events)``."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            Progress,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._file = os.fdopen(os.dup(sys.stderr.fileno()), "w", buffering=1, encoding="utf-8",
                               errors="replace")
        self.console = Console(file=self._file, stderr=True)
        self.progress = Progress(
            TextColumn("[bold]{task.description:<30.30}"), BarColumn(bar_width=36), TaskProgressColumn(),
            TextColumn("{task.fields[events]:>16}"), TimeElapsedColumn(), TextColumn("ETA"),
            TimeRemainingColumn(), console=self.console, transient=True, refresh_per_second=8)
        self.task = self.progress.add_task("starting", total=None, events="")

    def __enter__(self) -> TerminalProgress:
        self.progress.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.progress.stop()
        self._file.close()

    def job(self, fraction: float, message: str | None = None) -> None:
        text = message or ""
        found = _EVENTS.search(text)
        fields: dict[str, Any] = {"description": _phase(text) if text else "working", "total": 1.0,
                                  "completed": min(1.0, max(0.0, float(fraction)))}
        if found:
            fields["events"] = f"{found.group(1)} events"
        self.progress.update(self.task, **fields)

    def reading(self, path: Path, events: int) -> None:
        self.progress.update(self.task, description=f"reading {Path(path).name}", events=f"{events:,} events")


def terminal_progress(args: argparse.Namespace) -> TerminalProgress | None:
    """A bar when stderr is a terminal and the output is not --json, else ``None``."""
    if getattr(args, "json", False) or not sys.stderr.isatty():
        return None
    return TerminalProgress()
