"""``seqsketch`` commands on datasets: ``build``, ``info``, ``datasets``, ``query``, ``append``,
``export``."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from api import service
from api.cli.answers import QUERY_MAX_MATCHES, add_query_arguments, count_text, partition_values, query_text
from api.cli.output import common, emit, human_bytes, positive_int, table
from api.cli.progress import TerminalProgress, terminal_progress
from api.cli.summary_tables import plot_summary, summary_text
from exact.readers import DEFAULT_TIME_FIELD, DEFAULT_TYPE_FIELD, FORMATS
from exact.store import check_dataset_name, dataset_names, seqsketch_home
from sketch.dataset import AUTO_KEY


def register(sub: argparse._SubParsersAction) -> None:
    for add in (add_build, add_info, add_datasets, add_query, add_append, add_export, add_compact, add_retain):
        add(sub)


# --- datasets: build, info, datasets -----------------------------------------------------------------------


def add_build(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("build", help="ingest inputs into a new dataset: event store (and index)")
    p.add_argument("dataset", help="dataset name: [a-z0-9][a-z0-9_-]{0,63}")
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="input files, read in the order given")
    p.add_argument("--format", default="auto", choices=("auto", *FORMATS),
                   help="input format (default: by extension)")
    p.add_argument("--type-field", default=DEFAULT_TYPE_FIELD, help="csv/jsonl/parquet: the event type field")
    p.add_argument("--time-field", default=DEFAULT_TIME_FIELD, help="csv/jsonl/parquet: the timestamp field")
    p.add_argument("--engine", choices=("spark", "local"), default="spark", help="index build engine")
    p.add_argument("--leaf-size", type=positive_int, default=None, help="events per leaf of the index (C)")
    p.add_argument("--fpq", type=_probability, default=None, help="target false-positive rate of a query")
    p.add_argument("--memory", type=_byte_size, default=None, help="memory budget of the index (e.g. 64M)")
    p.add_argument("--local-memory", type=_byte_size, default=None, metavar="BYTES",
                   help="--engine local: the most memory the build may take (default: half the available "
                        "memory); inputs estimated to need more are refused")
    p.add_argument("--replace", action="store_true", help="rebuild an existing dataset")
    served = p.add_mutually_exclusive_group()
    served.add_argument("--index-attrs", type=_names, default=None, metavar="A,B",
                        help="the attributes served in place for conditions (default: the cheapest within 24 "
                             "bytes per event)")
    served.add_argument("--no-index-attrs", dest="index_attrs", action="store_const", const=[],
                        help="serve no attribute in place (conditions then read the Parquet parts)")
    p.add_argument("--footprint", type=_ratio, default=None, metavar="RATIO",
                   help="keep the whole dataset within RATIO times its Parquet parts: the attributes served in "
                        "place and their value indexes are chosen to fit (default 4)")
    p.add_argument("--partition-key", default=AUTO_KEY, metavar="ATTR",
                   help="cluster events by this attribute for per-case questions (default: case, when every "
                        "event has it; '' for none)")
    p.add_argument("--keep", default=None, metavar="SPAN",
                   help="keep this much history: a span of event time ('90 days', '12h') or a number of events "
                        "('1000000 events'); older parts are retired, a decayed summary stays (default: all)")
    p.add_argument("--store", default=None, metavar="s3://BUCKET/PREFIX",
                   help="keep the dataset on object storage there (default: $SEQSKETCH_STORE, else the home's "
                        "disk); credentials and endpoint from AWS_* in the environment")
    common(p)
    p.set_defaults(handler=_build)


def add_info(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="describe a dataset")
    p.add_argument("dataset")
    common(p)
    p.set_defaults(handler=_info)


def add_datasets(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("datasets", help="list the datasets")
    common(p)
    p.set_defaults(handler=_datasets)


def _probability(text: str) -> float:
    value = float(text)
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must lie strictly between 0 and 1, got {text}")
    return value


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not 1.0 <= value <= 1000.0:
        raise argparse.ArgumentTypeError(f"must lie between 1 and 1000, got {text}")
    return value


def _byte_size(text: str) -> int:
    """Bytes from ``123``, ``64K``, ``512M``, ``2G`` (binary multiples)."""
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    body = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = body[-1] if body and body[-1] in units else ""
    try:
        value = int(float(body[: len(body) - len(unit)]) * units[unit])
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size in bytes: {text!r} (e.g. 268435456, 256M, 2G)") \
            from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"a comma-separated list of attribute names, got {text!r}")
    return list(dict.fromkeys(names))


def _build(args: argparse.Namespace) -> int:
    with _progress(args) as bar:
        request = service.BuildRequest(
            fmt=args.format, type_field=args.type_field, time_field=args.time_field, leaf_size=args.leaf_size,
            fpq=args.fpq, memory=args.memory, partition_key=args.partition_key, index_attrs=args.index_attrs,
            footprint=args.footprint, keep=args.keep, store=args.store, replace=args.replace)
        summary = service.build_from_inputs(seqsketch_home(), args.dataset, args.inputs, request, engine=args.engine,
                                            local_memory=args.local_memory, progress=bar.reading if bar else None,
                                            job_progress=bar.job if bar else None)
    emit(args, summary, f"built {summary['name']}: {summary['events']:,} events, "
         f"{len(summary['types'])} types, {summary['start_ts']} .. {summary['end_ts']}, "
         f"store {human_bytes(summary['store_bytes'])}, {summary['seconds']:.1f} s")
    return 0


@contextmanager
def _progress(args: argparse.Namespace) -> Iterator[TerminalProgress | None]:
    """The progress bar of a build or append on a terminal (``None`` elsewhere and with --json)."""
    bar = terminal_progress(args)
    if bar is None:
        yield None
        return
    with bar:
        yield bar


def _info(args: argparse.Namespace) -> int:

    info = service.dataset_info(seqsketch_home(), check_dataset_name(args.dataset))
    emit(args, info, _info_text(info))
    return 0


def _datasets(args: argparse.Namespace) -> int:

    home = seqsketch_home()
    infos = [service.dataset_info(home, n) for n in dataset_names(home)]
    rows = [(i["name"], f"{i['events']:,}", i["start_ts"] or "-", i["end_ts"] or "-",
             human_bytes(i["store_bytes"])) for i in infos]
    text = table(("NAME", "EVENTS", "START", "END", "STORE"), rows) if rows else f"no datasets in {home}"
    emit(args, {"datasets": infos}, text)
    return 0


def _info_text(info: dict[str, Any]) -> str:
    top = list(info["types"].items())
    lines = [f"name        {info['name']}", f"events      {info['events']:,}",
             f"time range  {info['start_ts']} .. {info['end_ts']}",
             f"store       {human_bytes(info['store_bytes'])}",
             f"attributes  {', '.join(f'{k}: {v}' for k, v in info['attrs'].items()) or '-'}",
             f"types       {len(top)}"]
    index = info.get("index")
    if index:
        lines.insert(4, f"index       {human_bytes(index['bytes'])}, version {index['version']}, "
                        f"C={index['leaf_size']}, m={index['m']}, k={index['k']}, {index['nodes']:,} nodes, "
                        f"{index['levels']} levels, expected fpq {index['expected_fpq']:.2g}, "
                        f"digest {index['index_digest'][:12]}…")
        part = index.get("partition")
        if part:
            tail = (f", {part['tail_events']:,} appended since (compact folds them in)"
                    if part["tail_events"] else "")
            lines.insert(5, f"partition   by {part['key']}: {part['groups']:,} groups, tree "
                            f"{human_bytes(part['bytes'])} ({part['nodes']:,} nodes), layout "
                            f"{human_bytes(part['layout_bytes'])}{tail}")
    served = (info.get("attr_index") or {}).get("attributes") or {}
    if served:
        parts = info["attr_index"]["parts"]
        def one(attr: str, entry: dict[str, int]) -> str:
            some = "" if entry["parts"] == parts else f", {entry['parts']} of {parts} parts"
            return f"{attr} ({human_bytes(entry['bytes'])}{some})"

        lines.insert(-1, "in place    " + ", ".join(one(a, e) for a, e in served.items()))
    footprint = info.get("footprint")
    if footprint:
        parts_bytes = footprint["structures"]["parts"]["bytes"]
        rest = ", ".join(f"{k.replace('_', ' ')} {e['ratio']:.2f}" for k, e in footprint["structures"].items()
                         if k != "parts" and e["bytes"])
        lines.insert(-1, f"on disk     {human_bytes(footprint['bytes'])}, {footprint['ratio']:.2f}x the parts "
                         f"({human_bytes(parts_bytes)}){': ' + rest if rest else ''}")
    lines += [f"  {count:>12,}  {typ}" for typ, count in top[:20]]
    if len(top) > 20:
        lines.append(f"  … {len(top) - 20} more (--json lists all)")
    return "\n".join(lines)


# --- query ------------------------------------------------------------------------------------------------


def add_query(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("query", help="answer a pattern query on a dataset")
    add_query_arguments(p)
    p.set_defaults(handler=_query)


def _query(args: argparse.Namespace) -> int:
    import sys

    home = seqsketch_home()
    if args.out:
        from api.formats import check_out_path, split_answer, write_rows

        check_out_path(args.out)  # before the query runs
        result = service.limited_query(home, args.dataset, args.query, mode=args.mode, limit=args.limit,
                                       timeout_ms=round(args.timeout * 1000), include_events=args.include_events,
                                       columnar=True)
        written = write_rows(result, args.out)
        head, _ = split_answer(result)
        stats = head.get("stats", {})
        emit(args, head, f"wrote {written:,} {head['rows']} to {args.out}  ({count_text(head)} match(es); "
                         f"{head['mode']}, {stats.get('total_ms', 0):.1f} ms)")
        return 0
    limit = QUERY_MAX_MATCHES if args.limit is None else args.limit
    result = service.limited_query(home, args.dataset, args.query, mode=args.mode, limit=limit,
                                   timeout_ms=round(args.timeout * 1000), include_events=args.include_events)
    emit(args, result, query_text(result, partition_values(args.query, result)))
    if args.plot and summary_text(result) is not None:  # (a summary's own chart, not the timeline)
        print(f"seqsketch: drew the answer into {plot_summary(args.plot, query=args.query, answer=result)}",
              file=sys.stderr)
    elif args.plot:
        from api.cli.plot import plot_answer

        candidates = result if args.mode == "approximate" else service.limited_query(
            home, args.dataset, args.query, mode="approximate", timeout_ms=round(args.timeout * 1000))
        out = plot_answer(args.plot, query=args.query, info=service.dataset_info(home, args.dataset),
                          density=service.event_density(home, args.dataset), answer=result,
                          candidates=candidates)
        print(f"seqsketch: drew the answer into {out}", file=sys.stderr)
    return 0


# --- append (local, or the Spark job) ----------------------------------------------------------------------


def add_append(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("append", help="add the events of input files to a built dataset, index included")
    p.add_argument("dataset")
    p.add_argument("inputs", nargs="*", metavar="INPUT",
                   help="input files, read in the order given (none: only --watermark)")
    p.add_argument("--format", default="auto", choices=("auto", *FORMATS))
    p.add_argument("--type-field", default=DEFAULT_TYPE_FIELD)
    p.add_argument("--time-field", default=DEFAULT_TIME_FIELD)
    p.add_argument("--engine", choices=("local", "spark"), default="local",
                   help="local (default: in place, no Spark) or the Spark job")
    p.add_argument("--watermark", default=None, metavar="TIME",
                   help="event time has reached TIME after these events (ISO 8601 or epoch seconds): no later "
                        "event at or before it; windows close on it")
    common(p)
    p.set_defaults(handler=_append)


def _append(args: argparse.Namespace) -> int:
    from exact.errors import InputError

    if not args.inputs and args.watermark is None:
        raise InputError("name at least one input file, or --watermark TIME", where="append")
    with _progress(args) as bar:
        out = service.append_inputs(seqsketch_home(), args.dataset, args.inputs, fmt=args.format,
                                    type_field=args.type_field, time_field=args.time_field,
                                    engine=args.engine, job_progress=bar.job if bar else None,
                                    watermark=args.watermark)
    mark = f"; event time has reached {out['watermark']}" if out.get("watermark") else ""
    emit(args, out, f"appended {out['appended']:,} events to {out['name']} (seq {out['first_seq']:,} .. "
         f"{out['last_seq']:,}); {out['events']:,} events in all{mark}")
    return 0


# --- export -------------------------------------------------------------------------------------------------


def add_export(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="the stored events back out, in seq order, every attribute kept")
    p.add_argument("dataset")
    p.add_argument("--format", default="jsonl", choices=service.EXPORT_FORMATS,
                   help="jsonl (default), parquet (needs --out) or csv")
    p.add_argument("--out", default=None, metavar="PATH", help="output file (default: standard output)")
    p.add_argument("--between", nargs=2, metavar=("T1", "T2"), default=None,
                   help="only events with T1 <= ts <= T2 (ISO-8601; without a zone: UTC)")
    common(p)
    p.set_defaults(handler=_export)


def _export(args: argparse.Namespace) -> int:
    from exact.errors import InputError
    from exact.events import parse_timestamp

    between = None
    if args.between:
        try:
            between = (parse_timestamp(args.between[0]), parse_timestamp(args.between[1]))
        except ValueError as err:
            raise InputError(str(err), where="--between") from None
    if args.out is None and args.json:
        raise InputError("--json describes the export, so the events need --out PATH", where="--json")
    out = service.export_dataset(seqsketch_home(), check_dataset_name(args.dataset), fmt=args.format,
                                 out=args.out, between=between)
    if args.out is not None:
        emit(args, out, f"exported {out['events']:,} events of {out['dataset']} to {out['out']} "
             f"({args.format}, {human_bytes(out['bytes'] or 0)})")
    return 0


# --- compact ------------------------------------------------------------------------------------------------


def add_retain(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("retain", help="keep a span or a number of a dataset's latest events; retire the rest")
    p.add_argument("dataset")
    p.add_argument("keep", metavar="KEEP",
                   help="'90 days', '12h', '1000000 events', or 'forever' (keep everything from now on)")
    common(p)
    p.set_defaults(handler=_retain)


def _retain(args: argparse.Namespace) -> int:
    info = service.set_retention(seqsketch_home(), check_dataset_name(args.dataset), args.keep)
    kept = f"keeps {info['retention']}" if info.get("retention") else "keeps all its history"
    since = f"; its history starts at seq {info['retained_from']:,} ({info['start_ts']})" \
        if info.get("retained_from") else ""
    emit(args, info, f"{info['name']} {kept}{since}")
    return 0


def add_compact(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compact", help="merge a dataset's small parts and fold appended events into its "
                                       "partition-clustered index")
    p.add_argument("dataset")
    common(p)
    p.set_defaults(handler=_compact)


def _compact(args: argparse.Namespace) -> int:
    info = service.compact_dataset(seqsketch_home(), check_dataset_name(args.dataset))
    part = (info.get("index") or {}).get("partition") or {}
    emit(args, info, f"compacted {info['name']}: {part.get('groups', 0):,} groups by {part.get('key')} "
         f"over {part.get('events', 0):,} events")
    return 0

