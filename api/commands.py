"""Sub-commands of the ``seqsketch`` CLI.  Each ``add_*`` registers one sub-command and its handler."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    for add in (add_demo,):
        add(sub)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")


def add_demo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="build the bundled real log and answer example queries")
    _common(p)
    p.set_defaults(handler=lambda args: 0)
