"""A small Loki HTTP client for the logs backend: `query_range` and `/ready`.

The LogQL of a call is the target's `selector`, with `<service_label>="<service>"` added to
its matchers when the call names a service. The query's terms are not pushed into a LogQL
line filter: a term may match a label (service, level) or only after case folding and NFKC,
which Loki's line filters cannot see, so the logs backend matches them in Python exactly as it
does for files. `start`/`end` are the window in nanoseconds, `direction=backward` (newest
first), `limit` `LOKI_LIMIT` (when that many lines come back, older lines of the window were
not searched, and the logs backend says so). `X-Scope-OrgID` carries the tenant; the secret
(`password_env`/`password_file`) is sent as HTTP basic auth when the URL names a user (`https://user@loki…`), else as a bearer
token. Answers are read up to the target's `max_bytes`; HTTP failures are mapped as `_http`
describes.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx

from rootproof.backends.live._http import get_bounded, make_client, not_api
from rootproof.backends.query import TimeWindow
from rootproof.errors import BackendQueryError
from rootproof.targets import LokiTarget, secret_of

__all__ = ["LOKI_LIMIT", "LokiClient", "LokiLine", "build_logql", "logql_string"]

LOKI_LIMIT = 2000
"""Most lines asked of Loki per call (its default `max_entries_limit_per_query` is 5000)."""


@dataclass(frozen=True, kw_only=True)
class LokiLine:
    """One line Loki returned, with its stream's labels."""

    ts: datetime
    line: str
    labels: dict[str, str]


def logql_string(text: str) -> str:
    """`text` as a double-quoted LogQL (Go) string literal: quote and backslash escaped, newline,
    return, tab and the other C escapes by name, any other control character as a hex escape."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        elif ch in "\u2028\u2029\x85" or 0x80 <= ord(ch) < 0xA0:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\a": "\\a", "\b": "\\b", "\f": "\\f", "\v": "\\v"}


def _selector_end(selector: str) -> int:
    """Index of the `}` closing the first stream selector (quoted strings skipped); -1 if none."""
    depth, quote, i = 0, "", 0
    while i < len(selector):
        c = selector[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"`":
            quote = c
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def build_logql(selector: str, *, service_label: str, service: str | None) -> str:
    """The LogQL of one call (see the module docstring)."""
    expr = selector.strip()
    if service is not None:
        end = _selector_end(expr)
        matcher = f"{service_label}={logql_string(service)}"
        if end < 0:
            expr = "{" + matcher + "}" + (" " + expr if expr else "")
        else:
            inner = expr[1:end].strip()
            expr = "{" + (inner + ", " if inner else "") + matcher + "}" + expr[end + 1 :]
    return expr


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ns(ts: datetime) -> str:
    delta = ts.astimezone(UTC) - _EPOCH
    return str((delta.days * 86400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000)


class LokiClient:
    """`query_range` and `/ready` on one Loki target; errors mapped to BackendUnavailable / BackendQueryError."""

    def __init__(self, target: LokiTarget, *, environ: Mapping[str, str]) -> None:
        self.target = target
        secret = secret_of(target, environ)
        self._bad_url: str | None = None  # refused by the targets file; a target built in code fails its calls
        try:
            parts = urlsplit(target.url)
            host = parts.hostname or ""
            netloc = host + (f":{parts.port}" if parts.port else "")
        except ValueError as exc:
            self._bad_url = str(exc)
            parts, netloc = urlsplit(""), ""
        self._base = urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        self.shown = self._base if self._bad_url is None else "invalid URL"
        self._headers: dict[str, str] = {"Accept": "application/json"}
        self._auth: tuple[str, str] | None = None
        if parts.username is not None:
            self._auth = (unquote(parts.username), secret if secret is not None else unquote(parts.password or ""))
        elif secret is not None:
            self._headers["Authorization"] = f"Bearer {secret}"
        if target.tenant:
            self._headers["X-Scope-OrgID"] = target.tenant
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()  # calls may run in parallel threads; one client is shared

    def _get(self, path: str, params: Mapping[str, str] | None = None) -> bytes:
        t = self.target
        with self._lock:
            if self._client is None:
                self._client = make_client(timeout_s=t.timeout_s, headers=self._headers, auth=self._auth)
            client = self._client
        where = f"loki {t.name} ({self.shown})"
        if self._bad_url is not None:
            raise BackendQueryError(f"{where}: invalid URL ({self._bad_url})")
        return get_bounded(client, self._base + path, where=where, path=path, params=params, max_bytes=t.max_bytes, timeout_s=t.timeout_s)

    def ready(self) -> None:
        """Raise unless `/ready` answers 200."""
        self._get("/ready")

    def query_range(self, logql: str, window: TimeWindow) -> tuple[list[LokiLine], int]:
        """Lines of `logql` in `window`, newest first, and the bytes read."""
        params = {
            "query": logql,
            "start": _ns(window.start),
            "end": _ns(window.end),
            "limit": str(LOKI_LIMIT),
            "direction": "backward",
        }
        body = self._get("/loki/api/v1/query_range", params)
        try:
            data: Any = json.loads(body)
            streams = data["data"]["result"]
            if data.get("status") != "success" or data["data"].get("resultType") != "streams":
                raise ValueError("not a streams answer")
            lines = [
                LokiLine(ts=_EPOCH + timedelta(microseconds=int(ns) // 1000), line=str(text), labels={str(k): str(v) for k, v in (s.get("stream") or {}).items()})
                for s in streams
                for ns, text, *_ in s["values"]
            ]
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError, OSError, RecursionError) as exc:
            where = f"loki {self.target.name} ({self.shown})"
            raise not_api(where, "/loki/api/v1/query_range", f"a Loki streams answer ({type(exc).__name__})") from None
        return lines, len(body)

    def close(self) -> None:
        """Close the HTTP client; idempotent."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()
