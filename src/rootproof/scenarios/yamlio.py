"""A safe YAML reader for scenario files.

PyYAML's safe loader follows YAML 1.1, which turns `on`, `off`, `yes` and `no` into booleans,
`0755` into an octal number and `17:36:12` into a base-60 integer. Scenario data must stay as
the systems print it, so this reader resolves plain scalars by the YAML 1.2 core schema
(`true`/`false` are the only booleans; decimal, `0o` and `0x` integers; decimal floats,
`.inf`, `.nan`; `null` and `~`), keeps bare timestamps (`2026-07-22T17:39:02.113Z` becomes a
timezone-aware `datetime`; a date without a time stays text), and rejects duplicate keys.
Every error names the file and the line; `load_yaml` also returns the line of every value so
later validation errors can point at it.

Hostile input is bounded before anything is built from it: a file larger than the cap
(`ROOTPROOF_MAX_SCENARIO_FILE_BYTES`) is refused unread; anchors and aliases (`&name`, `*name`,
which let a 1 KB "billion laughs" file stand for gigabytes), merge keys and explicit collection
tags are refused; so is nesting deeper than `MAX_DEPTH`.

Large files (a quarter of a million log entries) load in linear time and memory: libyaml
(PyYAML's C parser) produces the events when it is available, and the values are built from the
events directly, never through a node graph. The line of every value is worked out again, only
when an error needs it.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import GeneratorType
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.events import (
    AliasEvent,
    CollectionEndEvent,
    MappingStartEvent,
    ScalarEvent,
    StreamEndEvent,
)
from yaml.nodes import Node, ScalarNode

from rootproof.errors import ScenarioError
from rootproof.limits import SCENARIO_FILE_BYTES

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "MAX_DEPTH",
    "YamlDocument",
    "load_yaml",
    "parse_yaml",
    "parse_yaml_values",
    "plain_is_text",
    "read_capped",
]

_TIMESTAMP = re.compile(
    r"""^(?P<year>[0-9][0-9][0-9][0-9])-(?P<month>[0-9][0-9]?)-(?P<day>[0-9][0-9]?)
    (?:(?:[Tt]|[ \t]+)(?P<hour>[0-9][0-9]?):(?P<minute>[0-9][0-9]):(?P<second>[0-9][0-9])
    (?:\.(?P<fraction>[0-9]*))?(?:[ \t]*(?P<tz>Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?)?$""",
    re.X,
)

Path_ = tuple[str | int, ...]

DEFAULT_MAX_FILE_BYTES = SCENARIO_FILE_BYTES
"""Default size cap of one scenario file (`Settings.max_scenario_file_bytes`)."""
MAX_DEPTH = 64
"""Deepest nesting of mappings and lists a scenario file may use (real ones use fewer than 10)."""

_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml if PyYAML was built with it
_STR = "tag:yaml.org,2002:str"
_MERGE = "tag:yaml.org,2002:merge"
_SEQ_TAGS = (None, "!", "tag:yaml.org,2002:seq")
_MAP_TAGS = (None, "!", "tag:yaml.org,2002:map")
_NO_KEY = object()  # a mapping frame waiting for its next key
_INTERN_MAX = 40  # short repeated texts (keys, services, levels) are stored once


class _Loader(_BaseLoader):  # type: ignore[misc]
    """A safe loader with YAML 1.2 core-schema scalars and bare timestamps (events only)."""


_Loader.yaml_implicit_resolvers = {}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789")
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+.0123456789"),
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""]
)
_Loader.add_implicit_resolver("tag:yaml.org,2002:timestamp", _TIMESTAMP, list("0123456789"))
_Loader.add_implicit_resolver("tag:yaml.org,2002:merge", re.compile(r"^(?:<<)$"), ["<"])


def plain_is_text(text: str) -> bool:
    """Whether `text`, written as a plain (unquoted) scalar, reads back as that text here (and is
    not taken for a boolean, number, null or timestamp by this module's YAML 1.2 resolvers).
    For writers: PyYAML's dumper quotes by YAML 1.1 and would leave `1e5` or `0o17` plain."""
    tag = _Loader.resolve(_Loader, ScalarNode, text, (True, False))
    return bool(tag == _STR)


def _construct_int(loader: yaml.SafeLoader, node: Node) -> int:
    assert isinstance(node, ScalarNode)
    text = str(loader.construct_scalar(node))
    try:
        if text.startswith("0x"):
            return int(text[2:], 16)
        if text.startswith("0o"):
            return int(text[2:], 8)
        return int(text, 10)  # YAML 1.2: `0755` is decimal 755
    except ValueError as exc:
        raise ConstructorError(None, None, f"invalid integer {text!r}", node.start_mark) from exc


def _construct_timestamp(loader: yaml.SafeLoader, node: Node) -> Any:
    assert isinstance(node, ScalarNode)
    text = str(loader.construct_scalar(node))
    m = _TIMESTAMP.match(text)
    if m is None or m.group("hour") is None:
        return text  # a bare date stays text, as the systems print it
    try:
        return loader.construct_yaml_timestamp(node)
    except ValueError as exc:  # month 13, hour 25...
        raise ConstructorError(None, None, f"invalid timestamp {text!r}: {exc}", node.start_mark) from exc


_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_Loader.add_constructor("tag:yaml.org,2002:timestamp", _construct_timestamp)


@dataclass(frozen=True, kw_only=True, eq=False)
class YamlDocument:
    """A parsed YAML document and where each value was written."""

    data: Any
    """The document (None for an empty file)."""
    name: str
    """The file as errors name it (`pg-row-lock/scenario.yaml`)."""
    source: str | bytes = ""
    """The text parsed; the line map is rebuilt from it when an error first asks for a line."""
    _lines: dict[Path_, int] = field(default_factory=dict, repr=False)

    @property
    def lines(self) -> dict[Path_, int]:
        """1-based line of each value by its path (mapping keys as written, list indexes as ints)."""
        if not self._lines and self.source:
            self._lines.update(_build(_Loader(self.source), self.name, lines=True)[1])
        return self._lines

    def line_of(self, path: Path_) -> int | None:
        """The line of the deepest written value on `path` (keys compared as text)."""
        lines = self.lines
        key: tuple[str | int, ...] = tuple(p if isinstance(p, int) else str(p) for p in path)
        while key:
            if key in lines:
                return lines[key]
            key = key[:-1]
        return lines.get((), None)


def _fmt(path: Path_) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(document)"


def _refuse(name: str, mark: Any, path: Path_, what: str) -> ScenarioError:
    return ScenarioError(f"{name}: line {mark.line + 1}: {_fmt(path)}: {what}")


def _scalar(loader: Any, ev: Any) -> tuple[str, Any]:
    """A scalar's tag and value by the loader's resolvers and constructors (no node is kept)."""
    tag = ev.tag
    if tag is None or tag == "!":
        tag = loader.resolve(ScalarNode, ev.value, ev.implicit)
    if tag == _STR:
        value: str = ev.value
        return tag, sys.intern(value) if len(value) <= _INTERN_MAX else value
    if tag == _MERGE:
        return tag, None
    node = ScalarNode(tag, ev.value, ev.start_mark, ev.end_mark, ev.style)
    construct = loader.yaml_constructors.get(tag) or loader.yaml_constructors[None]
    out = construct(loader, node)
    if isinstance(out, GeneratorType):  # a collection tag on a scalar
        raise ConstructorError(None, None, f"tag {tag!r} is not accepted on a single value", ev.start_mark)
    return tag, out


class _Frame:
    """An open mapping or list while the document is built."""

    __slots__ = ("container", "is_map", "key", "key_mark", "key_text", "path", "seen", "start")

    def __init__(self, container: dict[Any, Any] | list[Any], path: Path_, start: Any) -> None:
        self.container = container
        self.is_map = isinstance(container, dict)
        self.path = path
        self.start = start
        self.key: Any = _NO_KEY
        self.key_mark: Any = None
        self.key_text = ""
        self.seen: dict[Any, int] = {}

    def child(self) -> Path_:
        """The path of the value about to be attached (the mapping's own while a key is due)."""
        if self.is_map:
            return self.path if self.key is _NO_KEY else (*self.path, self.key_text)
        return (*self.path, len(self.container))


def _build(loader: Any, name: str, *, lines: bool) -> tuple[Any, dict[Path_, int]]:
    """Build one document from the parser's events, iteratively (depth costs no Python stack).

    Refuses anchors, aliases, merge keys, collection tags, duplicate and non-text keys, and
    nesting deeper than MAX_DEPTH. With `lines`, also returns the line of every value.
    """
    where: dict[Path_, int] = {}
    try:
        loader.get_event()  # StreamStart
        if loader.check_event(StreamEndEvent):
            return None, where
        loader.get_event()  # DocumentStart
        stack: list[_Frame] = []
        while True:
            ev: Any = loader.get_event()
            mark: Any = ev.start_mark
            top = stack[-1] if stack else None
            path = top.child() if top is not None else ()
            if isinstance(ev, CollectionEndEvent):
                assert top is not None
                stack.pop()
                value: Any = top.container
                top = stack[-1] if stack else None
            elif isinstance(ev, AliasEvent):
                raise _refuse(
                    name,
                    mark,
                    path,
                    f"YAML aliases (*{ev.anchor}) are not accepted (one can stand for gigabytes); write the value out",
                )
            elif ev.anchor is not None:
                raise _refuse(
                    name,
                    mark,
                    path,
                    f"YAML anchors (&{ev.anchor}) are not accepted (aliases to them can stand for gigabytes); write each value out",
                )
            elif isinstance(ev, ScalarEvent):
                tag, value = _scalar(loader, ev)
                if tag == _MERGE:
                    raise _refuse(
                        name,
                        mark,
                        path,
                        "YAML merge keys (<<) are not accepted; write the fields out",
                    )
                if top is not None and top.is_map and top.key is _NO_KEY:
                    first = top.seen.get(value)
                    if first is not None:
                        raise ConstructorError(
                            "while constructing a mapping",
                            top.start,
                            f"duplicate key {value!r} (first on line {first})",
                            mark,
                        )
                    top.seen[value] = mark.line + 1
                    top.key, top.key_mark, top.key_text = value, mark, ev.value
                    continue
                if lines:
                    where.setdefault(
                        path, (top.key_mark if top is not None and top.is_map else mark).line + 1
                    )
            else:  # a mapping or a list starts
                if top is not None and top.is_map and top.key is _NO_KEY:
                    raise ConstructorError(
                        "while constructing a mapping", top.start, "found unhashable key", mark
                    )
                is_map = isinstance(ev, MappingStartEvent)
                if ev.tag not in (_MAP_TAGS if is_map else _SEQ_TAGS):
                    raise ConstructorError(
                        None,
                        None,
                        f"tag {ev.tag!r} is not accepted (scenario files use plain mappings and lists)",
                        mark,
                    )
                if len(path) >= MAX_DEPTH:
                    raise _refuse(name, mark, path, f"nested deeper than {MAX_DEPTH} levels")
                if lines:
                    where.setdefault(
                        path, (top.key_mark if top is not None and top.is_map else mark).line + 1
                    )
                stack.append(_Frame({} if is_map else [], path, mark))
                continue
            if top is None:
                break
            if top.is_map:
                top.container[top.key] = value  # type: ignore[call-overload]
                top.key = _NO_KEY
            else:
                top.container.append(value)  # type: ignore[union-attr]
        loader.get_event()  # DocumentEnd
        if not loader.check_event(StreamEndEvent):
            mark = loader.get_event().start_mark
            raise ComposerError(
                "expected a single document in the stream", None, "but found another document", mark
            )
        return value, where
    finally:
        loader.dispose()


def _line_col(text: str | bytes, line: int, column: int) -> str:
    """`N, column M` (1-based). libyaml puts the end of a file that lacks a final newline on
    the line after the last one; that place is the end of the last line."""
    raw = text.encode() if isinstance(text, str) else text
    last = raw.count(b"\n")  # 0-based index of the last line when there is no final newline
    if raw and not raw.endswith(b"\n") and line > last:
        line, column = last, len(raw) - (raw.rfind(b"\n") + 1)
    return f"{line + 1}, column {column + 1}"


def parse_yaml(text: str | bytes, name: str) -> YamlDocument:
    """Parse one YAML document (text, or UTF-8 bytes); raise `ScenarioError` naming `name`, the
    line and the problem. Anchors, aliases, merge keys and nesting deeper than `MAX_DEPTH` are refused."""
    try:
        data, _ = _build(_Loader(text), name, lines=False)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {_line_col(text, mark.line, mark.column)}: " if mark is not None else ""
        what = " ".join(p for p in (exc.context, exc.problem) if p)
        raise ScenarioError(f"{name}: {where}{what or 'invalid YAML'}") from exc
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{name}: invalid YAML: {exc}") from exc
    return YamlDocument(data=data, name=name, source=text)


def parse_yaml_values(text: str | bytes, name: str) -> Any:
    """YAML as PyYAML's safe loader reads it (YAML 1.1 scalars), with this module's refusals
    (anchors, aliases, merge keys, nesting deeper than `MAX_DEPTH`): for other inputs than
    scenario files (alert payloads). Raises `yaml.YAMLError` on bad syntax and `ScenarioError`
    naming `name` and the line on a refusal."""
    return _build(_BaseLoader(text), name, lines=False)[0]


def read_capped(path: Path, display: str, max_bytes: int, setting: str) -> bytes:
    """A file's bytes, refused unread (`ScenarioError` naming the file and `setting`) above `max_bytes`."""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise ScenarioError(
                f"{display}: {size} bytes, more than the cap of {max_bytes} bytes ({setting}); "
                "split the data or raise the cap"
            )
        with path.open("rb") as f:
            raw = f.read(max_bytes + 1)  # the file may have grown since stat
    except OSError as exc:
        raise ScenarioError(f"{display}: cannot be read ({exc.strerror or exc})") from exc
    if len(raw) > max_bytes:
        raise ScenarioError(f"{display}: more than the cap of {max_bytes} bytes ({setting})")
    return raw


def load_yaml(
    path: Path, name: str | None = None, *, max_bytes: int = DEFAULT_MAX_FILE_BYTES
) -> YamlDocument:
    """Read and parse a UTF-8 YAML file of at most `max_bytes`; errors name the file (as `name`,
    default the path)."""
    display = name or str(path)
    raw = read_capped(path, display, max_bytes, "ROOTPROOF_MAX_SCENARIO_FILE_BYTES")
    try:
        raw.decode("utf-8")  # libyaml would also take UTF-16; scenario files are UTF-8
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{display}: not UTF-8 text (byte {exc.start})") from exc
    return parse_yaml(raw, display)
