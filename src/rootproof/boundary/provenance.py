"""Provenance of evidence: which parts of a ref's text an outsider controls (docs/guard-rules.md "Untrusted spans").

Anyone who can send a request writes text into an access log: the request line, query string,
user agent, referer, `Host` and `X-Forwarded-For` headers, and any request or response body a
service quotes. `untrusted_spans(tool, text)` returns those parts as half-open `[start, end)`
character offsets into the ref's text, as a pure function of the text, so the guard can
recompute them instead of trusting a recorded list. What the server itself writes (timestamps,
levels, status codes, byte counts, timings, upstream addresses, its own error text such as
`upstream timed out (110: Connection timed out)`) is never inside a span.

Formats recognised (docs/guard-rules.md, "Untrusted spans"):

- nginx access log (combined, with any trailing `key=value` fields): the quoted request line,
  referer, user agent and every other quoted field, and `$remote_user`;
- nginx error log: every quoted value (`request: "…"`, `host: "…"`, `referrer: "…"`, quoted
  file paths in the message) and the path of `upstream: "scheme://host:port/path"`;
- JSON log lines and rows: the values of keys naming outsider data (`url`, `path`, `user_agent`,
  `referer`, `body`, `headers` …);
- application log lines: an unquoted request line's target (`GET /path?q=… 200 in 3 ms`), a
  quoted request line, `key=value` fields for outsider data (`url=`, `ua=`, `body=` …);
- PostgreSQL logs: bound parameter values (`parameters: $1 = '…'`).

The rule of the parsers: a part counts as server-written only when it fits that field's strict
form (an address, a number, a status, a single token), so an outsider who forges a field can
place at most one token outside a span.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Sequence

from rootproof.tools.refs import fold_text, parse_log_ref

_scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]

__all__ = ["Span", "only_untrusted", "outside_spans", "record_key", "untrusted_spans"]

Span = tuple[int, int]
"""Half-open `[start, end)` character offsets into a ref's text."""

_LOG_TOOLS = frozenset({"query_logs", "inspect_postgres", "inspect_redis", "inspect_nginx"})

# -- nginx access log ------------------------------------------------------------------------------
# `$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer"
# "$http_user_agent"` plus whatever a custom log_format appends. nginx escapes `"` inside quoted
# variables (as \x22), so a quoted field ends at the next quote.
_ACCESS = re.compile(
    r"^(?P<addr>\S+) (?P<ident>\S+) (?P<user>.*?) \[\d{2}/\w{3}/\d{4}:\d{2}:\d{2}:\d{2} [+-]\d{4}\] "
    r'"(?P<req>[^"]*)" (?:\d{3}|-) (?:\d+|-)(?P<rest>.*)$'
)
_QUOTED = re.compile(r'"([^"]*)"')

# -- nginx error log -------------------------------------------------------------------------------
_NGINX_ERROR = re.compile(r"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} \[[a-z]+\] \d+#\d+: ")
# The tail nginx appends: `, client: ADDR, server: NAME` then quoted values (request, subrequest,
# upstream, host, referrer). Client and server must be single tokens to count as server-written.
_NGINX_TAIL = re.compile(r', client: [0-9A-Fa-f.:\[\]]+, server: [^\s,"]*')
_UPSTREAM_ADDR = re.compile(r"[a-z][a-z0-9+.\-]*://[^/\s\"]+")

# -- application logs ------------------------------------------------------------------------------
_METHODS = "GET|POST|PUT|DELETE|PATCH|HEAD|OPTIONS|CONNECT|TRACE|PROPFIND"
# An unquoted request line: METHOD then a target (a path or an absolute URL).
_REQUEST_LINE = re.compile(rf"(?<![A-Za-z0-9_/\-])(?:{_METHODS}) +(?=/|https?://)")
# Where the server's own words resume after a target: ` 503 in 12 ms`, ` 200 12ms`, ` -> 502`,
# ` HTTP/1.1`, `: ` (a Go url.Error quotes its target instead).
_STATUS_TAIL = re.compile(r" (?:[1-5]\d{2})(?: in)? \d+(?:\.\d+)? ?ms\b| [1-5]\d{2}(?=[:,;]| *$)")
_ARROW = re.compile(r" +->")
_PROTOCOL = re.compile(r" HTTP/\d(?:\.\d)?\b")
# A quoted request line or a quoted target after a method: `"GET /x HTTP/1.1"`, `Post "https://…"`.
_QUOTED_REQUEST = re.compile(rf'"(?:(?:{_METHODS}) [^"]*|[^"]*HTTP/\d(?:\.\d)?)"')
_METHOD_QUOTED = re.compile(rf'(?<![A-Za-z0-9_])(?:{_METHODS}|Get|Post|Put|Delete|Patch|Head) +"([^"]*)"')
# `key=value` fields of outsider data. Bodies run to the end of the line unless quoted.
_KV_TOKEN = (
    "url|uri|path|request_uri|request|query|query_string|qs|ua|user_agent|useragent|http_user_agent"
    "|referer|referrer|http_referer|x_forwarded_for|xff|forwarded_for|http_host|host_header|cookie"
)
_KV_BODY = "body|payload|request_body|response_body|req_body|resp_body|headers|params"
_KV = re.compile(rf"(?<![A-Za-z0-9_.\-])(?P<key>{_KV_BODY}|{_KV_TOKEN})=", re.I)
_BODY_KEYS = frozenset(_KV_BODY.split("|"))

