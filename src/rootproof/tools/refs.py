"""Evidence refs: stable JSON paths into a canonical result, and the text each path stands for.

The text of a ref is a pure function of the canonical result at its path, so the guard can
recompute it (docs/scenario-files.md "Evidence refs"). Canonical JSON is
`json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple

__all__ = [
    "NO_EVIDENCE_PATH",
    "REFUSED_PATH",
    "DataSource",
    "EvidenceRef",
    "EvidenceStatus",
    "LogRef",
    "canonical_json",
    "fmt_value",
    "fold_text",
    "normalize_text",
    "parse_log_ref",
    "parse_path",
    "ref_items",
    "ref_text",
    "resolve_path",
]

NO_EVIDENCE_PATH = "$.no_evidence"
REFUSED_PATH = "$.refused"
"""The server's refusal of rootproof's own connection (a limit ran out): evidence, citable."""


class EvidenceStatus(StrEnum):
    """What a READY invocation found."""

    EVIDENCE_FOUND = "EVIDENCE_FOUND"
    NO_EVIDENCE = "NO_EVIDENCE"
    DEDUPLICATED = "DEDUPLICATED"


class DataSource(StrEnum):
    """Where a ref's data came from (`live:<service>` is built with `DataSource.live`)."""

    SNAPSHOT = "snapshot"
    MOCK = "mock"
    KNOWLEDGE = "knowledge"

    @staticmethod
    def live(service: str) -> str:
        """`live:<service>`."""
        return f"live:{service}"


@dataclass(frozen=True, kw_only=True)
class EvidenceRef:
    """One citable item of a result."""

    raw_path: str
    """Stable JSON path into the canonical result (`$.entries[3]`)."""
    text: str
    """The text the path stands for; carries its own context."""
    data_source: str
    """snapshot | mock | live:<service> | knowledge."""
    instruction_like: bool = False
    """The injection detector flagged this text as instructions addressed to an AI."""
    untrusted_spans: tuple[tuple[int, int], ...] = ()
    """Half-open `[start, end)` offsets into `text` of the parts an outsider controls (a request's
    URL, user agent, referer, a quoted body): `rootproof.boundary.provenance.untrusted_spans`."""

    def as_dict(self) -> dict[str, Any]:
        """Plain data for records and observations (`untrusted_spans` only when there are any)."""
        d: dict[str, Any] = {"raw_path": self.raw_path, "text": self.text, "data_source": self.data_source}
        if self.instruction_like:
            d["instruction_like"] = True
        if self.untrusted_spans:
            d["untrusted_spans"] = [[s, e] for s, e in self.untrusted_spans]
        return d


# What `json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)` builds on every
# call (an encoder holds no state between calls), built once.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(value: Any) -> str:
    """The one canonical JSON form (sorted keys, compact, UTF-8 kept)."""
    return _CANONICAL.encode(value)


def fmt_value(value: Any) -> str:
    """A scalar as refs print it: text as is, numbers as Python's shortest repr, JSON otherwise."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if value is None:
        return "null"
    return canonical_json(value)


_WS = re.compile(r"\s+")


def normalize_text(text: str) -> str:
    """NFKC and whitespace collapsing only: what excerpt matching is allowed to forgive."""
    # `" ".join(t.split())` is `_WS.sub(" ", t).strip()`: `\s` and `str.split` agree on every code
    # point (tests/boundary/test_fast_paths.py), and it is several times faster on long lines.
    return " ".join(unicodedata.normalize("NFKC", text).split())


def fold_text(text: str) -> str:
    """NFKC and case folding: for lenient matching (judging, scoring, signals), never for the
    guard's excerpt check, which forgives only what `normalize_text` does."""
    return unicodedata.normalize("NFKC", text).casefold()


_SEGMENT = re.compile(r"\.([A-Za-z0-9_\-]+)|\[(\d+)\]|\['((?:[^'\\]|\\.)*)'\]")


def parse_path(path: str) -> list[str | int] | None:
    """Split `$.a.b[2]` into `["a", "b", 2]`; None if the path is not of that grammar."""
    if not path.startswith("$"):
        return None
    pos, out = 1, []
    while pos < len(path):
        m = _SEGMENT.match(path, pos)
        if not m:
            return None
        if m.group(1) is not None:
            out.append(m.group(1))
        elif m.group(2) is not None:
            out.append(int(m.group(2)))
        else:
            out.append(re.sub(r"\\(.)", r"\1", m.group(3), flags=re.S))
        pos = m.end()
    return out


def key_segment(key: str) -> str:
    """A mapping key as a path segment (`.name` or `['odd key']`)."""
    if re.fullmatch(r"[A-Za-z0-9_\-]+", key):
        return "." + key
    return "['" + key.replace("\\", "\\\\").replace("'", "\\'") + "']"


_MISSING = object()


def resolve_path(result: Any, path: str) -> Any:
    """The value at `path` in `result`, or `_MISSING`-like None sentinel via `KeyError`."""
    segments = parse_path(path)
    if segments is None:
        raise KeyError(path)
    node = result
    for seg in segments:
        if isinstance(seg, int):
            if not isinstance(node, list) or seg >= len(node):
                raise KeyError(path)
            node = node[seg]
        else:
            if not isinstance(node, dict) or seg not in node:
                raise KeyError(path)
            node = node[seg]
    return node


def _log_entry_text(e: dict[str, Any]) -> str:
    return f"{e['ts']} {e['level']} {e['service']} [{e['source']}] {e['message']}"


_LOG_REF = re.compile(r"^(\S+)\s+([A-Z]+)\s+(\S+)\s+\[([^\]]*)\]\s+(.*)$", re.S)


