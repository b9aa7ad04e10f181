"""Reading an OpenSRE reference answer: its sections, and which mechanisms its prose names.

`model_response` is prose in sections (`ROOT_CAUSE:`, `VALIDATED_CLAIMS:` with
`[evidence: <source>]` tags, `NON_VALIDATED_CLAIMS:`, `CAUSAL_CHAIN:`). The root cause is read
from the `ROOT_CAUSE` statement by the tables of `_opensre_rules`: sentences are cut where a
dismissal starts (`DISMISS_SENTENCE`, `DISMISS_AFTER`), the first sentence that names a
mechanism decides, and a causal connective inside it says which of the mechanisms it names is
the cause (`FORWARD`, `REVERSE`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rootproof.scenarios.importers._opensre_rules import (
    COMPOSITIONAL,
    DISMISS_AFTER,
    DISMISS_SENTENCE,
    FORWARD,
    MECHANISMS,
    REVERSE,
)

__all__ = ["Answer", "Claim", "Finding", "fold", "named", "parse_answer", "read_root_cause"]

_SECTION = re.compile(r"^\s*([A-Z][A-Z_]{3,}):\s?(.*)$")
_EVIDENCE = re.compile(r"\[evidence:\s*([^\]]*)\]", re.I)
_SENTENCE = re.compile(r"(?<=[.!?])(?<!\.\.\.)\s+(?=[A-Z(\"'])")
_ENUM = re.compile(r"\(\s*(\d{1,2})\s*\)")


def fold(text: str) -> str:
    """Case-folded, whitespace collapsed: what phrases are matched against."""
    return " ".join(text.casefold().split())


@dataclass(frozen=True, kw_only=True)
class Claim:
    """One VALIDATED_CLAIMS line: its text and the evidence sources it names."""

    text: str
    sources: tuple[str, ...]


@dataclass(kw_only=True)
class Answer:
    """The sections of a reference answer."""

    root_cause: str = ""
    claims: list[Claim] = field(default_factory=list)
    other: list[str] = field(default_factory=list)
    """NON_VALIDATED_CLAIMS and CAUSAL_CHAIN lines (proposals and the chain)."""
    text: str = ""
    """The whole `model_response`."""


def parse_answer(model_response: str) -> Answer:
    """Split `model_response` into its sections (text outside a known section is ignored)."""
    ans = Answer(text=model_response)
    section = ""
    root: list[str] = []
    for line in model_response.splitlines():
        m = _SECTION.match(line)
        if m:
            section, rest = m.group(1), m.group(2).strip()
            if section == "ROOT_CAUSE" and rest:
                root.append(rest)
            continue
        s = line.strip()
        if not s:
            continue
        if section == "ROOT_CAUSE":
            root.append(s)
        elif section == "VALIDATED_CLAIMS" and s.startswith("-"):
            body = s.lstrip("- ").strip()
            sources = tuple(
                x.strip().lower()
                for m2 in _EVIDENCE.finditer(body)
                for x in m2.group(1).split(",")
                if x.strip()
            )
            ans.claims.append(Claim(text=_EVIDENCE.sub("", body).strip(), sources=sources))
        elif section in ("NON_VALIDATED_CLAIMS", "CAUSAL_CHAIN"):
            ans.other.append(s.lstrip("- ").strip())
    ans.root_cause = " ".join(root)
    return ans


def named(text: str) -> list[tuple[int, str]]:
    """`(position, mechanism)` for each mechanism the text names, first-named first (folded text)."""
    f = fold(text)
    found: dict[str, int] = {}
    for rule in MECHANISMS:
        for phrase in rule.phrases:
            pos = f.find(phrase)
            if pos >= 0 and pos < found.get(rule.mechanism, len(f) + 1):
                found[rule.mechanism] = pos
    return sorted(((p, m) for m, p in found.items()), key=lambda x: x[0])


def _first(text: str, markers: tuple[str, ...]) -> tuple[int, str] | None:
    """The earliest marker in folded `text` (the longest at a tie)."""
    best: tuple[int, str] | None = None
    for marker in markers:
        pos = text.find(marker)
        if pos >= 0 and (best is None or pos < best[0] or pos == best[0] and len(marker) > len(best[1])):
            best = (pos, marker)
    return best


@dataclass(frozen=True, kw_only=True)
class Finding:
    """What one statement (a sentence, or an enumerated part) says about the root cause."""

    root: str
    """The mechanism it gives as the cause."""
    also: tuple[str, ...]
    """Other mechanisms it gives as what happened (accepted labels: the headline of `X caused by Y`)."""
    sentence: str
    """The sentence, as written (the culprit)."""


@dataclass(kw_only=True)
class RootReading:
    """What the ROOT_CAUSE statement says."""

    findings: list[Finding] = field(default_factory=list)
    """One per cause (more than one: a compositional fault)."""
    dismissed: list[tuple[str, str]] = field(default_factory=list)
    """(mechanism, sentence) the statement dismisses (confounders, historical events)."""
    compositional: bool = False


def _analyse(sentence: str) -> tuple[Finding | None, list[str]]:
    """A sentence's finding, and the mechanisms it dismisses."""
    f = fold(sentence)
    if _first(f, DISMISS_SENTENCE) is not None:
        return None, [m for _, m in named(f)]
    cut = _first(f, DISMISS_AFTER)
    kept, dropped = (f[: cut[0]], f[cut[0] :]) if cut else (f, "")
    dismissed = [m for _, m in named(dropped)]
    mentioned = named(kept)
    if not mentioned:
        return None, dismissed
    fwd, rev = _first(kept, FORWARD), _first(kept, REVERSE)
    if fwd is not None and (rev is None or fwd[0] <= rev[0]):
        head, cause = named(kept[: fwd[0]]), named(kept[fwd[0] + len(fwd[1]) :])
        if cause:
            also = tuple(m for _, m in head if m != cause[0][1])
            return Finding(root=cause[0][1], also=also, sentence=sentence), dismissed
        return Finding(root=head[0][1] if head else mentioned[0][1], also=(), sentence=sentence), dismissed
    if rev is not None:
        before = named(kept[: rev[0]])
        root = before[0][1] if before else mentioned[0][1]
        return Finding(root=root, also=(), sentence=sentence), dismissed
    return Finding(root=mentioned[0][1], also=(), sentence=sentence), dismissed


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


