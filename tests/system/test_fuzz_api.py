"""Bad input at the HTTP door: schemathesis generates requests from our own ``/v1/openapi.json`` — data that
fits the schema and data that does not — and sends them to the real app in-process (WSGI), on a real SQLite
catalog with a real dataset.

Every answer must be a documented status below 500 with a JSON body (an error body ``{"error": {code,
message}}`` for every 4xx, never a traceback), arrive promptly, and a rejected request must leave the event
store and the catalog exactly as they were.  Answers of 2xx must fit their response schema.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from flask import Flask
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from schemathesis import GenerationMode

from api.app import create_app
from api.service import build_from_inputs as build_dataset
from api.state import service_state
from tests.generators import examples, scaled


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Iterator[Flask]:
    home = tmp_path_factory.mktemp("fuzz-api-home")
    inputs = home / "inputs"
    inputs.mkdir()
    (inputs / "running-example.xes").write_bytes((shared_data / "running-example.xes").read_bytes())
    build_dataset(home, "running", [str(inputs / "running-example.xes")])
    app = create_app({"SEQSKETCH_HOME": str(home), "DATABASE_URL": f"sqlite:///{home / 'catalog.db'}",
                      "INPUT_ROOTS": [str(inputs)], "QUERY_TIMEOUT_MS": 5000,
                      "MAX_CONTENT_LENGTH": 64 * 1024, "MAX_APPEND_BYTES": 256 * 1024})
    assert app.test_client().get("/v1/datasets/running").status_code == 200  # recorded in the catalog
    yield app
    state = service_state(app)
    assert state.jobs is not None
    state.jobs.shutdown()
    state.catalog.dispose()


@pytest.fixture(scope="module")
def schema(app: Flask) -> Any:
    return schemathesis.openapi.from_wsgi("/v1/openapi.json", app)


def fingerprint(app: Flask) -> tuple[Any, ...]:
    """The state a rejected request must not change: every dataset's files and the catalog's records."""
    state = service_state(app)
    root = state.home / "datasets"
    files = []
    for path in sorted(root.rglob("*")) if root.is_dir() else []:
        if path.is_file() and not path.name.endswith(".lock"):
            files.append((str(path.relative_to(root)), hashlib.sha256(path.read_bytes()).hexdigest()))
    catalog = state.catalog
    rows = catalog.list_datasets(include_deleted=True)
    versions = [catalog.index_versions(r["name"]) for r in rows]
    return tuple(files), repr(rows), repr(versions)


def response_schemas(document: dict[str, Any]) -> dict[tuple[str, str, str], Draft202012Validator]:
    """Validators of every documented (path, method, status) response, components resolved."""
    components = document["components"]["schemas"]
    out = {}
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            for status, response in operation["responses"].items():
                body = (response.get("content") or {}).get("application/json", {}).get("schema")
                if body is not None:
                    name = body["$ref"].rsplit("/", 1)[-1]
                    out[(path, method, status)] = Draft202012Validator(components[name])
    return out


def content_type(headers: Any) -> str:
    """The media type of an answer, whatever shape its headers come in (a mapping to strings or lists)."""
    for key, value in dict(headers).items():
        if key.lower() == "content-type":
            value = value[0] if isinstance(value, list) else value
            return str(value).split(";")[0].strip()
    return ""


def check_answer(app: Flask, case: Any, response: Any, elapsed: float, before: tuple[Any, ...],
                 validators: dict[tuple[str, str, str], Draft202012Validator]) -> None:
    where = f"{case.method} {case.formatted_path} → {response.status_code}"
    text = response.text if hasattr(response, "text") else response.get_data(as_text=True)
    assert response.status_code < 500, f"{where}: {text[:500]}"
    assert "Traceback" not in text and 'File "' not in text, f"{where}: a traceback in the answer"
    assert elapsed < 10.0, f"{where}: answered after {elapsed:.1f} s"
    operation = app.test_client().get("/v1/openapi.json").json["paths"][case.path][case.method.lower()]
    documented = set(operation["responses"])
    media = content_type(response.headers)
    if response.status_code < 300 and media != "application/json":  # the console's page and files
        assert media in (operation["responses"][str(response.status_code)].get("content") or {}), where
        return
    body = response.json()
    if response.status_code >= 400:
        assert set(body) == {"error"}, f"{where}: {body}"
        assert body["error"]["code"] and body["error"]["message"], f"{where}: {body}"
        assert fingerprint(app) == before, f"{where}: a rejected request changed the store or the catalog"
        # Routing-level answers (405 for a method, 404 for a path the router cannot match) are generic.
        assert str(response.status_code) in documented or response.status_code in (404, 405), where
    else:
        assert str(response.status_code) in documented, where
        validator = validators.get((case.path, case.method.lower(), str(response.status_code)))
        if validator is not None:
            errors = sorted(validator.iter_errors(body), key=str)
            assert not errors, f"{where}: the answer does not fit its schema: {errors[0].message}"


# At least 60 examples under any profile: each run counts the operations it reached.
FUZZ = scaled(60, HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture, least=60, derandomize=True)


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_every_generated_request_gets_a_clean_answer(app: Flask, schema: Any, mode: GenerationMode) -> None:
    validators = response_schemas(app.test_client().get("/v1/openapi.json").json)
    strategy = schema.as_strategy(generation_mode=mode)
    seen: set[tuple[str, str]] = set()

    @FUZZ
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        case = data.draw(strategy, label="case")
        before = fingerprint(app)
        started = time.perf_counter()
        response = case.call()
        check_answer(app, case, response, time.perf_counter() - started, before, validators)
        seen.add((case.method, case.path))

    run()
    assert len(seen) >= 6, f"too few operations exercised: {sorted(seen)}"


def test_the_dataset_survives_the_fuzzing(app: Flask) -> None:
    """Run after the fuzzing (same module app): the real dataset still answers a query exactly."""
    client = app.test_client()
    info = client.get("/v1/datasets/running").json
    assert info["events"] >= 42
    answer = client.post("/v1/datasets/running/query",
                         json={"query": "PATTERN SEQ('register request' r, 'pay compensation' p) "
                                        "PARTITION BY case", "mode": "exact"})
    assert answer.status_code == 200 and answer.json["count"] >= 1


@pytest.mark.parametrize("path,content_type", [
    ("/v1/datasets/running/query", "application/json"),
    ("/v1/datasets/running/events", "application/json"),
    ("/v1/datasets/running/events", "application/x-ndjson"),
    ("/v1/datasets/deep/builds", "application/json")])
# Within the app's 64 KiB request limit, far deeper than Python's decoder goes.
@pytest.mark.parametrize("body", [b"[" * 30_000 + b"]" * 30_000, b'{"a":' * 8_000 + b"1" + b"}" * 8_000])
def test_deeply_nested_bodies_are_refused(app: Flask, path: str, content_type: str, body: bytes) -> None:
    before = fingerprint(app)
    response = app.test_client().post(path, data=body, content_type=content_type)
    assert response.status_code == 400, response.get_data(as_text=True)[:300]
    assert response.json["error"]["code"] == "bad_request" and "nested" in response.json["error"]["message"]
    assert fingerprint(app) == before


@pytest.mark.parametrize("batch", [
    [{"type": "A", "ts": "2031-01-01T00:00:00Z"}, {"type": "B", "ts": 1e300}],
    [{"type": "A", "ts": "2031-01-01T00:00:00Z"}, {"type": "B", "ts": "9999-12-31T23:59:59-05:00"}],
    [{"type": "A", "ts": "2031-01-01T00:00:00Z"}, {"type": "B", "ts": float("nan")}],
    [{"type": "A", "ts": "2031-01-01T00:00:00Z"}, {"type": "B", "ts": "2031-01-01", "attrs": {"x": [1]}}],
    [{"type": "A", "ts": "2031-01-01T00:00:00Z"}, {"type": "", "ts": "2031-01-01"}],
    [{"type": "A", "ts": "2031-01-01T00:00:00Z", "x": 1, "attrs": {"x": 2}}],
    [{"type": "A", "ts": "1999-01-01T00:00:00Z"}],  # older than the dataset's last event
])
def test_a_bad_record_rejects_the_whole_batch(app: Flask, batch: list[dict[str, Any]]) -> None:
    import json

    before = fingerprint(app)
    data = json.dumps(batch).encode()  # NaN is written as the NaN literal Python's decoder accepts
    response = app.test_client().post("/v1/datasets/running/events", data=data,
                                      content_type="application/json")
    assert 400 <= response.status_code < 500, response.get_data(as_text=True)
    error = response.json["error"]
    assert error["message"] and ("record" in error["message"] or error["code"] == "conflict"), error
    assert fingerprint(app) == before


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every (path, value) of a JSON value, containers included."""
    yield path, value
    if isinstance(value, dict):
        for key, sub in value.items():
            yield from _leaves(sub, (*path, key))
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            yield from _leaves(sub, (*path, i))


