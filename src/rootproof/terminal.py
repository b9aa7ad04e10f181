"""Terminal-safe text: control characters from logs, questions and models never reach a terminal raw.

A log line can carry `ESC [2J` (clear the screen), an OSC title sequence, `\\r` (overwrite what
was printed), C1 controls such as CSI (`\\x9b`) or bidirectional overrides that reorder what is
shown. `terminal_safe` shows each as an escape (`\\x1b`, `\\r`, `\\u202e`), newline and tab kept.
It is applied to the data a command prints, not to the whole stream: rich's own progress bars
and colours are control sequences too, and must reach the terminal.
"""

from __future__ import annotations

import re

__all__ = ["json_text_safe", "terminal_safe"]

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""C0 but tab and newline, DEL, C1, and the bidirectional embeddings, overrides and isolates."""
_JSON_RAW = re.compile("[\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""What `json.dumps(ensure_ascii=False)` leaves raw although a terminal acts on it."""


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code == 0x0D:
        return "\\r"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: str) -> str:
    """`text` with control characters shown as escapes (`\\x1b`, `\\r`, `\\u202e`), newline and tab kept."""
    return _CONTROL.sub(_escape, text)


def json_text_safe(text: str) -> str:
    """JSON text with DEL, C1 and bidirectional controls as `\\uXXXX`: the same document, decoded."""
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
