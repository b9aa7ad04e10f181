"""Parsing application log lines (jsonl, logfmt, regex) into entries `query_logs` returns.

- Fields: `fields` maps `ts`, `level`, `service`, `message` to record keys (a dotted key also
  walks nested JSON objects: `log.level`). Unmapped, `ts` is the first of ts, time, timestamp,
  @timestamp; `level` of level, severity, lvl, log.level; `message` of message, msg; `service`
  of service, service.name — else the target's `service`.
- Times: ISO 8601 / RFC 3339 (`Z` or an offset; `,` or `.` before the fraction; a time without
  a zone is UTC), or epoch seconds, milliseconds, microseconds or nanoseconds (told apart by
  size) → UTC.
- Levels → DEBUG | INFO | WARN | ERROR | FATAL: trace/debug → DEBUG, info/notice → INFO,
  warn/warning → WARN, err/error/severe → ERROR, fatal/critical/crit/panic/emerg/alert →
  FATAL (case-insensitive; glog's single letters too); missing or unknown → INFO.
- Message: the message field, then the record's other fields as ` key=value` (logfmt style, in
  record order: ids, durations, an `error` text are evidence), then exception and stack fields
  (exception, exc_info, stack, stack_trace, stacktrace, traceback) on their own lines, newlines
  kept. A regex record's other named groups are appended the same way.
- A line that yields no record with a time (a raw stack-trace line under a regex or logfmt
  record, a torn JSON line) continues the record before it: it is appended to its message on a
  new line. One with no record before it in the part read is dropped and counted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rootproof.tools.refs import canonical_json

__all__ = ["LineParser", "ParsedLines", "Record", "normalise_level", "parse_logfmt", "parse_time"]

DEFAULT_KEYS: dict[str, tuple[str, ...]] = {
    "ts": ("ts", "time", "timestamp", "@timestamp"),
    "level": ("level", "severity", "lvl", "log.level"),
    "message": ("message", "msg"),
    "service": ("service", "service.name"),
}
"""Record keys tried, in order, for a field the target's `fields` does not map."""
STACK_KEYS = ("exception", "exc_info", "stack", "stack_trace", "stacktrace", "traceback")
"""Record fields appended to the message on their own lines."""
_STACK_SET = frozenset(STACK_KEYS)

_LEVELS = {
    **dict.fromkeys(("trace", "debug", "dbug", "fine", "finer", "finest", "d", "t"), "DEBUG"),
    **dict.fromkeys(("info", "information", "informational", "notice", "inf", "i", "n"), "INFO"),
    **dict.fromkeys(("warn", "warning", "wrn", "w"), "WARN"),
    **dict.fromkeys(("error", "err", "eror", "severe", "e"), "ERROR"),
    **dict.fromkeys(("fatal", "critical", "crit", "panic", "dpanic", "emerg", "emergency", "alert", "f", "c"), "FATAL"),
}
_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?$")
_LOGFMT_PAIR = re.compile(r'([^\s=]+)(?:=("(?:[^"\\]|\\.)*"?|[^\s"]*))?')
_LOGFMT_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\"}
_BARE = re.compile(r"^[^\s\"=]+$")


def normalise_level(value: Any) -> str:
    """A level as DEBUG | INFO | WARN | ERROR | FATAL (INFO when missing or unknown)."""
    if isinstance(value, str):
        return _LEVELS.get(value.strip().lower(), "INFO")
    return "INFO"


