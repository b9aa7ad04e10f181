"""The PostgreSQL server log: bounded reading from the end of the file and parsing into records.

A record is a line that starts with the `log_line_prefix` timestamp (`%m` or `%t`, as in
Debian's default `%m [%p] %q%u@%d `) together with the lines that belong to it: the
`DETAIL:`, `HINT:`, `QUERY:`, `CONTEXT:`, `STATEMENT:` and `LOCATION:` lines of the same
process (they carry a prefix of their own) and the lines without a prefix that follow
(tab-indented continuations such as a deadlock's `Process N: …` lines, a plan). A record's
time is the timestamp of its first line. A line of PostgreSQL's `jsonlog` format (one JSON
object per record, PostgreSQL 15+) becomes the same record text as the stderr format with
Debian's prefix would give: `<timestamp> [<pid>] <user>@<dbname> <SEVERITY>:  <message>`,
then one line each for `DETAIL`, `HINT`, `QUERY`, `CONTEXT` and `STATEMENT`.

The file is read backwards from its end in blocks, at most `max_bytes` per call, and reading
stops early once a block starts with a line older than the window: the newest records are
always the ones read. Nothing in the file is interpreted beyond these patterns. The file is
opened with `open_regular`: non-blocking, and anything but a regular file (a FIFO, a device) is
refused before a byte is read, so a path can never hang a call.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from pathlib import Path
from typing import Any, BinaryIO
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from rootproof.backends.query import TextQuery, TimeWindow
from rootproof.errors import BackendQueryError

__all__ = ["CONTINUATIONS", "SERVER_WIDE", "LogRecord", "in_window", "of_database", "jsonlog_record", "line_timestamp", "open_regular", "parse_records", "read_tail", "zone_of"]

CONTINUATIONS = frozenset({"DETAIL", "HINT", "QUERY", "CONTEXT", "STATEMENT", "LOCATION"})
"""Severities of the lines that continue the record before them (same process)."""
MAX_RECORD_CHARS = 32 * 1024
"""A longer record (a huge STATEMENT) is cut, and says so."""
_BLOCK = 64 * 1024

_TS = re.compile(
    r"^\[?(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?)"
    r"(?: ?(Z|[+-]\d{2}(?::?\d{2})?|[A-Za-z][A-Za-z0-9_/+\-]{0,40}))?(?![\d.:])"
)
_SEVERITY = re.compile(
    r"\b(DEBUG[1-5]|INFO|NOTICE|WARNING|ERROR|LOG|FATAL|PANIC|DETAIL|HINT|QUERY|CONTEXT|STATEMENT|LOCATION):  "
)
_BARE = re.compile(r"^(DEBUG[1-5]|INFO|NOTICE|WARNING|ERROR|LOG|FATAL|PANIC|DETAIL|HINT|QUERY|CONTEXT|STATEMENT|LOCATION):  ")
_PID = re.compile(r"\[(\d+)\]")
_USER_DB = re.compile(r"(?:^|\s)[^\s@\[\]]*@([^\s@\[\]]+)(?=\s|$)")
"""`%u@%d` in a line's prefix: the user (may be empty) and the database."""
_JSON_TS = '{"timestamp":"'
_JSON_PARTS = (("detail", "DETAIL"), ("hint", "HINT"), ("internal_query", "QUERY"), ("context", "CONTEXT"), ("statement", "STATEMENT"))
_UTC_NAMES = frozenset({"UTC", "GMT", "Z", "UCT", "ETC/UTC", "ETC/GMT"})


@dataclass(kw_only=True)
class LogRecord:
    """One server log record: its first line's time (None without a prefix) and its text."""

    ts: datetime | None
    pid: str | None = None
    lines: list[str] = field(default_factory=list)
    db: str | None = None
    """The database of its first line's `%u@%d` prefix (None: none printed, a server-wide record)."""
    severity: str | None = None
    """Its first line's severity (`LOG`, `ERROR`, `FATAL` …)."""

    @property
    def text(self) -> str:
        """The record's lines joined by newlines (cut at `MAX_RECORD_CHARS`)."""
        text = "\n".join(self.lines)
        if len(text) > MAX_RECORD_CHARS:
            text = text[:MAX_RECORD_CHARS] + f" …[record cut at {MAX_RECORD_CHARS} characters]"
        return text


