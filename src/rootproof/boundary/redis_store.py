"""The canonical store in Redis, shared by the replicas of the service (`ROOTPROOF_REDIS_URL`).

Implements `CanonicalStore` like `InMemoryCanonicalStore`, so that a citation written on one
replica is checked on another, and another run's invocation is still recognised as foreign.
Two kinds of keys, both expiring `ttl_s` seconds (`ROOTPROOF_CANONICAL_TTL_S`) after they are
written:

- `rootproof:inv:<invocation_id>`: the whole invocation as one JSON document
  (`invocation_to_json`: ids, arguments, status, the full redacted result, its evidence refs);
- `rootproof:run:<run_id>:inv`: the run's invocation ids in the order they were stored (a list;
  its TTL restarts with each invocation of the run).

Both are written in one MULTI/EXEC transaction. Storing an invocation again replaces its
document and keeps its place in the run's order, like the in-process store. A document above
`max_document_bytes` (16 MiB by default) is refused. A Redis failure (unreachable, refused
login, timeout) raises `StoreError` naming `ROOTPROOF_REDIS_URL` and the URL with its password
masked; the password never appears in a message. Nothing connects until the first use;
`close()` closes the client. redis-py is imported here only.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
import redis.exceptions as rex
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from rootproof.backends.live._redis_text import mask_url
from rootproof.boundary.redaction import redact
from rootproof.boundary.store import CanonicalInvocation, invocation_from_json, invocation_to_json
from rootproof.errors import ConfigError, StoreError

__all__ = ["DEFAULT_PREFIX", "MAX_DOCUMENT_BYTES", "RedisCanonicalStore"]

SETTING = "ROOTPROOF_REDIS_URL"
"""The variable that names the Redis server, for messages."""
DEFAULT_PREFIX = "rootproof"
"""Every key starts with this and a colon."""
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024
"""Largest invocation document stored, bytes (16 MiB)."""
_MGET_BATCH = 256
"""Invocation documents read per round trip by `for_run`."""
_MIN_SCRUB = 4
"""Shorter passwords are not scrubbed from error texts (they would hit ordinary digits)."""


class RedisCanonicalStore:
    """Canonical invocations in Redis, with a TTL; thread-safe (redis-py's connection pool)."""

    def __init__(
        self,
        url: str,
        *,
        ttl_s: int = 86_400,
        prefix: str = DEFAULT_PREFIX,
        max_document_bytes: int = MAX_DOCUMENT_BYTES,
        connect_timeout_s: float = 5.0,
        timeout_s: float = 10.0,
    ) -> None:
        """Parse `url` (`redis://[[user]:password@]host[:port][/db]`, `rediss://`, `unix://`) and
        build the client; nothing connects yet. A URL redis-py cannot read is a `ConfigError`
        naming `ROOTPROOF_REDIS_URL`."""
        if ttl_s < 1:
            raise ValueError(f"ttl_s must be at least 1 second, got {ttl_s}")
        if max_document_bytes < 1:
            raise ValueError(f"max_document_bytes must be positive, got {max_document_bytes}")
        self.ttl_s = ttl_s
        self.prefix = prefix
        self.max_document_bytes = max_document_bytes
        self._shown = mask_url(url)
        try:
            self._client = redis.Redis.from_url(
                url,
                socket_connect_timeout=connect_timeout_s,
                socket_timeout=timeout_s,
                # A refused connect is tried twice more, shortly: a replica rides out a failover
                # blip, an outage is reported within a second.
                retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 2),
                health_check_interval=30,
                driver_info=None,  # no CLIENT SETINFO: a Redis 7.0 server answers it with an error
                decode_responses=False,
            )
        except ValueError as exc:
            raise ConfigError(f"{SETTING}: {self._shown}: not a Redis URL ({redact(str(exc).replace(url, self._shown))})") from None
        password = self._client.connection_pool.connection_kwargs.get("password")
        self._password = str(password) if password else None
        self._closed = False
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RedisCanonicalStore({self._shown}, prefix={self.prefix!r}, ttl_s={self.ttl_s})"

    # -- keys -------------------------------------------------------------------------------
    def invocation_key(self, invocation_id: str) -> str:
        """`<prefix>:inv:<invocation_id>`: the invocation's JSON document."""
        return f"{self.prefix}:inv:{invocation_id}"

    def run_key(self, run_id: str) -> str:
        """`<prefix>:run:<run_id>:inv`: the run's invocation ids, in order."""
        return f"{self.prefix}:run:{run_id}:inv"

    # -- CanonicalStore ---------------------------------------------------------------------
    def put(self, inv: CanonicalInvocation) -> None:
        """Store (or replace) one invocation and append it to its run's order, in one transaction."""
        try:
            doc = invocation_to_json(inv)
        except TypeError as exc:
            raise StoreError(f"canonical store: {exc}") from None
        if len(doc) > self.max_document_bytes:
            raise StoreError(
                f"canonical store: invocation {inv.invocation_id} ({inv.tool_name}) is {len(doc)} bytes as a document, "
                f"above the cap of {self.max_document_bytes} bytes; it is not stored"
            )
        key, run_key = self.invocation_key(inv.invocation_id), self.run_key(inv.run_id)
        with self._redis("storing an invocation"), self._client.pipeline(transaction=True) as pipe:
            pipe.set(key, doc, ex=self.ttl_s)
            # Stored again, the id is listed again: `for_run` keeps its first place.
            pipe.rpush(run_key, inv.invocation_id)
            pipe.expire(run_key, self.ttl_s)
            pipe.execute()

    def get(self, invocation_id: str) -> CanonicalInvocation | None:
        """One invocation by id, whatever run it belongs to (None when unknown or expired)."""
        key = self.invocation_key(invocation_id)
        with self._redis("reading an invocation"):
            data = self._client.get(key)
        return None if data is None else self._decode(key, data)

    def for_run(self, run_id: str) -> list[CanonicalInvocation]:
        """Every invocation of a run, in the order stored (each once; expired ones left out)."""
        with self._redis("reading a run's invocations"):
            raw_ids = self._client.lrange(self.run_key(run_id), 0, -1)
            ids = list(dict.fromkeys(i.decode("utf-8", "surrogatepass") if isinstance(i, bytes) else str(i) for i in raw_ids))
            out: list[CanonicalInvocation] = []
            for start in range(0, len(ids), _MGET_BATCH):
                keys = [self.invocation_key(i) for i in ids[start : start + _MGET_BATCH]]
                for key, data in zip(keys, self._client.mget(keys), strict=True):
                    if data is not None:
                        inv = self._decode(key, data)
                        if inv.run_id == run_id:
                            out.append(inv)
        return out

    # -- lifecycle --------------------------------------------------------------------------
    def ping(self) -> None:
        """Check that the server answers (`StoreError` if not)."""
        with self._redis("connecting"):
            self._client.ping()

    def close(self) -> None:
        """Close the client and its connections; idempotent. Any later use raises `StoreError`."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._client.close()

    # -- errors -----------------------------------------------------------------------------
    def _decode(self, key: str, data: Any) -> CanonicalInvocation:
        try:
            return invocation_from_json(bytes(data))
        except ValueError as exc:
            raise StoreError(f"canonical store: Redis key {key} ({SETTING}): {exc}") from None

    @contextmanager
    def _redis(self, doing: str) -> Iterator[None]:
        """Map a redis-py error while `doing` to a `StoreError` naming the setting, password masked."""
        if self._closed:
            raise StoreError(f"canonical store: the Redis store ({self._shown}) is closed")
        try:
            yield
        except rex.RedisError as exc:
            raise StoreError(self._message(exc, doing)) from None

    def _message(self, exc: rex.RedisError, doing: str) -> str:
        where = f"canonical store: Redis at {self._shown} ({SETTING})"
        text = self._scrub(str(exc) or type(exc).__name__)
        if isinstance(exc, rex.AuthenticationError):
            return f"{where} refused the login while {doing}: {text}"
        if isinstance(exc, rex.TimeoutError):
            return f"{where} did not answer in time while {doing}: {text}"
        if isinstance(exc, rex.ConnectionError):
            return f"{where} is unreachable while {doing}: {text}"
        return f"{where} failed while {doing}: {text}"

    def _scrub(self, text: str) -> str:
        if self._password and len(self._password) >= _MIN_SCRUB:
            text = text.replace(self._password, "***")
        return redact(text)
