"""Required evidence: `match` strings taken from the answer's claims, checked against the refs.

A validated claim (`- ReplicaLag stayed above 900 seconds on payments-prod-replica-1.
[evidence: aws_cloudwatch_metrics]`) says what its evidence shows. The importer takes from the
claim what could occur verbatim in a ref text — quoted text, identifiers (`CPU:user`,
`audit_log`, `payments-prod-replica-1`), CamelCase metric names, times of day, decimal figures,
and for log entries the word runs the claim shares with a message — and keeps, for each claim,
the converted refs that contain the most of it. Each kept ref becomes one alternative
(`any_of`) whose `match` strings all occur in that ref's text: they are chosen from it, and
`verify` checks them again before anything is written.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rootproof.scenarios.importers._opensre_evidence import DB_LOAD_METRIC, Ref
from rootproof.scenarios.importers._opensre_prose import fold
from rootproof.tools.refs import fold_text

__all__ = ["TOOLS_OF", "Alternative", "evidence_for", "verify"]

TOOLS_OF: dict[str, tuple[str, ...]] = {
    "metrics": ("query_metrics",),
    "events": ("query_logs",),
    "pi": ("inspect_postgres", "query_metrics"),
}
"""Evidence kind → the tools whose refs show it (Performance Insights: its rows, and the db_load series)."""

MAX_ALTERNATIVES = 4
"""Most alternatives (`any_of`) of one required evidence item."""
MAX_REFS_SCANNED = 20_000
"""Refs compared per claim (a case with more events is matched on its first ones)."""

_QUOTE = re.compile(r"[\"“]([^\"”\n]{4,400})[\"”]")
_IDENT = re.compile(r"(?<![\w:.-])[A-Za-z][A-Za-z0-9]*(?:[_:.\-][A-Za-z0-9]+)+")
_CAMEL = re.compile(r"\b(?:[A-Z][a-z0-9]+(?:[A-Z][A-Za-z0-9]*)+|[A-Z]{2,}[a-z][A-Za-z0-9]*)\b")
_TIME = re.compile(r"(?<![\d:])(\d{2}:\d{2}(?::\d{2})?)Z?(?![\d:])")
_NUMBER = re.compile(r"(?<![\w.,])(\d+\.\d+|\d{3,})(?![\w.,]*\d)")
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_:.'/-]*[A-Za-z0-9]|[A-Za-z0-9]")
_NOISE = frozenset({"postgresql", "performance", "insights", "cloudwatch", "multi", "rds", "aws"})
_STOP = frozenset(
    "a an the of on in at to for from by with and or is was were are be been has have had this that these those it its "
    "as into than then so but not no".split()
)


@dataclass(frozen=True, kw_only=True)
class Alternative:
    """One way to satisfy a required evidence item: a ref of `tool` containing every `match` string."""

    tool: str
    match: tuple[str, ...]
    where: str
    """The ref it was taken from (`logs[2]`), for notes."""


@dataclass(frozen=True)
class _Cand:
    text: str
    kind: str  # quote, ident, time, number, words
    weight: float


def _candidates(claim: str) -> list[_Cand]:
    out: dict[str, _Cand] = {}

    def add(text: str, kind: str, weight: float) -> None:
        key = fold(text)
        if len(key) >= 2 and key not in _NOISE and (key not in out or out[key].weight < weight):
            out[key] = _Cand(text, kind, weight)

    for m in _QUOTE.finditer(claim):
        add(m.group(1).strip(), "quote", 2.0 * len(m.group(1)))
    for m in _IDENT.finditer(claim):
        add(m.group(0), "ident", float(len(m.group(0))))
    for m in _CAMEL.finditer(claim):
        add(m.group(0), "ident", float(len(m.group(0))))
    for m in _TIME.finditer(claim):
        add(m.group(1), "time", 3.0)
    for m in _NUMBER.finditer(claim):
        add(m.group(1), "number", 2.0)
    return list(out.values())


def _within(run: str, target: str) -> bool:
    """Whether the word run occurs in the folded target as whole words."""
    return re.search(r"(?<![\w])" + re.escape(fold(run)) + r"(?![\w])", target) is not None


def _word_runs(claim: str, message: str) -> list[_Cand]:
    """The longest word runs (2+ words, one of them a content word) of `claim` found in `message`."""
    words = _WORD.findall(claim)
    target = fold(message)
    found: list[str] = []
    i = 0
    while i < len(words):
        best = ""
        for j in range(len(words), i + 1, -1):  # longest run starting at i first
            run = words[i:j]
            if run[0].lower() in _STOP:  # a run starts and ends on a word that says something
                break
            while run and run[-1].lower() in _STOP:
                run = run[:-1]
            content = [w for w in run if w.lower() not in _STOP and len(w) >= 4 and not w.isdigit()]
            if len(run) >= 2 and content and _within(" ".join(run), target):
                best = " ".join(run)
                break
        if best:
            found.append(best)
            i += len(best.split())
        else:
            i += 1
    return [_Cand(r, "words", float(len(r))) for r in dict.fromkeys(found)]


def _score(claim: str, cands: list[_Cand], ref: Ref, kind: str) -> tuple[tuple[int, int, float], list[_Cand]]:
    """How much of the claim the ref shows (textual candidates, all candidates, weight), and those it contains."""
    if ref.tool == "query_metrics":
        if kind == "pi":  # Performance Insights' only series is db_load
            named = [_Cand(DB_LOAD_METRIC, "ident", 10.0)] if "db_load" in fold(claim) else []
        else:
            named = [c for c in cands if c.kind == "ident" and fold(c.text) == fold(ref.pieces[0])]
        if not named:
            return (0, 0, 0.0), []
        labels = [
            c
            for c in cands
            if c.kind == "ident" and c not in named and any(fold(c.text) in fold(p) for p in ref.pieces[1:])
        ]
        inside = named + labels
    else:
        text = fold_text(ref.text)
        inside = [c for c in cands if fold_text(c.text) in text]
        if ref.tool == "query_logs":  # only the message says what happened; time and service are context
            message = fold_text(ref.text.split("] ", 1)[-1])
            inside = [c if fold_text(c.text) in message else _Cand(c.text, "context", 1.0) for c in inside]
            inside += _word_runs(claim, ref.text.split("] ", 1)[-1])
    textual = sum(1 for c in inside if c.kind in ("quote", "ident", "words"))
    return (textual, len(inside), sum(c.weight for c in inside)), inside


def _pick(ref: Ref, inside: list[_Cand]) -> tuple[str, ...] | None:
    """Up to two textual match strings (plus a time or figure when only one), none inside another."""
    if ref.tool == "query_metrics":
        labels = [p for p in ref.pieces[1:] if any(fold(c.text) in fold(p) for c in inside[1:])]
        if not labels:  # name the instance the series is about when the claim does not
            labels = [p for p in ref.pieces[1:] if p.startswith("DBInstanceIdentifier=")] or list(
                ref.pieces[1:2]
            )
        return (ref.pieces[0], *labels[:1])
    textual = sorted((c for c in inside if c.kind in ("quote", "ident", "words")), key=lambda c: -c.weight)
    chosen: list[str] = []
    for c in textual:
        if any(fold(c.text) in fold(x) or fold(x) in fold(c.text) for x in chosen):
            continue
        chosen.append(c.text)
        if len(chosen) == 2:
            break
    if not chosen:
        return None
    if len(chosen) == 1:
        extra = sorted(
            (c for c in inside if c.kind in ("time", "number", "context")), key=lambda c: -c.weight
        )
        for c in extra:
            if fold(c.text) not in fold(chosen[0]):
                chosen.append(c.text)
                break
    return tuple(chosen)


def _pool(refs: Sequence[Ref], kinds: Iterable[str]) -> list[Ref]:
    out: list[tuple[str, Ref]] = []
    for kind in kinds:
        for r in refs:
            if r.tool not in TOOLS_OF[kind]:
                continue
            if r.tool == "query_metrics" and (kind == "pi") != (r.pieces[0] == DB_LOAD_METRIC):
                continue
            out.append((kind, r))
    return [r for _, r in out]


def evidence_for(claims: Sequence[str], refs: Sequence[Ref], kinds: Iterable[str]) -> list[Alternative]:
    """The alternatives that show what `claims` say in refs of the evidence `kinds`, best first."""
    kinds = tuple(kinds)
    pool = [(k, r) for k in kinds for r in _pool(refs, (k,))][:MAX_REFS_SCANNED]
    out: list[Alternative] = []
    for claim in claims:
        cands = _candidates(claim)
        scored = []
        for kind, ref in pool:
            score, inside = _score(claim, cands, ref, kind)
            if score[0] > 0:
                scored.append((score, ref, inside))
        if not scored:
            continue
        best = max(s[:2] for s, _, _ in scored)
        tied = [x for x in scored if x[0][:2] == best]
        heaviest = max(x[0][2] for x in tied)
        for score, ref, inside in sorted(tied, key=lambda x: -x[0][2]):
            if score[2] < 0.6 * heaviest:  # a ref that shares far less of the claim's wording
                continue
            match = _pick(ref, inside)
            if match is not None and verify(Alternative(tool=ref.tool, match=match, where=ref.where), [ref]):
                out.append(Alternative(tool=ref.tool, match=match, where=ref.where))
    return _simplest(out)[:MAX_ALTERNATIVES]


def _implies(stricter: Alternative, looser: Alternative) -> bool:
    """Whether every ref satisfying `stricter` satisfies `looser` (each of its strings lies in one of the stricter's)."""
    return stricter.tool == looser.tool and all(
        any(fold(m) in fold(n) for n in stricter.match) for m in looser.match
    )


def _simplest(alts: list[Alternative]) -> list[Alternative]:
    """Without an alternative that another, looser one on the same tool makes redundant (any_of
    needs one: the looser one is satisfied whenever the stricter is); of two equal ones, the first."""
    out: list[Alternative] = []
    for i, alt in enumerate(alts):
        redundant = any(
            _implies(alt, other) and (not _implies(other, alt) or j < i)
            for j, other in enumerate(alts)
            if j != i
        )
        if not redundant:
            out.append(alt)
    return out


def verify(alt: Alternative, refs: Sequence[Ref]) -> bool:
    """Whether some converted ref of the alternative's tool contains every match string (as scoring folds)."""
    for ref in refs:
        if ref.tool != alt.tool:
            continue
        text = fold_text(ref.text)
        if all(fold_text(m) in text for m in alt.match):
            return True
    return False
