"""The SDK's exceptions: every error answer of the API as a typed exception carrying the server's error
``code``, ``message``, HTTP ``status`` and query ``position`` (:func:`error_for`); imported from
:mod:`api.client`."""

from __future__ import annotations

import json
import urllib.error
from collections.abc import Mapping
from typing import Any


class SeqsketchAPIError(Exception):
    """An error answer from the service (or no answer at all: ``code == "connection_error"``)."""

    def __init__(self, code: str, message: str, *, status: int | None = None,
                 position: Mapping[str, int] | None = None, body: Any = None) -> None:
        super().__init__(f"{code}: {message}" if status is None else f"HTTP {status} {code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.position = dict(position) if position else None
        self.body = body


class BadRequestError(SeqsketchAPIError):
    """The request did not fit the API (body, parameters, input files)."""


class QueryError(BadRequestError):
    """The query is malformed (``query_syntax``), meaningless (``query_semantic``) or over a limit."""


class AuthError(SeqsketchAPIError):
    """Missing or invalid token (401), or a token without the needed scope (403)."""


class NotFoundError(SeqsketchAPIError):
    pass


class ConflictError(SeqsketchAPIError):
    """The request contradicts the dataset's state (exists already, build in progress, append in the past)."""


class PayloadTooLargeError(SeqsketchAPIError):
    pass


class ServerError(SeqsketchAPIError):
    """The service failed (5xx)."""


class ServiceUnavailableError(ServerError):
    """The service could not be reached, or is not ready (e.g. its catalog is behind the migration head)."""


class JobFailedError(SeqsketchAPIError):
    """A build job ended in ``failed``; ``job`` holds its record (``job["error"]`` the cause)."""

    def __init__(self, job: Mapping[str, Any]) -> None:
        error = job.get("error") or {}
        super().__init__(error.get("code", "build_failed"), error.get("message", "the build failed"),
                         body=dict(job))
        self.job = dict(job)


_QUERY_CODES = {"query_syntax", "query_semantic", "query_limit"}


def error_for(status: int, body: Any) -> SeqsketchAPIError:
    """The typed exception for an error answer."""
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        err = {"code": f"http_{status}", "message": str(body)[:500] if body else f"HTTP {status}"}
    code, message, position = err.get("code", "error"), err.get("message", ""), err.get("position")
    cls: type[SeqsketchAPIError]
    if code in _QUERY_CODES:
        cls = QueryError
    elif status == 401 or code in ("unauthorized", "forbidden"):
        cls = AuthError
    elif status == 404:
        cls = NotFoundError
    elif status == 409:
        cls = ConflictError
    elif status == 413:
        cls = PayloadTooLargeError
    elif status == 503:
        cls = ServiceUnavailableError
    elif status >= 500:
        cls = ServerError
    else:
        cls = BadRequestError
    return cls(code, message, status=status, position=position, body=body)


def _error_answer(err: urllib.error.HTTPError) -> SeqsketchAPIError:
    """The typed exception of an HTTP error answer (its JSON error object, or its text)."""
    return _error_of(err.code, err.read())


def _error_of(status: int, payload: bytes) -> SeqsketchAPIError:
    """The typed exception of an answer with error status ``status`` and body ``payload``."""
    try:
        decoded = json.loads(payload) if payload else None
    except ValueError:
        decoded = payload.decode("utf-8", "replace")
    return error_for(status, decoded)
