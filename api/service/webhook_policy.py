"""Where a webhook may post, decided once and kept to: one parser for the check and the send.

A webhook address is an ``http`` or ``https`` URL with a host and nothing else in its authority: no user
name or password (it would be shown to every reader of the watch, and two URL parsers read ``a@b`` as
different hosts — the differential behind real SSRF bugs), a port only as 1–65535.  Its host must be on
this machine's loopback (an address in the loopback range, or ``localhost``) or named exactly in
``SEQSKETCH_WEBHOOK_HOSTS`` (a deployment's setting, comma-separated).

:func:`parse_webhook` is the only parser: the watch stores what it returns, and :func:`post` sends to it.  A
send resolves the host once, checks every address it got (a loopback name must resolve to loopback
addresses only), and connects to the address it checked — there is no second look-up between the check and
the connection for DNS to answer differently.  ``https`` verifies the certificate against the host's name.
A redirect is an answer that failed: its target was never checked.
"""

from __future__ import annotations

import http.client
import ipaddress
import os
import socket
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

from exact.errors import QuerySemanticError

#: Hosts a webhook may name besides the loopback ones: comma-separated names (a deployment's setting).
WEBHOOK_HOSTS_ENV = "SEQSKETCH_WEBHOOK_HOSTS"
LONGEST = 2048
#: How long a receiver has to answer one delivery (seconds).
POST_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Webhook:
    """A checked webhook address."""

    scheme: str
    host: str  # lower case; an IPv6 address without brackets
    port: int
    target: str  # path and query, at least "/"

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = (self.scheme, self.port) in (("http", 80), ("https", 443))
        return f"{self.scheme}://{host}{'' if default else f':{self.port}'}{self.target}"

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = (self.scheme, self.port) in (("http", 80), ("https", 443))
        return host if default else f"{host}:{self.port}"


def _refuse(message: str) -> QuerySemanticError:
    return QuerySemanticError(message, where="webhook")


def allowed_hosts() -> frozenset[str]:
    return frozenset(h.strip().lower() for h in os.environ.get(WEBHOOK_HOSTS_ENV, "").split(",") if h.strip())


def _loopback_literal(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_webhook(address: object) -> Webhook:
    """``address`` as a :class:`Webhook`, or a positioned error saying what is wrong with it."""
    if not isinstance(address, str) or not address or len(address) > LONGEST:
        raise _refuse(f"expected an http(s) address of at most {LONGEST} characters")
    if any(ord(c) <= 0x20 or ord(c) == 0x7F or c == "\\" for c in address):
        raise _refuse("an address with spaces, control characters or backslashes is not taken")
    try:
        parts = urllib.parse.urlsplit(address)
    except ValueError:
        raise _refuse(f"webhook {address!r}: expected an http:// or https:// address with a host") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.netloc:
        raise _refuse(f"webhook {address!r}: expected an http:// or https:// address with a host")
    if "@" in parts.netloc:
        raise _refuse("a webhook address may not carry a user name or password (it would be shown to "
                      "every reader of the watch); sign deliveries with the watch's secret instead")
    host = (parts.hostname or "").lower()
    if not host:
        raise _refuse(f"webhook {address!r}: expected an http:// or https:// address with a host")
    try:
        port = parts.port
    except ValueError:
        raise _refuse("the webhook's port must be a number from 1 to 65535") from None
    if port is not None and not 1 <= port <= 65535:
        raise _refuse("the webhook's port must be a number from 1 to 65535")
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise _refuse(f"webhook {address!r}: expected an http:// or https:// address with a host") from None
    hook = Webhook(scheme, host, port or (443 if scheme == "https" else 80),
                   (parts.path or "/") + (f"?{parts.query}" if parts.query else ""))
    if not (_loopback_literal(host) or host == "localhost" or host in allowed_hosts()):
        raise _refuse(f"webhook {address!r}: host {host!r} is not allowed; a webhook posts to this machine's "
                      f"loopback (127.0.0.1, ::1, localhost) or to a host the operator lists in "
                      f"{WEBHOOK_HOSTS_ENV}")
    return hook


def check_webhook(address: object) -> str:
    """The address a watch keeps for ``address`` (:func:`parse_webhook`), written one way."""
    return parse_webhook(address).url


def addresses(hook: Webhook) -> list[str]:
    """The addresses a delivery may connect to: the host's own when it is an address; a loopback name's
    loopback addresses only; an allowed name's, as resolved now.  Empty: nowhere (it fails)."""
    try:
        ipaddress.ip_address(hook.host)
        return [hook.host] if _loopback_literal(hook.host) or hook.host in allowed_hosts() else []
    except ValueError:
        pass
    if hook.host != "localhost" and hook.host not in allowed_hosts():
        return []  # (no longer listed)
    try:
        infos = socket.getaddrinfo(hook.host, hook.port, type=socket.SOCK_STREAM)
    except OSError:
        return []
    found = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if hook.host == "localhost":
        return [a for a in found if _loopback_literal(a)]
    return found


class _PinnedHTTP(http.client.HTTPConnection):
    """A connection to one checked address, whatever the host name says."""

    def __init__(self, address: str, hook: Webhook, timeout: float) -> None:
        super().__init__(address, hook.port, timeout=timeout)


class _PinnedHTTPS(http.client.HTTPSConnection):
    """A TLS connection to one checked address, its certificate verified against the host's name."""

    def __init__(self, address: str, hook: Webhook, timeout: float) -> None:
        import ssl  # (only a delivery over https needs it: a query never loads it)

        super().__init__(address, hook.port, timeout=timeout, context=ssl.create_default_context())
        self._hook = hook

    def connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self._hook.host)  # type: ignore[attr-defined]


def post(url: str, body: bytes, headers: Mapping[str, str], timeout: float = POST_TIMEOUT_S) -> bool:
    """One delivery attempt to the checked address of ``url``: True when the receiver answered 2xx (a
    redirect, an address no longer allowed or a host that resolves nowhere allowed is an attempt that
    failed)."""
    try:
        hook = parse_webhook(url)
    except QuerySemanticError:
        return False
    for address in addresses(hook)[:1]:
        kind = _PinnedHTTPS if hook.scheme == "https" else _PinnedHTTP
        conn = kind(address, hook, timeout)
        try:
            conn.request("POST", hook.target, body=body,
                         headers={"Host": hook.host_header, "Content-Type": "application/json", **headers})
            answer = conn.getresponse()
            answer.read()
            return 200 <= answer.status < 300
        except (OSError, http.client.HTTPException, ValueError):
            return False
        finally:
            conn.close()
    return False
