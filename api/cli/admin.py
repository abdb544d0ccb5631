"""``seqsketch`` commands that administer the service: ``db``, ``token``, and the ``demo``."""

from __future__ import annotations

import argparse

from api.cli.output import common, emit


def register(sub: argparse._SubParsersAction) -> None:
    for add in (add_demo, add_db, add_token):
        add(sub)


def add_demo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="build the bundled real log and answer example queries")
    p.add_argument("--engine", choices=("spark", "local"), default="spark", help="index build engine")
    p.add_argument("--rebuild", action="store_true", help="rebuild the demo dataset even if it exists")
    p.add_argument("--data", default=None,
                   help="path of bpic2012.xes.gz (default: shared/data beside the repo)")
    common(p)
    p.set_defaults(handler=_demo)


def _demo(args: argparse.Namespace) -> int:
    import json

    from api.db import seqsketch_home
    from api.demo import run_demo

    quiet = bool(args.json)
    result = run_demo(seqsketch_home(), engine=args.engine, rebuild=args.rebuild, data=args.data,
                      say=(lambda _text: None) if quiet else print)
    if quiet:
        print(json.dumps(result, indent=2, default=str))
    return 0


# --- the service: db, token ------------------------------------------------------------------------------


def add_db(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("db", help="the catalog database: upgrade, downgrade, current revision")
    actions = p.add_subparsers(dest="db_action", required=True)
    up = actions.add_parser("upgrade", help="migrate the catalog to the newest schema (or --revision)")
    up.add_argument("--revision", default="head")
    down = actions.add_parser("downgrade", help="migrate the catalog back to REVISION ('base' empties it)")
    down.add_argument("revision")
    current = actions.add_parser("current", help="the catalog's revision and the code's head")
    for q in (up, down, current):
        common(q)
    p.set_defaults(handler=_db)


def _db(args: argparse.Namespace) -> int:
    from api import db

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
        common(q)
    p.set_defaults(handler=_token)


def _token(args: argparse.Namespace) -> int:
    from api import auth
    from api.catalog import open_catalog

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