def open_regular(path: Path) -> BinaryIO:
    """`path` opened for binary reading without ever blocking: O_NONBLOCK | O_NOCTTY, then fstat.

    Raises BackendQueryError for anything but a regular file (FIFO, socket, device, directory)
    and OSError when the file cannot be opened.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BackendQueryError(f"{path} is not a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def zone_of(name: str | None) -> tzinfo:
    """The zone of PostgreSQL's `log_timezone` (`Etc/UTC`, `Europe/Berlin`); UTC if unknown."""
    if not name or name.upper() in _UTC_NAMES:
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return UTC


def _zone(token: str | None, default: tzinfo) -> tzinfo:
    if token is None:
        return default
    if token.upper() in _UTC_NAMES:
        return UTC
    if token[0] in "+-":
        digits = token[1:].replace(":", "")
        hours, minutes = int(digits[:2]), int(digits[2:4] or 0)
        delta = timedelta(hours=hours, minutes=minutes)
        return timezone(-delta if token[0] == "-" else delta)
    # An abbreviation (CET, EST): it names the server's log_timezone, which `default` is.
    return default


def line_timestamp(line: str, default: tzinfo = UTC) -> datetime | None:
    """The `log_line_prefix` timestamp a line starts with (or a jsonlog line's), timezone-aware; None if none."""
    if line.startswith(_JSON_TS):
        line = line[len(_JSON_TS) :]
    m = _TS.match(line)
    if not m:
        return None
    try:
        naive = datetime.fromisoformat(m.group(1).replace("T", " "))
    except ValueError:
        return None
    return naive.replace(tzinfo=_zone(m.group(2), default))


def jsonlog_record(line: str, default: tzinfo = UTC) -> LogRecord | None:
    """The record of one `jsonlog` line, its text as the stderr format would print it; None if
    the line is not a JSON object with a `timestamp` and a `message`."""
    try:
        obj: Any = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("timestamp"), str) or "message" not in obj:
        return None
    stamp = str(obj["timestamp"])
    pid = str(obj["pid"]) if obj.get("pid") is not None else None
    head = stamp + (f" [{pid}]" if pid else "")
    if obj.get("user") is not None or obj.get("dbname") is not None:
        head += f" {obj.get('user') or ''}@{obj.get('dbname') or ''}"
    severity = str(obj.get("error_severity") or "LOG")
    lines = [f"{head} {severity}:  {obj['message']}"]
    for key, label in _JSON_PARTS:
        if obj.get(key) not in (None, ""):
            lines.append(f"{head} {label}:  {obj[key]}")
    text_lines = "\n".join(lines).split("\n")
    return LogRecord(ts=line_timestamp(stamp, default), pid=pid, lines=text_lines, db=str(obj["dbname"]) if obj.get("dbname") else None, severity=severity)


