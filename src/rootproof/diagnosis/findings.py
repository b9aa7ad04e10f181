"""Findings: what the analyzers read in one tool result, whatever the question.

An analyzer runs in the harness on the whole canonical result of a call (after it is recorded
and redacted, not the bounded view the model reads) and returns findings: the mechanism(s) a
finding supports (from the vocabulary), the raw refs of the same invocation that show it, and
the numbers that size it. Findings travel with the observation the model reads (`findings`),
and the refs they name are shown first, so an LLM and the offline planner start from the same
anomalies. A finding is never cited: claims cite the raw refs it names.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml

__all__ = ["Finding", "Ref", "VocabularyError", "analyze", "finding_refs", "explains", "symptoms", "use_vocabulary", "vocabulary"]

MAX_FINDINGS = 8
"""Findings kept per call (the first ones, by analyzer order)."""
MAX_TEXT = 300
"""Characters of one finding's text."""


class VocabularyError(ValueError):
    """The vocabulary file named by ROOTPROOF_VOCABULARY cannot be used (the message names it)."""


@dataclass(frozen=True)
class Ref:
    """One evidence ref of the call: its raw path and its text."""

    path: str
    text: str
    spans: tuple[tuple[int, int], ...] = ()
    """Where the text holds what an outsider wrote (a request's URL): never a finding's trigger."""

    def says(self, phrase: str) -> bool:
        """Whether `phrase` (lower case) occurs in the text outside its untrusted spans."""
        low = self.text.lower()
        start = low.find(phrase)
        while start >= 0:
            end = start + len(phrase)
            if not any(a < end and start < b for a, b in self.spans):
                return True
            start = low.find(phrase, start + 1)
        return False


@dataclass(frozen=True)
class Finding:
    """One anomaly read in a tool result."""

    code: str
    """What was found (`redis.memory_at_limit`): a key of the vocabulary."""
    text: str
    """One line in English with the numbers (never cited: the refs are)."""
    refs: tuple[str, ...]
    """The raw paths of this invocation that show it, the subject's own record first."""
    numbers: dict[str, float | int | str] = field(default_factory=dict)
    """What sizes it: value, limit, ratio, count, age_s, since …"""
    subject: str | None = None
    """Who it is about, as an operator acts on it (`pid 6494`, `maxclients 64`), when one."""
    facts: dict[str, Any] = field(default_factory=dict)
    """The subject's own fields as its record gives them (a blocker's pid, application, client,
    state, transaction age, query): raw values for the report's culprit."""

    @property
    def supports(self) -> tuple[str, ...]:
        """The `component/mechanism` pairs the vocabulary says this finding is evidence for."""
        return tuple(entry(self.code).get("supports") or ())

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"finding": self.code, "text": self.text[:MAX_TEXT], "supports": list(self.supports), "refs": list(self.refs)}
        if self.supports and all(k in symptoms() for k in self.supports):
            out["symptom"] = True
        if self.numbers:
            out["numbers"] = dict(self.numbers)
        if self.subject:
            out["subject"] = self.subject
        if self.facts:
            out["facts"] = {k: (v[:200] if isinstance(v, str) else v) for k, v in self.facts.items()}
        return out


Analyzer = Callable[[str | None, dict[str, Any], list[Ref]], list[Finding]]


_configured: Path | None = None


def use_vocabulary(path: Path) -> None:
    """Use the user's vocabulary file `path` over the shipped one (checked now: `VocabularyError`)."""
    global _configured
    _user_vocabulary(path)
    _configured = path
    _documents.cache_clear()


@cache
def _documents() -> tuple[dict[str, Any], ...]:
    """The shipped vocabulary, then the user's file (the `vocabulary` setting, ROOTPROOF_VOCABULARY)."""
    docs = [yaml.safe_load(files("rootproof.diagnosis").joinpath("vocabulary.yaml").read_text(encoding="utf-8"))]
    extra = _configured or (Path(v) if (v := os.environ.get("ROOTPROOF_VOCABULARY", "").strip()) else None)
    if extra is not None:
        docs.append(_user_vocabulary(extra))
    return tuple(docs)