# -- JSON ------------------------------------------------------------------------------------------
_JSON_KEYS = frozenset(
    {
        "url",
        "uri",
        "path",
        "request",
        "requesturi",
        "requestline",
        "querystring",
        "qs",
        "useragent",
        "ua",
        "httpuseragent",
        "referer",
        "referrer",
        "httpreferer",
        "body",
        "requestbody",
        "responsebody",
        "reqbody",
        "respbody",
        "payload",
        "headers",
        "requestheaders",
        "responseheaders",
        "xforwardedfor",
        "forwardedfor",
        "xff",
        "host",
        "httphost",
        "cookie",
        "cookies",
        "params",
        "form",
    }
)
"""JSON keys (lower-cased, `-`/`_` removed) whose values an outsider writes."""
_JSON_QUERY_KEYS = frozenset({"query", "querystring", "search"})
"""…and in application logs (not database rows, where `query` is the SQL text) these too."""

# -- PostgreSQL ------------------------------------------------------------------------------------
_PG_PARAMS = re.compile(r"\bparameters: ")
_PG_VALUE = re.compile(r"\$\d+ = '((?:[^']|'')*)'")


def untrusted_spans(tool_name: str, text: str) -> tuple[Span, ...]:
    """The outsider-controlled parts of a ref's text, sorted and merged (a pure function of the text)."""
    if tool_name not in _LOG_TOOLS or not text:
        return ()
    base = 0
    body = text
    if tool_name == "query_logs":
        log = parse_log_ref(text)
        if log is None:
            return ()
        base = len(text) - len(log.message)
        body = log.message
    spans: list[Span] = []
    if body.lstrip().startswith("{"):
        spans.extend(_json_spans(body, query_keys=tool_name == "query_logs"))
    else:
        offset = 0
        for line in body.split("\n"):
            spans.extend((offset + s, offset + e) for s, e in _line_spans(line))
            offset += len(line) + 1
    return _merge((base + s, base + e) for s, e in spans)


def _line_spans(line: str) -> list[Span]:
    if '"' not in line and "=" not in line and "parameters: " not in line:
        # Every rule but two needs a quote (access and quoted fields, JSON keys, quoted requests)
        # or `=` (`key=value` fields); the two are an nginx error line's tail and an unquoted
        # request line, tested here as the full path would.
        if _NGINX_ERROR.match(line):
            return _nginx_error_spans(line)
        if _REQUEST_LINE.search(line) is None:
            return []
    m = _ACCESS.match(line)
    if m:
        return _access_spans(line, m)
    if _NGINX_ERROR.match(line):
        return _nginx_error_spans(line)
    if line.lstrip().startswith("{"):
        return _json_spans(line, query_keys=True)
    spans = _app_spans(line)
    for m in _PG_PARAMS.finditer(line):
        spans.extend((v.start(1), v.end(1)) for v in _PG_VALUE.finditer(line, m.end()))
    return spans


def _access_spans(line: str, m: re.Match[str]) -> list[Span]:
    spans: list[Span] = [(m.start("req"), m.end("req"))]
    if m.group("user") != "-":
        spans.append((m.start("user"), m.end("user")))
    rest = m.start("rest")
    spans.extend((q.start(1), q.end(1)) for q in _QUOTED.finditer(line, rest))
    return spans


