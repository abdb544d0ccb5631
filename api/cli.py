"""The ``seqsketch`` command line (CONTRACT §4)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from exact.errors import SeqsketchError

Handler = Callable[[argparse.Namespace], int]


def emit(args: argparse.Namespace, obj: Any, text: str | None = None) -> None:
    """Print ``obj`` as JSON with --json (or when no human text is given), else ``text``."""
    if getattr(args, "json", False) or text is None:
        print(json.dumps(obj, indent=2, sort_keys=False, default=str))
    else:
        print(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="seqsketch", description="Pattern queries over event histories.")
    sub = parser.add_subparsers(dest="command", required=True)
    # Each command module registers itself; see api/commands.py.
    from api import commands

    commands.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except SeqsketchError as err:
        print(f"seqsketch: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("seqsketch: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
