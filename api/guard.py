"""Cross-site rules for every request, before any route runs (docs/contract.md §5, docs/operations.md §Guarantees).

A page open in the user's browser can send requests to a server on the user's machine: form posts and
``fetch`` with a "simple" content type go out without a CORS preflight, and DNS rebinding lets a foreign
name resolve to 127.0.0.1 so that even reads look same-origin to the browser.  Three rules close that:

* **Content type.** A request with a body must declare ``application/json`` (``application/x-ndjson`` and
  its aliases where a route takes event batches); anything else — ``text/plain``, form encodings — is
  ``415``.  A browser cannot send ``application/json`` cross-site without a preflight, which the next rule
  refuses.
* **Origin.** A request carrying an ``Origin`` that is neither the server's own (scheme and host of the
  request) nor listed in ``ALLOWED_ORIGINS`` (``SEQSKETCH_ALLOWED_ORIGINS``, comma-separated) is ``403``,
  preflights included.  CORS headers are sent to listed origins only.
* **Host.** A server without tokens answers only requests whose ``Host`` names loopback (``localhost``,
  ``127.0.0.0/8``, ``[::1]``): any other name is ``421`` — the answer to a rebound DNS name.  With tokens,
  a request needs a token anyway, which a page on another origin does not have.

Forwarding headers (``Forwarded``, ``X-Forwarded-*``, ``X-Real-IP`` and the like, ``Via``) mark a request
as proxied: an open (token-less) server refuses it, since the peer address it sees is the proxy's.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from urllib.parse import urlsplit

from flask import Flask, Response, request

from api.auth import Forbidden, has_active_tokens, is_loopback
from api.state import ServiceState
from exact.errors import SeqsketchError

JSON_TYPES = frozenset({"application/json"})
NDJSON_TYPES = frozenset({"application/x-ndjson", "application/ndjson", "application/jsonl",
                          "application/x-jsonlines"})
#: Headers a proxy adds: any of them means the peer address is not the client's.
FORWARDING_HEADERS = ("Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto",
                      "X-Forwarded-Port", "X-Forwarded-Server", "X-Real-IP", "X-Client-IP", "True-Client-IP",
                      "CF-Connecting-IP", "Fastly-Client-IP", "X-Cluster-Client-IP",
                      "X-Original-Forwarded-For", "X-ProxyUser-Ip", "Client-IP", "Via")
_CORS_METHODS = "GET, POST, PUT, DELETE, OPTIONS"
_CORS_HEADERS = "Authorization, Content-Type"


class UnsupportedMediaType(SeqsketchError):
    code = "unsupported_media_type"
    http_status = 415


class MisdirectedRequest(SeqsketchError):
    code = "misdirected_request"
    http_status = 421


def is_forwarded(headers: Iterable[str]) -> bool:
    """Does a request with these header names come through a proxy?"""
    names = {h.lower() for h in headers}
    return any(h.lower() in names for h in FORWARDING_HEADERS)


def allowed_origins(value: str | Collection[str] | None) -> frozenset[str]:
    """``SEQSKETCH_ALLOWED_ORIGINS`` (comma-separated, or a list) as normalised origins."""
    if not value:
        return frozenset()
    items = value.split(",") if isinstance(value, str) else value
    return frozenset(normal_origin(v) for v in items if v.strip())


def normal_origin(origin: str) -> str:
    """``scheme://host[:port]`` in lower case, default ports dropped (``http://a:80`` = ``http://a``)."""
    parts = urlsplit(origin.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is not None and (scheme, port) not in (("http", 80), ("https", 443)):
        host = f"{host}:{port}"
    return f"{scheme}://{host}"


def _own_origin() -> str:
    return normal_origin(f"{request.scheme}://{request.host}")


def host_name(host_header: str) -> str:
    """The name in a ``Host`` header, without port or IPv6 brackets."""
    host = host_header.strip()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host[1:]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _has_body() -> bool:
    if request.content_length:
        return True
    return "chunked" in (request.headers.get("Transfer-Encoding") or "").lower()


def check_request(state: ServiceState, listed: frozenset[str]) -> Response | None:
    """The cross-site rules for the current request; a preflight from a listed origin is answered here."""
    origin = request.headers.get("Origin")
    if origin is not None:
        normal = normal_origin(origin) if origin.strip().lower() != "null" else "null"
        if normal != _own_origin() and normal not in listed:
            raise Forbidden(f"requests from origin {origin!r} are refused: only this server's own pages and "
                            "the origins in SEQSKETCH_ALLOWED_ORIGINS may call it", where="Origin")
    if not is_loopback(host_name(request.host)) and not has_active_tokens(state.catalog):
        raise MisdirectedRequest(f"this server has no API tokens and answers only requests addressed to "
                                 f"a loopback name; Host {request.host!r} is not one", where="Host")
    if request.method == "OPTIONS":
        return Response(status=204 if origin is not None else 200)
    if _has_body():
        kinds = JSON_TYPES | (NDJSON_TYPES if request.path.endswith("/events") else frozenset())
        mimetype = (request.mimetype or "").lower()
        if mimetype not in kinds:
            said = request.headers.get("Content-Type") or "no Content-Type"
            raise UnsupportedMediaType(f"a request body must be sent as {' or '.join(sorted(kinds))}; "
                                       f"got {said}", where="Content-Type")
    return None


def cors_headers(response: Response, listed: frozenset[str]) -> Response:
    """CORS headers for a listed origin (and only for one)."""
    origin = request.headers.get("Origin")
    if origin is not None and origin.strip().lower() != "null" and normal_origin(origin) in listed:
        response.headers["Access-Control-Allow-Origin"] = origin.strip()
        response.headers["Access-Control-Allow-Methods"] = _CORS_METHODS
        response.headers["Access-Control-Allow-Headers"] = _CORS_HEADERS
        response.headers["Access-Control-Max-Age"] = "600"
    if listed:
        response.headers.add("Vary", "Origin")
    return response


def install(app: Flask, state: ServiceState) -> None:
    """Apply the rules to every request of ``app`` (routes, the console and unknown paths alike)."""
    listed = allowed_origins(app.config.get("ALLOWED_ORIGINS"))

    @app.before_request
    def _guard() -> Response | None:
        return check_request(state, listed)

    @app.after_request
    def _cors(response: Response) -> Response:
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        return cors_headers(response, listed)