def _nginx_error_spans(line: str) -> list[Span]:
    tail = _NGINX_TAIL.search(line)
    head_end = tail.start() if tail else len(line)
    spans = _quoted_runs(line, 0, head_end)
    if tail is None or tail.end() >= len(line):
        return spans
    values = _tail_values(line, tail.end())
    if values is None:
        # Not the well-formed `, key: "value"` sequence (a value forged a key, or a quote is
        # missing): everything after `server: NAME` is the outsider's.
        spans.append((tail.end(), len(line)))
        return spans
    for key, start, end in values:
        if key == "upstream":
            # The server writes `scheme://host:port`; the path after it is the request's URI.
            addr = _UPSTREAM_ADDR.match(line, start, end)
            if addr:
                start = addr.end()
        if start < end:
            spans.append((start, end))
    return spans


_TAIL_FIRST = re.compile(r', (request|subrequest|upstream|host|referrer): "')
_TAIL_NEXT = re.compile(r'", (request|subrequest|upstream|host|referrer): "')


def _tail_values(line: str, pos: int) -> list[tuple[str, int, int]] | None:
    """The quoted values of nginx's tail as (key, start, end), or None when it is not well formed."""
    m = _TAIL_FIRST.match(line, pos)
    if m is None or not line.endswith('"'):
        return None
    keys, starts, ends = [m.group(1)], [m.end()], []
    for k in _TAIL_NEXT.finditer(line, m.end()):
        ends.append(k.start())
        keys.append(k.group(1))
        starts.append(k.end())
    ends.append(len(line) - 1)
    if len(set(keys)) != len(keys) or any(e < s for s, e in zip(starts, ends, strict=True)):
        return None
    return list(zip(keys, starts, ends, strict=True))


def _quoted_runs(line: str, start: int, end: int) -> list[Span]:
    """Quoted strings between start and end; an unmatched quote runs to `end`."""
    out: list[Span] = []
    pos = start
    while True:
        q = line.find('"', pos, end)
        if q < 0:
            return out
        close = line.find('"', q + 1, end)
        if close < 0:
            out.append((q + 1, end))
            return out
        if close > q + 1:
            out.append((q + 1, close))
        pos = close + 1


def _app_spans(line: str) -> list[Span]:
    spans: list[Span] = []
    for m in _QUOTED_REQUEST.finditer(line):
        spans.append((m.start() + 1, m.end() - 1))
    for m in _METHOD_QUOTED.finditer(line):
        spans.append((m.start(1), m.end(1)))
    for m in _REQUEST_LINE.finditer(line):
        if any(s <= m.start() < e for s, e in spans):
            continue
        start = m.end()
        spans.append((start, _target_end(line, start)))
    for m in _KV.finditer(line):
        start = m.end()
        if any(s <= m.start() < e for s, e in spans):
            continue
        if start < len(line) and line[start] == '"':
            close = _closing_quote(line, start + 1)
            spans.append((start + 1, close))
        elif m.group("key").lower() in _BODY_KEYS:
            spans.append((start, len(line)))
        else:
            end = start
            while end < len(line) and not line[end].isspace():
                end += 1
            spans.append((start, end))
    return spans


def _target_end(line: str, start: int) -> int:
    """Where an unquoted request target ends: before the last status tail, an arrow, the protocol, or the token's end."""
    # The last of each: an outsider's target may contain a forged one, never the server's own.
    for pat in (_STATUS_TAIL, _ARROW, _PROTOCOL):
        found = [m.start() for m in pat.finditer(line, start)]
        if found:
            return found[-1]
    end = start
    while end < len(line) and not line[end].isspace():
        end += 1
    return end


def _closing_quote(line: str, pos: int) -> int:
    while pos < len(line):
        if line[pos] == "\\":
            pos += 2
            continue
        if line[pos] == '"':
            return pos
        pos += 1
    return len(line)


def _json_key(key: str) -> str:
    return re.sub(r"[-_.\s]", "", key).lower()


