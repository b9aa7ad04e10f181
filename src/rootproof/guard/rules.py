"""The guards' rule set: a packaged file that documents and versions the checks (docs/guard-rules.md).

The checks are code and always all run; `rules.yaml` names each one (id, code, description)
and must cover the code's checks exactly, so it can describe a check but never switch one off.
Every guard result records `rule_set_version` (the file's declared version plus a digest of
its bytes) and the rules it ran.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rootproof.errors import ConfigError

__all__ = ["RULES_FILE", "RuleSet", "load_rule_set", "rule_set", "rules_for"]

RULES_FILE = Path(__file__).with_name("rules.yaml")
"""The packaged rules; module-level so that tests can point the guards at an edited copy."""


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[A-Z][A-Z0-9-]*$")
    code: str = Field(pattern=r"^[A-Z][A-Z0-9_]*$")
    description: str = Field(min_length=10)


class _Semantic(BaseModel):
    model_config = ConfigDict(extra="forbid")

    common: list[_Rule]
    offline: list[_Rule]
    llm: list[_Rule]


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = Field(ge=1)
    evidence_guard: list[_Rule]
    semantic_guard: _Semantic


@dataclass(frozen=True, eq=False)
class RuleSet:
    """A loaded rule set: its version and each section's rules."""

    version: str
    path: Path
    sections: dict[str, tuple[_Rule, ...]]

    def section(self, name: str, codes: Iterable[str]) -> list[dict[str, str]]:
        """The section's rules as dicts, after checking they cover `codes` (the code's checks) exactly."""
        rules = self.sections.get(name)
        if rules is None:
            raise ConfigError(f"{self.path}: {name}: no such section")
        want = {str(c) for c in codes}
        have = [r.code for r in rules]
        missing, unknown = sorted(want - set(have)), sorted(set(have) - want)
        if missing or unknown:
            parts = ([f"missing {', '.join(missing)}"] if missing else []) + ([f"unknown {', '.join(unknown)}"] if unknown else [])
            raise ConfigError(f"{self.path}: {name}: the rules must name every check exactly ({'; '.join(parts)})")
        return [r.model_dump() for r in rules]


def _field(loc: tuple[int | str, ...]) -> str:
    return ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in loc).replace(".[", "[") or "(file)"


def load_rule_set(path: Path) -> RuleSet:
    """Load and validate a rules file; one clear error naming the field at fault."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the guard rules: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(raw)
        doc = _File.model_validate(data)
    except yaml.YAMLError:
        raise ConfigError(f"{path}: not valid YAML") from None
    except ValidationError as exc:
        e = exc.errors(include_url=False)[0]
        raise ConfigError(f"{path}: {_field(tuple(e['loc']))}: {e['msg']}") from None
    sections = {
        "evidence_guard": tuple(doc.evidence_guard),
        "semantic_guard.common": tuple(doc.semantic_guard.common),
        "semantic_guard.offline": tuple(doc.semantic_guard.offline),
        "semantic_guard.llm": tuple(doc.semantic_guard.llm),
    }
    seen: dict[str, str] = {}
    for name, rules in sections.items():
        codes = [r.code for r in rules]
        if len(codes) != len(set(codes)):
            raise ConfigError(f"{path}: {name}: a code is listed twice")
        for r in rules:
            if r.id in seen:
                raise ConfigError(f"{path}: {name}: rule id {r.id} is also used in {seen[r.id]}")
            seen[r.id] = name
    digest = hashlib.sha256(raw).hexdigest()[:12]
    return RuleSet(version=f"guard-rules-v{doc.version}+{digest}", path=path, sections=sections)


@lru_cache(maxsize=8)
def _cached(path: Path, mtime_ns: int, size: int) -> RuleSet:
    return load_rule_set(path)


def rule_set() -> RuleSet:
    """The rule set in force (RULES_FILE), reloaded when the file changes."""
    path = RULES_FILE
    try:
        st = path.stat()
    except OSError:
        return load_rule_set(path)  # raises the clear error
    return _cached(path, st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=64)
def _section(rs: RuleSet, section: str, codes: frozenset[str]) -> tuple[dict[str, str], ...]:
    return tuple(rs.section(section, codes))


def rules_for(section: str, codes: Iterable[str]) -> tuple[str, list[dict[str, str]]]:
    """(rule_set_version, the section's rules), checked against the code's checks."""
    rs = rule_set()
    return rs.version, [dict(r) for r in _section(rs, section, frozenset(str(c) for c in codes))]
