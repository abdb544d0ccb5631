"""The schemas of the ``/v1`` routes' requests and responses; :data:`ALL_SCHEMAS` are those the OpenAPI document
publishes under ``components/schemas``."""

from __future__ import annotations

from api.schemas.base import DATASET_NAME_PATTERN, JSON, Schema

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
    "watermark": {"type": ["string", "null"]},
    "retention": {"type": ["string", "null"]},
    "retained_from": {"type": "integer", "minimum": 0},
    "location": {"type": ["string", "null"],
                 "description": "where on object storage the dataset lives (s3://…); null: the server's disk"},
    "decayed": {"type": ["object", "null"]},
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
        "appended": {"type": "integer", "minimum": 0},
        "first_seq": {"type": "integer", "minimum": 0},
        "last_seq": {"type": "integer", "minimum": -1,
                     "description": "the last event appended (first_seq - 1 when none was)"},
        "watermark": {"type": ["string", "null"],
                      "description": "how far event time has come by the writer's word (null: never said)"},
        "index_version": {"type": ["integer", "null"]},
    },
})

RETENTION_REQUEST = Schema("RetentionRequest", {
    "type": "object",
    "required": ["keep"],
    "additionalProperties": False,
    "properties": {"keep": {"type": ["string", "null"], "maxLength": 64,
                            "description": "'90 days', '12h', '1000000 events', 'forever' or null"}},
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
        "index_attrs": {"type": "array", "maxItems": 256, "uniqueItems": True,
                        "items": {"type": "string", "minLength": 1},
                        "description": "the attributes served in place for conditions ([]: none; default: "
                                       "the cheapest within 24 bytes per event)"},
        "footprint": {"type": "number", "minimum": 1, "maximum": 1000,
                      "description": "the whole dataset within this many times its Parquet parts: the "
                                     "attributes served in place and their value indexes are chosen to fit "
                                     "(default 4)"},
        "keep": {"type": "string", "maxLength": 64,
                 "description": "keep this much history ('90 days', '1000000 events'); default all"},
        "store": {"type": "string", "maxLength": 1024, "pattern": "^s3://",
                  "description": "the object-storage location the dataset lives at (s3://bucket/prefix); "
                                 "default: the server's SEQSKETCH_STORE, else its disk"},
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

#: a query, as text or its JSON form (docs/contract.md §2)
_QUERY_FIELD = {
    "anyOf": [{"type": "string", "minLength": 1}, {"type": "object"}],
    "description": "the query text (docs/contract.md §2) or its JSON form",
}

QUERY_REQUEST = Schema("QueryRequest", {
    "type": "object",
    "required": ["query"],
    "additionalProperties": False,
    "properties": {
        "query": _QUERY_FIELD,
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
        "density": {
            "type": ["integer", "null"], "minimum": 1, "maximum": 4000,
            "description": "add match_density: every match's first event counted over the dataset's time "
                           "range cut into this many spans (verified and exact modes)",
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
        "case": {"description": "the match's case: its PARTITION BY value (an object of them for several)"},
    },
}

_CASE = {
    "type": "object",
    "required": ["case", "matches", "start_seq", "end_seq"],
    "properties": {
        "case": {"description": "the PARTITION BY value (an object of them for several attributes)"},
        "matches": {"type": "integer", "minimum": 1},
        "start_seq": {"type": "integer"}, "end_seq": {"type": "integer"},
        "start_ts": {"type": ["string", "null"]}, "end_ts": {"type": ["string", "null"]},
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
        "cases": {"type": "array", "items": _CASE,
                  "description": "RETURN cases: the cases holding a match, in the order of their first matches"},
        "case_count": {"type": ["integer", "null"], "description": "RETURN cases: how many cases hold a match"},
        "funnel": {"type": "array", "items": {"type": "object"},
                   "description": "RETURN funnel: per step {step, label, reached, stopped, converted, median_ms, "
                                  "p90_ms} (docs/contract.md §3.7)"},
        "units": {"enum": ["partitions", "windows"], "description": "RETURN funnel: what reached the steps"},
        "unit_count": {"type": "integer", "description": "RETURN funnel: the units that reached step 1"},
        "next": {"type": "array", "items": {"type": "object"},
                 "description": "RETURN next k: {offset, type, count, median_ms, p90_ms}"},
        "durations": {"type": "array", "items": {"type": "object"},
                      "description": "RETURN durations: per pair of consecutive steps, then first to last"},
        "groups": {"type": "array", "items": {"type": "object"},
                   "description": "RETURN count|cases BY v.attr: the top values {value, count}"},
        "other": {"type": "object", "description": "RETURN … BY: the values not listed, {groups, count}"},
        "group_count": {"type": "integer", "description": "RETURN … BY: how many values there are"},
        "truncated": {"type": "boolean"},
        "match_density": {"type": "object", "description": "with density: where all matches lie"},
        "expected_false_positive_rate": {"type": "number"},
        "stats": {"type": "object", "additionalProperties": {"type": ["number", "integer", "null"]}},
    },
})

WATCH_REQUEST = Schema("WatchRequest", {
    "type": "object",
    "required": ["query"],
    "additionalProperties": False,
    "properties": {
        "query": {**_QUERY_FIELD, "description": "the query text or its JSON form; it needs WITHIN (a match "
                                                 "is delivered once its window has closed)"},
        "mode": {"enum": ["verified", "exact"], "default": "verified"},
        "from": {"type": "string", "minLength": 1, "default": "now",
                 "description": "where the stream starts: 'now' (new events only), 'start' (the whole history) "
                                "or an ISO 8601 time"},
        "webhook": {"type": "string", "minLength": 1, "maxLength": 2048,
                    "description": "an http(s) address each match is also posted to, signed with the watch's "
                                   "secret: on this machine's loopback or a host in SEQSKETCH_WEBHOOK_HOSTS"},
    },
})

WATCH = Schema("Watch", {
    "type": "object",
    "required": ["id", "dataset", "query", "mode", "cursor", "created"],
    "properties": {
        "id": {"type": "string"}, "dataset": {"type": "string"}, "query": {"type": "string"},
        "mode": {"enum": ["verified", "exact"]},
        "cursor": {"type": "string", "description": "where its stream starts (FIRST_SEQ:DELIVERED)"},
        "created": {"type": "string"}, "stream": {"type": "string"},
        "webhook": {"type": "string", "description": "where its matches are posted (watches with a webhook)"},
        "delivered": {"type": ["string", "null"],
                      "description": "the cursor after the last match the webhook took (null before the first)"},
        "secret": {"type": "string", "description": "the key of the deliveries' HMAC-SHA256 signature: in the "
                                                    "answer that creates the watch only"},
    },
})

WATCH_LIST = Schema("WatchList", {
    "type": "object", "required": ["watches"], "properties": {"watches": {"type": "array", "items": WATCH.schema}},
})

ALL_SCHEMAS: tuple[Schema, ...] = (
    ERROR, HEALTH, DATASET, DATASET_LIST, DENSITY, DELETED, EVENT, EVENT_BATCH, APPEND_RESULT, BUILD_REQUEST,
    RETENTION_REQUEST,
    INPUT_LIST, JOB_ACCEPTED, JOB, QUERY_REQUEST, QUERY_ANSWER, WATCH_REQUEST, WATCH, WATCH_LIST,
)
