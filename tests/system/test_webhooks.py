"""Webhook delivery of a watch's matches, end to end: a real server on a loopback port, a real receiver on
another, the job runner's deliverer between them.  The history's matches and then each new one arrive once,
in order, signed with the watch's secret; a receiver that fails is retried; a restart goes on after the last
match delivered; a deleted watch stops; an address off the machine is refused unless the operator allows
its host."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from api import service
from api.client import BadRequestError, Client
from api.service.webhooks import post, signature
from exact.errors import QuerySemanticError
from exact.query.ast import Strategy, WithinEvents, WithinTime
from exact.reference import reference_matches
from tests.generators import engine_queries, keyed_streams, scaled
from tests.helpers import serve, wait_for_length
from tests.sketch.test_standing import steps
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
        # new events: their match is posted as soon as it is certain, with the append that completes it
        client.append("running", new_case("http-1", "2011-03-01"))
        receiver.wait_for(len(history) + 1)
        time.sleep(0.5)
        assert [key(m) for m in receiver.matches()] == certain(home)
        assert receiver.matches()[-1]["case"] == "http-1"
        deliveries = [h["X-Seqsketch-Delivery"] for h, _ in receiver.received]
        deadline = time.monotonic() + 10
        while client.watches("running")[0]["delivered"] != deliveries[-1] and time.monotonic() < deadline:
            time.sleep(0.05)
        delivered = client.watches("running")[0]["delivered"]
        assert delivered == json.loads(receiver.received[-1][1])["cursor"]
    # a restart: delivery goes on after the last match delivered, none again
    before = len(receiver.received)
    with serve(home, shared_data) as (url, _app):
        client = Client(url, timeout=30)
        client.append("running", new_case("http-2", "2011-07-01"))
        receiver.wait_for(before + 1)
        time.sleep(0.5)
        assert [key(m) for m in receiver.matches()] == certain(home)
        assert [m["case"] for m in receiver.matches()[before:]] == ["http-2"]
        # deleted: nothing more is posted
        client.delete_watch("running", watch["id"])
        time.sleep(1.5)  # (the deliverer looks at the watches every second)
        client.append("running", new_case("http-4", "2011-09-01"))
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
        for sly in ("http://127.0.0.1.evil.com/in", "http://127.attacker.net/in",
                    "http://[::ffff:8.8.8.8]/in", "http://localhost.evil.com/in"):
            with pytest.raises(BadRequestError, match="is not allowed"):
                client.create_watch("running", QUERY, webhook=sly)
        # a user name or password: two URL parsers may read two hosts, and a password would be shown
        for sly in ("http://127.0.0.1@evil.com/in", "http://10.0.0.1@127.0.0.1/", "http://user:pw@127.0.0.1/",
                    "http://:@127.0.0.1/"):
            with pytest.raises(BadRequestError, match="may not carry a user name or password"):
                client.create_watch("running", QUERY, webhook=sly)
        for port in (":99999", ":abc", ":0", ":-1"):
            with pytest.raises(BadRequestError, match="port must be a number from 1 to 65535"):
                client.create_watch("running", QUERY, webhook=f"http://127.0.0.1{port}/in")
        for odd in ("http://127.0.0.1/a b", "http://127.0.0.1/\\x", "http://127.0.0.1/\x00"):
            with pytest.raises(BadRequestError, match="spaces, control characters or backslashes"):
                client.create_watch("running", QUERY, webhook=odd)
        assert all("@" not in w.get("webhook", "") for w in client.watches("running"))
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


@scaled(12, HealthCheck.function_scoped_fixture, HealthCheck.too_slow)
@given(rows=keyed_streams(8), plan=steps(), data=st.data())
def test_webhook_deliveries_are_the_certain_matches_in_order_across_a_restart(
        tmp_path_factory: pytest.TempPathFactory, rows: list[dict], plan: list[tuple[str, Any]],
        data: st.DataObject) -> None:
    """The property test of tests/sketch/test_standing.py through the webhook path: the job runner's deliverer
    posts, after every append and watermark, exactly the whole stream's matches certain by then, in order,
    each once — across a deliverer stopped and started again (it goes on after the last match recorded as
    delivered)."""
    from api.catalog import open_catalog
    from api.service.webhooks import Deliverer
    from exact.query.language import to_json
    from sketch.build import BuildOptions
    from sketch.dataset import Dataset
    from tests.sketch.test_standing import key as match_key
    from tests.sketch.test_standing import moment_of, now_of, table_of, windowed

    within = data.draw(st.one_of(st.builds(WithinEvents, st.integers(2, 6)),
                                 st.builds(WithinTime, st.integers(0, 4))))
    query = windowed(data.draw(engine_queries()), within)
    home = tmp_path_factory.mktemp("webhook-home")
    Dataset.build(home, "d", table_of(rows), BuildOptions(leaf_size=2, fpq=0.9))
    catalog = open_catalog(f"sqlite:///{(home / 'catalog.db').as_posix()}")
    posted: list[dict[str, Any]] = []
    lock = threading.Lock()

    def send(url: str, body: bytes, headers: Mapping[str, str]) -> bool:
        with lock:
            posted.append(json.loads(body))
        return True

    deliverer = None
    try:
        try:
            service.create_watch(catalog, home, "d", to_json(query), start="start", webhook="http://127.0.0.1:9/h")
        except QuerySemanticError:
            return  # a comparison of kinds the dataset cannot hold: refused as a watch too
        deliverer = Deliverer(catalog, home, look_every=0.05, send=send).start()
        every, watermark = list(rows), None
        restart_at = data.draw(st.integers(0, len(plan)))
        checkpoints: list[tuple[int, tuple[int, int]]] = [(0, now_of(every, watermark))]
        for step, (kind, value) in enumerate(plan):
            if step == restart_at:
                deliverer.shutdown()
                deliverer = Deliverer(catalog, home, look_every=0.05, send=send).start()
            floor = max(every[-1]["ts"], watermark if watermark is not None else every[-1]["ts"])
            if kind == "watermark":
                watermark = floor + value
                service.append_records(home, "d", [], watermark=watermark / 1e6)
            else:
                base = watermark + 1 if watermark is not None and watermark >= every[-1]["ts"] else every[-1]["ts"]
                shifted = [{**r, "ts": r["ts"] + base} for r in value]
                service.append_records(home, "d", [{**r, "ts": r["ts"] / 1e6} for r in shifted])
                every += shifted
            checkpoints.append((step + 1, now_of(every, watermark)))
        whole = table_of(every)
        greedy = ({match_key(m) for m in reference_matches(dataclasses.replace(
            query, strategy=Strategy.SKIP_TILL_NEXT_MATCH), whole)}
            if query.strategy is Strategy.ROBUST_SKIP_TILL_NEXT_MATCH else set())
        timed = [(t, match_key(m)) for t, m in sorted((moment_of(query, m, every, greedy), m)
                                                for m in reference_matches(query, whole))]
        expected = [k for t, k in timed if t <= checkpoints[-1][1]]
        deadline = time.monotonic() + 20
        while len(posted) < len(expected) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)  # (nothing more may come)
        assert [match_key(p["match"]) for p in posted] == expected, query
        cursors = [p["cursor"] for p in posted]
        assert len(set(cursors)) == len(cursors)
    finally:
        if deliverer is not None:
            deliverer.shutdown()
        catalog.dispose()


def test_a_delivery_connects_to_the_address_it_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """A webhook's host is resolved once per delivery and the connection goes to the address that was
    checked (DNS cannot answer the check and the connection differently); a loopback name that resolves
    off the loopback is no loopback, and nothing is sent."""
    import socket

    received: list[dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server name
            self.rfile.read(int(self.headers["Content-Length"]))
            received.append(dict(self.headers))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_port
    looked_up: list[str] = []
    real = socket.getaddrinfo

    def resolve(host: Any, *args: Any, **kwargs: Any) -> Any:
        if any(c.isalpha() for c in str(host)):  # (names; connecting to an address parses it here too)
            looked_up.append(str(host))
        if host == "hooks.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]
        if host == "localhost":  # a resolver that answers a loopback name with a foreign address
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.1.2.3", port))]
        return real(host, *args, **kwargs)

    try:
        monkeypatch.setenv("SEQSKETCH_WEBHOOK_HOSTS", "hooks.test")
        monkeypatch.setattr(socket, "getaddrinfo", resolve)
        assert post(f"http://hooks.test:{port}/hook", b"{}", {}) is True
        assert looked_up == ["hooks.test"] and received[-1]["Host"] == f"hooks.test:{port}"
        looked_up.clear()
        assert post(f"http://localhost:{port}/hook", b"{}", {}) is False
        assert looked_up == ["localhost"] and len(received) == 1
        monkeypatch.setenv("SEQSKETCH_WEBHOOK_HOSTS", "")  # no longer listed: refused before any look-up
        looked_up.clear()
        assert post(f"http://hooks.test:{port}/hook", b"{}", {}) is False and looked_up == []
    finally:
        server.shutdown()
        server.server_close()
