"""Redis replies and log lines as `inspect_redis` returns them (no driver here: text only).

- INFO: `# Section` headers and `field:value` lines become `section → field → value`, the
  section name lower-cased (`clients`, `stats`, `keyspace`); a value that INFO prints as an
  integer (`48211`, `-1`) is an int, one printed as a decimal (`1.07`) a float, anything else
  text as printed (`1.17G`, `99.98%`, `00000000`, `keys=3,expires=0,avg_ttl=0`).
- CLIENT LIST: one row per line, fields in the order Redis prints them; counters are ints,
  `addr`, `laddr`, `name`, `flags`, `events`, `cmd`, `user`, `lib-name`, `lib-ver` stay text.
- SLOWLOG GET: one line per entry,
  `id=<id> timestamp=<unix s> duration_us=<µs> command=<argv> client_addr=<addr> client_name=<name>`,
  the keys of a SLOWLOG entry written as a mapping in a scenario; an argument holding a space,
  a quote, a backslash or a control character is quoted as `redis-cli` quotes it (`"a b\\n"`),
  so a line is always one line and each argument visible as one.
- Server log: `pid:role dd Mon yyyy hh:mm:ss.mmm <level> message`. Redis writes the server's
  local time; the log is read on the host that runs Redis, so the time is read as this host's
  local time (UTC on most servers and containers). A line without a timestamp takes the time of
  the line before; lines before the first timestamp of the part read are left out. The file is
  opened by `tailfile.open_regular` (a FIFO or device is refused at once), and a line longer
  than `tailfile.MAX_RECORD_CHARS` is cut, saying so.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from rootproof.backends.live.tailfile import cut_record, open_regular

__all__ = [
    "LogLine",
    "mask_url",
    "parse_client_list",
    "parse_info",
    "read_log_tail",
    "slowlog_line",
]

_INT = re.compile(r"-?(?:0|[1-9][0-9]*)")
_FLOAT = re.compile(r"-?(?:0|[1-9][0-9]*)\.[0-9]+")
_CLIENT_TEXT_FIELDS = frozenset({"addr", "laddr", "name", "flags", "events", "cmd", "user", "lib-name", "lib-ver"})
_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}
_LOG_TS = re.compile(r"^\d+:[XCSM] (\d{1,2}) ([A-Z][a-z]{2}) (\d{4}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))? [.\-*#] ")
_PLAIN_ARG = re.compile(r'[^\s"\'\\\x00-\x1f\x7f]+')
_SECRET_QUERY_KEYS = frozenset({"password", "pass", "pwd", "secret", "token"})


def typed_value(text: str) -> int | float | str:
    """A value as INFO prints it: an integer as int, a decimal as float, else the text."""
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)
    return text


def parse_info(text: str) -> dict[str, dict[str, int | float | str]]:
    """`INFO` output as section → field → value (fields before any header go to `server`)."""
    info: dict[str, dict[str, int | float | str]] = {}
    section = "server"
    for raw in text.split("\n"):
        line = raw.rstrip("\r")
        if not line:
            continue
        if line.startswith("#"):
            section = line[1:].strip().lower() or section
            continue
        field, sep, value = line.partition(":")
        if sep and field:
            info.setdefault(section, {})[field] = typed_value(value)
    return info


def parse_client_list(text: str) -> list[dict[str, int | str]]:
    """`CLIENT LIST` output as rows, fields in the order Redis prints them."""
    rows: list[dict[str, int | str]] = []
    for raw in text.split("\n"):
        line = raw.rstrip("\r")
        if not line.strip():
            continue
        row: dict[str, int | str] = {}
        for part in line.split(" "):
            key, sep, value = part.partition("=")
            if not sep or not key:
                continue
            row[key] = value if key in _CLIENT_TEXT_FIELDS or not _INT.fullmatch(value) else int(value)
        if row:
            rows.append(row)
    return rows


def _quote_arg(arg: str) -> str:
    """An argument as `redis-cli` shows it: bare when plain, else double-quoted with escapes."""
    if arg and _PLAIN_ARG.fullmatch(arg):
        return arg
    out = []
    for ch in arg:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F or ch in "\u2028\u2029\x85":
            out.append(f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def slowlog_line(entry: Sequence[Any]) -> tuple[str, datetime | None]:
    """One `SLOWLOG GET` entry (id, unix time, µs, argv[, client addr, client name]) as a line and its time."""
    ident, stamp, micros = (int(entry[i]) for i in range(3))
    argv = entry[3] if len(entry) > 3 and isinstance(entry[3], list | tuple) else []
    command = " ".join(_quote_arg(_text(a)) for a in argv)
    addr = _text(entry[4]) if len(entry) > 4 else ""
    name = _text(entry[5]) if len(entry) > 5 else ""
    line = (
        f"id={ident} timestamp={stamp} duration_us={micros} command={command} "
        f"client_addr={_quote_arg(addr) if addr else ''} client_name={_quote_arg(name) if name else ''}"
    )
    try:
        ts: datetime | None = datetime.fromtimestamp(stamp, UTC)
    except (OverflowError, OSError, ValueError):
        ts = None
    return line, ts


@dataclass(frozen=True, kw_only=True)
class LogLine:
    """A server log line and the time it carries (or inherits from the line before)."""

    text: str
    ts: datetime


def log_time(text: str) -> datetime | None:
    """The time a Redis log line starts with, read as this host's local time; None without one."""
    m = _LOG_TS.match(text)
    if not m or m.group(2) not in _MONTHS:
        return None
    d, mon, y, h, mi, s, frac = m.groups()
    try:
        local = datetime(int(y), _MONTHS[mon], int(d), int(h), int(mi), int(s), int((frac or "0").ljust(6, "0")[:6]))
        return local.astimezone(UTC)  # a naive time is taken as local time
    except (ValueError, OverflowError, OSError):
        return None


def read_log_tail(path: Path, max_bytes: int) -> tuple[list[LogLine], int]:
    """The last `max_bytes` of a log file as lines with their times (oldest first), and the bytes read.

    Raises BackendQueryError naming the path when it is not a readable regular file.
    """
    with open_regular(path) as f:
        size = f.seek(0, 2)
        start = max(0, size - max_bytes)
        f.seek(start)
        data = f.read(max_bytes)
    if start > 0:  # the first line is cut: drop it
        cut = data.find(b"\n")
        data = data[cut + 1 :] if cut >= 0 else b""
    lines: list[LogLine] = []
    last: datetime | None = None
    for raw in data.decode("utf-8", errors="replace").split("\n"):
        text = raw.rstrip("\r")
        if not text.strip():
            continue
        ts = log_time(text) or last
        if ts is None:
            continue
        last = ts
        lines.append(LogLine(text=cut_record(text), ts=ts))
    return lines, len(data)


def mask_url(url: str) -> str:
    """`url` with its password (and secret-looking query values) replaced by `***`."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, host = netloc.rsplit("@", 1)
            user, sep, _ = userinfo.partition(":")
            netloc = f"{user}{':***' if sep else ''}@{host}"
        query = parts.query
        if query:
            pairs = parse_qsl(query, keep_blank_values=True)
            query = urlencode([(k, "***" if k.lower() in _SECRET_QUERY_KEYS else v) for k, v in pairs], safe="*")
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:
        return "<unparseable redis URL>"