def _replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {k: (_replaced(v, rest, new) if k == head else v) for k, v in value.items()}
    return [(_replaced(v, rest, new) if i == head else v) for i, v in enumerate(value)]


#: Integer fields of the request schemas (where ``2.0`` is not an integer).
INTEGER_FIELDS = ("limit", "granularity", "leaf_size", "memory", "timeout_ms")


@pytest.mark.parametrize("poison", ["surrogate", "float_integer"])
def test_generated_bodies_with_lone_surrogates_and_float_integers(app: Flask, schema: Any,
                                                                  poison: str) -> None:
    """Valid generated requests, each with one string given a lone surrogate (which JSON can escape but no
    UTF-8 text can hold) or one integer written as a float (``2.0``): a clean 4xx, nothing changed.  Sent
    as JSON text with the surrogate escaped, as a client in another language would send it."""
    import json

    strategy = schema.include(method="POST").as_strategy(generation_mode=GenerationMode.POSITIVE)
    poisoned: set[tuple[str, str]] = set()
    client = app.test_client()

    @settings(FUZZ, max_examples=examples(300, least=120))
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        case = data.draw(strategy, label="case")
        if not isinstance(case.body, (dict, list)):
            return
        if poison == "surrogate":
            spots = [p for p, v in _leaves(case.body) if isinstance(v, str)]
        else:
            spots = [p for p, v in _leaves(case.body) if isinstance(v, int) and not isinstance(v, bool)
                     and p and p[-1] in INTEGER_FIELDS]
        if not spots:
            return
        spot = data.draw(st.sampled_from(spots), label="spot")
        old = next(v for p, v in _leaves(case.body) if p == spot)
        if poison == "surrogate":
            bad = data.draw(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), label="surrogate")
            at = data.draw(st.integers(0, len(old)), label="at")
            new: Any = old[:at] + bad + old[at:]
        else:
            new = float(old)
        body = json.dumps(_replaced(case.body, spot, new)).encode()
        before = fingerprint(app)
        started = time.perf_counter()
        response = client.open(case.formatted_path, method=case.method, data=body,
                                headers={k: v for k, v in (case.headers or {}).items()
                                         if k.lower() != "content-type"},
                                content_type="application/json")
        where = f"{case.method} {case.formatted_path} {spot} → {response.status_code}"
        text = response.get_data(as_text=True)
        assert time.perf_counter() - started < 10.0, where
        # 401/403/404 may come first (scope, a missing dataset); otherwise the poisoned field is refused
        assert response.status_code in (400, 401, 403, 404, 413), f"{where}: {text[:300]}"
        assert set(response.json) == {"error"} and "Traceback" not in text, where
        if response.status_code == 400:
            assert ("surrogate" in text if poison == "surrogate" else "integer" in text), f"{where}: {text}"
        assert fingerprint(app) == before, f"{where}: a refused request changed the store or the catalog"
        poisoned.add((case.method, case.path))

    run()
    assert len(poisoned) >= 2, f"too few operations poisoned: {sorted(poisoned)}"
