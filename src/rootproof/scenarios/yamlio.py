"""A safe YAML reader for scenario files.

PyYAML's safe loader follows YAML 1.1, which turns `on`, `off`, `yes` and `no` into booleans,
`0755` into an octal number and `17:36:12` into a base-60 integer. Scenario data must stay as
the systems print it, so this reader resolves plain scalars by the YAML 1.2 core schema
(`true`/`false` are the only booleans; decimal, `0o` and `0x` integers; decimal floats,
`.inf`, `.nan`; `null` and `~`), keeps bare timestamps (`2026-07-22T17:39:02.113Z` becomes a
timezone-aware `datetime`; a date without a time stays text), and rejects duplicate keys.
Every error names the file and the line; `load_yaml` also returns the line of every value so
later validation errors can point at it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from rootproof.errors import ScenarioError

__all__ = ["YamlDocument", "load_yaml", "parse_yaml"]

_TIMESTAMP = re.compile(
    r"""^(?P<year>[0-9][0-9][0-9][0-9])-(?P<month>[0-9][0-9]?)-(?P<day>[0-9][0-9]?)
    (?:(?:[Tt]|[ \t]+)(?P<hour>[0-9][0-9]?):(?P<minute>[0-9][0-9]):(?P<second>[0-9][0-9])
    (?:\.(?P<fraction>[0-9]*))?(?:[ \t]*(?P<tz>Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?)?$""",
    re.X,
)

Path_ = tuple[str | int, ...]


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 core-schema scalars, bare timestamps and no duplicate keys."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                if key in seen:
                    raise ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"duplicate key {key!r} (first on line {seen[key]})",
                        key_node.start_mark,
                    )
                seen[key] = key_node.start_mark.line + 1
            except TypeError:
                pass  # unhashable key: the base class reports it
        return super().construct_mapping(node, deep=deep)


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


@dataclass(frozen=True, kw_only=True)
class YamlDocument:
    """A parsed YAML document and where each value was written."""

    data: Any
    """The document (None for an empty file)."""
    name: str
    """The file as errors name it (`pg-row-lock/scenario.yaml`)."""
    lines: dict[Path_, int] = field(default_factory=dict)
    """1-based line of each value by its path (mapping keys as written, list indexes as ints)."""

    def line_of(self, path: Path_) -> int | None:
        """The line of the deepest written value on `path` (keys compared as text)."""
        key: tuple[str | int, ...] = tuple(p if isinstance(p, int) else str(p) for p in path)
        while key:
            if key in self.lines:
                return self.lines[key]
            key = key[:-1]
        return self.lines.get((), None)


def _record_lines(node: Node, path: Path_, out: dict[Path_, int]) -> None:
    out.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, MappingNode):
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            child = (*path, key_node.value)
            out.setdefault(child, key_node.start_mark.line + 1)
            if isinstance(value_node, MappingNode | SequenceNode):
                _record_lines(value_node, child, out)
    elif isinstance(node, SequenceNode):
        for i, item in enumerate(node.value):
            _record_lines(item, (*path, i), out)


def parse_yaml(text: str, name: str) -> YamlDocument:
    """Parse one YAML document; raise `ScenarioError` naming `name`, the line and the problem."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        what = " ".join(p for p in (exc.context, exc.problem) if p)
        raise ScenarioError(f"{name}: {where}{what or 'invalid YAML'}") from exc
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{name}: invalid YAML: {exc}") from exc
    finally:
        loader.dispose()
    lines: dict[Path_, int] = {}
    if node is not None:
        _record_lines(node, (), lines)
    return YamlDocument(data=data, name=name, lines=lines)


def load_yaml(path: Path, name: str | None = None) -> YamlDocument:
    """Read and parse a UTF-8 YAML file; errors name the file (as `name`, default the path)."""
    display = name or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{display}: not UTF-8 text (byte {exc.start})") from exc
    except OSError as exc:
        raise ScenarioError(f"{display}: cannot be read ({exc.strerror or exc})") from exc
    return parse_yaml(text, display)
