"""API keys and roles of the team service.

Keys come from `ROOTPROOF_API_KEYS` (`key1:operator,key2:auditor`) and/or
`ROOTPROOF_API_KEYS_FILE` (one `sha256:<hex>:<role>` per line; `#` starts a comment). Only the
SHA-256 digest of a key is kept in memory; a presented key is hashed and compared with every
known digest in constant time (`hmac.compare_digest`). A principal is named by a short prefix
of its digest (`key:1a2b3c4d5e6f`), never by the key: that name owns the sessions it opens.

Roles: `operator` asks (chat, webhooks, its own runs and traces); `auditor` reads (any trace,
the reasoning audit); `admin` may do both.

Who sent a request is decided from its headers alone, by `principal_from_headers`: the service's
key gate (`service.limits.KeyGate`, before any byte of a body is read) and the routes' own
dependency both call it, so there is one definition of it.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from rootproof.errors import ConfigError

if TYPE_CHECKING:
    from rootproof.settings import Settings

__all__ = ["KeyRing", "Principal", "ROLES", "Refusal", "hash_key", "principal_from_headers", "require_grant"]

Role = Literal["operator", "auditor", "admin"]
ROLES: tuple[Role, ...] = ("operator", "auditor", "admin")

_GRANTS: dict[str, frozenset[str]] = {
    "operator": frozenset({"ask"}),
    "auditor": frozenset({"audit"}),
    "admin": frozenset({"ask", "audit"}),
}
"""`ask`: start runs, read and cancel one's own; `audit`: read any run, its trace and its reasoning."""


