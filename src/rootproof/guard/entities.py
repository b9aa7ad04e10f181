"""The entities a claim names and the entities a ref is about (EG-18, CITATION_ENTITY_MISMATCH).

Code only, no model. An entity is a typed identifier: a process or session (`pid`), a transaction
(`xid`), a Redis client (`client`), a network address (`addr`, the IP without its port), a
relation (`relation`), a database (`database`), a service (`service`: the service of an application log
entry, a session's `application_name`) or an HTTP route (`route`, method and path).
They are read with narrow patterns only (`pid 21328`, `process 21328`, `"pid":21328`,
`transaction 790`, `relation "inventory"`, `POST /orders` …): a word the patterns do not know
is no entity, so free prose never invents one (a missed entity only makes the check weaker).

A ref of a structured row (a session, a lock, a Redis client) has a *subject*: the row's own
identifier (`pid` of a session or lock row, `id` of a client). The row is the record of its
subject; it merely *mentions* the others it lists (a waiter's `blocking_pids`). A log line or any
other ref has no subject: it is a record of everything it names.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache

from rootproof.tools.refs import normalize_text

__all__ = ["Entity", "RefEntities", "claim_mismatches", "culprit_mismatch", "culprit_strays", "named", "occurrences", "own_entities", "ref_entities"]

Entity = tuple[str, str]
"""(type, value): ("pid", "21328"), ("addr", "10.0.0.7"), ("route", "POST /orders") …"""

SUBJECT_TYPES = ("pid", "client")
"""The types a row can be the record of."""

ABOUT_TYPES = frozenset({"pid", "xid", "client", "addr", "relation", "database"})
"""The types that say what a ref is about. A service or a route says who reported a line and for
which request: a claim quoting one service's error may cite the same error reported by another,
so they count only for "every entity the claim names occurs in some cited ref"."""

_NUM = r"(\d{1,10})"
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("pid", re.compile(r"(?i)\b(?:pid|process|backend)\b\"?\s*(?:id\b)?\s*[:=#]?\s*" + _NUM + r"\b")),
    ("pid", re.compile(r"(?:进程|会话)\s*(?:号|ID|id)?\s*[:：=]?\s*" + _NUM)),
    ("xid", re.compile(r"(?i)\b(?:transaction|xid|transactionid)\b\"?\s*(?:id\b)?\s*[:=]?\s*\"?" + _NUM + r"\b")),
    ("xid", re.compile(r"事务\s*(?:号|ID|id)?\s*[:：=]?\s*" + _NUM)),
    ("client", re.compile(r"(?i)\bclient\s+id\s*[:=]?\s*" + _NUM + r"\b")),
    ("client", re.compile(r"(?:^|\s)id=" + _NUM + r"\b")),
    ("addr", re.compile(r"(?<![\w.])(\d{1,3}(?:\.\d{1,3}){3})(?!\d|\.\d)")),
    ("relation", re.compile(r"(?i)\b(?:relation|table)\s+\"([^\"\s]{1,128})\"")),
    ("relation", re.compile(r"\"(?:relname|relation|table)\"\s*:\s*\"([^\"]{1,128})\"")),
    ("database", re.compile(r"(?i)\bdatabase\s+\"([^\"\s]{1,128})\"")),
    ("database", re.compile(r"\"(?:datname|database|db)\"\s*:\s*\"([^\"]{1,128})\"")),
    ("service", re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+(?:Z|[+-]\d\d:?\d\d)?\s+[A-Z]{3,8}\s+([\w.-]{1,64})\s+\[")),
    ("service", re.compile(r"\"(?:application_name|service)\"\s*:\s*\"([^\"]{1,64})\"")),
    ("route", re.compile(r"\b(GET|POST|PUT|PATCH|DELETE)\s+(/[\w/.{}%~+:@-]{0,200})")),
)
_LISTS = re.compile(r"\"(?:blocking_pids|pids|waiting_pids)\"\s*:\s*\[([\d,\s]{0,400})\]")
_SUBJECT_FIELDS = (("pid", "pid"), ("client", "id"))
_MAX_TEXT = 8000
QUOTE_MIN = 16
"""The shortest stretch of a claim read as a quote of a cited ref."""


def occurrences(text: str) -> list[tuple[Entity, int, int]]:
    """Each entity `text` names, with the span of the words that name it (first 8000 characters)."""
    text = text[:_MAX_TEXT]
    out: list[tuple[Entity, int, int]] = []
    for kind, pattern in _PATTERNS:
        for m in pattern.finditer(text):
            if _cut(text, m):
                continue  # a number at the very end of a quote may be cut short: no entity
            if kind == "route":
                value = f"{m.group(1)} {m.group(2).rstrip('/') or '/'}"
            else:
                value = m.group(1).casefold() if kind in ("relation", "database", "service") else m.group(1)
            out.append(((kind, value), m.start(), m.end()))
    for m in _LISTS.finditer(text):
        out.extend((("pid", p.group()), m.start(), m.end()) for p in re.finditer(r"\d+", m.group(1)))
    return out


@lru_cache(maxsize=4096)
def named(text: str) -> frozenset[Entity]:
    """The entities `text` names."""
    return frozenset(e for e, _, _ in occurrences(text))


_CLOSING = frozenset('"”’」』\'')


def _cut(text: str, m: re.Match[str]) -> bool:
    """A number that ends a quotation (`…"pid":21"`), unless the number is quoted itself
    (`"transactionid":"790"`): an excerpt may end in the middle of it."""
    start, end = m.span(1)
    value = m.group(1)
    return value.isdigit() and end < len(text) and text[end] in _CLOSING and not (start > 0 and text[start - 1] == '"')


@dataclass(frozen=True)
class RefEntities:
    """What one ref is about: its subject (a structured row's own identifier) and all it names."""

    subject: Entity | None
    mentions: frozenset[Entity]


@lru_cache(maxsize=4096)
def ref_entities(tool: str, raw_path: str, text: str) -> RefEntities:
    """The subject and mentions of a ref, from its recomputed text."""
    mentions = named(text)
    subject: Entity | None = None
    if raw_path.startswith("$.rows["):
        row = _row(text)
        if row is not None:
            for kind, fieldname in _SUBJECT_FIELDS:
                value = row.get(fieldname)
                if isinstance(value, int | str) and str(value).isdigit() and (kind != "client" or "addr" in row):
                    subject = (kind, str(value))
                    break
    if subject is not None:
        mentions = mentions | {subject}
    return RefEntities(subject=subject, mentions=mentions)


def _row(text: str) -> dict[str, object] | None:
    """A row ref as a mapping: canonical JSON, or `key=value` pairs (a Redis client)."""
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None
    pairs = dict(p.split("=", 1) for p in text.split() if "=" in p)
    return pairs or None  # type: ignore[return-value]


def _present(entity: Entity, text: str) -> bool:
    """Whether the entity's value occurs in `text` (case-insensitive; a route as method and path)."""
    kind, value = entity
    if kind == "route":
        method, _, path = value.partition(" ")
        return re.search(re.escape(method) + r"\s+" + re.escape(path) + r"(?![\w/-])", text) is not None
    return value.casefold() in text.casefold()


def own_entities(claim_text: str, ref_texts: list[str]) -> frozenset[Entity]:
    """The entities a claim names in its own words: an entity whose naming words lie inside a
    stretch of at least `QUOTE_MIN` characters found verbatim (after `normalize_text`) in one of
    its cited refs is quoted from that ref, which says what the ref shows, not what the claim
    is about; the others are the claim's own."""
    text = normalize_text(claim_text)
    refs = [normalize_text(t)[: _MAX_TEXT * 2] for t in ref_texts]
    return frozenset(e for e, start, end in occurrences(text) if not any(_quoted(text, start, end, ref) for ref in refs))


def _quoted(text: str, start: int, end: int, ref: str) -> bool:
    """Whether `text[start:end]`, widened on both sides while it matches, is a stretch of `ref`
    of at least `QUOTE_MIN` characters (the first 64 places it occurs in `ref` are tried)."""
    token = text[start:end]
    pos = ref.find(token)
    for _ in range(64):
        if pos < 0:
            return False
        i, j = start, pos
        while i > 0 and j > 0 and text[i - 1] == ref[j - 1]:
            i, j = i - 1, j - 1
        k, m = end, pos + len(token)
        while k < len(text) and m < len(ref) and text[k] == ref[m]:
            k, m = k + 1, m + 1
        if k - i >= QUOTE_MIN:
            return True
        pos = ref.find(token, pos + 1)
    return False


def claim_mismatches(claim_text: str, refs: list[tuple[int, str, str, str]]) -> list[tuple[int | None, str]]:
    """EG-18 for one claim: `refs` are its cited runtime refs as (citation index, tool, raw path,
    text). What the claim names in its own words (`own_entities`: not quoting its refs)
    occurs in some cited ref, and every cited ref is about it: a row whose subject is of a type
    the claim names is the row of one it names; any other ref that names entities of the
    `ABOUT_TYPES` names at least one the claim names. Returns (citation index or None, detail)
    for each mismatch."""
    if not refs or not named(claim_text):
        return []
    claim = own_entities(claim_text, [text for _, _, _, text in refs])
    if not claim:
        return []
    out: list[tuple[int | None, str]] = []
    missing = sorted(e for e in claim if not any(_present(e, text) for _, _, _, text in refs))
    if missing:
        out.append((None, "the claim names " + ", ".join(f"{k} {v}" for k, v in missing[:4]) + " but no ref it cites does"))
    about = frozenset(e for e in claim if e[0] in ABOUT_TYPES)
    types = {k for k, _ in about}
    for idx, tool, path, text in refs:
        ents = ref_entities(tool, path, text)
        if ents.subject is not None and ents.subject[0] in types:
            if ents.subject not in about:
                names = ", ".join(sorted(v for k, v in about if k == ents.subject[0])[:4])
                out.append((idx, f"cites the row of {ents.subject[0]} {ents.subject[1]}; the claim is about {ents.subject[0]} {names}"))
            continue
        mentions = frozenset(e for e in ents.mentions if e[0] in ABOUT_TYPES)
        if about and mentions and not (mentions & about) and not any(_present(e, text) for e in about):
            out.append((idx, "the cited ref names none of the claim's entities (" + ", ".join(f"{k} {v}" for k, v in sorted(about)[:4]) + ")"))
    return out


def culprit_strays(culprit: str, refs: list[tuple[str, str, str]]) -> list[int]:
    """The indexes of the cause's cited rows that are about another session than the culprit's
    chain: a row of the culprit's type (a session, a client) that neither is the culprit's own
    nor names it (a waiter lists its blocker in `blocking_pids`). An unrelated session idle in
    transaction matches a row-lock signal too; it is no evidence of this culprit."""
    first = _first_subject(culprit)
    if first is None:
        return []
    out = []
    for i, (t, p, x) in enumerate(refs):
        ents = ref_entities(t, p, x)
        if ents.subject is not None and ents.subject[0] == first[0] and first not in ents.mentions:
            out.append(i)
    return out


def culprit_mismatch(culprit: str, refs: list[tuple[str, str, str]]) -> str | None:
    """EG-18 for a cause's culprit: the first process or client it names is cited by its own
    record — the row whose subject it is when the cause cites rows of that type (a waiter's row
    listing it in `blocking_pids` is not its record), else a ref that names it — and no row the
    cause cites is of another session that does not name it (`culprit_strays`). `refs` are the
    cause's cited runtime refs as (tool, raw path, text). None when it holds."""
    first = _first_subject(culprit)
    if first is None or not refs:
        return None
    strays = culprit_strays(culprit, refs)
    if strays:
        subjects = sorted({s[1] for i in strays if (s := ref_entities(*refs[i]).subject) is not None})
        return f"the culprit is {first[0]} {first[1]} but the cause also cites the row of {first[0]} " + ", ".join(subjects[:4]) + ", which neither is it nor names it"
    typed = [s for t, p, x in refs if (s := ref_entities(t, p, x).subject) is not None and s[0] == first[0]]
    if typed:
        if first in typed:
            return None
        return f"the culprit is {first[0]} {first[1]} but the cited rows are of {first[0]} " + ", ".join(sorted({s[1] for s in typed})[:4])
    if any(_present(first, x) for _, _, x in refs):
        return None
    return f"the culprit is {first[0]} {first[1]} and no ref the cause cites names it"


def _first_subject(text: str) -> Entity | None:
    best: tuple[int, Entity] | None = None
    for kind, pattern in _PATTERNS:
        if kind not in SUBJECT_TYPES:
            continue
        m = pattern.search(text[:_MAX_TEXT])
        if m is not None and (best is None or m.start() < best[0]):
            best = (m.start(), (kind, m.group(1)))
    return best[1] if best else None
