"""What ``seqsketch query`` prints, and the arguments it takes — light enough for a command that answers
through a running server (``SEQSKETCH_URL``, :mod:`api.cli.remote`) to import nothing of the engine."""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from api.cli.output import positive_float, positive_int, table
from api.cli.summary_tables import summary_text

#: The CLI's query limits, the server's defaults (SEQSKETCH_QUERY_TIMEOUT_MS is 30 s; a person at a terminal
#: waits a little longer).
QUERY_TIMEOUT_S = 60.0
QUERY_MAX_MATCHES = 10_000


def add_query_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``seqsketch query`` (in process, or through a server)."""
    p.add_argument("dataset")
    p.add_argument("query", help="the query text (or its JSON form)")
    p.add_argument("--mode", choices=("approximate", "verified", "exact"), default="verified",
                   help="approximate: index only; verified (default): index, then exact on candidates; "
                        "exact: the exact engine over the whole stream")
    p.add_argument("--limit", type=positive_int, default=None,
                   help=f"return at most N matches, or cases with RETURN cases (default: {QUERY_MAX_MATCHES:,}, "
                        "as the server; with --out, all)")
    p.add_argument("--timeout", type=positive_float, default=QUERY_TIMEOUT_S, metavar="SECONDS",
                   help=f"give up after this many seconds (default {QUERY_TIMEOUT_S:g})")
    p.add_argument("--out", default=None, metavar="PATH",
                   help="write the rows (matches, cases or intervals) to a file, all of them unless --limit is "
                        "given: .parquet, .csv (list columns as JSON text) or .jsonl")
    p.add_argument("--include-events", action="store_true",
                   help="add each match's bound events (their type and attributes, per variable)")
    p.add_argument("--plot", default=None, metavar="PNG",
                   help="also draw the answer on a timeline of the history into this file (needs matplotlib: "
                        "the 'plot' extra)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def partition_values(query: str, result: dict[str, Any]) -> tuple[list[str], list[str]] | None:
    """``(keys, value per match)`` when the query has ``PARTITION BY``: each match's case."""
    matches = result.get("matches") or []
    if not matches or "case" not in matches[0]:
        return None
    first = matches[0]["case"]
    keys = list(first) if isinstance(first, dict) else [_partition_key(query)]
    return keys, [_case_text(m.get("case")) for m in matches]


#: ``PARTITION BY name`` in a query's text, up to the clause after it (the language is not loaded to read it)
_PARTITION = re.compile(r"\bPARTITION\s+BY\s+('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^\s,]+)", re.I)


def _partition_key(query: str) -> str:
    """The one ``PARTITION BY`` attribute of a query given as text or its JSON form."""
    text = query.strip()
    if text.startswith("{"):
        try:
            named = json.loads(text).get("partition_by") or ["case"]
            return str(named[0])
        except (ValueError, AttributeError, IndexError):
            return "case"
    found = _PARTITION.search(text)
    if found is None:
        return "case"
    name = found.group(1)
    return name[1:-1] if name[:1] in "'\"" else name


def _case_text(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join("-" if v is None else str(v) for v in value.values())
    return "-" if value is None else str(value)


def count_text(result: dict[str, Any]) -> str:
    if result.get("count") is not None:
        return f"{result['count']:,}"
    return "more than the" if result.get("truncated") else "some"


def query_text(result: dict[str, Any], partition: tuple[list[str], list[str]] | None = None) -> str:
    summary = summary_text(result)  # (funnel, next, durations, counts BY)
    if summary is not None:
        return summary
    stats = result.get("stats", {})
    if result.get("mode") == "approximate":  # no matches, no count: candidate intervals with their level
        head = (f"{len(result.get('intervals', [])):,} candidate interval(s), exists: "
                f"{str(result['exists']).lower()}, expected false-positive rate "
                f"{result.get('expected_false_positive_rate', 0):.2g}  [approximate, "
                f"{result.get('strategy', '')}, {stats.get('total_ms', 0):.1f} ms, "
                f"{stats.get('nodes_probed', 0):,} nodes probed]")
        rows: list[tuple[str, ...]] = [
            (str(i["start_seq"]), str(i["end_seq"]), i["start_ts"], i["end_ts"], str(i.get("level", 0)))
            for i in result.get("intervals", [])]
        body = f"\n{table(('START', 'END', 'START_TS', 'END_TS', 'LEVEL'), rows)}" if rows else ""
        why = f"\n{result['explain']}" if result.get("explain") else ""
        return f"{head}{body}{why}"
    count = f"{result['count']:,}" if result["count"] is not None else (
        f"more than {len(result['matches']):,}" if result.get("truncated") and result.get("matches") else "some")
    head = (f"{count} match(es), exists: {str(result['exists']).lower()}  "
            f"[{result['mode']}, {result.get('strategy', '')}, {stats.get('total_ms', 0):.1f} ms]")
    if result.get("explain"):
        head += f"\n{result['explain']}"
    if result.get("matches"):
        rows = [(str(m["start_seq"]), str(m["end_seq"]), m["start_ts"],
                 " ".join(f"{k}={','.join(map(str, v))}" for k, v in m["bindings"].items()))
                for m in result["matches"]]
        header: tuple[str, ...] = ("START", "END", "START_TS", "BINDINGS")
        if partition is not None:  # the partition beside each match, e.g. its case
            keys, values = partition
            header = (*header[:3], ", ".join(k.upper() for k in keys), header[3])
            rows = [(*row[:3], value, row[3]) for row, value in zip(rows, values, strict=True)]
        body = table(header, rows)
        more = ("\n(truncated: --limit caps the matches shown; the search stopped there, RETURN count counts "
                "them all)" if result.get("truncated") and result["count"] is None else
                "\n(truncated: --limit caps the matches shown)" if result.get("truncated") else "")
        return f"{head}\n{body}{more}"
    if result.get("intervals"):
        rows = [(str(i["start_seq"]), str(i["end_seq"]), i["start_ts"], i["end_ts"])
                for i in result["intervals"]]
        return f"{head}\n{table(('START', 'END', 'START_TS', 'END_TS'), rows)}"
    if result.get("cases"):
        shown = len(result["cases"])
        head = head.replace(" match(es),", f" match(es) in {result.get('case_count') or shown:,} case(s),", 1)
        rows = [(_case_text(c["case"]), f"{c['matches']:,}", str(c["start_seq"]), str(c["end_seq"]),
                 c["start_ts"]) for c in result["cases"]]
        more = "\n(truncated: --limit caps the cases shown)" if result.get("truncated") else ""
        return f"{head}\n{table(('CASE', 'MATCHES', 'FIRST_START', 'FIRST_END', 'FIRST_START_TS'), rows)}{more}"
    return head
