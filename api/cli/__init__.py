"""The ``seqsketch`` command line (docs/contract.md §4): a thin door onto :mod:`api.service` — or, for
``seqsketch query`` with ``SEQSKETCH_URL`` set, onto that server (:mod:`api.cli.remote`).

:mod:`api.cli.data` holds the commands on datasets, :mod:`api.cli.serving` those that run the service
(``serve``, ``jobs run``), :mod:`api.cli.admin` those that administer it, :mod:`api.cli.output` what they
print."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from api.cli.output import reported
from api.rlimits import raise_open_file_limit

Handler = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    from api.cli import admin, data, serving, watching  # (not for a query answered through a server)

    parser = argparse.ArgumentParser(prog="seqsketch", description="Pattern queries over event histories.")
    sub = parser.add_subparsers(dest="command", required=True)
    serving.register(sub)
    admin.register(sub)
    data.register(sub)
    watching.register(sub)
    return parser


# commands that read and answer, and never hand pandas objects to pyarrow
_WITHOUT_PANDAS = frozenset({"query", "info", "datasets", "export", "append", "watch"})


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    url = os.environ.get("SEQSKETCH_URL", "").strip()
    if url and args_list[:1] == ["query"]:  # (answered by a running server: no engine is loaded here)
        from api.cli.remote import remote_query

        return remote_query(url, args_list[1:])
    parser = build_parser()
    args = parser.parse_args(args_list)
    handler: Handler = args.handler
    if args.command in _WITHOUT_PANDAS:
        _answer_pyarrows_pandas_probe()
    raise_open_file_limit()
    return reported(lambda: handler(args))


class _NoPandas:
    """An import finder that refuses pandas, installed only while pyarrow probes for it."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("pandas is not needed to answer a query")


def _answer_pyarrows_pandas_probe() -> None:
    """Spare a short command pyarrow's import of pandas (about 150 ms, more than a small query takes).

    The first array pyarrow builds from Python objects first asks, once per process, whether pandas can be
    imported, so that it can recognise pandas objects — and imports it to find out. None of these commands
    has pandas objects, so the probe is run here with pandas refused and remembers "no pandas". An explicit
    conversion (``to_pandas``) still imports pandas when asked: pyarrow retries then."""
    if "pandas" in sys.modules:
        return
    import pyarrow as pa

    sys.meta_path.insert(0, _NoPandas)  # type: ignore[arg-type]
    try:
        pa.array([0])
    finally:
        sys.meta_path.remove(_NoPandas)  # type: ignore[arg-type]
