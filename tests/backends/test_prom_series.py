"""Prometheus matrix entries as `query_metrics` series (backends/live/_prom_series.py), on
Prometheus's documented `query_range` JSON: conversion, order, and the cut before conversion."""

from __future__ import annotations

from typing import Any

import pytest

from rootproof.backends.live import _prom_series
from rootproof.backends.live._prom_series import has_finite, kept_series, series_item, sort_key, unit_of


def test_nan_and_inf_points_are_dropped_values_int_when_integral() -> None:
    raw = {"metric": {"__name__": "x_seconds", "b": "2", "a": "1"}, "values": [[1.5, "NaN"], [2, "3"], [3.25, "+Inf"], [4, "0.5"], [5, "-Inf"]]}
    s = series_item(raw)
    assert s is not None
    assert s.points == [["1970-01-01T00:00:02.000Z", 3], ["1970-01-01T00:00:04.000Z", 0.5]]
    assert list(s.labels) == ["a", "b"] and s.unit == "seconds" and s.summary.last == 0.5
    assert series_item({"metric": {"__name__": "y"}, "values": [[1, "NaN"]]}) is None
    assert series_item({"metric": {"__name__": "y"}, "values": [[float("inf"), "1"]]}) is None
    assert not has_finite({"metric": {"__name__": "y"}, "values": [[1, "NaN"], [float("nan"), "2"], "x"]})
    assert has_finite(raw) and not has_finite({"values": [[1, "1"]]}) and not has_finite("junk")


def test_units_from_suffixes() -> None:
    assert [unit_of(n) for n in ("a_seconds", "a_bytes", "a_total", "pg_locks_count", "a_ratio", "pg_up")] == [
        "seconds", "bytes", "count", "count", "ratio", ""
    ]


def _entry(name: str, i: int, values: list[list[Any]] | None = None) -> dict[str, Any]:
    return {"metric": {"__name__": name, "instance": f"h{i:03d}", "job": "j"}, "values": values or [[1785000000, str(i)]]}


def test_only_the_kept_series_are_converted_the_rest_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    raw: list[Any] = [_entry(f"m_{i % 7}", i) for i in reversed(range(120))]
    raw += [_entry("a_empty", 0, [[1785000000, "NaN"]]), _entry("z_empty", 0, [[1785000000, "+Inf"]]), "junk", {"metric": 1}]
    converted: list[Any] = []
    real = _prom_series.series_item

    def spy(entry: Any) -> Any:
        converted.append(entry)
        return real(entry)

    monkeypatch.setattr(_prom_series, "series_item", spy)
    kept, total = kept_series(raw, 50)
    assert total == 120 and len(kept) == 50
    # converted: the empty entry sorted first ("a_empty"), then the 50 kept; never the other 70
    assert len(converted) == 51 and converted[0]["metric"]["__name__"] == "a_empty"
    keys = [(s.metric, sorted(s.labels.items())) for s in kept]
    expected = sorted(k for k in (sort_key(e) for e in raw) if k is not None and not k[0].endswith("_empty"))[:50]
    assert keys == expected and keys == sorted(keys)
    assert kept_series(raw, 500)[1] == total  # the count does not depend on the cut
    assert kept_series([], 50) == ([], 0)
