"""Alert payloads: Alertmanager v4 and Grafana webhooks, the plain scenario alert, and their errors."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from rootproof.alerts import AlertPayload, load_alert_file, parse_alert
from rootproof.errors import AlertError

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "alerts"


def _am() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((EXAMPLES / "alertmanager-pg-row-lock.json").read_text(encoding="utf-8"))
    return data


def _grafana() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((EXAMPLES / "grafana-redis-maxclients.json").read_text(encoding="utf-8"))
    return data


def test_alertmanager_primary_is_the_most_severe_firing_alert() -> None:
    p = parse_alert(_am())
    assert p.source == "alertmanager" and p.status == "firing"
    assert p.primary.name == "OrdersApiLatencyHigh"
    assert p.primary.severity == "critical" and p.primary.service == "order-service"
    assert p.primary.summary == "p95 latency 30s > 2s for 5m"
    assert p.primary.ends_at is None  # 0001-01-01T00:00:00Z means "not ended"
    assert p.primary.fingerprint == "a81e5c30d29f6b47"
    # Firing before resolved, then severity, then the earliest start: the resolved critical comes last.
    assert [a.name for a in p.related] == ["NodeFilesystemSpaceFillingUp", "OrdersApiErrorBudgetBurn", "PostgresReplicationLagHigh"]
    resolved = p.related[-1]
    assert resolved.status == "resolved" and resolved.ends_at is not None and resolved.ends_at.isoformat() == "2026-08-03T06:20:00+00:00"
    # The service falls back to the job label when there is no service or app label.
    assert p.related[0].service == "node-exporter"
    assert p.common_labels == {"env": "prod", "team": "orders"} and p.group_labels == {"env": "prod"}
    assert p.language == "en"


def test_severity_ties_go_to_the_earliest_start() -> None:
    data = _am()
    for a in data["alerts"]:
        a["labels"]["severity"] = "warning"
        a["status"] = "firing"
    p = parse_alert(data)
    assert p.primary.name == "PostgresReplicationLagHigh"  # started 06:02, the earliest


def test_severity_order_and_unknown_values() -> None:
    data = _am()
    sev = ["info", "error", "P1", "warning"]
    for a, s in zip(data["alerts"], sev, strict=True):
        a["labels"]["severity"] = s
        a["status"] = "firing"
    p = parse_alert(data)
    assert p.primary.severity == "error"
    assert [a.severity for a in p.related] == ["warning", "info", "none"]


def test_service_label_precedence() -> None:
    def service_of(labels: dict[str, str]) -> str | None:
        data = _am()
        data["alerts"] = [data["alerts"][0]]
        data["alerts"][0]["labels"] = {"alertname": "X", **labels}
        return parse_alert(data).primary.service

    assert service_of({"container": "c", "job": "j", "app": "a", "service": "s"}) == "s"
    assert service_of({"container": "c", "job": "j", "app": "a"}) == "a"
    assert service_of({"container": "c", "job": "j"}) == "j"
    assert service_of({"container": "c"}) == "c"
    assert service_of({}) is None


def test_missing_optional_fields_are_fine() -> None:
    data = {
        "version": "4",
        "status": "firing",
        "alerts": [{"status": "firing", "labels": {"alertname": "HighLoad"}, "startsAt": "2026-08-03T09:40:00.123456789Z"}],
    }
    p = parse_alert(data)
    assert p.primary.name == "HighLoad" and p.primary.severity == "none" and p.primary.service is None
    assert p.primary.summary == "" and p.primary.ends_at is None and p.primary.fingerprint is None
    assert p.related == [] and p.group_labels == {}
    assert "HighLoad" in p.question() and "an unknown service" in p.question()


def test_all_resolved_keeps_the_most_severe_as_primary() -> None:
    data = _am()
    data["status"] = "resolved"
    for a in data["alerts"]:
        a["status"] = "resolved"
        a["endsAt"] = "2026-08-03T10:30:00Z"
    p = parse_alert(data)
    assert p.status == "resolved" and p.primary.status == "resolved"
    assert p.primary.severity == "critical"
    assert "resolved" in p.question()


def test_grafana_payload() -> None:
    p = parse_alert(_grafana())
    assert p.source == "grafana" and p.title == "[FIRING:2] Cart (prod)"
    assert p.primary.name == "CartServiceErrorRate" and p.primary.service == "cart-service"
    assert p.primary.generator_url and p.primary.generator_url.startswith("https://grafana.example.com/")
    assert [a.name for a in p.related] == ["CheckoutLatencyHigh"]
    assert p.language == "zh"
    q = p.question()
    assert q.startswith("告警 CartServiceErrorRate") and "cart-service" in q and "5xx 比例 12%" in q and q.endswith("根因是什么？")


def test_grafana_docs_shape_without_severity_or_service() -> None:
    """Grafana's documented example: no severity, no service label; numbers in `values`."""
    data = {
        "receiver": "My Super Webhook",
        "status": "firing",
        "orgId": 1,
        "alerts": [
            {
                "status": "firing",
                "labels": {"alertname": "High CPU usage", "team": "blue", "zone": "eu-1"},
                "annotations": {"description": "The system has high CPU usage", "summary": "This alert was triggered for zone eu-1"},
                "startsAt": "2021-10-12T09:56:03.157076+02:00",
                "endsAt": "0001-01-01T00:00:00Z",
                "fingerprint": "bc97ff14869b13e3",
                "values": {"B": 44.2, "C": 1},
            },
            {
                "status": "firing",
                "labels": {"alertname": "High memory usage", "team": "blue", "zone": "us-1"},
                "annotations": {"summary": "This alert was triggered for zone us-1"},
                "startsAt": "2021-10-12T09:51:03.157076+02:00",
                "endsAt": "0001-01-01T00:00:00Z",
                "valueString": "[ metric='' labels={} value=14151.33 ]",
            },
        ],
        "groupLabels": {},
        "commonLabels": {"team": "blue"},
        "commonAnnotations": {},
        "externalURL": "https://play.grafana.org/",
        "version": "1",
        "groupKey": "{}:{}",
        "truncatedAlerts": 0,
        "title": "[FIRING:2]  (blue)",
        "state": "alerting",
        "message": "**Firing**",
    }
    p = parse_alert(data)
    assert p.primary.name == "High memory usage"  # same severity (none): the earlier start, 07:51Z
    assert p.primary.starts_at.isoformat() == "2021-10-12T07:51:03.157076+00:00"
    assert p.primary.service is None and p.primary.severity == "none"