def vocabulary() -> dict[str, dict[str, Any]]:
    """Finding name → its entry: the shipped ones, with the user's file's entries over them."""
    out: dict[str, dict[str, Any]] = {}
    for doc in _documents():
        out.update({str(k): dict(v) for k, v in (doc.get("findings") or {}).items()})
    return out


def _symptoms() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for doc in _documents():
        out.update({str(k): [str(p) for p in v or []] for k, v in (doc.get("symptoms") or {}).items()})
    return out


def symptoms() -> frozenset[str]:
    """The symptom mechanisms (`component/mechanism`): the shipped ones and the user's."""
    return frozenset(_symptoms())


def explains(cause: str, symptom: str) -> bool:
    """Whether the vocabulary says `cause` (`component/mechanism`, itself no symptom) can explain `symptom`."""
    if cause in symptoms():
        return False
    return any(fnmatch.fnmatchcase(cause, p) for p in _symptoms().get(symptom, []))


def _user_vocabulary(path: Path) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise VocabularyError(f"cannot read {path}: {exc}") from None
    if not isinstance(doc, dict) or not set(doc) <= {"findings", "symptoms"}:
        raise VocabularyError(f"{path}: expected a mapping with `findings:` and/or `symptoms:`")
    found = doc.get("findings") or {}
    if not isinstance(found, dict):
        raise VocabularyError(f"{path}: findings: expected a mapping of finding name → entry")
    for name, body in found.items():
        if not isinstance(body, dict) or not isinstance(body.get("supports", []), list):
            raise VocabularyError(f"{path}: findings.{name}: expected a mapping with a list `supports`")
        for words in ("phrases", "contexts"):
            if words in body and not (isinstance(body[words], list) and all(isinstance(w, str) for w in body[words])):
                raise VocabularyError(f"{path}: findings.{name}.{words}: expected a list of strings")
        for label in body.get("supports") or []:
            if not _known_label(str(label)):
                raise VocabularyError(f"{path}: findings.{name}.supports: unknown component/mechanism {label!r} (docs/taxonomy.md)")
    sym = doc.get("symptoms") or {}
    if not isinstance(sym, dict) or not all(isinstance(v, list) for v in sym.values()):
        raise VocabularyError(f"{path}: symptoms: expected a mapping of component/mechanism → list of what can explain it")
    return doc


def _known_label(label: str) -> bool:
    """`component/mechanism` of the taxonomy (either part may be a namespaced label a card adds)."""
    from rootproof.taxonomy import COMPONENTS, MECHANISMS, is_namespaced

    comp, sep, mech = label.partition("/")
    return bool(sep) and (comp in COMPONENTS or is_namespaced(comp)) and (mech in MECHANISMS or is_namespaced(mech))


def entry(code: str) -> dict[str, Any]:
    """The vocabulary entry of a finding (empty when unknown)."""
    return vocabulary().get(code, {})


def threshold(code: str, name: str, default: float) -> float:
    """A number of a finding's vocabulary entry."""
    value = entry(code).get(name, default)
    return float(value) if isinstance(value, int | float) else default


def phrases(code: str) -> list[str]:
    """The lower-case phrases of a finding's vocabulary entry."""
    return [str(p).lower() for p in entry(code).get("phrases") or []]


def analyze(tool: str, kind: str | None, result: dict[str, Any], refs: list[Ref]) -> list[Finding]:
    """Every finding of the analyzers of `tool` on one call's whole result and refs (bounded)."""
    from rootproof.diagnosis.analyzers import ANALYZERS

    # "Found no match" is never read as evidence of anything (its text repeats the query's words).
    refs = [r for r in refs if r.path != "$.no_evidence"]
    out: list[Finding] = []
    for analyzer in ANALYZERS.get(tool, ()):
        out.extend(analyzer(kind, result, refs))
    known = {r.path for r in refs}
    return [f for f in out if f.refs and all(p in known for p in f.refs)][:MAX_FINDINGS]


def finding_refs(findings: list[dict[str, Any]]) -> list[str]:
    """The raw paths the findings of an observation name, in order, each once."""
    return list(dict.fromkeys(str(p) for f in findings for p in f.get("refs") or []))
