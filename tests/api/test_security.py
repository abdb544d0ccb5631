"""Access control of the HTTP API, checked on the real app, a real SQLite catalog and real files.

- tokens are stored hashed (the database files hold no secret) and compared in constant time;
- every route in ``app.url_map`` enforces its declared scope for no token, a read token and a write token;
- nothing about a dataset is visible without read scope: an unauthenticated or under-scoped caller gets the
  same answer whether the dataset exists or not (no existence oracle);
- an open (token-less) server answers loopback only, and refuses proxied requests;
- build inputs stay inside the configured roots: ``..``, absolute paths, symlinks (file and directory), NUL
  bytes and home-relative paths are refused alike, whether the outside file exists or not, and a refused
  build leaves the catalog and the data directory as they were.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from api import auth
from api.app import create_app
from api.auth import create_token, revoke_token
from api.state import service_state

OFF_MACHINE = {"REMOTE_ADDR": "203.0.113.9"}


def make_app(home: Path, roots: list[Path]) -> Flask:
    return create_app({
        "SEQSKETCH_HOME": str(home),
        "DATABASE_URL": f"sqlite:///{(home / 'catalog.db').as_posix()}",
        "INPUT_ROOTS": [str(r) for r in roots],
    })


@pytest.fixture
def root(home: Path, shared_data: Path) -> Path:
    """An input root holding a copy of the running example (a real file inside the root)."""
    folder = home / "inputs"
    folder.mkdir()
    (folder / "running-example.xes").write_bytes((shared_data / "running-example.xes").read_bytes())
    return folder


@pytest.fixture
def app(home: Path, root: Path) -> Iterator[Flask]:
    app = make_app(home, [root])
    yield app
    state = service_state(app)
    assert state.jobs is not None
    state.jobs.shutdown()
    state.catalog.dispose()


def wait_build(app: Flask, client: FlaskClient, name: str, headers: dict[str, str] | None = None) -> str:
    """Build ``name`` from the running example over HTTP and wait for it; returns the job id."""
    response = client.post(f"/v1/datasets/{name}/builds", json={"inputs": ["running-example.xes"],
                                                                 "engine": "local"}, headers=headers)
    assert response.status_code == 202, response.json
    jobs = service_state(app).jobs
    assert jobs is not None
    jobs.wait(response.json["job_id"], timeout=120)
    assert client.get(f"/v1/jobs/{response.json['job_id']}", headers=headers).json["state"] == "succeeded"
    return response.json["job_id"]


@pytest.fixture
def tokens(app: Flask) -> dict[str, str]:
    catalog = service_state(app).catalog
    return {"read": create_token(catalog, "reader", "read")[1],
            "write": create_token(catalog, "writer", "write")[1]}


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


# --- tokens at rest and their comparison --------------------------------------------------------------------


def test_the_database_holds_no_plaintext_secret(app: Flask, home: Path) -> None:
    catalog = service_state(app).catalog
    secrets = [create_token(catalog, f"t{i}", "read" if i % 2 else "write")[1] for i in range(5)]
    revoke_token(catalog, "t3")
    catalog.dispose()  # flush the WAL into the main file as well
    stored = b"".join(p.read_bytes() for p in home.glob("catalog.db*"))
    for secret in secrets:
        assert secret.encode() not in stored
        assert secret[len(auth.TOKEN_PREFIX):].encode() not in stored  # nor the random part alone
        assert hashlib.sha256(secret.encode()).hexdigest().encode() in stored


def test_token_comparison_is_constant_time_over_all_tokens(app: Flask,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Every check hashes the presented secret and compares it with *every* active token's digest through
    ``hmac.compare_digest``, wherever (and whether) it matches: the time does not tell how far a guess got."""
    catalog = service_state(app).catalog
    secrets = [create_token(catalog, f"k{i}", "read")[1] for i in range(6)]
    calls: list[tuple[str, str]] = []
    real = hmac.compare_digest

    def counting(a: Any, b: Any) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", counting)
    for presented in (secrets[0], secrets[-1], "ssk_wrong", secrets[0][:-1] + "x"):
        calls.clear()
        auth.authenticate(catalog, presented)
        assert len(calls) == len(secrets)
        # Only digests of equal length are compared, never the presented plaintext.
        assert all(len(a) == len(b) == 64 and presented not in (a, b) for a, b in calls)


