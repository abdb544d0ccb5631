"""Sub-commands of the ``seqsketch`` CLI.  Each ``add_*`` registers one sub-command and its handler."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    for add in (add_demo, add_serve, add_db, add_token):
        add(sub)
    for add in (add_build, add_info, add_datasets):
        add(sub)
    add_query(sub)
    add_append(sub)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")


def add_demo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="build the bundled real log and answer example queries")
    p.add_argument("--engine", choices=("spark", "local"), default="spark", help="index build engine")
    p.add_argument("--rebuild", action="store_true", help="rebuild the demo dataset even if it exists")
    p.add_argument("--data", default=None,
                   help="path of bpic2012.xes.gz (default: shared/data beside the repo)")
    _common(p)
    p.set_defaults(handler=_demo)


def _demo(args: argparse.Namespace) -> int:
    import json

    from api.demo import run_demo
    from exact.store import seqsketch_home

    quiet = bool(args.json)
    result = run_demo(seqsketch_home(), engine=args.engine, rebuild=args.rebuild, data=args.data,
                      say=(lambda _text: None) if quiet else print)
    if quiet:
        print(json.dumps(result, indent=2, default=str))
    return 0


# --- the service: serve, db, token ------------------------------------------------------------------------


def add_serve(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the HTTP service (Werkzeug; use gunicorn in production)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks a free one)")
    _common(p)
    p.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    import sys

    from werkzeug.serving import make_server

    from api.app import create_app, service_state
    from api.auth import check_bind_allowed
    from exact.errors import SeqsketchError

    app = create_app()
    state = service_state(app)
    check_bind_allowed(state.catalog, args.host)  # no tokens → loopback only
    try:
        server = make_server(args.host, args.port, app, threaded=True)
    except OSError as err:
        raise SeqsketchError(f"cannot listen on {args.host}:{args.port}: {err.strerror or err}",
                             where="--port") from None
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(f"seqsketch: serving http://{host}:{server.server_port}/v1 (Ctrl-C stops)", file=sys.stderr,
          flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
        if state.jobs is not None:
            state.jobs.shutdown(wait=False)
    return 0


def add_db(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("db", help="the catalog database: upgrade, downgrade, current revision")
    actions = p.add_subparsers(dest="db_action", required=True)
    up = actions.add_parser("upgrade", help="migrate the catalog to the newest schema (or --revision)")
    up.add_argument("--revision", default="head")
    down = actions.add_parser("downgrade", help="migrate the catalog back to REVISION ('base' empties it)")
    down.add_argument("revision")
    current = actions.add_parser("current", help="the catalog's revision and the code's head")
    for q in (up, down, current):
        _common(q)
    p.set_defaults(handler=_db)


def _db(args: argparse.Namespace) -> int:
    from api import db
    from api.cli import emit

    url = db.database_url()
    engine = db.make_engine(url)
    try:
        if args.db_action == "upgrade":
            db.upgrade(engine, args.revision)
        elif args.db_action == "downgrade":
            db.downgrade(engine, args.revision)
        current, head = db.current_revision(engine), db.head_revision()
    finally:
        engine.dispose()
    state = "at head" if current == head else ("empty" if current is None else "behind head")
    emit(args, {"url": db.redact(url), "current": current, "head": head, "at_head": current == head},
         f"catalog {db.redact(url)}: revision {current or '(none)'}, head {head} ({state})")
    return 0


def add_token(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("token", help="API tokens: create, list, revoke")
    actions = p.add_subparsers(dest="token_action", required=True)
    create = actions.add_parser("create", help="create a token; its secret is printed once")
    create.add_argument("name")
    create.add_argument("--scope", choices=("read", "write"), default="read",
                        help="read: list, describe, query; write: also append, build, delete")
    listing = actions.add_parser("list", help="tokens and their scopes (never secrets)")
    revoke = actions.add_parser("revoke", help="revoke a token at once")
    revoke.add_argument("name")
    for q in (create, listing, revoke):
        _common(q)
    p.set_defaults(handler=_token)


def _token(args: argparse.Namespace) -> int:
    from api import auth
    from api.catalog import open_catalog
    from api.cli import emit

    catalog = open_catalog()
    try:
        if args.token_action == "create":
            info, secret = auth.create_token(catalog, args.name, args.scope)
            emit(args, {**info, "token": secret},
                 f"{secret}\n(token {info['name']!r}, scope {info['scope']}: shown once, store it now)")
        elif args.token_action == "revoke":
            info = auth.revoke_token(catalog, args.name)
            emit(args, info, f"token {info['name']!r} revoked")
        else:
            tokens = auth.list_tokens(catalog)
            lines = [f"{t['name']:<24} {t['scope']:<6} created {t['created']}"
                     + (f"  revoked {t['revoked']}" if t["revoked"] else "") for t in tokens]
            emit(args, {"tokens": tokens}, "\n".join(lines) if lines else "no tokens (the service is open "
                 "to loopback clients only)")
    finally:
        catalog.dispose()
    return 0


# --- datasets: build, info, datasets -----------------------------------------------------------------------


def add_build(sub: argparse._SubParsersAction) -> None:
    from exact.readers import DEFAULT_TIME_FIELD, DEFAULT_TYPE_FIELD, FORMATS

    p = sub.add_parser("build", help="ingest inputs into a new dataset: event store (and index)")
    p.add_argument("dataset", help="dataset name: [a-z0-9][a-z0-9_-]{0,63}")
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="input files, read in the order given")
    p.add_argument("--format", default="auto", choices=("auto", *FORMATS),
                   help="input format (default: by extension)")
    p.add_argument("--type-field", default=DEFAULT_TYPE_FIELD, help="csv/jsonl/parquet: the event type field")
    p.add_argument("--time-field", default=DEFAULT_TIME_FIELD, help="csv/jsonl/parquet: the timestamp field")
    p.add_argument("--engine", choices=("spark", "local"), default="spark", help="index build engine")
    p.add_argument("--leaf-size", type=_positive_int, default=None, help="events per leaf of the index (C)")
    p.add_argument("--fpq", type=_probability, default=None, help="target false-positive rate of a query")
    p.add_argument("--memory", type=_byte_size, default=None, help="memory budget of the index (e.g. 64M)")
    p.add_argument("--replace", action="store_true", help="rebuild an existing dataset")
    _common(p)
    p.set_defaults(handler=_build)


def add_info(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="describe a dataset")
    p.add_argument("dataset")
    _common(p)
    p.set_defaults(handler=_info)


def add_datasets(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("datasets", help="list the datasets")
    _common(p)
    p.set_defaults(handler=_datasets)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _probability(text: str) -> float:
    value = float(text)
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must lie strictly between 0 and 1, got {text}")
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


def dataset_info(home: Path, name: str) -> dict[str, Any]:
    """The ``info`` object of a dataset (CONTRACT §4): :func:`api.service.dataset_info`."""
    from api.service import dataset_info as info

    return info(home, name)


def build_dataset(home: Path, name: str, inputs: list[str], **options: Any) -> dict[str, Any]:
    """The offline build of ``seqsketch build``: :func:`api.service.build_from_inputs`."""
    from api.service import build_from_inputs

    return build_from_inputs(home, name, inputs, **options)


def _build(args: argparse.Namespace) -> int:
    import sys

    from api.cli import emit
    from exact.store import seqsketch_home

    progress = _terminal_progress(args)
    job_progress = _terminal_job_progress(args)
    try:
        summary = build_dataset(seqsketch_home(), args.dataset, args.inputs, fmt=args.format,
                                type_field=args.type_field, time_field=args.time_field,
                                replace=args.replace, leaf_size=args.leaf_size, fpq=args.fpq,
                                memory=args.memory, progress=progress, engine=args.engine,
                                job_progress=job_progress)
    finally:
        if progress is not None:
            print("\r\033[K", end="", file=sys.stderr, flush=True)  # the counter line gives way to the result
    emit(args, summary, f"built {summary['name']}: {summary['events']:,} events, "
         f"{len(summary['types'])} types, {summary['start_ts']} .. {summary['end_ts']}, "
         f"store {_human_bytes(summary['store_bytes'])}, {summary['seconds']:.1f} s")
    return 0


def _terminal_progress(args: argparse.Namespace) -> Any:
    """A one-line reading counter on stderr when it is a terminal (and not with --json), else ``None``."""
    import sys

    if getattr(args, "json", False) or not sys.stderr.isatty():
        return None

    def show(path: Path, events: int) -> None:
        print(f"\r\033[Kseqsketch: reading {path.name}: {events:,} events", end="", file=sys.stderr,
              flush=True)

    return show


def _info(args: argparse.Namespace) -> int:
    from api.cli import emit
    from exact.store import check_dataset_name, seqsketch_home

    info = dataset_info(seqsketch_home(), check_dataset_name(args.dataset))
    emit(args, info, _info_text(info))
    return 0


def _datasets(args: argparse.Namespace) -> int:
    from api.cli import emit
    from exact.store import dataset_names, seqsketch_home

    home = seqsketch_home()
    infos = [dataset_info(home, n) for n in dataset_names(home)]
    rows = [(i["name"], f"{i['events']:,}", i["start_ts"] or "-", i["end_ts"] or "-",
             _human_bytes(i["store_bytes"])) for i in infos]
    text = _table(("NAME", "EVENTS", "START", "END", "STORE"), rows) if rows else f"no datasets in {home}"
    emit(args, {"datasets": infos}, text)
    return 0


def _info_text(info: dict[str, Any]) -> str:
    top = list(info["types"].items())
    lines = [f"name        {info['name']}", f"events      {info['events']:,}",
             f"time range  {info['start_ts']} .. {info['end_ts']}",
             f"store       {_human_bytes(info['store_bytes'])}",
             f"attributes  {', '.join(f'{k}: {v}' for k, v in info['attrs'].items()) or '-'}",
             f"types       {len(top)}"]
    index = info.get("index")
    if index:
        lines.insert(4, f"index       {_human_bytes(index['bytes'])}, version {index['version']}, "
                        f"C={index['leaf_size']}, m={index['m']}, k={index['k']}, {index['nodes']:,} nodes, "
                        f"{index['levels']} levels, expected fpq {index['expected_fpq']:.2g}, "
                        f"digest {index['index_digest'][:12]}…")
    lines += [f"  {count:>12,}  {typ}" for typ, count in top[:20]]
    if len(top) > 20:
        lines.append(f"  … {len(top) - 20} more (--json lists all)")
    return "\n".join(lines)


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in (header, *rows))


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


# --- query ------------------------------------------------------------------------------------------------


def add_query(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("query", help="answer a pattern query on a dataset")
    p.add_argument("dataset")
    p.add_argument("query", help="the query text (or its JSON form)")
    p.add_argument("--mode", choices=("approximate", "verified", "exact"), default="verified",
                   help="approximate: index only; verified (default): index, then exact on candidates; "
                        "exact: the exact engine over the whole stream")
    p.add_argument("--limit", type=_positive_int, default=None, help="return at most N matches")
    _common(p)
    p.set_defaults(handler=_query)


def _query(args: argparse.Namespace) -> int:
    from api.cli import emit
    from api.service import run_query
    from exact.store import seqsketch_home

    result = run_query(seqsketch_home(), args.dataset, args.query, mode=args.mode, limit=args.limit)
    emit(args, result, _query_text(result))
    return 0


def _query_text(result: dict[str, Any]) -> str:
    stats = result.get("stats", {})
    if result.get("mode") == "approximate":  # no matches, no count: candidate intervals with their level
        head = (f"{len(result.get('intervals', [])):,} candidate interval(s), exists: "
                f"{str(result['exists']).lower()}, expected false-positive rate "
                f"{result.get('expected_false_positive_rate', 0):.2g}  [approximate, "
                f"{result.get('strategy', '')}, {stats.get('total_ms', 0):.1f} ms, "
                f"{stats.get('nodes_probed', 0):,} nodes probed]")
        rows = [(str(i["start_seq"]), str(i["end_seq"]), i["start_ts"], i["end_ts"], str(i.get("level", 0)))
                for i in result.get("intervals", [])]
        body = f"\n{_table(('START', 'END', 'START_TS', 'END_TS', 'LEVEL'), rows)}" if rows else ""
        why = f"\n{result['explain']}" if result.get("explain") else ""
        return f"{head}{body}{why}"
    head = (f"{result['count']:,} match(es), exists: {str(result['exists']).lower()}  "
            f"[{result['mode']}, {result.get('strategy', '')}, {stats.get('total_ms', 0):.1f} ms]")
    if result.get("explain"):
        head += f"\n{result['explain']}"
    if result.get("matches"):
        rows = [(str(m["start_seq"]), str(m["end_seq"]), m["start_ts"],
                 " ".join(f"{k}={','.join(map(str, v))}" for k, v in m["bindings"].items()))
                for m in result["matches"]]
        body = _table(("START", "END", "START_TS", "BINDINGS"), rows)
        more = "\n(truncated: --limit caps the matches shown)" if result.get("truncated") else ""
        return f"{head}\n{body}{more}"
    if result.get("intervals"):
        rows = [(str(i["start_seq"]), str(i["end_seq"]), i["start_ts"], i["end_ts"])
                for i in result["intervals"]]
        return f"{head}\n{_table(('START', 'END', 'START_TS', 'END_TS'), rows)}"
    return head


# --- append (local, or the Spark job) ----------------------------------------------------------------------


def add_append(sub: argparse._SubParsersAction) -> None:
    from exact.readers import DEFAULT_TIME_FIELD, DEFAULT_TYPE_FIELD, FORMATS

    p = sub.add_parser("append", help="add the events of input files to a built dataset, index included")
    p.add_argument("dataset")
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="input files, read in the order given")
    p.add_argument("--format", default="auto", choices=("auto", *FORMATS))
    p.add_argument("--type-field", default=DEFAULT_TYPE_FIELD)
    p.add_argument("--time-field", default=DEFAULT_TIME_FIELD)
    p.add_argument("--engine", choices=("local", "spark"), default="local",
                   help="local (default: in place, no Spark) or the Spark job")
    _common(p)
    p.set_defaults(handler=_append)


def append_inputs(home: Path, name: str, inputs: list[str], *, fmt: str = "auto", type_field: str = "type",
                  time_field: str = "ts", engine: str = "local", job_progress: Any = None) -> dict[str, Any]:
    """Append the events of ``inputs`` to dataset ``name`` (all or nothing); returns ``info`` plus
    ``appended``, ``first_seq`` and ``last_seq``."""
    from exact.ingest import IngestOptions, read_inputs
    from exact.store import EventStore, check_dataset_name, dataset_dir, store_dir
    from sketch.dataset import Dataset

    check_dataset_name(name)
    before = EventStore.open(store_dir(dataset_dir(name, home))).snapshot().events
    if engine == "spark":
        from sketch.spark_job import append_dataset_spark

        info = append_dataset_spark(home, name, inputs, fmt=fmt, type_field=type_field, time_field=time_field,
                                    **({"progress": job_progress} if job_progress else {}))
    else:
        table = read_inputs(inputs, IngestOptions(fmt=fmt, type_field=type_field, time_field=time_field))
        Dataset.open(home, name).append(table)
        info = dataset_info(home, name)
    return {**info, "appended": info["events"] - before, "first_seq": before, "last_seq": info["events"] - 1}


def _append(args: argparse.Namespace) -> int:
    from api.cli import emit
    from exact.store import seqsketch_home

    out = append_inputs(seqsketch_home(), args.dataset, args.inputs, fmt=args.format,
                        type_field=args.type_field, time_field=args.time_field, engine=args.engine,
                        job_progress=_terminal_job_progress(args))
    emit(args, out, f"appended {out['appended']:,} events to {out['name']} (seq {out['first_seq']:,} .. "
         f"{out['last_seq']:,}); {out['events']:,} events in all")
    return 0


def _terminal_job_progress(args: argparse.Namespace) -> Any:
    """The Spark job's stages on one stderr line when it is a terminal (and not with --json), else None."""
    import sys

    if getattr(args, "json", False) or not sys.stderr.isatty():
        return None

    def show(fraction: float, message: str | None = None) -> None:
        end = "\n" if fraction >= 1.0 else ""
        print(f"\r\033[Kseqsketch: [{fraction:4.0%}] {message or ''}", end=end, file=sys.stderr, flush=True)

    return show
