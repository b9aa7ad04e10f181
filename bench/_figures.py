"""What the bench scripts share: progress lines on stderr and percentiles of their timings."""

from __future__ import annotations

import math
import sys


def progress(message: str) -> None:
    """A progress line on stderr (figures go to stdout)."""
    print(message, file=sys.stderr, flush=True)


def pct(xs: list[float], q: float) -> float | None:
    """The q-th percentile (linear interpolation, as numpy's default), None when empty."""
    if not xs:
        return None
    s = sorted(xs)
    pos = (len(s) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)