def test_revoked_and_malformed_credentials(app: Flask, tokens: dict[str, str]) -> None:
    client = app.test_client()
    revoke_token(service_state(app).catalog, "reader")
    for header in (bearer(tokens["read"]), {"Authorization": "Basic dXNlcjpwYXNz"},
                   {"Authorization": "Bearer"}, {"Authorization": "Bearer  "},
                   {"Authorization": tokens["write"]}, bearer(tokens["write"] + "x"),
                   bearer(tokens["write"].upper()), {"Authorization": "Bearer \x00"}):
        response = client.get("/v1/datasets", headers=header)
        assert response.status_code == 401, (header, response.json)
        assert response.json["error"]["code"] == "unauthorized"
        assert tokens["write"] not in response.get_data(as_text=True)
    lower = {"Authorization": f"bearer {tokens['write']}"}  # the scheme is case-insensitive (RFC 7235)
    assert client.get("/v1/datasets", headers=lower).status_code == 200


# --- scopes on every route ----------------------------------------------------------------------------------


def rule_url(rule: str, dataset: str, job_id: str) -> str:
    values = {"name": dataset, "job_id": job_id, "asset": "console.js", "watch_id": "no-such-watch"}
    return re.sub(r"<(?:[a-z_]+:)?([a-z_]+)>", lambda m: values[m.group(1)], rule)


BODIES: dict[str, Any] = {
    "append_events": [{"type": "Z", "ts": "2030-01-01T00:00:00Z"}],
    "start_build": {"inputs": ["running-example.xes"], "engine": "local", "replace": True},
    "query": {"query": "PATTERN SEQ(A a, B b)", "mode": "exact"},
    "create_watch": {"query": "PATTERN SEQ(A a, B b) WITHIN 5 events", "from": "start"},
}


def test_every_route_enforces_its_scope(app: Flask, tokens: dict[str, str]) -> None:
    client = app.test_client()
    job_id = wait_build(app, client, "scoped", bearer(tokens["write"]))
    checked = 0
    for rule in app.url_map.iter_rules():
        view = app.view_functions[rule.endpoint]
        op = getattr(view, "__operation__", None)
        if rule.endpoint == "static":
            continue
        assert op is not None, f"route {rule.rule} declares no operation (and so no scope)"
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            endpoint = rule.endpoint.split(".")[-1]
            if endpoint == "delete_dataset":
                continue  # checked last, below, so that the dataset stays for the other routes
            url = rule_url(rule.rule, "scoped", job_id)
            body = BODIES.get(endpoint)

            def call(headers: dict[str, str], url: str = url, method: str = method, body: Any = body) -> Any:
                return client.open(url, method=method, json=body, headers=headers)

            write = check_scope(op.scope, call, tokens)
            if endpoint == "start_build" and write.status_code == 202:
                # Let the replacing build finish: the other routes are checked on a settled dataset.
                jobs = service_state(app).jobs
                assert jobs is not None
                jobs.wait(write.json["job_id"], timeout=120)
            checked += 1
    assert checked >= 6
    # DELETE: refused without write scope (and the dataset is still there), then allowed.
    url = "/v1/datasets/scoped"
    assert client.delete(url).status_code == 401
    assert client.delete(url, headers=bearer(tokens["read"])).status_code == 403
    assert client.get(url, headers=bearer(tokens["read"])).status_code == 200
    assert client.delete(url, headers=bearer(tokens["write"])).status_code == 200
    assert client.get(url, headers=bearer(tokens["read"])).status_code == 404


