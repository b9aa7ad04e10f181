"""Series: a latency or error series that rose against its own baseline, a success series (a
hit ratio, a success rate) that fell. The baseline is the series' first third, compared with its
last third (each a mean of its points); the thresholds are the vocabulary's.

These findings are impact (someone was hurt in the window); they support no mechanism by
themselves.

A level against its capacity: a free-space series (`free`, `available`, `FreeStorageSpace` …)
is read by what is left and how fast it goes (the least-squares slope over the window), as a
time to exhaustion: a falling line with days of space left is an observation, not a fault.
"""

from __future__ import annotations

import re
from statistics import fmean
from typing import Any

from rootproof.diagnosis.findings import Finding, Ref, threshold

HURT = re.compile(r"latency|duration|response_time|error|5xx|timeout|failed|failure|rejected|p9\d", re.I)
FREE = re.compile(r"free|avail", re.I)
GOOD = re.compile(r"hit_ratio|hit_rate|success|availability|apdex", re.I)
MIN_POINTS = 6
"""Fewer points than this and no baseline is read."""


def _values(series: dict[str, Any]) -> list[float]:
    out: list[float] = []
    for p in series.get("points") or []:
        if isinstance(p, list | tuple) and len(p) == 2 and isinstance(p[1], int | float) and not isinstance(p[1], bool):
            out.append(float(p[1]))
    return out


def series_changes(kind: str | None, result: dict[str, Any], refs: list[Ref]) -> list[Finding]:
    known = {r.path for r in refs}
    out: list[Finding] = []
    rise = threshold("metrics.hurt_rose", "ratio", 2.0)
    fall = threshold("metrics.success_fell", "ratio", 0.8)
    for i, s in enumerate(result.get("series") or []):
        if not isinstance(s, dict):
            continue
        path = f"$.series[{i}]"
        name = str(s.get("metric", ""))
        values = _values(s)
        if path not in known or len(values) < MIN_POINTS:
            continue
        third = len(values) // 3
        base, recent = fmean(values[:third]), fmean(values[-third:])
        if GOOD.search(name) and base > 0 and recent <= fall * base:
            out.append(Finding(code="metrics.success_fell", text=f"{name} fell from {base:.4g} to {recent:.4g} (mean of the first and last third of the window)", refs=(path,), numbers={"baseline": round(base, 6), "value": round(recent, 6)}))
        elif HURT.search(name) and not GOOD.search(name) and recent > 0 and recent >= rise * max(base, 1e-9):
            out.append(Finding(code="metrics.hurt_rose", text=f"{name} rose from {base:.4g} to {recent:.4g} (mean of the first and last third of the window)", refs=(path,), numbers={"baseline": round(base, 6), "value": round(recent, 6)}))
        if FREE.search(name) and not HURT.search(name):
            left = _exhaustion(name, path, s, values)
            if left is not None:
                out.append(left)
    return out[:4]


def _slope_per_s(series: dict[str, Any]) -> float | None:
    """The least-squares slope of a series' points (value per second), None without two times."""
    pts = [(float(p[0]), float(p[1])) for p in series.get("points") or [] if isinstance(p, list | tuple) and len(p) == 2 and isinstance(p[0], int | float) and isinstance(p[1], int | float)]
    if len(pts) < 2:
        return None
    mx, my = fmean(t for t, _ in pts), fmean(v for _, v in pts)
    den = sum((t - mx) ** 2 for t, _ in pts)
    return sum((t - mx) * (v - my) for t, v in pts) / den if den > 0 else None


def _exhaustion(name: str, path: str, series: dict[str, Any], values: list[float]) -> Finding | None:
    """What is left of a free-space series and, when it falls, when it runs out."""
    slope = _slope_per_s(series)
    left = values[-1]
    if slope is None or left < 0:
        return None
    near = threshold("metrics.capacity_running_out", "exhausted_within_s", 6 * 3600.0)
    if slope >= 0:
        return None
    eta = left / -slope
    code = "metrics.capacity_running_out" if eta <= near else "metrics.capacity_left"
    return Finding(
        code=code,
        text=f"{name} at {left:.4g} falls {-slope * 3600:.4g} per hour: exhausted in about {eta / 3600:.3g} h at that rate",
        refs=(path,),
        numbers={"value": left, "per_hour": round(slope * 3600, 6), "exhausted_in_s": round(eta, 1)},
    )
