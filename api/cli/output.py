"""What the ``seqsketch`` commands print: JSON with ``--json``, aligned tables and sizes for people."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from exact import jsontext
from exact.errors import SeqsketchError, out_of_resources


def emit(args: argparse.Namespace, obj: Any, text: str | None = None) -> None:
    """Print ``obj`` as JSON with --json (or when no human text is given), else ``text``."""
    if getattr(args, "json", False) or text is None:
        print(jsontext.dumps(obj, indent=2, sort_keys=False, default=str))
    else:
        print(text)


def table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in (header, *rows))


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")


def positive_float(text: str) -> float:
    """An argument that must be a number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def positive_int(text: str) -> int:
    """An argument that must be an integer ≥ 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def reported(work: Callable[[], int]) -> int:
    """``work()``'s exit status, with what stops a command said as ``seqsketch`` says it: an error in one
    line (status 1), an interruption (130), the reader of the output gone (141, quietly)."""
    try:
        return work()
    except SeqsketchError as err:
        print(f"seqsketch: error: {out_of_resources(err) or err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("seqsketch: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader of our output went away (`… | head`): nothing more to say, and nowhere to say it
        _silence_stdout()
        return 141  # as a process killed by SIGPIPE
    except OSError as err:  # (after BrokenPipeError, one of them)
        exhausted = out_of_resources(err)
        if exhausted is None:
            raise
        print(f"seqsketch: error: {exhausted}", file=sys.stderr)
        return 1


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's final flush does not fail on the closed pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)
