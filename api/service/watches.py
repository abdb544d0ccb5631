"""Watches: standing queries kept in the catalog, each owned by the token that made it.

A watch is its query, mode and starting cursor; with a webhook, the checked address its matches are posted
to (:mod:`api.service.webhook_policy`), the secret they are signed with and the cursor after the last one
delivered.  Only the token that made a watch, or a token with the ``write`` scope, reads, streams or deletes
it (an open server's caller is every token at once); to any other it does not exist.  A watch of a dataset
that no longer exists is gone too.  Following a watch is :mod:`api.service.follower`; its wire format
:mod:`api.service.sse`.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, cast

from api.service.datasets import dataset_exists
from api.service.follower import standing_query, store_of
from api.service.queries import query_text
from api.service.webhook_policy import check_webhook
from exact.engine.certainty import Moment
from exact.errors import InputError, NotFound, QuerySemanticError
from exact.events import parse_timestamp
from sketch.answer.event_sources import StoreSource
from sketch.answer.standing import Cursor, after_now

if TYPE_CHECKING:
    from api.auth import Principal
    from api.catalog import Catalog

WATCH_MODES = ("verified", "exact")
_NUMBER = re.compile(r"\s*[-+]?[0-9.]+([eE][-+]?[0-9]+)?\s*")


class Watch(TypedDict, total=False):
    """A watch as the service holds it (the catalog's record; never its secret)."""

    id: str
    dataset: str
    query: str
    mode: str
    cursor: str
    created: str
    #: the token that made it (None: an open server's caller)
    token: str | None
    webhook: str
    delivered: str | None
    #: the lineage of the event store it was made on (not shown by the API)
    lineage: str
    #: shown once, when a watch with a webhook is made
    secret: str


def start_cursor(home: Path, name: str, start: str | None) -> Cursor:
    """Where a new watch's stream starts: ``now`` (default: the matches that become certain after now),
    ``start`` (the whole history) or an ISO 8601 time (the matches certain at that event time or later)."""
    store = store_of(home, name)
    snap = store.snapshot()
    if start in (None, "now"):
        return after_now(snap)
    if start == "start":
        return Cursor.start()
    refused = QuerySemanticError(f"from {start!r}: expected 'now', 'start' or an ISO 8601 time", where="from")
    if not isinstance(start, str) or _NUMBER.fullmatch(start):
        raise refused  # (a number would read as epoch seconds: a time here is written as a time)
    try:
        micros = parse_timestamp(start)
    except (InputError, ValueError, TypeError):
        raise refused from None
    if not snap.events:
        return Cursor.start()
    lo, _ = StoreSource(store, snap).seq_span(micros, micros)
    return Cursor.start() if lo == 0 else Cursor(Moment(lo - 1, micros))


def create_watch(catalog: Catalog, home: Path, name: str, query: str | Mapping[str, Any], *,
                 mode: str = "verified", start: str | None = "now", token: str | None = None,
                 webhook: str | None = None) -> Watch:
    """A new watch on dataset ``name``, kept in the catalog and owned by ``token``: its id, query, mode and
    starting cursor; with a ``webhook`` (an allowed address: :func:`check_webhook`) also the secret its
    deliveries are signed with — shown this once."""
    if mode not in WATCH_MODES:
        raise QuerySemanticError(f"unknown mode {mode!r} for a watch; choose one of {', '.join(WATCH_MODES)}",
                                 where="mode")
    standing_query(home, name, query)
    cursor = start_cursor(home, name, start)
    lineage = store_of(home, name).snapshot().lineage
    if webhook is None:
        return cast(Watch, catalog.create_watch(name, query_text(query), mode, cursor.text(), token=token,
                                                lineage=lineage))
    secret = secrets.token_hex(32)
    watch = cast(Watch, catalog.create_watch(name, query_text(query), mode, cursor.text(), token=token,
                                             webhook=check_webhook(webhook), secret=secret, lineage=lineage))
    return {**watch, "secret": secret}


def may_use(watch: Mapping[str, Any], principal: Principal | None) -> bool:
    """May ``principal`` read, stream or delete ``watch``: its owner, a write token, an open server's caller."""
    from api.auth import Scope

    if principal is None or principal.anonymous or principal.scope is Scope.WRITE:
        return True
    return watch.get("token") == principal.name


def _missing(name: str, watch_id: str) -> NotFound:
    return NotFound(f"dataset {name!r} has no watch {watch_id!r}", where=watch_id)


def get_watch(catalog: Catalog, home: Path, name: str, watch_id: str, principal: Principal | None = None) -> Watch:
    """Watch ``watch_id`` of dataset ``name``, if ``principal`` may use it (else it does not exist for it)."""
    if not dataset_exists(home, name):
        raise NotFound(f"dataset {name!r} does not exist", where=name)
    watch = cast("Watch | None", catalog.get_watch(name, watch_id))
    if watch is None or not may_use(watch, principal):
        raise _missing(name, watch_id)
    return watch


def list_watches(catalog: Catalog, home: Path, name: str, principal: Principal | None = None) -> list[Watch]:
    """The watches of dataset ``name`` that ``principal`` may use."""
    if not dataset_exists(home, name):
        raise NotFound(f"dataset {name!r} does not exist", where=name)
    return [cast(Watch, w) for w in catalog.list_watches(name) if may_use(w, principal)]


def delete_watch(catalog: Catalog, home: Path, name: str, watch_id: str,
                 principal: Principal | None = None) -> dict[str, Any]:
    get_watch(catalog, home, name, watch_id, principal)
    if not catalog.delete_watch(name, watch_id):
        raise _missing(name, watch_id)
    return {"deleted": watch_id}