def _read_part(text: str, reading: RootReading) -> Finding | None:
    found: Finding | None = None
    for sentence in _sentences(text):
        finding, dismissed = _analyse(sentence)
        reading.dismissed.extend((m, sentence) for m in dismissed)
        if found is None and finding is not None:
            found = finding
    return found


def read_root_cause(statement: str, *, single_cause: bool) -> RootReading:
    """The causes and dismissals of a ROOT_CAUSE statement (`single_cause`: the answer forbids a second cause)."""
    reading = RootReading()
    kept = " ".join(fold(s) for s in _sentences(statement) if _first(fold(s), DISMISS_SENTENCE) is None)
    reading.compositional = not single_cause and _first(kept, COMPOSITIONAL) is not None
    parts = [p for p in _ENUM.split(statement)]
    if reading.compositional and len(parts) >= 5:  # "lead (1) first (2) second": text, num, part, num, part
        _read_part(parts[0], reading)  # the lead sentence may dismiss; its causes are the parts'
        for i in range(2, len(parts), 2):
            finding = _read_part(parts[i], reading)
            if finding is not None and all(finding.root != f.root for f in reading.findings):
                reading.findings.append(finding)
        return reading
    first = _read_part(statement, reading)
    if first is not None:
        reading.findings.append(first)
        if reading.compositional:  # not enumerated: every other mechanism the statement names is a cause too
            for _, m in named(kept):
                if m != first.root and m not in first.also and all(m != f.root for f in reading.findings):
                    reading.findings.append(Finding(root=m, also=(), sentence=statement))
    return reading