def hash_key(key: str) -> str:
    """`sha256:<hex>` of an API key (what `ROOTPROOF_API_KEYS_FILE` holds)."""
    return "sha256:" + hashlib.sha256(key.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Principal:
    """Who sent a request: the key's public name and its role."""

    name: str
    role: str

    def may(self, grant: str) -> bool:
        """Whether the role holds `grant` (`ask` or `audit`)."""
        return grant in _GRANTS.get(self.role, frozenset())


LOOPBACK_PRINCIPAL = Principal(name="local", role="admin")
"""Every request of a server started with `--no-auth` (bound to loopback only)."""


def _role(value: str, where: str) -> Role:
    role = value.strip().lower()
    if role not in ROLES:
        raise ConfigError(f"{where}: unknown role {value.strip()!r} (expected one of {', '.join(ROLES)})")
    return role  # type: ignore[return-value]


class KeyRing:
    """The digests of the configured keys and their roles."""

    def __init__(self, entries: list[tuple[bytes, Role]]) -> None:
        self._entries = entries

    def __len__(self) -> int:
        return len(self._entries)

    @classmethod
    def load(cls, keys: str | None, keys_file: Path | None) -> KeyRing:
        """Parse `ROOTPROOF_API_KEYS` and `ROOTPROOF_API_KEYS_FILE`; a bad entry is a ConfigError
        naming the variable (or the file and line) and never quoting the key."""
        entries: list[tuple[bytes, Role]] = []
        for i, item in enumerate((keys or "").split(","), start=1):
            if not item.strip():
                continue
            key, sep, role = item.strip().rpartition(":")
            if not sep or not key:
                raise ConfigError(f"ROOTPROOF_API_KEYS: entry {i} is not KEY:ROLE (roles: {', '.join(ROLES)})")
            if len(key) < 16:
                raise ConfigError(f"ROOTPROOF_API_KEYS: entry {i}: the key is shorter than 16 characters")
            entries.append((hashlib.sha256(key.encode("utf-8")).digest(), _role(role, f"ROOTPROOF_API_KEYS: entry {i}")))
        if keys_file is not None:
            try:
                text = keys_file.read_text(encoding="utf-8")
            except OSError as exc:
                raise ConfigError(f"ROOTPROOF_API_KEYS_FILE: cannot read {keys_file}: {exc.strerror or exc}") from exc
            except UnicodeDecodeError as exc:
                raise ConfigError(f"ROOTPROOF_API_KEYS_FILE: {keys_file} is not UTF-8 text") from exc
            for n, line in enumerate(text.splitlines(), start=1):
                line = line.split("#", 1)[0].strip()
                if not line:
                    continue
                where = f"ROOTPROOF_API_KEYS_FILE: {keys_file} line {n}"
                parts = line.split(":")
                if len(parts) != 3 or parts[0] != "sha256":
                    raise ConfigError(f"{where}: expected sha256:<64 hex digits>:<role> (`rootproof hash-key ROLE` prints one)")
                try:
                    digest = bytes.fromhex(parts[1])
                except ValueError:
                    digest = b""
                if len(digest) != 32:
                    raise ConfigError(f"{where}: the digest is not 64 hex digits")
                entries.append((digest, _role(parts[2], where)))
        seen: set[bytes] = set()
        for n, (digest, _given) in enumerate(entries, start=1):
            if digest in seen:
                raise ConfigError(f"ROOTPROOF_API_KEYS / ROOTPROOF_API_KEYS_FILE: key {n} (in order: the variable, then the file) is configured twice; give each key one role")
            seen.add(digest)
        return cls(entries)

    def authenticate(self, key: str) -> Principal | None:
        """The principal of `key`, or None; every digest is compared, each in constant time."""
        digest = hashlib.sha256(key.encode("utf-8")).digest()
        found: Principal | None = None
        for known, role in self._entries:
            if hmac.compare_digest(known, digest) and found is None:
                found = Principal(name="key:" + known.hex()[:12], role=role)
        return found

    def principal_named(self, name: str) -> Principal | None:
        """The principal whose public name is `name` (`key:1a2b3c4d5e6f`) with its role now, or
        None when no configured key has that name (a browser session of a key since removed)."""
        for known, role in self._entries:
            if "key:" + known.hex()[:12] == name:
                return Principal(name=name, role=role)
        return None



class Refusal(Exception):
    """A request refused from its headers: `401` (no key, or an unknown one) or `403` (the role
    lacks the route's grant). `detail` and `field` are the JSON problem the service answers."""

    def __init__(self, status: int, detail: str, field: str | None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.field = field

    @property
    def headers(self) -> dict[str, str]:
        """The answer's extra headers (`WWW-Authenticate` on a 401)."""
        return {"WWW-Authenticate": "Bearer"} if self.status == 401 else {}


def principal_from_headers(keyring: KeyRing, headers: Mapping[str, str], *, no_auth: bool = False) -> Principal:
    """Who sent a request, from its headers alone (`headers`: every header of the request, a
    mapping with case-insensitive names such as Starlette's `Headers`); a `Refusal` (401) when
    no known key is presented. A server started with `--no-auth` treats every request as the
    loopback admin. The one definition of it: the key gate and the routes both call this."""
    if no_auth:
        return LOOPBACK_PRINCIPAL
    scheme, _, token = (headers.get("authorization") or "").strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Refusal(401, "missing API key: send Authorization: Bearer KEY", "Authorization")
    found = keyring.authenticate(token)
    if found is None:
        raise Refusal(401, "unknown API key", "Authorization")
    return found


def require_grant(who: Principal, grant: str) -> None:
    """A `Refusal` (403) unless `who`'s role holds `grant` (`ask` or `audit`)."""
    if not who.may(grant):
        raise Refusal(403, f"the {who.role} role may not do this (needs {'operator or admin' if grant == 'ask' else 'auditor or admin'})", None)


def is_loopback(host: str) -> bool:
    """True for a loopback address or `localhost`."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def service_keys(settings: Settings, *, no_auth: bool = False) -> KeyRing:
    """The service's keys (`ROOTPROOF_API_KEYS`, `ROOTPROOF_API_KEYS_FILE`); a ConfigError naming
    the variable when they are malformed, or missing without `no_auth`. Light on purpose:
    `rootproof serve` refuses a bad configuration before importing the web stack."""
    keyring = KeyRing.load(settings.api_keys.get_secret_value() if settings.api_keys else None, settings.api_keys_file)
    if not len(keyring) and not no_auth:
        raise ConfigError(
            "ROOTPROOF_API_KEYS: no API key configured (or ROOTPROOF_API_KEYS_FILE); the service refuses to start "
            "without keys unless started with --no-auth, which binds to loopback only"
        )
    return keyring
