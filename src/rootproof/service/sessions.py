"""Browser sign-in of the team service: session cookies, the proxies believed, CSRF checks.

A person signs in once at `GET /login` with an API key; `POST /login` stores a session in the
trace store (the SHA-256 of a random token, the key's public name, an expiry) and sets the
token as an `HttpOnly; SameSite=Strict` cookie. Every replica reads the same table, so a
session works on any replica and `POST /logout` (which deletes the row) ends it on all of
them. The key itself is never stored, nor the token.

Each function takes the request's headers as a mapping with lower-case names (Starlette's
`Headers`, or a dict built from an ASGI scope), so authentication can be decided from the
headers alone, before a body is read.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # nothing at run time: `rootproof.service.auth` may import this module
    from rootproof.service.auth import KeyRing, Principal
    from rootproof.settings import IPNetwork

__all__ = [
    "LOGIN_COOKIE",
    "SESSION_COOKIE",
    "LoginThrottle",
    "ProxyTrust",
    "cookie_value",
    "cross_site_reason",
    "new_token",
    "principal_from_session_cookie",
    "token_hash",
]

SESSION_COOKIE = "rootproof_session"
"""The session cookie: a random token whose SHA-256 names a stored session."""
LOGIN_COOKIE = "rootproof_login"
"""The sign-in form's CSRF token (double submit: the cookie and the form's hidden field match)."""
LOGIN_FORM_TTL_S = 900
"""How long a sign-in form stays valid, seconds."""
TOKEN_CHARS = 128
"""Longest token read from a cookie; anything longer is not one of ours."""


class SessionReader(Protocol):
    """What resolving a session cookie needs of the trace store."""

    def web_session(self, token_hash: str, *, now: datetime | None = None) -> str | None: ...


def new_token() -> str:
    """A fresh random token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """The SHA-256 (hex) of a token: what the store keeps in its place."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def cookie_value(headers: Mapping[str, str], name: str) -> str | None:
    """The value of cookie `name` in the `Cookie` header, or None (also when it is empty or
    longer than any token of ours)."""
    raw = headers.get("cookie")
    if not raw:
        return None
    for part in raw.split(";"):
        key, sep, value = part.strip().partition("=")
        if sep and key.strip() == name:
            value = value.strip().strip('"')
            return value if 0 < len(value) <= TOKEN_CHARS else None
    return None


def principal_from_session_cookie(
    headers: Mapping[str, str], store: SessionReader, keyring: KeyRing, *, now: datetime | None = None
) -> Principal | None:
    """Who a browser request is, from its session cookie alone: the principal of an unexpired
    stored session whose key is still configured (with that key's role now), else None.
    Reads the store (blocking): call it in a worker thread from async code."""
    token = cookie_value(headers, SESSION_COOKIE)
    if token is None:
        return None
    name = store.web_session(token_hash(token), now=now)
    return None if name is None else keyring.principal_named(name)


def cross_site_reason(headers: Mapping[str, str], own_origin: str) -> tuple[str, str] | None:
    """Why a state-changing request carrying the session cookie must be refused as cross-site
    (`(field, reason)`), or None when a browser says it came from this service's own pages:
    `Sec-Fetch-Site: same-origin`, or (a browser too old to send it) `Origin` equal to
    `own_origin`. Neither header: refused (every browser sends one of them on a POST)."""
    site = headers.get("sec-fetch-site")
    if site is not None:
        if site.strip().lower() == "same-origin":
            return None
        return "Sec-Fetch-Site", f"Sec-Fetch-Site: a request with the session cookie from another site ({site.strip()[:32]!r}) is refused"
    origin = headers.get("origin")
    if origin is None:
        return "Origin", "Origin: a state-changing request with the session cookie must come from this service's pages (no Origin or Sec-Fetch-Site header)"
    if hmac.compare_digest(origin.strip().lower().encode("utf-8", "replace"), own_origin.lower().encode("utf-8", "replace")):
        return None
    return "Origin", "Origin: a request with the session cookie from another origin is refused"


@dataclass(frozen=True)
class ProxyTrust:
    """The reverse proxies believed (`ROOTPROOF_TRUSTED_PROXIES`): only a request whose peer is
    one of them may say, in `X-Forwarded-Proto` and `X-Forwarded-For`, that it came over TLS
    and from whom."""

    networks: tuple[IPNetwork, ...] = ()

    def trusts(self, host: str | None) -> bool:
        """Whether `host` (an IP address) is a trusted proxy."""
        if not host or not self.networks:
            return False
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(address in net for net in self.networks)

    def is_tls(self, scheme: str, peer: str | None, headers: Mapping[str, str]) -> bool:
        """Whether the browser's connection was TLS: this server's own (`scheme` https), or a
        trusted proxy's, which says so in `X-Forwarded-Proto` (its last value: the one the
        nearest proxy set)."""
        if scheme == "https":
            return True
        if not self.trusts(peer):
            return False
        forwarded = headers.get("x-forwarded-proto")
        return forwarded is not None and forwarded.split(",")[-1].strip().lower() == "https"

    def client(self, peer: str | None, headers: Mapping[str, str]) -> str:
        """The client's address: the peer, or behind trusted proxies the nearest address in
        `X-Forwarded-For` that is not one of them."""
        if not self.trusts(peer):
            return peer or "unknown"
        hops = [h.strip() for h in (headers.get("x-forwarded-for") or "").split(",") if h.strip()]
        for hop in reversed(hops):
            try:
                ipaddress.ip_address(hop)
            except ValueError:
                break
            if not self.trusts(hop):
                return hop
        return peer or "unknown"


class LoginThrottle:
    """Failed sign-ins per client address in the last minute, on this replica; at `per_minute`
    the next attempt waits. In memory, at most `max_clients` addresses (the oldest forgotten)."""

    def __init__(self, per_minute: int, *, max_clients: int = 10_000) -> None:
        self.per_minute = per_minute
        self.max_clients = max_clients
        self._failures: dict[str, deque[float]] = {}

    def _recent(self, client: str, now: float) -> deque[float]:
        found = self._failures.get(client)
        if found is None:
            return deque()
        while found and found[0] <= now - 60:
            found.popleft()
        if not found:
            del self._failures[client]
        return found

    def retry_after(self, client: str, now: float | None = None) -> int | None:
        """Seconds until `client` may try again, or None when it may now."""
        if self.per_minute <= 0:
            return None
        now = time.monotonic() if now is None else now
        recent = self._recent(client, now)
        if len(recent) < self.per_minute:
            return None
        return max(1, int(recent[0] + 60 - now) + 1)

    def failed(self, client: str, now: float | None = None) -> None:
        """Count a failed sign-in of `client`."""
        if self.per_minute <= 0:
            return
        now = time.monotonic() if now is None else now
        recent = self._recent(client, now)
        if client not in self._failures:
            while len(self._failures) >= self.max_clients:
                del self._failures[next(iter(self._failures))]
            self._failures[client] = recent
        recent.append(now)
