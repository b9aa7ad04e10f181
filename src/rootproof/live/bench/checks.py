"""A deterministic check's outcome, and holding a check for several seconds."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Check", "hold"]


@dataclass(frozen=True, kw_only=True)
class Check:
    """One deterministic check: what was checked, whether it held, and what was seen."""

    name: str
    ok: bool
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def hold(check: Callable[[], Check], *, seconds: float, interval_s: float = 1.0, name: str | None = None) -> Check:
    """Run `check` every `interval_s` for `seconds`; ok only when every run held (the first
    failure is returned at once, with how long the check had held until then)."""
    t0 = time.monotonic()
    runs = 0
    last: Check | None = None
    while True:
        last = check()
        runs += 1
        if not last.ok:
            return Check(name=name or last.name, ok=False, detail=f"failed after {time.monotonic() - t0:.1f} s ({runs} checks): {last.detail}")
        if time.monotonic() - t0 >= seconds:
            return Check(name=name or last.name, ok=True, detail=f"held {time.monotonic() - t0:.1f} s ({runs} checks): {last.detail}")
        time.sleep(interval_s)
