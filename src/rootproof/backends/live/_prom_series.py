"""Prometheus matrix entries as `query_metrics` series (the live metrics backend's conversion).

A `query_range` answer's `result` is a list of `{"metric": {labels}, "values": [[ts, "v"], …]}`
entries (Prometheus's documented JSON). `kept_series(raw, limit)` orders them as results list
series (name, then labels sorted) on their labels alone, converts only the first `limit` that
have a finite point into `SeriesItem`s and counts, without converting them, how many of the
others have one too: a broad selector costs a sort of its label sets, not a conversion of every
point of every series.

Conversion (`series_item`): `metric` is `__name__`, `labels` the other labels (sorted), `unit`
inferred from the name's suffix (`unit_of`), `points` `[ts, value]` with `ts` formatted by
`scenarios.types.format_timestamp` and values int when integral (NaN, ±Inf and garbage dropped),
and the window summary (`tools.results.summary_of`).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

from rootproof.scenarios.types import format_timestamp
from rootproof.tools.results import SeriesItem, summary_of

__all__ = ["has_finite", "kept_series", "number", "series_item", "sort_key", "unit_of"]

_UNITS = (("_seconds", "seconds"), ("_bytes", "bytes"), ("_total", "count"), ("_count", "count"), ("_ratio", "ratio"))
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def unit_of(metric: str) -> str:
    """The unit a metric's name suffix announces: `_seconds` seconds, `_bytes` bytes, `_total` and
    `_count` count, `_ratio` ratio; "" otherwise."""
    for suffix, unit in _UNITS:
        if metric.endswith(suffix):
            return unit
    return ""


def number(raw: Any) -> int | float | None:
    """A sample value as a plain number: int when integral, None for NaN, ±Inf and garbage."""
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(value):
        return None
    return int(value) if value.is_integer() and abs(value) < 2**63 else value


def _point(pair: Any) -> tuple[float, int | float] | None:
    """One `[ts, "value"]` pair as (unix seconds, number); None when it is no finite point."""
    if not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[0], int | float) or not math.isfinite(pair[0]):
        return None
    value = number(pair[1])
    return None if value is None else (float(pair[0]), value)


def series_item(raw: Any) -> SeriesItem | None:
    """One matrix entry as a result series; None when it is malformed or has no finite point."""
    if not isinstance(raw, dict) or not isinstance(raw.get("metric"), dict) or not isinstance(raw.get("values"), list):
        return None
    labels = {str(k): str(v) for k, v in raw["metric"].items()}
    name = labels.pop("__name__", "")
    points: list[list[Any]] = []
    for pair in raw["values"]:
        point = _point(pair)
        if point is not None:
            points.append([format_timestamp(_EPOCH + timedelta(milliseconds=round(point[0] * 1000))), point[1]])
    if not points:
        return None
    summary = summary_of([p[1] for p in points])
    return SeriesItem(metric=name, labels=dict(sorted(labels.items())), unit=unit_of(name), points=points, summary=summary)


def sort_key(raw: Any) -> tuple[str, list[tuple[str, str]]] | None:
    """A matrix entry's place in results: name, then labels (sorted); None when malformed."""
    if not isinstance(raw, dict) or not isinstance(raw.get("metric"), dict):
        return None
    labels = {str(k): str(v) for k, v in raw["metric"].items()}
    name = labels.pop("__name__", "")
    return name, sorted(labels.items())


def has_finite(raw: Any) -> bool:
    """Whether `series_item` would keep a matrix entry (it has a finite point), without converting it."""
    values = raw.get("values") if isinstance(raw, dict) and isinstance(raw.get("metric"), dict) else None
    return isinstance(values, list) and any(_point(p) is not None for p in values)


def kept_series(raw: list[Any], limit: int) -> tuple[list[SeriesItem], int]:
    """The first `limit` entries with a finite point, in result order, as series (only those are
    converted), and how many entries have a finite point in all (the kept ones included)."""
    ordered = sorted(((key, entry) for entry in raw if (key := sort_key(entry)) is not None), key=lambda ke: ke[0])
    kept: list[SeriesItem] = []
    total = 0
    for _, entry in ordered:
        if len(kept) < limit:
            item = series_item(entry)
            if item is not None:
                kept.append(item)
                total += 1
        elif has_finite(entry):
            total += 1
    return kept, total
