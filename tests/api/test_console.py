"""The web console's page as the server sends it: public, under a strict Content-Security-Policy, not to be
framed, made only of the package's own files (nothing fetched from elsewhere, so it works offline), and
calling nothing but ``/v1``.  The page driven in a real browser is ``tests/system/test_console_browser.py``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from api.app import create_app
from api.auth import create_token
from api.console import ASSETS, CONTENT_SECURITY_POLICY, STATIC
from api.state import service_state

#: The SVG namespace is a name the DOM needs (``createElementNS``), not an address anything is fetched from.
NAMESPACES = {"http://www.w3.org/2000/svg"}
URL = re.compile(r"""(?:https?:)?//[A-Za-z0-9.-]+\.[A-Za-z]{2,}[^\s"'`)<>]*""")


@pytest.fixture
def app(home: Path) -> Iterator[Flask]:
    app = create_app({"SEQSKETCH_HOME": str(home), "DATABASE_URL": f"sqlite:///{home / 'catalog.db'}",
                      "INPUT_ROOTS": [str(home)]})
    yield app
    state = service_state(app)
    if state.jobs is not None:
        state.jobs.shutdown()
    state.catalog.dispose()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def served_files(client: FlaskClient) -> dict[str, str]:
    """Every file of the page as served: ``/`` and each asset."""
    out = {"/": client.get("/").get_data(as_text=True)}
    for name in ASSETS:
        out[f"/console/{name}"] = client.get(f"/console/{name}").get_data(as_text=True)
    return out


def test_the_page_is_served_with_a_strict_policy(client: FlaskClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and page.mimetype == "text/html"
    assert page.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    policy = dict(part.strip().split(" ", 1) for part in CONTENT_SECURITY_POLICY.split(";"))
    assert policy["default-src"] == "'none'" and policy["frame-ancestors"] == "'none'"
    for directive in ("script-src", "style-src", "connect-src"):
        assert policy[directive] == "'self'", directive  # no inline code, no other host
    assert page.headers["X-Frame-Options"] == "DENY"
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    assert page.headers["Referrer-Policy"] == "no-referrer"


def test_every_asset_is_served_with_its_type_and_nothing_else_is(client: FlaskClient) -> None:
    assert set(ASSETS) == {p.name for p in STATIC.iterdir() if p.is_file() and p.name != "index.html"}
    for name, media_type in ASSETS.items():
        response = client.get(f"/console/{name}")
        assert response.status_code == 200 and response.mimetype == media_type, name
        assert response.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    for probe in ("index.html.bak", "..%2Fapp.py", "nope.js"):
        missing = client.get(f"/console/{probe}")
        assert missing.status_code == 404 and missing.json["error"]["code"] == "not_found", probe


def test_the_page_works_offline(client: FlaskClient) -> None:
    """No file of the page names another host: no CDN, no font service, no analytics."""
    for path, text in served_files(client).items():
        found = {m.group(0) for m in URL.finditer(text)} - NAMESPACES
        assert not found, f"{path} refers to {sorted(found)}"
        assert "http://" not in text.replace("http://www.w3.org/2000/svg", ""), path
        assert "https://" not in text, path


def test_the_page_loads_only_its_own_files_and_calls_only_v1(client: FlaskClient) -> None:
    files = served_files(client)
    html = files["/"]
    linked = set(re.findall(r'(?:src|href)="([^"]+)"', html))
    assert linked and all(client.get(link).status_code == 200 for link in linked), linked
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), "inline script: the policy would block it"
    assert not re.search(r"\sstyle=", html) and not re.search(r"\son[a-z]+=", html), "inline style or handler"
    scripts = {path: text for path, text in files.items() if path.endswith(".js")}
    for path, text in scripts.items():
        for target in re.findall(r'from\s+"([^"]+)"', text):
            assert target in files, f"{path} imports {target}, which is not served"
        assert "eval(" not in text and "new Function" not in text and ".innerHTML" not in text, path
    fetched = [f for text in scripts.values() for f in re.findall(r"fetch\(`([^`$]*)", text)]
    assert fetched == ["/v1"], fetched  # one door to the server: the public API (a watch's stream is its URL)


def test_the_page_is_public_when_the_api_needs_tokens(app: Flask, client: FlaskClient) -> None:
    create_token(service_state(app).catalog, "someone", "read")
    assert client.get("/").status_code == 200 and client.get("/console/console.js").status_code == 200
    assert client.get("/v1/datasets").status_code == 401  # the data is not
    assert client.get("/v1/health").json["auth"] == "tokens"  # what the page asks to offer a token box


def test_the_page_obeys_the_cross_site_rules(client: FlaskClient) -> None:
    assert client.get("/", headers={"Host": "rebound.example"}).status_code == 421
    assert client.get("/", headers={"Origin": "https://evil.example"}).status_code == 403
    same = client.get("/v1/health", headers={"Origin": "http://localhost"})
    assert same.status_code == 200  # the page's own origin may call
