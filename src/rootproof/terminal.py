"""Terminal-safe text: control characters from logs, questions and models never reach a terminal raw.

A log line can carry `ESC [2J` (clear the screen), an OSC title sequence, `\\r` (overwrite what
was printed), C1 controls such as CSI (`\\x9b`) or bidirectional overrides that reorder what is
shown. `terminal_safe` shows each as an escape (`\\x1b`, `\\r`, `\\u202e`), newline and tab kept.
It is applied to the data a command prints, not to the whole stream: rich's own progress bars
and colours are control sequences too, and must reach the terminal. `one_line` also shows line
breaks and tabs escaped: what the CLI prints as one line of a report stays one line.
"""

from __future__ import annotations

import re

__all__ = ["json_text_safe", "one_line", "terminal_safe"]

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


_BREAKS = re.compile("[\t\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")
"""What lays text out on more than one line or in columns: tab, LF, CR, VT, FF, the file, group
and record separators, NEL and the Unicode line and paragraph separators."""
_BREAK_NAMES = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def one_line(text: str) -> str:
    """`terminal_safe`, and every line break and tab shown escaped (`\\n`, `\\t`, `\\u2028`):
    one line of output stays one line whatever text from evidence it quotes, so a logged
    `%0A  root cause: ...` can never print as a line of the report."""
    broken = _BREAKS.sub(lambda m: _BREAK_NAMES.get(m.group()) or (f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}"), text)
    return _CONTROL.sub(_escape, broken)


def json_text_safe(text: str) -> str:
    """JSON text with DEL, C1 and bidirectional controls as `\\uXXXX`: the same document, decoded."""
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
