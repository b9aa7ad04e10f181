"""Card aliases (other vendors' names of a signal's metric and strings), the trend tests on each
alias's series, evidence against a hypothesis, culprit markers and the `where` extensions
(docs/knowledge-cards.md, "Aliases")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rootproof.errors import CardError
from rootproof.kb.cards import Signal, load_cards, parse_card
from rootproof.kb.signals import ref_matches, where_holds

CARD = """---
id: demo-lag
title: Demo replication lag
domain: postgresql
aliases:
  "pg_replication_lag*":
    - {name: ReplicaLag, threshold: 300}
    - postgresql.replication_delay
  "instance:node_cpu_utilisation:rate*":
    - {name: CPUUtilization, scale: 100}
  "recovery conflict": ["conflict with recovery"]
hypotheses:
  - component: postgresql
    mechanism: replication_lag
    signals:
      - {tool: query_metrics, metric: "pg_replication_lag*", trend: rises, weight: 3}
      - {tool: query_metrics, metric: "instance:node_cpu_utilisation:rate*", trend: high, threshold: 0.9, weight: 1}
      - {tool: query_metrics, metric: "instance:node_cpu_utilisation:rate*", trend: stays_below, threshold: 0.5, weight: 2, rules_out: true}
      - {tool: query_logs, match: ["recovery conflict", "standby"], weight: 2}
