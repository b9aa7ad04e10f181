"""HTTP for the live backends that speak it (nginx `stub_status`, Loki, Prometheus).

One client shape and one mapping of failures, so that the same fault reads the same everywhere:

| what happened | error |
|---|---|
| connect refused, reset, DNS failure, TLS failure, a broken body | `BackendUnavailable` (unreachable) |
| a connect, read or whole-answer timeout | `BackendUnavailable` (timed out) |
| HTTP 5xx, 429, 401/403 (authentication), 404 and other 4xx, 3xx (redirects are not followed) | `BackendUnavailable` |
| HTTP 200 whose body is not the API's answer (`not_api`) | `BackendUnavailable` |
| HTTP 400/422: the server refused the query (its own error text is kept) | `BackendQueryError` |
| an answer larger than the target's `max_bytes` | `BackendQueryError` |
| a URL httpx cannot use (not http(s), invalid) | `BackendQueryError` |

A wrong URL in the targets file is refused when the file is loaded (`targets`), so the last
row is only reached by targets built in code. Clients never read proxy settings or `~/.netrc`
from the environment (`trust_env=False`) and never follow redirects. Error texts quote at most
`MAX_ERROR_CHARS` of the server's answer, on one line, and never the URL's user or password
(callers pass `where` with the URL already masked).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from urllib.parse import urlsplit

import httpx

from rootproof.errors import BackendError, BackendQueryError, BackendUnavailable

__all__ = [
    "MAX_ERROR_CHARS",
    "get_bounded",
    "make_client",
    "not_api",
    "request_error",
    "server_text",
    "status_error",
    "url_error",
]

MAX_ERROR_CHARS = 500
"""Most characters of a server's error text kept in a message."""


def make_client(*, timeout_s: float, headers: Mapping[str, str] | None = None, auth: tuple[str, str] | None = None) -> httpx.Client:
    """An httpx client for one target: `timeout_s` per connect and read, no redirects, no environment."""
    return httpx.Client(
        timeout=httpx.Timeout(timeout_s), headers=dict(headers or {}), auth=auth, follow_redirects=False, trust_env=False
    )


def _brief(text: str) -> str:
    one = " ".join(text.split())
    return one if len(one) <= MAX_ERROR_CHARS else one[: MAX_ERROR_CHARS - 1] + "…"


def server_text(body: bytes) -> str:
    """The error a server put in its answer: `errorType: error` of a JSON API error, else the body's text."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        doc = None
    if isinstance(doc, dict) and "error" in doc:
        kind = str(doc.get("errorType") or "")
        return _brief((kind + ": " if kind else "") + str(doc["error"]))
    return _brief(body[: 4 * MAX_ERROR_CHARS].decode("utf-8", errors="replace"))


def status_error(status: int, body: bytes, *, where: str, path: str) -> BackendError | None:
    """The error an HTTP status means (see the module docstring); None for 200."""
    if status == 200:
        return None
    text = server_text(body)
    if status in (400, 422):
        return BackendQueryError(f"{where}: the server refused the query (HTTP {status}): {text or 'no error text'}")
    if status in (401, 403):
        return BackendUnavailable(f"{where}: authentication failed (HTTP {status})")
    if 300 <= status < 400:
        return BackendUnavailable(f"{where}: GET {path} answered HTTP {status}, a redirect (not followed): is the URL the server's own?")
    if status == 404:
        return BackendUnavailable(f"{where}: GET {path} answered HTTP 404: is the URL the server's base URL?")
    return BackendUnavailable(f"{where}: GET {path} answered HTTP {status}" + (f": {text}" if text else ""))


def not_api(where: str, path: str, expected: str) -> BackendUnavailable:
    """An HTTP 200 whose body is not what the API answers (a login page, another service)."""
    return BackendUnavailable(f"{where}: GET {path} did not answer {expected}")


def request_error(exc: Exception, *, where: str, timeout_s: float) -> BackendError:
    """An httpx (or socket) exception raised while asking, as ours (see the module docstring)."""
    if isinstance(exc, httpx.TimeoutException):
        return BackendUnavailable(f"{where}: timed out after {timeout_s:g}s ({type(exc).__name__})")
    if isinstance(exc, httpx.UnsupportedProtocol):
        return BackendQueryError(f"{where}: not an http(s) URL")
    if isinstance(exc, httpx.InvalidURL):
        return BackendQueryError(f"{where}: invalid URL ({_brief(str(exc))})")
    if isinstance(exc, httpx.TransportError | httpx.DecodingError | OSError):
        return BackendUnavailable(f"{where}: unreachable ({type(exc).__name__}: {_brief(str(exc))})")
    return BackendQueryError(f"{where}: {type(exc).__name__}: {_brief(str(exc))}")


def url_error(url: str, *, where: str) -> BackendQueryError | None:
    """BackendQueryError when `url` is not a usable http(s) URL (httpx would wrap a bad port, not refuse it); else None."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range or not a number
    except ValueError as exc:
        return BackendQueryError(f"{where}: invalid URL ({_brief(str(exc))})")
    if parts.scheme.lower() not in ("http", "https"):
        return BackendQueryError(f"{where}: not an http(s) URL")
    if not parts.hostname:
        return BackendQueryError(f"{where}: invalid URL (no host)")
    return None


def get_bounded(
    client: httpx.Client,
    url: str,
    *,
    where: str,
    path: str,
    max_bytes: int,
    timeout_s: float,
    params: Mapping[str, str] | None = None,
) -> bytes:
    """The body of `GET url` when it answers 200; every failure mapped (see the module docstring).

    The body is streamed and refused once it passes `max_bytes`; the whole answer may take at
    most twice `timeout_s` (httpx's timeout bounds each read, so a dripping server is bounded too).
    """
    if (bad := url_error(url, where=where)) is not None:
        raise bad
    body = bytearray()
    deadline = time.monotonic() + 2 * timeout_s
    try:
        with client.stream("GET", url, params=params) as response:
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > max_bytes:
                    raise BackendQueryError(f"{where}: the answer is larger than max_bytes={max_bytes}")
                if time.monotonic() > deadline:
                    raise BackendUnavailable(f"{where}: timed out after {timeout_s:g}s (no complete answer within {2 * timeout_s:g}s)")
            status = response.status_code
    except BackendError:
        raise
    except (httpx.HTTPError, httpx.InvalidURL, OSError, ValueError) as exc:
        raise request_error(exc, where=where, timeout_s=timeout_s) from None
    error = status_error(status, bytes(body), where=where, path=path)
    if error is not None:
        raise error
    return bytes(body)
