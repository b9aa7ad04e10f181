"""Untrusted tool output: redaction of secrets and an injection detector.

Tool output is data, shown to the model as data. Before it is stored, secrets are redacted;
refs that read as instructions to an AI are flagged `instruction_like`.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["is_instruction_like", "redact", "redact_value"]

_REDACTIONS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"(?P<pre>\b[a-z][a-z0-9+.\-]*://[^:/\s@]+:)(?P<secret>[^@\s/]+)(?=@)", re.I), r"\g<pre>***"),
    (re.compile(r"(?P<pre>\b(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key)\s*[=:]\s*)(?P<secret>[^\s,;&\"']+)", re.I), r"\g<pre>***"),
    (re.compile(r"(?P<pre>\bBearer\s+)[A-Za-z0-9\-._~+/]{8,}=*", re.I), r"\g<pre>***"),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), "AKIA****************"),
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}\b"), "sk-***"),
]

_INJECTION = [
    re.compile(p, re.I)
    for p in (
        r"ignore (all |any )?(the )?(previous|prior|above|earlier) (instructions|rules|prompts?)",
        r"disregard (all |any )?(the )?(previous|prior|above) (instructions|rules)",
        r"\byou are now\b",
        r"\bsystem prompt\b",
        r"\b(?:AI|assistant|agent|LLM|model)s?\b[^.\n]{0,40}\b(?:must|should)\s+(?:report|say|conclude|answer|state)",
        r"\b(?:tell|report to) the (?:user|operator)\b",
        r"\bthe (?:real |actual |true )?root cause is\b",
        r"忽略(之前|以上|先前)的?(所有)?(指令|规则|提示)",
        r"根因(是|为)",
        r"你现在是",
    )
]


def redact(text: str) -> str:
    """Mask passwords in connection strings, tokens and keys."""
    for pattern, repl in _REDACTIONS:
        text = pattern.sub(repl, text)
    return text


def redact_value(value: Any) -> Any:
    """Redact every string inside plain JSON data (keys kept)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [redact_value(v) for v in value]
    if isinstance(value, dict):
        return {k: redact_value(v) for k, v in value.items()}
    return value


def is_instruction_like(text: str) -> bool:
    """True when the text reads as instructions addressed to an AI reader."""
    return any(p.search(text) for p in _INJECTION)
