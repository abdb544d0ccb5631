"""Request and response schemas of the HTTP API — one source for validation and for ``/v1/openapi.json``.

Every schema is a JSON Schema (draft 2020-12, the dialect of OpenAPI 3.1).  Routes declare theirs with
:class:`Operation`; the same objects validate request bodies (:meth:`Schema.validate`, errors naming the
record and field) and become ``components/schemas`` of the OpenAPI document built by
:func:`openapi_document` from the routes that actually exist in the app's URL map.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from flask import Flask
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match
from jsonschema.validators import extend

from exact.errors import SeqsketchError

JSON = dict[str, Any]
OPENAPI_VERSION = "3.1.0"
DATASET_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"


class RequestInvalid(SeqsketchError):
    """A request body or parameter that does not fit its schema."""

    code = "bad_request"


class PayloadTooLarge(SeqsketchError):
    code = "payload_too_large"
    http_status = 413


def _where(path: Iterator[Any] | Any, prefix: str = "") -> str:
    """``record 3, field 'ts'`` style location of a JSON path, for error messages."""
    parts = [prefix] if prefix else []
    for step in path:
        parts.append(f"item {step}" if isinstance(step, int) else f"field {step!r}")
    return ", ".join(parts) or "request body"


def _is_integer(_checker: Any, value: Any) -> bool:
    # JSON Schema counts 2.0 as an integer; this API does not: a count, a level or a size is written 2.
    return isinstance(value, int) and not isinstance(value, bool)


#: Draft 2020-12 with integers that are integers in the JSON text.
_Validator = extend(Draft202012Validator,
                    type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer))


@dataclass(frozen=True)
class Schema:
    """A named JSON Schema that validates values and is published under ``components/schemas``."""

    name: str
    schema: JSON

    @cached_property
    def _validator(self) -> Draft202012Validator:
        Draft202012Validator.check_schema(self.schema)
        return _Validator(self.schema)

    def errors(self, value: Any) -> list[ValidationError]:
        return list(self._validator.iter_errors(value))

    def validate(self, value: Any, *, where: str = "") -> None:
        """Raise :class:`RequestInvalid` naming the first offending place when ``value`` does not fit."""
        error = best_match(self._validator.iter_errors(value))
        if error is not None:
            raise RequestInvalid(f"{error.message}", where=_where(error.absolute_path, where))

    def ref(self) -> JSON:
        return {"$ref": f"#/components/schemas/{self.name}"}


# --- shared pieces ------------------------------------------------------------------------------------------

_SCALAR = {"type": ["string", "number", "integer", "boolean", "null"]}
_TS = {"type": "string", "description": "ISO-8601 timestamp with zone (UTC)"}
_POSITION = {
    "type": "object",
    "properties": {"line": {"type": "integer"}, "column": {"type": "integer"}},
    "required": ["line"],
}

ERROR = Schema("Error", {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"type": "string", "description": "stable machine-readable code, e.g. query_syntax"},
                "message": {"type": "string"},
                "position": _POSITION,
            },
        }
    },
})

HEALTH = Schema("Health", {
    "type": "object",
    "required": ["status", "version"],
    "properties": {
        "status": {"const": "ok"},
        "version": {"type": "string"},
        "catalog_revision": {"type": "string"},
        "auth": {"enum": ["tokens", "open-loopback"]},
    },
})

_INDEX = {
    "type": ["object", "null"],
    "description": "the live index: sizing, shape and index_digest (docs/contract.md §4.1 info)",
    "properties": {
        "leaf_size": {"type": "integer"}, "fanout": {"type": "integer"}, "m": {"type": "integer"},
        "k": {"type": "integer"}, "levels": {"type": "integer"}, "nodes": {"type": "integer"},
        "bytes": {"type": "integer"}, "expected_fpq": {"type": "number"},
        "index_digest": {"type": "string"},
    },
}

_DATASET_PROPERTIES: JSON = {
    "name": {"type": "string", "pattern": DATASET_NAME_PATTERN},
    "events": {"type": "integer", "minimum": 0},
    "start_ts": {"type": ["string", "null"]},
    "end_ts": {"type": ["string", "null"]},
    "types": {"type": "object", "additionalProperties": {"type": "integer"}},
    "store_bytes": {"type": "integer"},
    "index": _INDEX,
    "state": {"enum": ["building", "ready", "failed", "deleted"]},
    "index_version": {"type": ["integer", "null"]},
    "created": {"type": ["string", "null"]},
}

DATASET = Schema("Dataset", {
    "type": "object", "required": ["name", "events"], "properties": _DATASET_PROPERTIES,
})

DATASET_LIST = Schema("DatasetList", {
    "type": "object",
    "required": ["datasets"],
    "properties": {"datasets": {"type": "array", "items": DATASET.schema}},
})

DENSITY = Schema("Density", {
    "type": "object",
    "required": ["name", "start_ts", "end_ts", "bins", "counts"],
    "properties": {
        "name": {"type": "string"},
        "start_ts": {"type": ["string", "null"]}, "end_ts": {"type": ["string", "null"]},
        "bins": {"type": "integer", "minimum": 0},
        "counts": {"type": "array", "items": {"type": "integer", "minimum": 0},
                   "description": "events in each of `bins` equal spans of [start_ts, end_ts], in order"},
    },
})

DELETED = Schema("Deleted", {
    "type": "object", "required": ["deleted"], "properties": {"deleted": {"type": "string"}},
})

EVENT = Schema("Event", {
    "type": "object",
    "description": "one event to append: its type, its timestamp (ISO-8601 with zone — naive means UTC — or "
                   "epoch seconds) and attributes, either under 'attrs' or as further top-level fields",
    "required": ["type", "ts"],
    "properties": {
        "type": {"type": "string", "minLength": 1},
        "ts": {"type": ["string", "number"]},
        "attrs": {"type": "object", "additionalProperties": _SCALAR},
        "seq": False,
    },
    "additionalProperties": _SCALAR,
})

EVENT_BATCH = Schema("EventBatch", {"type": "array", "items": EVENT.schema, "minItems": 1})

APPEND_RESULT = Schema("AppendResult", {
    "type": "object",
    "required": ["appended", "first_seq", "last_seq"],
    "properties": {
        "appended": {"type": "integer", "minimum": 1},
        "first_seq": {"type": "integer", "minimum": 0},
        "last_seq": {"type": "integer", "minimum": 0},
        "index_version": {"type": ["integer", "null"]},
    },
})

BUILD_REQUEST = Schema("BuildRequest", {
    "type": "object",
    "required": ["inputs"],
    "additionalProperties": False,
    "properties": {
        "inputs": {
            "type": "array", "minItems": 1, "maxItems": 1000,
            "items": {"type": "string", "minLength": 1},
            "description": "server-side files, relative to a configured input root or absolute inside one",
        },
        "format": {"enum": ["auto", "xes", "csv", "jsonl", "parquet", "text"]},
        "type_field": {"type": "string", "minLength": 1},
        "time_field": {"type": "string", "minLength": 1},
        "engine": {"enum": ["spark", "local"]},
        "leaf_size": {"type": "integer", "minimum": 1},
        "fpq": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "memory": {"type": "integer", "minimum": 1},
        "replace": {"type": "boolean", "description": "rebuild a dataset that exists already"},
    },
})

INPUT_LIST = Schema("InputList", {
    "type": "object",
    "required": ["inputs"],
    "properties": {"inputs": {
        "type": "array", "items": {"type": "string"},
        "description": "files a build may name, relative to their input root (at most 500)"}},
})

JOB_ACCEPTED = Schema("JobAccepted", {
    "type": "object",
    "required": ["job_id", "state"],
    "properties": {"job_id": {"type": "string"}, "state": {"const": "queued"}, "url": {"type": "string"}},
})

JOB = Schema("Job", {
    "type": "object",
    "required": ["id", "dataset", "state", "progress", "error"],
    "properties": {
        "id": {"type": "string"},
        "dataset": {"type": "string"},
        "state": {"enum": ["queued", "running", "succeeded", "failed"]},
        "progress": {"type": "number", "minimum": 0, "maximum": 1},
        "message": {"type": ["string", "null"]},
        "error": {"type": ["object", "null"]},
        "inputs": {"type": "array", "items": {"type": "string"}},
        "options": {"type": "object"},
        "result": {"type": ["object", "null"]},
        "created": {"type": ["string", "null"]},
        "started": {"type": ["string", "null"]},
        "finished": {"type": ["string", "null"]},
        "runner": {"type": ["string", "null"], "description": "the job runner that claimed the job"},
    },
})

QUERY_REQUEST = Schema("QueryRequest", {
    "type": "object",
    "required": ["query"],
    "additionalProperties": False,
    "properties": {
        "query": {
            "anyOf": [{"type": "string", "minLength": 1}, {"type": "object"}],
            "description": "the query text (docs/contract.md §2) or its JSON form",
        },
        "mode": {"enum": ["approximate", "verified", "exact"], "default": "verified"},
        "limit": {"type": ["integer", "null"], "minimum": 1,
                  "description": "cap on returned matches (a JSON integer ≥ 1; 2.0 is refused)"},
        "timeout_ms": {"type": ["integer", "null"], "minimum": 1,
                       "description": "wall-time limit of this query; the server's own limit still applies"},
        "granularity": {
            "type": ["integer", "null"], "minimum": 0,
            "description": "approximate mode: the tree level candidate intervals are resolved to "
                           "(0 = leaves, the finest)",
        },
        "include_events": {
            "type": "boolean", "default": False,
            "description": "add each match's bound events (seq, ts, type, attrs) under 'events'",
        },
    },
})

_INTERVAL = {
    "type": "object",
    "required": ["start_seq", "end_seq"],
    "properties": {
        "start_seq": {"type": "integer"}, "end_seq": {"type": "integer"},
        "start_ts": {"type": ["string", "null"]}, "end_ts": {"type": ["string", "null"]},
        "level": {"type": "integer"},
    },
}

_MATCH = {
    "type": "object",
    "required": ["start_seq", "end_seq", "bindings"],
    "properties": {
        "start_seq": {"type": "integer"}, "end_seq": {"type": "integer"},
        "start_ts": {"type": ["string", "null"]}, "end_ts": {"type": ["string", "null"]},
        "bindings": {"type": "object",
                     "additionalProperties": {"type": "array", "items": {"type": "integer"}}},
        "events": {"type": "array", "items": {"type": "object"}},
    },
}

QUERY_ANSWER = Schema("QueryAnswer", {
    "type": "object",
    "description": "the answer of docs/contract.md §3",
    "required": ["dataset", "mode", "exists"],
    "properties": {
        "dataset": {"type": "string"},
        "index_version": {"type": ["integer", "null"]},
        "mode": {"enum": ["approximate", "verified", "exact"]},
        "strategy": {"type": "string"},
        "exists": {"type": "boolean"},
        "count": {"type": ["integer", "null"]},
        "matches": {"type": "array", "items": _MATCH},
        "intervals": {"type": "array", "items": _INTERVAL},
        "truncated": {"type": "boolean"},
        "expected_false_positive_rate": {"type": "number"},
        "stats": {"type": "object", "additionalProperties": {"type": ["number", "integer", "null"]}},
    },
})

ALL_SCHEMAS: tuple[Schema, ...] = (
    ERROR, HEALTH, DATASET, DATASET_LIST, DENSITY, DELETED, EVENT, EVENT_BATCH, APPEND_RESULT, BUILD_REQUEST,
    INPUT_LIST, JOB_ACCEPTED, JOB, QUERY_REQUEST, QUERY_ANSWER,
)


# --- parsing request bodies ---------------------------------------------------------------------------------


def check_text(value: Any, where: str = "") -> Any:
    """``value`` (parsed JSON) when every string and key in it is valid Unicode; else :class:`RequestInvalid`
    naming the field.  JSON may escape a lone surrogate (``"\\ud800"``), which no UTF-8 text can hold."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            _valid_unicode(item, path, where)
        elif isinstance(item, dict):
            for key, sub in item.items():
                _valid_unicode(key, path, where, key=True)
                stack.append((sub, (*path, key)))
        elif isinstance(item, list):
            stack.extend((sub, (*path, i)) for i, sub in enumerate(item))
    return value