def parse_records(text: str, *, at_start: bool = True, default_tz: tzinfo = UTC) -> list[LogRecord]:
    """Records of a log text, oldest first.

    `at_start` says the text starts at the beginning of the file; otherwise lines before the
    first timestamped line are dropped (their record's first line was not read).
    """
    records: list[LogRecord] = []
    current: LogRecord | None = None
    for raw in text.split("\n"):
        line = raw.rstrip("\r").replace("\x00", "\ufffd")
        if not line and current is None:
            continue
        if line.startswith("{"):
            record = jsonlog_record(line, default_tz)
            if record is not None:
                current = record
                records.append(current)
                continue
        m = _TS.match(line)
        if m:
            ts = line_timestamp(line, default_tz)
            sev = _SEVERITY.search(line, m.end())
            head = line[m.end() : sev.start()] if sev else line[m.end() :]
            pid_m = _PID.search(head)
            pid = pid_m.group(1) if pid_m else None
            if (
                sev is not None
                and sev.group(1) in CONTINUATIONS
                and current is not None
                and (pid is None or current.pid is None or pid == current.pid)
            ):
                current.lines.append(line)
                continue
            db_m = _USER_DB.search(head)
            current = LogRecord(ts=ts, pid=pid, lines=[line], db=db_m.group(1) if db_m else None, severity=sev.group(1) if sev else None)
            records.append(current)
            continue
        bare = _BARE.match(line)
        if bare and bare.group(1) not in CONTINUATIONS:
            current = LogRecord(ts=None, lines=[line], severity=bare.group(1))
            records.append(current)
        elif current is not None:
            current.lines.append(line)
        elif at_start and line:
            current = LogRecord(ts=None, lines=[line])
            records.append(current)
    for r in records:
        while r.lines and not r.lines[-1].strip():
            r.lines.pop()
    return [r for r in records if r.lines]


SERVER_WIDE = frozenset({"FATAL", "PANIC"})
"""Severities kept from every database: a refused connection (`too many clients`, `remaining
connection slots are reserved`) or a crash concerns the whole server."""


def of_database(records: list[LogRecord], database: str | None) -> tuple[list[LogRecord], int]:
    """The records of `database`, those that name none (server-wide), and `SERVER_WIDE` ones of
    any database; with how many records of other databases were left out. `database` None keeps
    every record."""
    if database is None:
        return records, 0
    kept = [r for r in records if r.db is None or r.db == database or r.severity in SERVER_WIDE]
    return kept, len(records) - len(kept)


def in_window(records: list[LogRecord], window: TimeWindow, query: TextQuery) -> tuple[list[tuple[int, datetime, str]], int]:
    """`(score, ts, text)` of the records in `window` that match `query`, and how many records had
    no timestamp (they never pass a window: their time is unknown)."""
    matches: list[tuple[int, datetime, str]] = []
    undated = 0
    for r in records:
        if r.ts is None:
            undated += 1
        elif r.ts in window:
            body = r.text
            score = 0 if query.empty else query.score(body)
            if query.empty or score:
                matches.append((score, r.ts, body))
    return matches, undated


def _first_timestamp(block: bytes, skip_first: bool, default_tz: tzinfo) -> datetime | None:
    """The timestamp of the first complete line of `block` that has one."""
    start = block.find(b"\n") + 1 if skip_first else 0
    if skip_first and start == 0:
        return None
    while start < len(block):
        end = block.find(b"\n", start)
        end = len(block) if end < 0 else end
        ts = line_timestamp(block[start : min(end, start + 64)].decode("utf-8", "replace"), default_tz)
        if ts is not None:
            return ts
        start = end + 1
    return None


def read_tail(path: Path, *, max_bytes: int, not_before: datetime | None, default_tz: tzinfo = UTC) -> tuple[str, int, bool]:
    """The end of the file: `(text, bytes_read, at_start)`.

    Reads backwards in blocks until `max_bytes` are read, the file's start is reached, or a
    block's first timestamped line is older than `not_before`. Raises OSError, and
    BackendQueryError for a path that is not a regular file.
    """
    with open_regular(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        pos = size
        chunks: list[bytes] = []
        read = 0
        while pos > 0 and read < max_bytes:
            step = min(_BLOCK, pos, max_bytes - read)
            pos -= step
            fh.seek(pos)
            block = fh.read(step)
            if not block:
                break
            chunks.append(block)
            read += len(block)
            if not_before is not None:
                first = _first_timestamp(block, pos > 0, default_tz)
                if first is not None and first < not_before:
                    break
    data = b"".join(reversed(chunks))
    at_start = pos == 0
    if not at_start:
        cut = data.find(b"\n")
        data = data[cut + 1 :] if cut >= 0 else b""
    return data.decode("utf-8", "replace"), read, at_start