---
Body.
"""


def _series(name: str, first: float, last: float, lo: float, hi: float, unit: str = "Seconds") -> str:
    return (
        f'{name}{{DBInstanceIdentifier="db-1"}} first={first} last={last} min={lo} max={hi} '
        f"delta={last - first} mean={(lo + hi) / 2} unit={unit} window=2026-01-01T00:00:00.000Z..2026-01-01T00:30:00.000Z"
    )


def _card(tmp_path: Path, text: str = CARD) -> Any:
    p = tmp_path / "demo-lag.md"
    p.write_text(text, encoding="utf-8")
    return parse_card(text, p)


def test_aliases_merge_into_the_signals_that_use_the_canonical_name(tmp_path: Path) -> None:
    sigs = _card(tmp_path).hypotheses[0].signals
    assert sigs[0].metric_names() == [("pg_replication_lag*", None), ("ReplicaLag", 300.0), ("postgresql.replication_delay", None)]
    assert sigs[1].metric_names() == [("instance:node_cpu_utilisation:rate*", 0.9), ("CPUUtilization", 90.0)]
    assert sigs[3].spellings("recovery conflict") == ["recovery conflict", "conflict with recovery"]


def test_each_alias_series_is_tested_with_its_own_threshold(tmp_path: Path) -> None:
    lag, cpu, calm, log = _card(tmp_path).hypotheses[0].signals
    path = "$.series[0]"
    assert ref_matches(lag, "query_metrics", None, path, _series("ReplicaLag", 1.2, 1140.0, 1.2, 1140.0))
    # 195 s of lag on CloudWatch is under the alias's own threshold (300 s).
    assert not ref_matches(lag, "query_metrics", None, path, _series("ReplicaLag", 1.1, 196.1, 1.1, 196.1))
    # The Prometheus name keeps the signal's threshold (any rise).
    assert ref_matches(lag, "query_metrics", None, path, _series("pg_replication_lag_seconds", 0.1, 2.0, 0.1, 2.0))
    assert ref_matches(lag, "query_metrics", None, path, _series("postgresql.replication_delay", 0.1, 2.0, 0.1, 2.0))
    # A scaled alias: percent for a canonical fraction.
    assert ref_matches(cpu, "query_metrics", None, path, _series("CPUUtilization", 18.0, 95.0, 18.0, 97.0, "Percent"))
    assert not ref_matches(cpu, "query_metrics", None, path, _series("CPUUtilization", 18.0, 60.0, 18.0, 61.0, "Percent"))
    assert ref_matches(calm, "query_metrics", None, path, _series("CPUUtilization", 10.0, 12.0, 9.0, 19.0, "Percent"))
    assert not ref_matches(calm, "query_metrics", None, path, _series("CPUUtilization", 18.0, 95.0, 18.0, 97.0, "Percent"))
    # A match string's alias stands in for it; the other strings are still required.
    line = "2026-01-01T00:10:00.000Z ERROR api [api.log] canceling statement due to conflict with recovery on standby"
    assert ref_matches(log, "query_logs", None, "$.entries[0]", line)
    assert not ref_matches(log, "query_logs", None, "$.entries[0]", line.replace("standby", "primary"))


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ('  "recovery conflict": ["conflict with recovery"]', "  nope: [x]", "aliases.nope"),
        ('  "recovery conflict": ["conflict with recovery"]', '  "recovery conflict": [{name: x, threshold: 3}]', "aliases.recovery conflict[0].threshold"),
        ('  "recovery conflict": ["conflict with recovery"]', '  "recovery conflict": [{name: x, scale: 3}]', "aliases.recovery conflict[0].scale"),
        ("    - postgresql.replication_delay", '    - ""', "aliases.pg_replication_lag*[1].name"),
        ("    - {name: CPUUtilization, scale: 100}", "    - {name: CPUUtilization, scale: 0}", "aliases.instance:node_cpu_utilisation:rate*[0].scale"),
        ("trend: rises, weight: 3}", "trend: rises, weight: 3, rules_out: true, discriminating: true}", "hypotheses[0].signals[0].rules_out"),
        ('weight: 2, rules_out: true}', 'weight: 2, rules_out: true, culprit: true}', "hypotheses[0].signals[2].culprit"),
    ],
)
def test_bad_aliases_and_markers_are_one_line_errors(tmp_path: Path, old: str, new: str, field: str) -> None:
    assert old in CARD
    with pytest.raises(CardError) as exc:
        _card(tmp_path, CARD.replace(old, new))
    msg = str(exc.value)
    assert "\n" not in msg
    assert f"field {field}:" in msg, msg


def test_signal_level_aliases_must_name_one_of_its_own_strings() -> None:
    with pytest.raises(ValueError, match="aliases.elsewhere"):
        Signal.model_validate({"tool": "query_logs", "any": ["a"], "aliases": {"elsewhere": ["b"]}})


def test_where_share_path_and_contains() -> None:
    rows = [
        {"statement": "SELECT * FROM orders WHERE status = $1", "db_load_avg": 7.2, "wait_events": [{"name": "CPU:user", "db_load_avg": 5.9}]},
        {"statement": "SELECT 1", "db_load_avg": 0.5, "wait_events": [{"name": "IO:DataFileRead", "db_load_avg": 0.3}]},
    ]
    cond = {"db_load_avg": ">=40%", "wait_events[0].name": "~CPU"}
    assert where_holds(rows[0], cond, rows)
    assert not where_holds(rows[1], cond, rows)
    # A share needs the whole table: without it the condition does not hold.
    assert not where_holds(rows[0], cond)
    assert where_holds(rows[0], {"statement": "~orders"})
    assert not where_holds(rows[0], {"wait_events[3].name": "~CPU"})


def test_new_trends() -> None:
    def sig(trend: str, thr: float) -> Signal:
        return Signal.model_validate({"tool": "query_metrics", "metric": "FreeStorageSpace", "trend": trend, "threshold": thr})

    recovered = _series("FreeStorageSpace", 32e9, 214e9, 3.2e9, 214e9, "Bytes")
    exhausted = _series("FreeStorageSpace", 14e9, 0.5e9, 0.4e9, 14e9, "Bytes")
    flat = _series("FreeStorageSpace", 214e9, 214e9, 214e9, 214e9, "Bytes")
    path = "$.series[0]"
    assert ref_matches(sig("ends_high", 1e9), "query_metrics", None, path, recovered)
    assert not ref_matches(sig("ends_high", 1e9), "query_metrics", None, path, exhausted)
    assert not ref_matches(sig("ends_high", 1e9), "query_metrics", None, path, flat)
    assert ref_matches(sig("ends_low", 1e9), "query_metrics", None, path, exhausted)
    assert ref_matches(sig("flat", 0), "query_metrics", None, path, flat)
    assert not ref_matches(sig("flat", 0), "query_metrics", None, path, exhausted)
    assert ref_matches(sig("stays_above", 1e11), "query_metrics", None, path, flat)


def test_builtin_cards_name_provider_vocabularies() -> None:
    cards = load_cards()
    names = {n for c in cards.values() for h in c.hypotheses for s in h.signals for n, _ in s.metric_names()}
    for vendor_name in ("ReplicaLag", "CPUUtilization", "FreeStorageSpace", "DatabaseConnections", "aws.rds.cpuutilization", "postgresql.connections"):
        assert vendor_name in names, vendor_name
    mechanisms = {h.mechanism for c in cards.values() for h in c.hypotheses}
    assert {"failover", "storage_full", "checkpoint_storm", "vacuum_storm", "cpu_saturation"} <= mechanisms
    assert any(s.culprit for c in cards.values() for h in c.hypotheses for s in h.signals)
    assert any(s.rules_out for c in cards.values() for h in c.hypotheses for s in h.signals)