def _valid_unicode(text: str, path: tuple[Any, ...], where: str, *, key: bool = False) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        what = "a key" if key else "the text"
        raise RequestInvalid(f"{what} holds invalid Unicode (a lone surrogate, U+{ord(text[err.start]):04X}, "
                             f"at character {err.start + 1})", where=_where(path, where)) from None


def parse_json_body(raw: bytes, *, records: bool = False) -> Any:
    """The JSON value of a request body; a syntax error names its line and column, invalid Unicode its
    field (with ``records``, the items of a top-level array are named ``record i``)."""
    if not raw.strip():
        raise RequestInvalid("the request body is empty; expected JSON", where="request body")
    try:
        value = json.loads(raw)
        if records and isinstance(value, list):
            for i, item in enumerate(value):
                check_text(item, f"record {i}")
            return value
        return check_text(value)
    except UnicodeDecodeError:
        raise RequestInvalid("the request body is not UTF-8", where="request body") from None
    except json.JSONDecodeError as err:
        raise RequestInvalid(f"invalid JSON: {err.msg}", line=err.lineno, column=err.colno,
                             where="request body") from None
    except RecursionError:  # e.g. 100,000 nested brackets: Python's decoder gives up on the depth
        raise RequestInvalid("invalid JSON: nested too deeply", where="request body") from None


