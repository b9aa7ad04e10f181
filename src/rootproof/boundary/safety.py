"""Untrusted tool output: redaction of secrets and an injection detector.

Tool output is data, shown to the model as data. Before it is stored, secrets are redacted;
refs that read as instructions to an AI are flagged `instruction_like`. Redaction lives in
`boundary.redaction` (detect-secrets' plugins and our patterns); its two entry points are
re-exported here.
"""

from __future__ import annotations

import re

from rootproof.boundary.redaction import redact, redact_value

__all__ = ["is_instruction_like", "redact", "redact_value"]

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


def is_instruction_like(text: str) -> bool:
    """True when the text reads as instructions addressed to an AI reader."""
    return any(p.search(text) for p in _INJECTION)