def check_scope(scope: str | None, call: Any, tokens: dict[str, str]) -> Any:
    """Call with no token, a read token and a write token; check each answer; return the write one."""
    anonymous, read, write = call({}), call(bearer(tokens["read"])), call(bearer(tokens["write"]))
    for response in (anonymous, read, write):
        assert response.status_code < 500, response.get_data(as_text=True)
    if scope is None:
        assert anonymous.status_code == read.status_code == write.status_code == 200
        return write
    assert anonymous.status_code == 401 and anonymous.json["error"]["code"] == "unauthorized"
    if scope == "read":
        assert read.status_code not in (401, 403), read.json
    else:
        assert read.status_code == 403 and read.json["error"]["code"] == "forbidden"
    assert write.status_code not in (401, 403), write.json
    return write


# --- no existence oracle ------------------------------------------------------------------------------------


def test_no_existence_oracle_without_read_scope(app: Flask, tokens: dict[str, str]) -> None:
    """A caller without the needed scope gets byte-identical answers for a dataset that exists and one that
    does not; with read scope a missing dataset is 404 on every dataset route."""
    client = app.test_client()
    wait_build(app, client, "present", bearer(tokens["write"]))
    requests = [("GET", "/v1/datasets/{}", None), ("DELETE", "/v1/datasets/{}", None),
                ("POST", "/v1/datasets/{}/query", {"query": "PATTERN A a", "mode": "exact"}),
                ("POST", "/v1/datasets/{}/events", [{"type": "A", "ts": 1}]),
                ("POST", "/v1/datasets/{}/builds", {"inputs": ["running-example.xes"]})]
    for method, template, body in requests:
        for headers in ({}, bearer("ssk_not-a-token"), bearer(tokens["read"])):
            answers = [client.open(template.format(name), method=method, json=body, headers=headers)
                       for name in ("present", "absent")]
            if headers.get("Authorization", "").endswith(tokens["read"]) and method in ("GET",) or (
                    headers.get("Authorization", "").endswith(tokens["read"]) and template.endswith("query")):
                continue  # read scope may see the dataset: that is what it is for
            assert answers[0].status_code == answers[1].status_code in (401, 403), (method, template, headers)
            assert answers[0].get_data() == answers[1].get_data()
    # Read scope: a missing dataset is a plain 404, the same on each read route.
    read = bearer(tokens["read"])
    assert client.get("/v1/datasets/absent", headers=read).status_code == 404
    assert client.post("/v1/datasets/absent/query", json={"query": "PATTERN A a", "mode": "exact"},
                       headers=read).status_code == 404
    listed = client.get("/v1/datasets", headers={}).status_code
    assert listed == 401
    assert client.get("/v1/jobs/no-such-job", headers={}).status_code == 401


# --- the open (token-less) server ---------------------------------------------------------------------------


def test_open_server_answers_loopback_only_on_every_scoped_route(app: Flask) -> None:
    client = app.test_client()
    wait_build(app, client, "open")
    for rule in app.url_map.iter_rules():
        op = getattr(app.view_functions.get(rule.endpoint), "__operation__", None)
        if op is None or op.scope is None:
            continue
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            url = rule_url(rule.rule, "open", "no-job")
            body = BODIES.get(rule.endpoint.split(".")[-1])
            far = client.open(url, method=method, json=body, environ_base=OFF_MACHINE)
            proxied = client.open(url, method=method, json=body, headers={"X-Forwarded-For": "198.51.100.7"})
            forwarded = client.open(url, method=method, json=body, headers={"Forwarded": "for=198.51.100.7"})
            for response in (far, proxied, forwarded):
                assert response.status_code == 403 and response.json["error"]["code"] == "forbidden", url
    assert client.get("/v1/datasets/open").status_code == 200  # still there: nothing was deleted


# --- build inputs confined to the roots ---------------------------------------------------------------------


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.xes").write_text("<log/>")
    return folder