class LogRef(NamedTuple):
    """A `query_logs` ref text taken apart: `<ts> <LEVEL> <service> [<source>] <message>`."""

    ts: str
    level: str
    service: str
    source: str
    message: str


def parse_log_ref(text: str) -> LogRef | None:
    """The parts of a log entry's ref text (the inverse of how it is written), None for other text."""
    m = _LOG_REF.match(text)
    return LogRef(*m.groups()) if m else None


def _labels_text(labels: dict[str, Any]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{fmt_value(labels[k])}"' for k in sorted(labels)) + "}"


def _series_text(s: dict[str, Any], window: dict[str, Any]) -> str:
    sm = s["summary"]
    parts = " ".join(f"{k}={fmt_value(sm[k])}" for k in ("first", "last", "min", "max", "delta", "mean"))
    return (
        f"{s['metric']}{_labels_text(s.get('labels') or {})} {parts} unit={s.get('unit', '')} "
        f"window={window.get('from')}..{window.get('to')}"
    )


def _client_text(row: dict[str, Any]) -> str:
    return " ".join(f"{k}={fmt_value(v)}" for k, v in row.items())


def ref_text(tool: str, result: dict[str, Any], path: str) -> str:
    """Recompute the text of the ref at `path`; raises `KeyError` if the path does not resolve."""
    segments = parse_path(path)
    if not segments:
        raise KeyError(path)
    value = resolve_path(result, path)
    head = segments[0]
    if path == NO_EVIDENCE_PATH:
        return str(value)
    if path == REFUSED_PATH:
        return f"refused: {value}"
    if head == "entries" and len(segments) == 2:
        return _log_entry_text(value)
    if head == "series" and len(segments) == 2:
        return _series_text(value, result.get("window") or {})
    if head == "rows" and len(segments) == 2:
        if tool == "inspect_redis" and result.get("kind") == "clients":
            return _client_text(value)
        return canonical_json(value)
    if head == "settings" and len(segments) == 2:
        return f"{segments[1]} = {fmt_value(value)}"
    if head == "info" and len(segments) == 3:
        return f"{segments[2]}:{fmt_value(value)}"
    if head == "lines" and len(segments) == 2:
        return str(value)
    if head == "config" and len(segments) == 2 and isinstance(segments[1], int):
        return f"{segments[1] + 1}: {value}"
    if head == "status" and len(segments) == 2:
        return f"{segments[1]}: {fmt_value(value)}"
    if head == "results" and len(segments) == 2:
        return f"[{value['card_id']}] {value['title']}: {value['text']}"
    raise KeyError(path)


def ref_items(tool: str, result: dict[str, Any]) -> list[tuple[str, str]]:
    """`(path, ref_text(tool, result, path))` for every path of `enumerate_ref_paths(result)`, in
    its order, read straight from the result instead of parsing each path back (the same text)."""
    out: list[tuple[str, str]] = []
    if isinstance(result.get("refused"), str):
        out.append((REFUSED_PATH, f"refused: {result['refused']}"))
    window = result.get("window") or {}
    clients = tool == "inspect_redis" and result.get("kind") == "clients"
    for key in ("entries", "series", "rows", "lines", "config", "results"):
        items = result.get(key)
        if not isinstance(items, list):
            continue
        for i, value in enumerate(items):
            path = f"$.{key}[{i}]"
            if key == "entries":
                text = _log_entry_text(value)
            elif key == "series":
                text = _series_text(value, window)
            elif key == "rows":
                text = _client_text(value) if clients else canonical_json(value)
            elif key == "lines":
                text = str(value)
            elif key == "config":
                text = f"{i + 1}: {value}"
            else:
                text = f"[{value['card_id']}] {value['title']}: {value['text']}"
            out.append((path, text))
    for key in ("settings", "status"):
        mapping = result.get(key)
        if isinstance(mapping, dict):
            for k, value in mapping.items():
                path = f"$.{key}{key_segment(str(k))}"
                if not isinstance(k, str):  # the path names str(k): resolve it as ref_text does
                    out.append((path, ref_text(tool, result, path)))
                elif key == "settings":
                    out.append((path, f"{k} = {fmt_value(value)}"))
                else:
                    out.append((path, f"{k}: {fmt_value(value)}"))
    info = result.get("info")
    if isinstance(info, dict):
        for section, fields in info.items():
            if isinstance(fields, dict):
                head = f"$.info{key_segment(str(section))}"
                for f, value in fields.items():
                    path = f"{head}{key_segment(str(f))}"
                    if isinstance(section, str) and isinstance(f, str):
                        out.append((path, f"{f}:{fmt_value(value)}"))
                    else:
                        out.append((path, ref_text(tool, result, path)))
    return out


def enumerate_ref_paths(result: dict[str, Any]) -> list[str]:
    """Every citable path of a canonical result, in result order."""
    paths: list[str] = [REFUSED_PATH] if isinstance(result.get("refused"), str) else []
    for key in ("entries", "series", "rows", "lines", "config", "results"):
        items = result.get(key)
        if isinstance(items, list):
            paths.extend(f"$.{key}[{i}]" for i in range(len(items)))
    for key in ("settings", "status"):
        mapping = result.get(key)
        if isinstance(mapping, dict):
            paths.extend(f"$.{key}{key_segment(str(k))}" for k in mapping)
    info = result.get("info")
    if isinstance(info, dict):
        for section, fields in info.items():
            if isinstance(fields, dict):
                paths.extend(f"$.info{key_segment(str(section))}{key_segment(str(f))}" for f in fields)
    return paths
