"""``seqsketch watch``: a standing query on a local dataset, one line per match as each becomes certain.

The same walk as the HTTP event stream (:func:`api.service.follow`): the history's matches from ``--from``,
a line on standard error when the history is done, then each new match once its window has closed, while
appends arrive through any door.  Ctrl-C stops it cleanly (exit status 0).
"""

from __future__ import annotations

import argparse
import sys

from api import service
from api.cli.output import common
from exact import jsontext
from exact.store import seqsketch_home
from sketch.answer.standing import Cursor


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("watch", help="follow a standing query: its matches, one a line, as they become certain")
    p.add_argument("dataset")
    p.add_argument("query", help="the query text (or its JSON form); it needs WITHIN")
    p.add_argument("--from", dest="start", default="now", metavar="WHERE",
                   help="now (default: matches certain from now on), start (the whole history), an ISO 8601 time, or a "
                        "cursor printed before (@SEQ:DELIVERED: resume after it)")
    common(p)
    p.set_defaults(handler=_watch)


def _watch(args: argparse.Namespace) -> int:
    home = seqsketch_home()
    service.standing_query(home, args.dataset, args.query)  # refused before anything is printed
    start = args.start
    cursor = Cursor.parse(start, "--from") if start.startswith("@") or start.split(":")[0].isdigit() \
        else service.start_cursor(home, args.dataset, start)
    try:
        for kind, after, data in service.follow(home, args.dataset, args.query, cursor):
            if kind == "match":
                assert data is not None
                if args.json:
                    print(jsontext.dumps({"cursor": after.text(), **data}, ensure_ascii=False), flush=True)
                else:
                    bound = " ".join(f"{k}={','.join(map(str, v))}" for k, v in data["bindings"].items())
                    case = f"  {data['case']}" if "case" in data else ""
                    print(f"{data['start_seq']}–{data['end_seq']}  {data['start_ts']}{case}  {bound}  "
                          f"[{after.text()}]", flush=True)
            elif kind == "progress":
                print(f"seqsketch: the history is done (cursor {after.text()}); watching for new events — "
                      "Ctrl-C stops", file=sys.stderr, flush=True)
            elif kind == "end":
                assert data is not None
                print(f"seqsketch: {data['reason']}", file=sys.stderr)
                return 1
    except KeyboardInterrupt:
        print(file=sys.stderr)
    return 0
