"""Untrusted tool output: redaction of secrets and an injection detector.

Tool output is data, shown to the model as data. Before it is stored, secrets are redacted;
refs that read as instructions to an AI are flagged `instruction_like`. Redaction lives in
`boundary.redaction` (detect-secrets' plugins and our patterns); its two entry points are
re-exported here.
"""

from __future__ import annotations

import functools
import re
import unicodedata

from rootproof.boundary.redaction import redact, redact_value

__all__ = ["is_instruction_like", "redact", "redact_value"]

# Matched on folded text (`_fold`): format characters removed, NFKC, case folded, look-alike
# letters mapped, whitespace collapsed; so full-width letters and zero-width joins do not hide them.
_EARLIER = r"(?:previous|prior|above|earlier|preceding|foregoing|former|original|existing|system|all|any|my|your|these|those|the|of|everything|that)"
_RULES = r"(?:instructions?|rules?|prompts?|guidance|guidelines?|directions?|directives?|context|messages?|orders?|constraints?|commands?)"
_INJECTION = [
    re.compile(p)
    for p in (
        rf"\b(?:ignore|disregard|forget|override)\s+(?:{_EARLIER}\s+){{0,4}}{_RULES}\b",
        r"\b(?:ignore|disregard|forget)\s+(?:(?:all|everything|anything|what(?:ever)?)\s+)?(?:(?:is|was|you were told|written|said)\s+)?(?:the\s+)?(?:above|before|previously|earlier)\b",
        r"\b(?:new|updated|revised|real|actual|hidden)\s+(?:system\s+)?instructions?\s*[:：]",
        r"\bas\s+(?:an?|the)\s+(?:ai|assistant|agent|llm|language model|model|bot)\b[^.\n]{0,60}?\byou\s+(?:must|should|need to|have to|shall|are required to|will)\b",
        r"\byou are now\b",
        r"\bsystem prompt\b",
        r"\b(?:ai|assistant|agent|llm|model)s?\b[^.\n]{0,40}\b(?:must|should)\s+(?:report|say|conclude|answer|state|respond|write|output)",
        r"\b(?:tell|report to|inform) the (?:user|operator|engineer)s?\b",
        r"\bthe (?:real |actual |true )?root cause (?:is|was)\b",
        r"\b(?:report|declare|state|write) (?:the )?root cause as\b",
        r"(?:忽略|无视|忽视|忘记|忘掉|不要理会|不要理睬|跳过)(?:掉)?(?:之前|以上|先前|此前|前面|上面|上述|原有|原来|原先|所有|全部|一切|你的|的|，|,|\s)*(?:说明|指示|指令|规则|提示|要求|设定|命令|约束)",
        r"(?:将|把)根因(?:报告|写|定|认定|判定|标记|归结|说)(?:成|为)",
        r"根因(?:是|为|就是)",
        r"你现在是",
        r"作为(?:一个|一名)?(?:ai|人工智能|助手|智能助手|模型|大模型|语言模型)[，,]?\s*你(?:必须|应该|应当|需要|要)",
        r"(?:新的|最新|更新的?|真正的)(?:系统)?(?:指令|说明|指示)\s*[:：]",
        r"系统提示(?:词)?",
        r"(?:请|直接)(?:直接)?(?:告诉|报告给|通知)用户",
    )
]

# Letters from other scripts that look like Latin ones (Cyrillic, Greek): mapped before matching.
_CONFUSABLES = str.maketrans(
    {
        "а": "a", "е": "e", "о": "o", "р": "p", "с": "c", "х": "x", "у": "y", "і": "i", "ј": "j", "ѕ": "s",
        "ԁ": "d", "һ": "h", "ӏ": "l", "ո": "n", "ս": "u", "ν": "v", "ο": "o", "α": "a", "ε": "e", "ι": "i",
        "κ": "k", "ρ": "p", "τ": "t", "υ": "u", "χ": "x",
    }
)


def _fold(text: str) -> str:
    """What the detector reads: format and invisible characters dropped, NFKC, case folded, look-alikes mapped."""
    kept = "".join(
        ch
        for ch in text
        if unicodedata.category(ch) != "Cf" and ch != "\u034f" and not ("\ufe00" <= ch <= "\ufe0f")
    )
    folded = unicodedata.normalize("NFKC", kept).casefold().translate(_CONFUSABLES)
    return " ".join(folded.split())


# The English patterns (the first ten) as one alternation: a search of it finds a match exactly
# when one of them matches somewhere (no pattern holds a group reference), in one pass.
_ENGLISH = re.compile("|".join(f"(?:{p.pattern})" for p in _INJECTION[:10]))
# Every English pattern needs one of these literals in the folded text (`ignore`, `disregard`,
# `forget`, `override`; `instruction`; `you`; `system prompt`; `must`/`should`; `tell`,
# `report to`, `inform`; `root cause`); tests/boundary/test_fast_paths.py checks that each pattern
# holds one, and that the fast path agrees with the full pattern list on every corpus.
_ENGLISH_WORDS = (
    "ignore", "disregard", "forget", "override", "instruction", "you", "system prompt",
    "must", "should", "tell", "report to", "inform", "root cause",
)
_CACHE_MAX = 4096
_CACHE_TEXT = 512


def _fold_ascii(text: str) -> str:
    """`_fold` of ASCII text: no format characters or look-alikes, NFKC is the identity, casefold is lower."""
    return " ".join(text.lower().split())


def _detect(text: str) -> bool:
    if text.isascii():
        # The Chinese patterns need Chinese characters: only the English ones can match.
        folded = _fold_ascii(text)
        return any(w in folded for w in _ENGLISH_WORDS) and _ENGLISH.search(folded) is not None
    folded = _fold(text)
    return any(p.search(folded) for p in _INJECTION)


_detect_cached = functools.lru_cache(maxsize=_CACHE_MAX)(_detect)
"""`_detect` of short texts, remembered (results repeat the same values)."""


def is_instruction_like(text: str) -> bool:
    """True when the text reads as instructions addressed to an AI reader, disguised or not
    (full-width letters, zero-width characters, look-alike letters, Chinese)."""
    if len(text) > _CACHE_TEXT:
        return _detect(text)
    return _detect_cached(text)