def escape_specs(root: Path, outside: Path) -> list[str]:
    (root / "link.xes").symlink_to(outside / "secret.xes")
    (root / "linkdir").symlink_to(outside, target_is_directory=True)
    (root / "sub").mkdir()
    depth = len(root.resolve().parts)
    return [
        "../outside/secret.xes", "sub/../../outside/secret.xes", "../" * depth + "etc/passwd",
        str(outside / "secret.xes"), str(outside / "missing.xes"), "/etc/passwd", "/etc/no-such-file",
        "link.xes", "linkdir/secret.xes", "linkdir/missing.xes", "running-example.xes\x00.txt",
        str(root / ".." / "outside" / "secret.xes"), "//etc/passwd", "/",
    ]


def test_build_inputs_cannot_leave_the_roots(app: Flask, home: Path, root: Path, outside: Path) -> None:
    client = app.test_client()
    catalog = service_state(app).catalog
    before_rows = catalog.list_datasets()
    for spec in escape_specs(root, outside):
        response = client.post("/v1/datasets/escape/builds", json={"inputs": [spec], "engine": "local"})
        assert response.status_code == 403, (spec, response.json)
        body = response.json["error"]
        assert body["code"] == "input_not_allowed"
        # The message may repeat what the caller sent, but never where a link or '..' really leads.
        leftover = body["message"].replace(repr(spec), "")
        assert str(outside) not in leftover and "passwd" not in leftover
        # One good input beside a bad one does not get a job started either.
        mixed = client.post("/v1/datasets/escape/builds",
                            json={"inputs": ["running-example.xes", spec], "engine": "local"})
        assert mixed.status_code == 403
    assert catalog.list_datasets() == before_rows
    assert not (home / "datasets" / "escape").exists()
    assert client.get("/v1/datasets/escape").status_code == 404


def test_refusals_do_not_tell_whether_an_outside_file_exists(app: Flask, root: Path, outside: Path) -> None:
    client = app.test_client()
    answers = {spec: client.post("/v1/datasets/probe/builds", json={"inputs": [spec]}).json["error"]
               for spec in (str(outside / "secret.xes"), str(outside / "missing.xes"))}
    first, second = answers.values()
    assert first["code"] == second["code"] == "input_not_allowed"
    assert first["message"].replace("secret", "X") == second["message"].replace("missing", "X")


def test_links_and_dots_that_stay_inside_a_root_are_allowed(app: Flask, root: Path) -> None:
    (root / "sub").mkdir()
    (root / "sub" / "alias.xes").symlink_to(root / "running-example.xes")
    client = app.test_client()
    specs = ["sub/../running-example.xes", "sub/alias.xes", str(root / "running-example.xes"),
             "./running-example.xes"]
    for i, spec in enumerate(specs):
        response = client.post(f"/v1/datasets/inside{i}/builds", json={"inputs": [spec], "engine": "local"})
        assert response.status_code == 202, (spec, response.json)
        jobs = service_state(app).jobs
        assert jobs is not None
        jobs.wait(response.json["job_id"], timeout=120)
        assert client.get(f"/v1/datasets/inside{i}").json["events"] == 42


def test_a_symlinked_root_is_followed_but_not_escaped(home: Path, root: Path, outside: Path) -> None:
    """A root that is itself a link is resolved once; paths under it are judged against its target."""
    alias = home / "alias-root"
    os.symlink(root, alias, target_is_directory=True)
    app = make_app(home, [alias])
    try:
        client = app.test_client()
        assert client.post("/v1/datasets/viaalias/builds",
                           json={"inputs": ["running-example.xes"], "engine": "local"}).status_code == 202
        assert client.post("/v1/datasets/viaalias2/builds",
                           json={"inputs": ["../outside/secret.xes"]}).status_code == 403
    finally:
        state = service_state(app)
        assert state.jobs is not None
        state.jobs.shutdown()
        state.catalog.dispose()
