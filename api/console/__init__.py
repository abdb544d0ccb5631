"""The web console at ``/``: one static page (HTML, JS, CSS from this package) that calls the public ``/v1``
API from the browser — no server-side rendering, no front-end server, nothing fetched from elsewhere.

The page is served with a strict Content-Security-Policy (its own origin only: no inline script, no other
host) and may not be framed.  It is public, as ``/v1/health`` is: it holds no data; what it shows it reads
from ``/v1`` with the token the user types (kept in the tab's ``sessionStorage``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flask import Blueprint, Response, send_from_directory

from api import schemas as sc
from exact.errors import NotFound

bp = Blueprint("console", __name__)

STATIC = Path(__file__).resolve().parent / "static"
#: The page's own files, by name, and their media types (nothing else under ``/console/`` is served).
ASSETS = {"console.js": "text/javascript", "shared.js": "text/javascript", "datasets.js": "text/javascript",
          "answers.js": "text/javascript", "watch.js": "text/javascript", "jobs.js": "text/javascript",
          "editor.js": "text/javascript", "timeline.js": "text/javascript", "charts.js": "text/javascript",
          "console.css": "text/css", "favicon.svg": "image/svg+xml"}

#: The page may load its own scripts, styles and images and call its own origin; nothing else, and it may
#: not be framed (clickjacking) nor post forms anywhere.
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                           "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; "
                           "frame-ancestors 'none'")


def _register(rule: str, op: sc.Operation, view: Any) -> None:
    op.attach(view)
    bp.add_url_rule(rule, endpoint=view.__name__, view_func=view, methods=["GET"])


def index() -> Response:
    return _page(send_from_directory(STATIC, "index.html", mimetype="text/html", max_age=0))


def asset(asset: str) -> Response:
    media_type = ASSETS.get(asset)
    if media_type is None:
        raise NotFound(f"the console has no file {asset!r}", where=asset)
    return _page(send_from_directory(STATIC, asset, mimetype=media_type, max_age=0))


def _page(response: Response) -> Response:
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["Cache-Control"] = "no-cache"
    return response


_register("/", sc.Operation(
    summary="The web console", scope=None, tag="console", media_types=("text/html",),
    description="A page that lists the datasets, edits and answers queries with the answer drawn on a "
                "timeline, and starts and watches builds — all through this API from the browser.",
    responses={200: ("the page (HTML)", None)}), index)
_register("/console/<asset>", sc.Operation(
    summary="A file of the web console (script, style, icon)", scope=None, tag="console",
    media_types=tuple(sorted(set(ASSETS.values()))),
    responses={200: ("the file", None)}), asset)
