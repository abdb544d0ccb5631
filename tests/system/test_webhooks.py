"""Webhook delivery of a watch's matches, end to end: a real server on a loopback port, a real receiver on
another, the job runner's deliverer between them.  The history's matches and then each new one arrive once,
in order, signed with the watch's secret; a receiver that fails is retried; a restart goes on after the last
match delivered; a deleted watch stops; an address off the machine is refused unless the operator allows
its host."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from api import service
from api.client import BadRequestError, Client
from api.service.webhooks import post, signature
from tests.helpers import serve, wait_for_length
from tests.system.test_watches import QUERY, certain, key, new_case


class Receiver:
    """An HTTP server on 127.0.0.1 that records each POST; the first ``fail`` ones are answered 500."""

    def __init__(self, fail: int = 0) -> None:
        self.fail = fail
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.refused = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if receiver.refused < receiver.fail:
                    receiver.refused += 1
                    self.send_response(500)
                else:
                    receiver.received.append((dict(self.headers), body))
                    self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def matches(self) -> list[dict[str, Any]]:
        return [json.loads(body)["match"] for _, body in self.received]

    def wait_for(self, count: int, timeout: float = 30.0) -> None:
        wait_for_length(self.received, count, timeout)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver(fail=2)
    yield r
    r.close()


@pytest.fixture
def built(home: Path, shared_data: Path) -> Path:
    service.build_from_inputs(home, "running", [str(shared_data / "running-example.xes")], engine="local")
    return home


def test_history_then_live_matches_posted_once_each_and_signed(built: Path, shared_data: Path,
                                                               receiver: Receiver) -> None:
    home = built
    with serve(home, shared_data) as (url, _app):
        client = Client(url, timeout=30)
        watch = client.create_watch("running", QUERY, start="start", webhook=receiver.url)
        secret = watch["secret"]
        assert watch["webhook"] == receiver.url and watch["delivered"] is None and len(secret) == 64
        assert "secret" not in client.watches("running")[0]  # shown once, when the watch is made
        history = certain(home)
        receiver.wait_for(len(history))
        assert receiver.refused == 2  # the first two attempts were answered 500 and tried again
        assert [key(m) for m in receiver.matches()] == history
        for headers, body in receiver.received:
            expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
            assert headers["X-Seqsketch-Signature"] == expected == signature(secret, body)
            assert headers["X-Seqsketch-Watch"] == watch["id"]
            assert headers["X-Seqsketch-Delivery"] == json.loads(body)["cursor"]
        deliveries = [h["X-Seqsketch-Delivery"] for h, _ in receiver.received]
        assert len(set(deliveries)) == len(deliveries)
        # new events: their match is posted once its window closes
        client.append("running", new_case("http-1", "2011-03-01"))
        client.append("running", new_case("http-2", "2011-05-01"))  # closes http-1's window
        receiver.wait_for(len(history) + 1)
        time.sleep(0.5)
        assert [key(m) for m in receiver.matches()] == certain(home)
        assert receiver.matches()[-1]["case"] == "http-1"
        deadline = time.monotonic() + 10
        while client.watches("running")[0]["delivered"] != deliveries[-1] and time.monotonic() < deadline:
            time.sleep(0.05)
        delivered = client.watches("running")[0]["delivered"]
        assert delivered == json.loads(receiver.received[-1][1])["cursor"]
    # a restart: delivery goes on after the last match delivered, none again
    before = len(receiver.received)
    with serve(home, shared_data) as (url, _app):
        client = Client(url, timeout=30)
        client.append("running", new_case("http-3", "2011-07-01"))  # closes http-2's window
        receiver.wait_for(before + 1)
        time.sleep(0.5)
        assert [key(m) for m in receiver.matches()] == certain(home)
        assert [m["case"] for m in receiver.matches()[before:]] == ["http-2"]
        # deleted: nothing more is posted
        client.delete_watch("running", watch["id"])
        time.sleep(1.5)  # (the deliverer looks at the watches every second)
        client.append("running", new_case("http-4", "2011-09-01"))  # would close http-3's window
        time.sleep(1.0)
        assert len(receiver.received) == before + 1


def test_a_webhook_off_the_machine_is_refused_unless_its_host_is_allowed(
        built: Path, shared_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with serve(built, shared_data) as (url, _app):
        client = Client(url, timeout=30)
        with pytest.raises(BadRequestError, match="host 'hooks.example.org' is not allowed"):
            client.create_watch("running", QUERY, webhook="https://hooks.example.org/in")
        with pytest.raises(BadRequestError, match="expected an http:// or https:// address"):
            client.create_watch("running", QUERY, webhook="ftp://127.0.0.1/in")
        for sly in ("http://127.0.0.1.evil.com/in", "http://127.attacker.net/in", "http://127.0.0.1@evil.com/in",
                    "http://[::ffff:8.8.8.8]/in", "http://localhost.evil.com/in"):
            with pytest.raises(BadRequestError, match="is not allowed"):
                client.create_watch("running", QUERY, webhook=sly)
        with pytest.raises(BadRequestError, match="expected an http:// or https:// address"):
            client.create_watch("running", QUERY, webhook="http://[::1")
        for loopback in ("http://[::1]:9/in", "http://127.0.0.2:9/in", "http://LOCALHOST:9/in"):
            client.delete_watch("running", client.create_watch("running", QUERY, webhook=loopback)["id"])
        monkeypatch.setenv("SEQSKETCH_WEBHOOK_HOSTS", "hooks.example.org")
        watch = client.create_watch("running", QUERY, webhook="https://hooks.example.org/in")
        assert watch["webhook"] == "https://hooks.example.org/in"
        client.delete_watch("running", watch["id"])


def test_a_watch_whose_dataset_is_gone_is_not_followed_again(built: Path) -> None:
    """The deliverer follows each webhook watch once; when its stream ends (the dataset deleted) it is not
    started again every second."""
    from api.catalog import open_catalog
    from api.service.webhooks import Deliverer

    catalog = open_catalog(f"sqlite:///{(built / 'catalog.db').as_posix()}")
    try:
        watch = service.create_watch(catalog, built, "running", QUERY, start="start",
                                     webhook="http://127.0.0.1:9/hook")
        service.delete_dataset(built, "running")
        sent: list[bytes] = []
        deliverer = Deliverer(catalog, built, send=lambda url, body, headers: sent.append(body) or True)
        deliverer.look()
        thread, _ = deliverer._threads[watch["id"]]
        thread.join(timeout=10)
        assert not thread.is_alive() and watch["id"] in deliverer._ended
        deliverer.look()
        assert watch["id"] not in deliverer._threads and sent == []
        deliverer.shutdown()
    finally:
        catalog.dispose()


def test_a_redirect_is_not_followed() -> None:
    """A receiver answering 302 has not taken the match (the target was never checked): the attempt fails."""
    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server name
            hits.append(self.path)
            self.rfile.read(int(self.headers["Content-Length"]))
            if self.path == "/hook":
                self.send_response(302)
                self.send_header("Location", "/elsewhere")
            else:
                self.send_response(204)
            self.end_headers()

        do_GET = do_POST  # noqa: N815

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_port}"
        assert post(base + "/elsewhere", b"{}", {}) is True
        hits.clear()
        assert post(base + "/hook", b"{}", {}) is False
        assert hits == ["/hook"]
    finally:
        server.shutdown()
        server.server_close()
