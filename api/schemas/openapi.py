"""What a route accepts and returns (:class:`Operation`), and the OpenAPI 3.1 document of the routes an app
has (:func:`openapi_document`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from flask import Flask

from api.schemas.base import DATASET_NAME_PATTERN, JSON, Schema
from api.schemas.definitions import ALL_SCHEMAS, ERROR

OPENAPI_VERSION = "3.1.0"


@dataclass(frozen=True)
class Operation:
    """What a route accepts and returns, attached to its view function as ``__operation__``."""

    summary: str
    scope: str | None  # "read" / "write"; None = public
    request: Schema | None = None
    request_kind: str = "json"  # "json" | "events" (JSON array or NDJSON)
    responses: Mapping[int, tuple[str, Schema | None]] = field(default_factory=dict)
    tag: str = "service"
    description: str = ""
    #: Media types of a success answer that is not JSON (the web console's page and files).
    media_types: tuple[str, ...] = ()
    #: Optional query parameters: name → what it says.
    query: Mapping[str, str] = field(default_factory=dict)

    def attach(self, view: Callable[..., Any]) -> Callable[..., Any]:
        view.__operation__ = self  # type: ignore[attr-defined]
        return view


_ERROR_RESPONSES: dict[int, str] = {
    400: "invalid request (body, parameters, query syntax or semantics)",
    401: "missing or invalid token",
    403: "token lacks the scope, or an open server asked from off the machine",
    404: "no such dataset or job",
    409: "conflicts with the dataset's state",
    413: "request body over the configured limit",
    500: "internal error (no details in the body; see the server log)",
}

_RULE_ARG = re.compile(r"<(?:[a-z_]+:)?([a-zA-Z_][a-zA-Z0-9_]*)>")


def openapi_path(rule: str) -> str:
    """Flask's ``/v1/datasets/<name>`` → OpenAPI's ``/v1/datasets/{name}``."""
    return _RULE_ARG.sub(r"{\1}", rule)


def _param_schema(param: str) -> JSON:
    if param == "name":
        return {"type": "string", "pattern": DATASET_NAME_PATTERN}
    return {"type": "string"}


def _operation_object(op: Operation, endpoint: str, params: list[str]) -> JSON:
    out: JSON = {"operationId": endpoint.replace(".", "_"), "summary": op.summary, "tags": [op.tag]}
    if op.description:
        out["description"] = op.description
    if params or op.query:
        out["parameters"] = [
            {"name": p, "in": "path", "required": True, "schema": _param_schema(p)} for p in params
        ] + [{"name": q, "in": "query", "required": False, "description": text, "schema": {"type": "string"}}
             for q, text in op.query.items()]
    if op.request is not None:
        content: JSON = {"application/json": {"schema": op.request.ref()}}
        if op.request_kind == "events":
            content["application/x-ndjson"] = {
                "schema": {"type": "string", "description": "one Event object per line"}}
        out["requestBody"] = {"required": True, "content": content}
    responses: JSON = {}
    for status, (description, schema) in sorted(op.responses.items()):
        responses[str(status)] = {"description": description}
        if schema is not None:
            responses[str(status)]["content"] = {"application/json": {"schema": schema.ref()}}
            if status < 300:  # the same answer in other forms, chosen by Accept
                responses[str(status)]["content"].update(
                    {m: {"schema": {"type": "string", "format": "binary"}} for m in op.media_types})
        elif op.media_types and status < 300:
            responses[str(status)]["content"] = {m: {"schema": {"type": "string"}} for m in op.media_types}
    for status, description in _ERROR_RESPONSES.items():
        if op.scope is None and status in (401, 403):
            continue
        responses.setdefault(str(status), {
            "description": description, "content": {"application/json": {"schema": ERROR.ref()}}})
    out["responses"] = responses
    out["security"] = [] if op.scope is None else [{"bearerToken": []}]
    if op.scope is not None:
        out["x-scope"] = op.scope
    return out


def openapi_document(app: Flask, *, version: str) -> JSON:
    """The OpenAPI 3.1 document of exactly the routes registered in ``app`` that declare an operation."""
    paths: dict[str, JSON] = {}
    for rule in sorted(app.url_map.iter_rules(), key=lambda r: r.rule):
        view = app.view_functions.get(rule.endpoint)
        op: Operation | None = getattr(view, "__operation__", None)
        if op is None:
            continue
        params = [a for a in _RULE_ARG.findall(rule.rule)]
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            paths.setdefault(openapi_path(rule.rule), {})[method.lower()] = _operation_object(
                op, rule.endpoint, params)
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "seqsketch",
            "version": version,
            "description": "Ad-hoc event pattern queries over large event histories: a Bloom-filter tree "
                           "answers approximately, SES automata verify exactly.",
        },
        "paths": paths,
        "components": {
            "schemas": {s.name: s.schema for s in ALL_SCHEMAS},
            "securitySchemes": {"bearerToken": {"type": "http", "scheme": "bearer"}},
        },
    }
