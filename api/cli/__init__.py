"""The ``seqsketch`` command line (CONTRACT §4): a thin door onto :mod:`api.service`.

:mod:`api.cli.data` holds the commands on datasets, :mod:`api.cli.serving` those that run the service
(``serve``, ``jobs run``), :mod:`api.cli.admin` those that administer it, :mod:`api.cli.output` what they
print."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from api.cli import admin, data, serving
from exact.errors import SeqsketchError

Handler = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="seqsketch", description="Pattern queries over event histories.")
    sub = parser.add_subparsers(dest="command", required=True)
    serving.register(sub)
    admin.register(sub)
    data.register(sub)
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
    except BrokenPipeError:
        # the reader of our output went away (`… | head`): nothing more to say, and nowhere to say it
        _silence_stdout()
        return 141  # as a process killed by SIGPIPE


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's final flush does not fail on the closed pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)
