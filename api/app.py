"""The Flask application: ``create_app(config=None)``, a flaskr-style factory serving docs/contract.md §5 at ``/v1``.

Configuration comes from the environment, overridden by ``config``:

=========================  ===============================  ================================================
key                        environment                      default
=========================  ===============================  ================================================
``SEQSKETCH_HOME``         ``SEQSKETCH_HOME``               ``./.seqsketch``
``DATABASE_URL``           ``SEQSKETCH_DATABASE_URL``       SQLite ``<home>/catalog.db``
``INPUT_ROOTS``            ``SEQSKETCH_INPUT_ROOTS``        shared data dir beside the repo, ``<home>/inputs``
``MAX_APPEND_BYTES``       ``SEQSKETCH_MAX_APPEND_BYTES``   64 MiB (one append request)
``MAX_CONTENT_LENGTH``     ``SEQSKETCH_MAX_REQUEST_BYTES``  1 MiB (any other request)
``QUERY_TIMEOUT_MS``       ``SEQSKETCH_QUERY_TIMEOUT_MS``   30000
``QUERY_MAX_MATCHES``      ``SEQSKETCH_QUERY_MAX_MATCHES``  10000 (answers beyond are truncated)
``QUERY_MAX_ROWS``         ``SEQSKETCH_QUERY_MAX_ROWS``     1000000 (the same for Arrow and JSON-lines answers)
``QUERY_MAX_EVENTS``       ``SEQSKETCH_QUERY_MAX_EVENTS``   0 = unlimited (events a query may scan)
``BUILD_WORKERS``          ``SEQSKETCH_BUILD_WORKERS``      1 (builds a job runner runs at once)
``MAX_STREAMS``            ``SEQSKETCH_MAX_STREAMS``        2000 (watch streams open at once; then 503)
``MAX_STREAMS_PER_TOKEN``  ``…_MAX_STREAMS_PER_TOKEN``      500 (a token's open streams; then 429)
``JOB_RUNNER``             ``SEQSKETCH_JOB_RUNNER``         ``external``: a job runner process runs builds;
                                                            ``thread``: a runner on a thread of this app
``BUILD_ENGINE``           ``SEQSKETCH_BUILD_ENGINE``       ``local`` (builds that name no engine)
``ALLOWED_ORIGINS``        ``SEQSKETCH_ALLOWED_ORIGINS``    none: other origins may not call (``api.guard``)
``INIT_EMPTY_SQLITE``      —                                True (an empty SQLite catalog is migrated)
=========================  ===============================  ================================================

The app refuses to start on a catalog that is not at the migration head (:class:`api.db.CatalogOutOfDate`).
Build requests are queued in the catalog; with ``JOB_RUNNER = "external"`` (the default, and what
``seqsketch serve`` uses) the app runs none of them — the job runner process does (:mod:`api.jobs`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flask import Flask, jsonify
from flask.json.provider import DefaultJSONProvider
from werkzeug.exceptions import HTTPException

from api import guard, service
from api.catalog import Catalog, open_catalog
from api.console import bp as console_bp
from api.db import database_url
from api.jobs import JobRunner
from api.routes import bp
from api.state import EXTENSION, ServiceState, default_config
from api.streaming import StreamSlots
from exact import jsontext
from exact.engine.parallel import query_threads
from exact.errors import OutOfResources, SeqsketchError, out_of_resources

log = logging.getLogger(__name__)


def create_app(config: Mapping[str, Any] | None = None) -> Flask:
    """Build the application; opens (and checks) the catalog, and with ``JOB_RUNNER = "thread"`` starts a
    job runner on a thread (which first settles what stopped runners left)."""
    query_threads()  # a bad SEQSKETCH_QUERY_THREADS stops the service as it starts, not a query later
    app = _App(__name__)
    app.config.from_mapping(default_config())
    if config:
        app.config.from_mapping(config)
    # keep docs/contract.md §3's field order (app.json is Flask's default provider, typed as the base class)
    app.json.sort_keys = False  # type: ignore[attr-defined]

    home = Path(app.config["SEQSKETCH_HOME"])
    url = app.config["DATABASE_URL"] or database_url(home)
    catalog: Catalog = open_catalog(url, init_empty_sqlite=bool(app.config["INIT_EMPTY_SQLITE"]))
    roots = app.config["INPUT_ROOTS"]
    if isinstance(roots, str):
        roots = [r for r in roots.split(os.pathsep) if r]
    roots = [Path(r) for r in roots] if roots else service.input_roots_from_env(home)

    service.prepare_queries()  # the first query is not charged for the parser's tables
    slots = app.config.get("STREAM_SLOTS") or StreamSlots(int(app.config["MAX_STREAMS"]),
                                                         int(app.config["MAX_STREAMS_PER_TOKEN"]))
    state = ServiceState(home=home, catalog=catalog, input_roots=roots, config=app.config, stream_slots=slots)
    runner = app.config["JOB_RUNNER"]
    if runner == "thread":
        state.jobs = JobRunner(catalog, home, locks=state.locks,
                               workers=int(app.config["BUILD_WORKERS"])).start()
    elif runner != "external":
        raise SeqsketchError(f"JOB_RUNNER (SEQSKETCH_JOB_RUNNER) is 'external' or 'thread', not {runner!r}",
                             where="SEQSKETCH_JOB_RUNNER")
    app.extensions[EXTENSION] = state
    guard.install(app, state)
    app.register_blueprint(bp)
    app.register_blueprint(console_bp)
    _register_error_handlers(app)
    return app


class FiniteJSONProvider(DefaultJSONProvider):
    """Flask's JSON, never with NaN or Infinity: a number that is not finite is written as null
    (:mod:`exact.jsontext`)."""

    def dumps(self, obj: Any, **kwargs: Any) -> str:
        kwargs.setdefault("default", self.default)
        kwargs.setdefault("ensure_ascii", self.ensure_ascii)
        kwargs.setdefault("sort_keys", self.sort_keys)
        return jsontext.dumps(obj, **kwargs)


class _App(Flask):
    json_provider_class = FiniteJSONProvider


def error_body(code: str, message: str, position: Mapping[str, int] | None = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if position:
        err["position"] = dict(position)
    return {"error": err}


def _register_error_handlers(app: Flask) -> None:
    @app.errorhandler(SeqsketchError)
    def user_error(err: SeqsketchError) -> Any:
        exhausted = out_of_resources(err)  # (a layer that took running out of files for damage, or a miss)
        if exhausted is not None and not isinstance(err, OutOfResources):
            log.warning("%s (reported as %s: %s)", exhausted, err.code, err)
            err = exhausted
        elif err.http_status == 500:  # (damage the server found: the operator needs where it was found)
            log.error("%s: %s", err.code, err, exc_info=err)
        response = jsonify({"error": err.to_dict()})
        response.status_code = err.http_status
        for name, value in getattr(err, "headers", {}).items():  # (Retry-After of a refused stream)
            response.headers[name] = value
        return response

    @app.errorhandler(HTTPException)
    def http_error(err: HTTPException) -> Any:
        # Werkzeug's own errors (unknown route, wrong method, body too large) in the same JSON shape.
        fallback = (err.name or "error").lower().replace(" ", "_")
        code = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large",
                415: "unsupported_media_type", 421: "misdirected_request"}.get(err.code or 500, fallback)
        response = jsonify(error_body(code, err.description or err.name))
        response.status_code = err.code or 500
        if err.code == 405 and err.response is None:
            allow = getattr(err, "valid_methods", None)
            if allow:
                response.headers["Allow"] = ", ".join(allow)
        return response

    @app.errorhandler(Exception)
    def internal_error(err: Exception) -> Any:
        exhausted = out_of_resources(err)
        if exhausted is not None:
            log.warning("%s", exhausted)
            return user_error(exhausted)
        log.exception("unhandled error")
        return jsonify(error_body("internal", "internal server error; see the server log")), 500
