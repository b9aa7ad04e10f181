"""Terminal-safe text: control characters from logs, questions and models never reach a terminal raw.

A log line can carry `ESC [2J` (clear the screen), an OSC title sequence, `\\r` (overwrite what
was printed), C1 controls such as CSI (`\\x9b`) or bidirectional overrides that reorder what is
shown. `terminal_safe` shows each as an escape (`\\x1b`, `\\r`, `\\u202e`), newline and tab kept;
`SafeStream` does the same for everything a command writes, as a last line of defence, letting
through only the colour sequences (SGR) rich itself writes to a terminal.
"""

from __future__ import annotations

import re
from typing import Any, TextIO

__all__ = ["SafeStream", "json_text_safe", "terminal_safe"]

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""C0 but tab and newline, DEL, C1, and the bidirectional embeddings, overrides and isolates."""
_JSON_RAW = re.compile("[\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""What `json.dumps(ensure_ascii=False)` leaves raw although a terminal acts on it."""
_STREAM = re.compile("(\x1b\\[[0-9;]*m)|[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""A colour sequence (kept) or a control character (escaped)."""


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


def _stream_escape(match: re.Match[str]) -> str:
    if match.group(1):
        return match.group(1)
    # `\uXXXX` stays valid inside a JSON string, should a command print JSON through the stream.
    return f"\\u{ord(match.group()):04x}"


class SafeStream:
    """A text stream wrapper escaping control characters on `write` (colour sequences kept)."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner

    def write(self, text: str) -> int:
        """Write `text` with its control characters escaped; returns the length of `text`."""
        self._inner.write(_STREAM.sub(_stream_escape, text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        """Write each line through `write`."""
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
