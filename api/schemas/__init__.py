"""Request and response schemas of the HTTP API — one source for validation and for ``/v1/openapi.json``.

Every schema is a JSON Schema (draft 2020-12, the dialect of OpenAPI 3.1).  Routes declare theirs with
:class:`Operation`; the same objects validate request bodies (:meth:`Schema.validate`, errors naming the
record and field) and become ``components/schemas`` of the OpenAPI document built by
:func:`openapi_document` from the routes that actually exist in the app's URL map.

The package's modules: :mod:`~api.schemas.base` (:class:`Schema`, :class:`RequestInvalid`),
:mod:`~api.schemas.definitions` (the schemas themselves), :mod:`~api.schemas.bodies` (request bodies parsed and
checked), :mod:`~api.schemas.openapi` (:class:`Operation` and the OpenAPI document).
"""

from __future__ import annotations

from api.schemas.base import DATASET_NAME_PATTERN, JSON, PayloadTooLarge, RequestInvalid, Schema
from api.schemas.bodies import check_text, parse_json_body, parse_ndjson_body, validate_events
from api.schemas.definitions import (
    ALL_SCHEMAS,
    APPEND_RESULT,
    BUILD_REQUEST,
    DATASET,
    DATASET_LIST,
    DELETED,
    DENSITY,
    ERROR,
    EVENT,
    EVENT_BATCH,
    HEALTH,
    INPUT_LIST,
    JOB,
    JOB_ACCEPTED,
    QUERY_ANSWER,
    QUERY_REQUEST,
    RETENTION_REQUEST,
    WATCH,
    WATCH_LIST,
    WATCH_REQUEST,
)
from api.schemas.openapi import OPENAPI_VERSION, Operation, openapi_document, openapi_path

__all__ = ["ALL_SCHEMAS", "APPEND_RESULT", "BUILD_REQUEST", "DATASET", "DATASET_LIST", "DATASET_NAME_PATTERN",
           "DELETED", "DENSITY", "ERROR", "EVENT", "EVENT_BATCH", "HEALTH", "INPUT_LIST", "JOB", "JOB_ACCEPTED",
           "JSON", "OPENAPI_VERSION", "Operation", "PayloadTooLarge", "QUERY_ANSWER", "QUERY_REQUEST",
           "RETENTION_REQUEST", "RequestInvalid", "Schema", "check_text", "openapi_document", "openapi_path",
           "parse_json_body", "parse_ndjson_body", "validate_events", "WATCH", "WATCH_LIST", "WATCH_REQUEST"]
