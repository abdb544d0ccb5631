"""The ``/v1`` blueprint: every endpoint of docs/contract.md §5, thin — parse, authorise, call the service, serialise.

Each view is declared with :func:`operation`, which registers the route, checks the token scope, parses and
validates the JSON body against the view's :class:`~api.schemas.Operation` schema, and attaches that
operation to the view so that ``/v1/openapi.json`` is generated from exactly the routes that exist.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Mapping
from importlib import metadata
from typing import Any

from flask import Blueprint, Response, current_app, g, jsonify, request, url_for
from werkzeug.exceptions import RequestEntityTooLarge

from api import formats, service
from api import schemas as sc
from api.auth import Principal, authorize, has_active_tokens
from api.catalog import Scope
from api.db import head_revision
from api.guard import NDJSON_TYPES, is_forwarded
from api.state import ServiceState, service_state
from api.streaming import STREAM_KEY, STREAMS_KEY, StreamSpec
from sketch.answer.standing import Cursor

bp = Blueprint("v1", __name__, url_prefix="/v1")

NAME = re.compile(sc.DATASET_NAME_PATTERN)


def package_version() -> str:
    try:
        return metadata.version("seqsketch")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def state() -> ServiceState:
    return service_state(current_app)


def operation(rule: str, method: str, op: sc.Operation) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``rule`` for ``method`` with authorisation and body validation as ``op`` declares."""

    def register(view: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(view)
        def endpoint(**kwargs: Any) -> Any:
            g.principal = None
            if op.scope is not None:
                forwarded = is_forwarded(request.headers.keys())
                g.principal = authorize(state().catalog, request.headers.get("Authorization"),
                                        Scope(op.scope), request.remote_addr, forwarded=forwarded)
            if op.request is not None and op.request_kind == "json":
                body = sc.parse_json_body(request_body())
                op.request.validate(body)
                kwargs["body"] = body
            return view(**kwargs)

        op.attach(endpoint)
        bp.add_url_rule(rule, endpoint=view.__name__, view_func=endpoint, methods=[method])
        return endpoint

    return register


def request_body() -> bytes:
    """The whole request body within ``request.max_content_length``, or 413.

    A body without Content-Length (chunked) is cut by Werkzeug at the limit without an error; parsing the cut
    would report invalid JSON, or accept an NDJSON batch shorter than the one sent.  So a body that reaches
    the limit is checked for one more byte.
    """
    raw = request.get_data(cache=False)
    limit = request.max_content_length
    if limit is not None and request.content_length is None and len(raw) >= limit:
        if request.environ["wsgi.input"].read(1):
            raise RequestEntityTooLarge()
    return raw


def checked_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise sc.RequestInvalid("dataset names are 1-64 characters: a-z, 0-9, '_' and '-', starting with a "
                                "letter or digit", where=f"dataset name {name!r}")
    state().service.replicate(name)  # (a dataset on object storage this server serves too)
    return name


def _principal_name() -> str | None:
    principal: Principal | None = g.get("principal")
    return None if principal is None else principal.name


# --- health and the API description -------------------------------------------------------------------------


@operation("/health", "GET", sc.Operation(
    summary="Liveness and version", scope=None, tag="service",
    responses={200: ("the service is up", sc.HEALTH)}))
def health() -> Any:
    st = state()
    return jsonify({
        "status": "ok",
        "version": package_version(),
        "catalog_revision": head_revision(),
        "auth": "tokens" if has_active_tokens(st.catalog) else "open-loopback",
    })


@operation("/openapi.json", "GET", sc.Operation(
    summary="This API's OpenAPI 3.1 document", scope=None, tag="service",
    responses={200: ("the OpenAPI document", None)}))
def openapi() -> Any:
    return jsonify(sc.openapi_document(current_app, version=package_version()))


# --- datasets ----------------------------------------------------------------------------------------------


@operation("/datasets", "GET", sc.Operation(
    summary="List datasets", scope="read", tag="datasets",
    responses={200: ("every dataset, by name", sc.DATASET_LIST)}))
def list_datasets() -> Any:
    return jsonify({"datasets": state().service.datasets()})


@operation("/datasets/<name>", "GET", sc.Operation(
    summary="Describe a dataset", scope="read", tag="datasets",
    description="events, time range, types, store size, the live index (docs/contract.md §4.1 `info`) and its "
                "catalog state",
    responses={200: ("the dataset", sc.DATASET)}))
def get_dataset(name: str) -> Any:
    return jsonify(state().service.dataset(checked_name(name)))


@operation("/datasets/<name>/density", "GET", sc.Operation(
    summary="Events over time", scope="read", tag="datasets",
    description="The dataset's time range cut into equal spans and the number of events in each (the web "
                "console's density strip).",
    responses={200: ("events per span of time", sc.DENSITY)}))
def dataset_density(name: str) -> Any:
    return jsonify(state().service.density(checked_name(name)))


@operation("/datasets/<name>", "DELETE", sc.Operation(
    summary="Delete a dataset (events and index)", scope="write", tag="datasets",
    responses={200: ("deleted", sc.DELETED)}))
def delete_dataset(name: str) -> Any:
    state().service.delete(checked_name(name))
    return jsonify({"deleted": name})


# --- appends and builds ------------------------------------------------------------------------------------


def _append_records(empty: bool) -> list[dict[str, Any]]:
    """The request's events, from a JSON array or NDJSON, within the configured append size limit (``empty``:
    none may be sent, the body may be empty too)."""
    request.max_content_length = int(current_app.config["MAX_APPEND_BYTES"])
    raw = request_body()
    if empty and not raw.strip():
        return []
    mimetype = (request.mimetype or "").lower()
    records = (sc.parse_ndjson_body(raw) if mimetype in NDJSON_TYPES
               else sc.parse_json_body(raw, records=True))
    return sc.validate_events(records, empty=empty)


@operation("/datasets/<name>/events", "POST", sc.Operation(
    summary="Append events (all or nothing)", scope="write", tag="datasets", request=sc.EVENT_BATCH,
    request_kind="events",
    description="A JSON array of events, or NDJSON (Content-Type application/x-ndjson), one event per line. "
                "Events are ordered by ts (ties in the given order) and numbered after the dataset's last "
                "event; an event older than the dataset's last ts, or not after its watermark, rejects the "
                "whole batch (409). The index is extended in place. With ?watermark=TIME event time has "
                "reached TIME after these events (the batch may then be empty): windows close on it, and "
                "a later event at or before it is refused; a watermark that goes back in time is a 409.",
    query={"watermark": "ISO 8601 time or epoch seconds: no event at or before it will be appended"},
    responses={200: ("appended", sc.APPEND_RESULT)}))
def append_events(name: str) -> Any:
    checked_name(name)
    watermark = request.args.get("watermark")
    records = _append_records(empty=watermark is not None)
    return jsonify(state().service.append(name, records, watermark=watermark))


@operation("/datasets/<name>/retention", "PUT", sc.Operation(
    summary="Keep a span or a number of a dataset's latest events", scope="write", tag="datasets",
    request=sc.RETENTION_REQUEST,
    description="keep: '90 days', '12h', '1000000 events', or null / 'forever' for all. The parts past it are "
                "retired at once (deleting their events) and later as the stream grows; a decayed summary of "
                "the retired history stays for approximate answers. Returns the dataset's description.",
    responses={200: ("the dataset", sc.DATASET)}))
def set_retention(name: str, body: dict[str, Any]) -> Any:
    return jsonify(state().service.retain(checked_name(name), body["keep"]))


@operation("/datasets/<name>/builds", "POST", sc.Operation(
    summary="Start an offline build from server-side inputs", scope="write", tag="builds",
    request=sc.BUILD_REQUEST,
    description="Inputs are paths relative to (or inside) the server's input roots (SEQSKETCH_INPUT_ROOTS). "
                "The build is queued for the job runner; poll GET /v1/jobs/{id}.",
    responses={202: ("queued", sc.JOB_ACCEPTED)}))
def start_build(name: str, body: dict[str, Any]) -> Any:
    st = state()
    checked_name(name)
    options = {k: v for k, v in body.items() if k != "inputs"}
    options.setdefault("engine", current_app.config["BUILD_ENGINE"])
    job = st.service.request_build(name, body["inputs"], options)
    if st.jobs is not None:
        st.jobs.wake()  # a runner in this process looks at once
    location = url_for("v1.get_job", job_id=job["id"])
    response = jsonify({"job_id": job["id"], "state": job["state"], "url": location})
    response.status_code = 202
    response.headers["Location"] = location
    return response


# --- watches (standing queries) -------------------------------------------------------------------------------


def _watch_view(watch: Mapping[str, Any]) -> dict[str, Any]:
    """A watch as the API shows it: its owner (the token's name), never its lineage or secret but once."""
    shown = {k: v for k, v in watch.items() if k not in ("lineage", "token")}
    return {**shown, "owner": watch.get("token"),
            "stream": url_for("v1.watch_stream", name=watch["dataset"], watch_id=watch["id"])}


def _principal() -> Principal | None:
    return g.get("principal")


@operation("/datasets/<name>/watches", "POST", sc.Operation(
    summary="Keep a standing query on a dataset", scope="read", tag="watches", request=sc.WATCH_REQUEST,
    description="The watch is kept in the catalog, owned by the token that makes it; GET its stream for the "
                "matches: the history's from 'from', then each new one as soon as it is certain "
                "(docs/contract.md §5.8).",
    responses={201: ("the watch", sc.WATCH)}))
def create_watch(name: str, body: dict[str, Any]) -> Any:
    watch = state().service.create_watch(checked_name(name), body["query"], mode=body.get("mode") or "verified",
                                         start=body.get("from") or "now", token=_principal_name(),
                                         webhook=body.get("webhook"))
    response = jsonify(_watch_view(watch))
    response.status_code = 201
    response.headers["Location"] = url_for("v1.get_watch", name=name, watch_id=watch["id"])
    return response


@operation("/datasets/<name>/watches", "GET", sc.Operation(
    summary="A dataset's watches (those this token may use)", scope="read", tag="watches",
    responses={200: ("the watches", sc.WATCH_LIST)}))
def list_watches(name: str) -> Any:
    watches = state().service.watches(checked_name(name), _principal())
    return jsonify({"watches": [_watch_view(w) for w in watches]})


@operation("/datasets/<name>/watches/<watch_id>", "GET", sc.Operation(
    summary="One watch", scope="read", tag="watches", responses={200: ("the watch", sc.WATCH)}))
def get_watch(name: str, watch_id: str) -> Any:
    return jsonify(_watch_view(state().service.watch(checked_name(name), watch_id, _principal())))


@operation("/datasets/<name>/watches/<watch_id>", "DELETE", sc.Operation(
    summary="Stop keeping a watch", scope="read", tag="watches", responses={200: ("deleted", sc.DELETED)}))
def delete_watch(name: str, watch_id: str) -> Any:
    return jsonify(state().service.delete_watch(checked_name(name), watch_id, _principal()))


@operation("/datasets/<name>/watches/<watch_id>/stream", "GET", sc.Operation(
    summary="A watch's matches as Server-Sent Events", scope="read", tag="watches",
    description="event: match (id: its cursor; data: the match as in a JSON answer) as soon as each match is "
                "certain, one event: progress when the history is done, then live matches; a heartbeat "
                "comment while idle. Last-Event-ID (or ?cursor=) resumes just after the match it names. A "
                "server holds at most SEQSKETCH_MAX_STREAMS open streams (else 503) and a token "
                "SEQSKETCH_MAX_STREAMS_PER_TOKEN (else 429), both with Retry-After.",
    query={"cursor": "resume just after the match whose event id this is (as Last-Event-ID)"},
    media_types=("text/event-stream",), responses={200: ("the event stream", None)}))
def watch_stream(name: str, watch_id: str) -> Any:
    st = state()
    watch = st.service.watch(checked_name(name), watch_id, _principal())
    given = request.headers.get("Last-Event-ID") or request.args.get("cursor")
    cursor = Cursor.parse(given, "Last-Event-ID" if request.headers.get("Last-Event-ID") else "cursor") \
        if given else Cursor.parse(watch["cursor"])
    st.service.standing_query(name, watch["query"])  # a dataset changed since: refused now, not mid-stream
    token = _principal_name()
    st.stream_slots.acquire(token)
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    release = functools.partial(st.stream_slots.release, token)
    if request.environ.get(STREAMS_KEY):  # the front serves it from its event loop (api.server)
        request.environ[STREAM_KEY] = StreamSpec(st.home, name, dict(watch), cursor, token, release)
        return Response(b"", mimetype="text/event-stream", headers=headers)
    return Response(_released(st.service.sse_events(name, watch, cursor), release),
                    mimetype="text/event-stream", headers=headers)


def _released(events: Iterator[str], release: Callable[[], None]) -> Iterator[str]:
    """``events``, giving the stream's slot back when they end (or the client goes)."""
    try:
        yield from events
    finally:
        release()


@operation("/inputs", "GET", sc.Operation(
    summary="The files a build may read", scope="read", tag="builds",
    description="Files under the server's input roots (SEQSKETCH_INPUT_ROOTS), relative to their root, as "
                "POST /v1/datasets/{name}/builds takes them; at most 500.",
    responses={200: ("the build inputs", sc.INPUT_LIST)}))
def list_inputs() -> Any:
    return jsonify({"inputs": state().service.inputs()})


@operation("/jobs/<job_id>", "GET", sc.Operation(
    summary="A build job's state and progress", scope="read", tag="builds",
    responses={200: ("the job", sc.JOB)}))
def get_job(job_id: str) -> Any:
    return jsonify(state().service.job(job_id))


# --- queries -----------------------------------------------------------------------------------------------


@operation("/datasets/<name>/query", "POST", sc.Operation(
    summary="Answer a pattern query", scope="read", tag="queries", request=sc.QUERY_REQUEST,
    description="Modes: approximate (the Bloom-filter tree alone), verified (default; exact on the "
                "candidates), exact (the whole stream). Answers beyond the server's match limit are "
                "truncated (truncated: true); a query over the time or scan limit fails with query_limit. "
                f"With Accept: {formats.ARROW_STREAM} the rows (matches, cases or intervals) come as an Arrow "
                f"stream, the rest of the answer in its schema metadata; with Accept: {formats.NDJSON}, the "
                "rest of the answer on the first line, then one row per line (docs/contract.md §3.6).",
    media_types=(formats.ARROW_STREAM, formats.NDJSON),
    responses={200: ("the answer (docs/contract.md §3)", sc.QUERY_ANSWER)}))
def query(name: str, body: dict[str, Any]) -> Any:
    cfg = current_app.config
    form = request.accept_mimetypes.best_match(["application/json", formats.ARROW_STREAM, formats.NDJSON],
                                               default="application/json")
    most = cfg["QUERY_MAX_MATCHES"] if form == "application/json" else cfg["QUERY_MAX_ROWS"]
    limits = service.QueryLimits(max_matches=int(most) or None,
                                 timeout_ms=int(cfg["QUERY_TIMEOUT_MS"]) or None,
                                 max_events=int(cfg["QUERY_MAX_EVENTS"]) or None)
    asked = service.QueryRequest(
        mode=body.get("mode") or "verified", limit=body.get("limit"), granularity=body.get("granularity"),
        include_events=bool(body.get("include_events")), timeout_ms=body.get("timeout_ms"),
        columnar=form != "application/json", density=body.get("density"), token=_principal_name())
    answer = state().service.query(checked_name(name), body["query"], asked, limits)
    if form == formats.ARROW_STREAM:
        return Response(formats.arrow_stream(answer), mimetype=formats.ARROW_STREAM)
    if form == formats.NDJSON:
        return Response(formats.json_lines(answer), mimetype=formats.NDJSON)
    return jsonify(answer)