def parse_ndjson_body(raw: bytes) -> list[Any]:
    """One JSON value per non-blank line (NDJSON); an error names the line."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RequestInvalid("the request body is not UTF-8", where="request body") from None
    records: list[Any] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(check_text(json.loads(line), f"record {len(records)}"))
        except json.JSONDecodeError as err:
            raise RequestInvalid(f"invalid JSON: {err.msg}", line=lineno, column=err.colno,
                                 where="NDJSON body") from None
        except RecursionError:
            raise RequestInvalid("invalid JSON: nested too deeply", line=lineno,
                                 where="NDJSON body") from None
    if not records:
        raise RequestInvalid("the NDJSON body has no records", where="request body")
    return records


def validate_events(records: Any) -> list[JSON]:
    """Check an append batch record by record; the error names the record (0-based) and field."""
    if not isinstance(records, list):
        raise RequestInvalid("expected a JSON array of events (or NDJSON, one event per line)",
                             where="request body")
    if not records:
        raise RequestInvalid("the batch has no events", where="request body")
    for i, record in enumerate(records):
        if isinstance(record, dict) and "seq" in record:
            raise RequestInvalid("seq is assigned by the service (events are numbered after the dataset's "
                                 "last event); leave it out", where=f"record {i}, field 'seq'")
        EVENT.validate(record, where=f"record {i}")
    return records


# --- operations and the OpenAPI document --------------------------------------------------------------------


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
    if params:
        out["parameters"] = [
            {"name": p, "in": "path", "required": True, "schema": _param_schema(p)} for p in params
        ]
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
