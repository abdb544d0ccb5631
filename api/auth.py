"""API tokens: creation, revocation, and checking ``Authorization: Bearer …`` against scopes (docs/contract.md §5).

A token is a random secret shown once; the catalog keeps only its SHA-256.  Checking a presented secret hashes
it and compares that digest with every active token's digest using :func:`hmac.compare_digest`, without
stopping at the first hit, so neither the comparison nor the loop tells an attacker how close a guess came.

Scopes: ``read`` lists, describes and queries; ``write`` also appends, builds and deletes.

With no active token in the catalog the service is *open* — and therefore confined to loopback: ``seqsketch
serve`` refuses to bind elsewhere (:func:`check_bind_allowed`), and the app answers a non-loopback client
with 403 (the same rule when it runs under another server such as gunicorn).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import secrets
from dataclasses import dataclass

from sqlalchemy import select

from api.catalog import Catalog, Scope, Token, utcnow
from exact.errors import Conflict, NotFound, SeqsketchError

TOKEN_PREFIX = "ssk_"
TOKEN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")


class Unauthorized(SeqsketchError):
    """No credentials, or credentials that do not name an active token."""

    code = "unauthorized"
    http_status = 401


class Forbidden(SeqsketchError):
    """Valid credentials without the needed scope, or an open server asked from off the machine."""

    code = "forbidden"
    http_status = 403


class BadTokenRequest(SeqsketchError):
    code = "bad_request"


@dataclass(frozen=True)
class Principal:
    """Who is calling: a token's name and scope, or the anonymous caller of an open (token-less) server."""

    name: str | None
    scope: Scope

    @property
    def anonymous(self) -> bool:
        return self.name is None


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def new_secret() -> str:
    # 32 random bytes: far beyond guessing; the prefix makes leaked tokens easy to spot in logs and scanners.
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def parse_scope(text: str) -> Scope:
    try:
        return Scope(text)
    except ValueError:
        raise BadTokenRequest(f"unknown scope {text!r}; expected 'read' or 'write'", where="scope") from None


def create_token(catalog: Catalog, name: str, scope: Scope | str) -> tuple[dict[str, object], str]:
    """Create a token; returns its description and the plaintext secret (not stored anywhere)."""
    scope = parse_scope(scope) if isinstance(scope, str) else scope
    if not TOKEN_NAME.fullmatch(name):
        raise BadTokenRequest(
            f"token name {name!r} is not valid: 1-64 characters, letters, digits, '_', '.', '@', '-'",
            where="name")
    secret = new_secret()
    with catalog.session() as s:
        if s.scalar(select(Token).where(Token.name == name)) is not None:
            raise Conflict(f"a token named {name!r} exists already (names stay taken after revocation)",
                           where="name")
        row = Token(name=name, secret_sha256=hash_secret(secret), scope=scope.value)
        s.add(row)
        s.flush()
        return row.to_dict(), secret


def revoke_token(catalog: Catalog, name: str) -> dict[str, object]:
    with catalog.session() as s:
        row = s.scalar(select(Token).where(Token.name == name))
        if row is None:
            raise NotFound(f"no token named {name!r}", where="name")
        if row.revoked is None:
            row.revoked = utcnow()
        return row.to_dict()


def list_tokens(catalog: Catalog) -> list[dict[str, object]]:
    with catalog.session() as s:
        return [row.to_dict() for row in s.scalars(select(Token).order_by(Token.name))]


def has_active_tokens(catalog: Catalog) -> bool:
    """Whether any token is active (then every request needs one); asked per request, on a plain connection."""
    with catalog.engine.connect() as conn:
        return conn.execute(select(Token.id).where(Token.revoked.is_(None)).limit(1)).scalar() is not None


def authenticate(catalog: Catalog, secret: str) -> Principal | None:
    """The active token whose secret this is, compared in constant time over all active tokens."""
    presented = hash_secret(secret)
    with catalog.session() as s:
        rows = s.execute(select(Token.name, Token.secret_sha256, Token.scope).where(Token.revoked.is_(None)))
        found: Principal | None = None
        for name, digest, scope in rows:
            if hmac.compare_digest(digest, presented):
                found = Principal(name=name, scope=Scope(scope))
        return found


def bearer_secret(header: str | None) -> str | None:
    """The secret of an ``Authorization: Bearer <secret>`` header, None when there is no header."""
    if header is None or not header.strip():
        return None
    scheme, _, secret = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise Unauthorized("the Authorization header must be 'Bearer <token>'", where="Authorization")
    return secret.strip()


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def authorize(catalog: Catalog, header: str | None, needed: Scope, remote_addr: str | None, *,
              forwarded: bool = False) -> Principal:
    """The caller, if allowed ``needed``; else :class:`Unauthorized` (401) or :class:`Forbidden` (403).

    ``forwarded``: the request came through a proxy (it carries ``Forwarded`` / ``X-Forwarded-For``), so a
    loopback peer address says nothing about the real client; an open server refuses it.
    """
    if not has_active_tokens(catalog):
        if forwarded or not is_loopback(remote_addr):
            raise Forbidden("this server has no API tokens configured and answers loopback clients only; "
                            "create one with `seqsketch token create NAME --scope read|write`")
        return Principal(name=None, scope=Scope.WRITE)
    secret = bearer_secret(header)
    if secret is None:
        raise Unauthorized("this endpoint needs an 'Authorization: Bearer <token>' header",
                           where="Authorization")
    principal = authenticate(catalog, secret)
    if principal is None:
        raise Unauthorized("the token is not valid (unknown or revoked)", where="Authorization")
    if not principal.scope.grants(needed):
        raise Forbidden(f"token {principal.name!r} has scope {principal.scope.value!r}; "
                        f"this needs {needed.value!r}")
    return principal


def check_bind_allowed(catalog: Catalog, host: str) -> None:
    """Refuse to listen beyond loopback while no token protects the service."""
    if not is_loopback(host) and not has_active_tokens(catalog):
        raise Forbidden(f"refusing to listen on {host}: no API tokens are configured, so the service may "
                        "only bind to loopback (127.0.0.1, ::1); create a token with "
                        "`seqsketch token create`",
                        where="--host")