def _json_spans(text: str, *, query_keys: bool) -> list[Span]:
    """Values of outsider keys in a JSON text, found by walking it with offsets; a malformed tail is kept whole."""
    keys = _JSON_KEYS | _JSON_QUERY_KEYS if query_keys else _JSON_KEYS
    out: list[Span] = []
    decoder = json.JSONDecoder()
    ws = re.compile(r"\s*")

    def skip(pos: int) -> int:
        m = ws.match(text, pos)
        return m.end() if m else pos

    def value(pos: int) -> int:
        pos = skip(pos)
        if pos >= len(text):
            raise ValueError("end of text")
        ch = text[pos]
        if ch == "{":
            pos = skip(pos + 1)
            if text.startswith("}", pos):
                return pos + 1
            while True:
                if not text.startswith('"', pos):
                    raise ValueError("key expected")
                key, pos = _scanstring(text, pos + 1)
                pos = skip(pos)
                if not text.startswith(":", pos):
                    raise ValueError("colon expected")
                start = skip(pos + 1)
                pos = value(start)
                if _json_key(key) in keys:
                    s, e = start, pos
                    if text.startswith('"', s) and e - s >= 2:
                        s, e = s + 1, e - 1
                    if s < e:
                        out.append((s, e))
                pos = skip(pos)
                if text.startswith(",", pos):
                    pos = skip(pos + 1)
                    continue
                if text.startswith("}", pos):
                    return pos + 1
                raise ValueError("comma or brace expected")
        if ch == "[":
            pos = skip(pos + 1)
            if text.startswith("]", pos):
                return pos + 1
            while True:
                pos = skip(value(pos))
                if text.startswith(",", pos):
                    pos += 1
                    continue
                if text.startswith("]", pos):
                    return pos + 1
                raise ValueError("comma or bracket expected")
        _, end = decoder.raw_decode(text, pos)
        return int(end)

    try:
        value(0)
    except (ValueError, json.JSONDecodeError):
        # Not JSON after all: fall back to the line rules, line by line.
        out = []
        offset = 0
        for line in text.split("\n"):
            if not line.lstrip().startswith("{"):
                out.extend((offset + s, offset + e) for s, e in _line_spans(line))
            else:
                out.extend((offset + s, offset + e) for s, e in _app_spans(line))
            offset += len(line) + 1
    return out


def _merge(spans: Iterable[Span]) -> tuple[Span, ...]:
    out: list[list[int]] = []
    for s, e in sorted(spans):
        if s >= e:
            continue
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return tuple((s, e) for s, e in out)


def outside_spans(text: str, spans: Iterable[Sequence[int]]) -> str:
    """`text` with every span replaced by spaces (same length, so offsets still hold)."""
    chars = list(text)
    for span in spans:
        for i in range(max(0, int(span[0])), min(len(chars), int(span[1]))):
            chars[i] = " "
    return "".join(chars)


def only_untrusted(text: str, needle: str, spans: Iterable[Sequence[int]]) -> bool:
    """Whether every occurrence of `needle` (case-folded) lies inside a span (True also when it does not occur)."""
    folded = " ".join(fold_text(needle).split())
    if not folded:
        return False
    # A span becomes a barrier (not a space) so that words on either side never join into a
    # match; folding may change lengths, so the folded needle is sought in the folded rest.
    chars = list(text)
    for span in spans:
        for i in range(max(0, int(span[0])), min(len(chars), int(span[1]))):
            chars[i] = "\x00"
    outside = " ".join(fold_text("".join(chars)).split())
    return folded not in outside


# -- independence of records -----------------------------------------------------------------------
_TIMESTAMPS = [
    # ISO 8601 (2026-03-12T09:31:10.220Z, 2026-01-08T10:49:05.240+0000, 2026-03-12 09:31:10)
    re.compile(
        r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2}|\s?(?:UTC|GMT|CES?T|[PE][SD]T))?"
    ),
    # nginx error log (2026/11/30 07:08:33)
    re.compile(r"\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}"),
    # nginx access log / Apache ([30/Nov/2026:07:08:30 +0000])
    re.compile(r"\d{2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2}(?: [+-]\d{4})?"),
    # Redis (09 Mar 2026 20:01:12.004)
    re.compile(r"\d{1,2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2}(?:\.\d+)?"),
    # syslog (Mar  9 20:01:12)
    re.compile(r"\b[A-Z][a-z]{2} +\d{1,2} \d{2}:\d{2}:\d{2}\b"),
]


def record_key(text: str) -> str:
    """A ref's text without its timestamps: two refs with the same key are the same record, not two.

    Pids, ids and the rest of the line prefix are kept, so two lines that differ only in the time
    they were written count once, while two processes' lines stay two. Short texts are remembered
    (a planner asks again for the same refs at every step).
    """
    return _record_key_cached(text) if len(text) <= 8192 else _record_key(text)


def _record_key(text: str) -> str:
    out = text
    for pat in _TIMESTAMPS:
        out = pat.sub("<ts>", out)
    return " ".join(out.split())


_record_key_cached = functools.lru_cache(maxsize=8192)(_record_key)