def test_plain_scenario_alert_and_yaml_numbers_as_labels(tmp_path: Path) -> None:
    f = tmp_path / "alert.yaml"
    f.write_text(
        "name: OrdersApiLatencyHigh\nseverity: critical\nservice: order-service\nstarts_at: 2026-07-22T17:38:00Z\n"
        "labels: {team: payments, tier: 1}\nsummary: p95 latency 9.1s > 2s for 5m\n",
        encoding="utf-8",
    )
    p = load_alert_file(f)
    assert p.source == "plain" and p.primary.labels == {"team": "payments", "tier": "1"}
    assert p.primary.starts_at.isoformat() == "2026-07-22T17:38:00+00:00"
    assert p.for_agent() == {"source": "plain", "primary_alert": p.primary.brief()}


def test_related_alerts_reach_the_agent_as_context_only() -> None:
    view = parse_alert(_am()).for_agent()
    assert view["primary_alert"]["name"] == "OrdersApiLatencyHigh"
    assert len(view["related_alerts"]) == 3 and view["related_alerts"][-1]["status"] == "resolved"
    assert "context only" in view["related_alerts_note"]
    assert "alertname" not in view["primary_alert"]["labels"]


def _without(data: dict[str, Any], *path: str | int) -> dict[str, Any]:
    d = copy.deepcopy(data)
    node: Any = d
    for p in path[:-1]:
        node = node[p]
    del node[path[-1]]
    return d


def _with(data: dict[str, Any], value: Any, *path: str | int) -> dict[str, Any]:
    d = copy.deepcopy(data)
    node: Any = d
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    return d


MALFORMED: list[tuple[str, Any, str]] = [
    ("no alertname", _without(_am(), "alerts", 1, "labels", "alertname"), "alerts[1].labels.alertname"),
    ("bad startsAt", _with(_am(), "yesterday", "alerts", 2, "startsAt"), "alerts[2].startsAt"),
    ("missing startsAt", _without(_am(), "alerts", 0, "startsAt"), "alerts[0].startsAt"),
    ("zero startsAt", _with(_am(), "0001-01-01T00:00:00Z", "alerts", 0, "startsAt"), "alerts[0].startsAt"),
    ("pending status", _with(_am(), "pending", "alerts", 3, "status"), "alerts[3].status"),
    ("nested label", _with(_am(), {"a": 1}, "alerts", 0, "labels", "team"), "alerts[0].labels.team"),
    ("no alerts", _with(_am(), [], "alerts"), "alerts"),
    ("alerts not a list", _with(_am(), {"x": 1}, "alerts"), "alerts"),
    ("no status", _without(_am(), "status"), "status"),
    ("version 3", _with(_am(), "3", "version"), "version"),
    ("grafana bad orgId", _with(_grafana(), "one", "orgId"), "orgId"),
    ("plain without starts_at", {"name": "X", "severity": "critical"}, "starts_at"),
    ("plain unknown field", {"name": "X", "starts_at": "2026-01-01T00:00:00Z", "sevrity": "critical"}, "sevrity"),
    ("neither", {"foo": 1}, "alerts"),
    ("a list", [1, 2], "(payload)"),
]


@pytest.mark.parametrize(("case", "data", "field"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_payloads_name_the_field(case: str, data: Any, field: str) -> None:
    with pytest.raises(AlertError) as info:
        parse_alert(data, source="hook.json")
    assert info.value.field == field, str(info.value)
    assert str(info.value).startswith(f"hook.json: {field}: ")
    assert "\n" not in str(info.value)


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(AlertError, match="alert file not found"):
        load_alert_file(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": "4", "alerts": [', encoding="utf-8")
    with pytest.raises(AlertError, match=r"bad.json: line \d+: not valid JSON or YAML"):
        load_alert_file(bad)
    empty = tmp_path / "empty.json"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(AlertError, match=r"empty.json: \(file\): empty"):
        load_alert_file(empty)


def test_payload_is_immutable_and_round_trips() -> None:
    p = parse_alert(_am())
    again = AlertPayload.model_validate(p.trace())
    assert again == p
    with pytest.raises(Exception):  # noqa: B017 - frozen model: any mutation is refused
        p.primary.name = "other"  # type: ignore[misc]