def _epoch(value: float | int) -> datetime | None:
    size = abs(value)
    scaled = value / 1e9 if size >= 1e17 else value / 1e6 if size >= 1e14 else value / 1e3 if size >= 1e11 else value
    try:
        return datetime.fromtimestamp(scaled, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def parse_time(value: Any) -> datetime | None:
    """ISO 8601 / RFC 3339 text or epoch s/ms/µs/ns (number or numeric text) → aware UTC; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return _epoch(value)
    if not isinstance(value, str):
        return None
    text = value.strip()
    if _NUMBER.match(text):
        return _epoch(int(text) if "." not in text else float(text))
    if len(text) < 10 or len(text) > 40:
        return None
    try:
        ts = datetime.fromisoformat(text.replace(",", "."))
    except ValueError:
        return None
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


def _unquote(raw: str) -> str:
    body = raw[1:-1] if len(raw) >= 2 and raw.endswith('"') else raw[1:]
    return re.sub(r"\\(.)", lambda m: _LOGFMT_ESCAPES.get(m.group(1), "\\" + m.group(1)), body)


def parse_logfmt(line: str) -> dict[str, str] | None:
    """`key=value key2="quoted \\" value" flag` → dict (a bare key is `true`); None if no `key=` pair."""
    out: dict[str, str] = {}
    pairs = 0
    for m in _LOGFMT_PAIR.finditer(line):
        key, raw = m.group(1), m.group(2)
        if raw is None:
            out.setdefault(key, "true")
            continue
        pairs += 1
        out[key] = _unquote(raw) if raw.startswith('"') else raw
    return out if pairs else None


def _lookup(record: Mapping[str, Any], key: str) -> Any:
    if key in record:
        return record[key]
    node: Any = record
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return canonical_json(value)
    except (ValueError, RecursionError):
        return "(a value nested too deeply to print)"


def _pair(key: str, value: Any) -> str:
    text = _text(value)
    if not _BARE.match(text):
        text = json.dumps(text, ensure_ascii=False)
    return f"{key}={text}"


@dataclass(frozen=True, kw_only=True)
class Record:
    """One parsed log record (UTC time, normalised level)."""

    ts: datetime
    level: str
    service: str
    message: str


@dataclass(kw_only=True)
class ParsedLines:
    """Records parsed from lines (oldest first) and the lines that could not be attached."""

    records: list[Record] = field(default_factory=list)
    unparsed: int = 0


class LineParser:
    """Turns the raw lines of one logs target into records (see the module docstring)."""

    def __init__(self, *, fmt: str, service: str, fields: Mapping[str, str], pattern: re.Pattern[str] | None = None) -> None:
        self._fmt = fmt
        self._service = service
        self._pattern = pattern
        self._keys = {name: ((fields[name],) if name in fields else keys) for name, keys in DEFAULT_KEYS.items()}

    def fields_of(self, line: str) -> Mapping[str, Any] | None:
        """The key/value record of one line in this target's format; None if it is not one."""
        if self._fmt == "jsonl":
            stripped = line.strip()
            if not stripped.startswith("{"):
                return None
            try:
                data = json.loads(stripped)
            except (ValueError, RecursionError):  # hostile nesting is no record
                return None
            return data if isinstance(data, dict) else None
        if self._fmt == "logfmt":
            return parse_logfmt(line)
        assert self._pattern is not None
        m = self._pattern.search(line)
        return {k: v for k, v in m.groupdict().items() if v is not None} if m else None

    def _first(self, record: Mapping[str, Any], name: str) -> tuple[str | None, Any]:
        for key in self._keys[name]:
            value = record[key] if key in record else _lookup(record, key)
            if value is not None and value != "":
                return key, value
        return None, None

    def record(self, data: Mapping[str, Any], *, ts: datetime | None = None, labels: Mapping[str, str] | None = None,
               service_label: str = "service") -> Record | None:
        """A record from parsed fields; `ts` (Loki's entry time) wins over the record's; None without a time."""
        ts_key, ts_value = self._first(data, "ts")
        when = ts or parse_time(ts_value)
        if when is None:
            return None
        level_key, level = self._first(data, "level")
        message_key, message = self._first(data, "message")
        service_key, service = self._first(data, "service")
        labels = labels or {}
        if level is None:
            level = next((labels[k] for k in ("level", "detected_level", "severity", "lvl") if labels.get(k)), None)
        if service is None:
            service = labels.get(service_label) or self._service
        used = {k for k in (ts_key, level_key, message_key, service_key) if k}
        extras = [_pair(k, v) for k, v in data.items() if k not in used and k not in _STACK_SET and v not in (None, "")]
        stacks = [_text(data[k]) for k in STACK_KEYS if data.get(k) not in (None, "", False)] if not _STACK_SET.isdisjoint(data) else []
        text = " ".join(([_text(message)] if message is not None else []) + extras)
        if stacks:
            text = "\n".join([text, *stacks]) if text else "\n".join(stacks)
        return Record(ts=when, level=normalise_level(level), service=_text(service), message=text)

    def parse(self, lines: Sequence[str]) -> ParsedLines:
        """Records of `lines` (oldest first); lines without a record continue the one before."""
        out = ParsedLines()
        for line in lines:
            data = self.fields_of(line)
            rec = self.record(data) if data is not None else None
            if rec is not None:
                out.records.append(rec)
            elif not line.strip():
                continue
            elif out.records:
                prev = out.records[-1]
                out.records[-1] = Record(ts=prev.ts, level=prev.level, service=prev.service, message=f"{prev.message}\n{line}")
            else:
                out.unparsed += 1
        return out
