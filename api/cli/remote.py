"""``seqsketch query`` answered by a running server: with ``SEQSKETCH_URL`` set (and ``SEQSKETCH_TOKEN``
when the server asks for one), the command sends the query over HTTP and prints what it prints in process —
the same text, ``--json``, ``--out`` file, ``--plot`` picture and exit status — without loading the engine,
the store or pyarrow (``--out`` and ``--plot`` load what they write with).  A shell loop, a script or a
notebook cell then pays for a Python start and one request, not for the kernels (docs/contract.md §4.2)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from api.cli.answers import QUERY_MAX_MATCHES, add_query_arguments, count_text, partition_values, query_text
from api.cli.output import emit, reported
from api.cli.summary_tables import summary_text

#: seconds a request may take beyond the query's own time limit (the server answers a query over its limit
#: with query_limit: the connection must outlast that)
_GRACE_S = 5.0


def remote_query(url: str, argv: list[str]) -> int:
    """Run ``seqsketch query ARGV`` against the server at ``url``; the exit status."""
    from api.client import Client, SeqsketchAPIError

    parser = argparse.ArgumentParser(prog="seqsketch query", description="answer a pattern query on a dataset "
                                     f"(through the server at {url})")
    add_query_arguments(parser)
    args = parser.parse_args(argv)
    client = Client(url, os.environ.get("SEQSKETCH_TOKEN") or None, timeout=args.timeout + _GRACE_S, retries=1)
    timeout_ms = round(args.timeout * 1000)

    def answer() -> int:
        try:
            return _answer(client, args, timeout_ms)
        except SeqsketchAPIError as err:  # (the server's refusal, already in its words)
            text = err.message if err.code != "connection_error" else \
                f"cannot reach the server at {url}: {err.message}"
            print(f"seqsketch: error: {text}", file=sys.stderr)
            return 1
        finally:
            client.close()

    return reported(answer)


def _answer(client: Any, args: argparse.Namespace, timeout_ms: int) -> int:
    if args.out:
        from api.formats import check_out_path, split_answer, write_rows

        check_out_path(args.out)  # before the query runs
        asked = client.query(args.dataset, args.query, mode=args.mode, limit=args.limit, timeout_ms=timeout_ms,
                             include_events=args.include_events, format="arrow")
        result = {k: v for k, v in asked.raw.items() if k != "rows"}
        result["rows"] = asked.table
        written = write_rows(result, args.out)
        head, _ = split_answer(result)
        head["rows"] = asked.raw.get("rows", head["rows"])  # (what the server said they are)
        stats = head.get("stats", {})
        emit(args, head, f"wrote {written:,} {head['rows']} to {args.out}  ({count_text(head)} match(es); "
                         f"{head['mode']}, {stats.get('total_ms', 0):.1f} ms)")
        return 0
    limit = QUERY_MAX_MATCHES if args.limit is None else args.limit
    answer = client.query(args.dataset, args.query, mode=args.mode, limit=limit, timeout_ms=timeout_ms,
                          include_events=args.include_events).raw
    emit(args, answer, query_text(answer, partition_values(args.query, answer)))
    if args.plot:
        if summary_text(answer) is not None:
            from api.cli.summary_tables import plot_summary

            out = plot_summary(args.plot, query=args.query, answer=answer)
        else:
            from api.cli.plot import plot_answer

            candidates = answer if args.mode == "approximate" else client.query(
                args.dataset, args.query, mode="approximate", timeout_ms=timeout_ms).raw
            out = plot_answer(args.plot, query=args.query, info=client.info(args.dataset),
                              density=client.density(args.dataset), answer=answer, candidates=candidates)
        print(f"seqsketch: drew the answer into {out}", file=sys.stderr)
    return 0
