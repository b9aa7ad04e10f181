"""Input caps: how much of any input rootproof reads, parses and stores.

The defaults of the `max_*` settings live here (this module imports nothing), so the loaders'
own defaults and `Settings` agree; `Settings.input_limits()` gives the configured values.
Every cap refuses with one message naming the file or field, the size and the setting, except
the two storage caps, which shorten what is kept and say so.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ALERTS",
    "ALERT_BYTES",
    "ALERT_FIELD_CHARS",
    "CARD_BYTES",
    "DEFAULT_LIMITS",
    "QUESTION_CHARS",
    "SCENARIO_FILE_BYTES",
    "STORED_RELATED_ALERTS",
    "InputLimits",
    "clip_text",
]

SCENARIO_FILE_BYTES = 128 * 1024 * 1024
"""Default cap of one scenario file, bytes (128 MiB: about half a million log entries)."""
CARD_BYTES = 1024 * 1024
"""Default cap of one knowledge card file, bytes (1 MiB)."""
ALERT_BYTES = 32 * 1024 * 1024
"""Default cap of one alert payload, bytes (32 MiB)."""
ALERTS = 20_000
"""Default cap of the alerts in one payload."""
ALERT_FIELD_CHARS = 8192
"""Default cap of one text field of an alert (a label or annotation key or value, a title), characters."""
QUESTION_CHARS = 8000
"""Default cap of the question a run keeps (and asks), characters."""
STORED_RELATED_ALERTS = 100
"""Default cap of the related alerts a run's record keeps (the agent sees at most 20)."""


@dataclass(frozen=True, kw_only=True)
class InputLimits:
    """The caps in force (from `Settings.input_limits()`; defaults as the settings')."""

    scenario_file_bytes: int = SCENARIO_FILE_BYTES
    card_bytes: int = CARD_BYTES
    alert_bytes: int = ALERT_BYTES
    alerts: int = ALERTS
    alert_field_chars: int = ALERT_FIELD_CHARS
    question_chars: int = QUESTION_CHARS
    stored_related_alerts: int = STORED_RELATED_ALERTS


DEFAULT_LIMITS = InputLimits()


def clip_text(text: str, limit: int) -> str:
    """`text` whole if it fits, else its first characters and a note of how many were cut."""
    if len(text) <= limit:
        return text
    note = f" … [{len(text) - limit} more characters not kept]"
    return text[: max(0, limit - len(note))] + note
