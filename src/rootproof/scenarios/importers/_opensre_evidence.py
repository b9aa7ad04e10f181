"""OpenSRE evidence → `snapshot/tool_responses.yaml` sections, and the ref texts they yield.

The peer's evidence is kept as it is, nothing added (docs/importing.md has the tables):

- CloudWatch series → `metrics`: `metric` = `metric_name`, labels = the dimensions plus `stat`,
  `unit` as given, points = `timestamps` × `values`. The series' `id`, `label` and
  `status_code` are dropped (an `id` such as `m_replica_lag_confounder` would name the answer).
- RDS events → `logs` with `scope: CLOUD`: `service` = `source_identifier`, `source` =
  `aws_rds_events`, `message` as is, `level` from `event_categories` (`LEVELS`).
- Performance Insights → `db_load` as the series `db.load.avg` (label `DBInstanceIdentifier`,
  unit as given); `top_sql` → `postgres.top_queries`, `top_wait_events` →
  `postgres.wait_events`, `top_users` → `postgres.load_by_user`, `top_hosts` →
  `postgres.load_by_host`, each row as written.

`Ref` is what a tool call on the converted snapshot yields for one item, computed the way
`rootproof.tools.refs` computes it, so the ground truth's `match` strings can be checked against
the very texts the agent will cite. A metric series' ref text also carries figures of the queried
window (`first=… window=…`); its `Ref` keeps only the window-free parts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rootproof.scenarios.importers._opensre_read import CaseInput
from rootproof.scenarios.types import format_timestamp
from rootproof.tools.refs import canonical_json, fmt_value

__all__ = ["DB_LOAD_METRIC", "EVENT_SOURCE", "LEVELS", "PI_KINDS", "Evidence", "Ref", "convert_evidence"]

LEVELS: tuple[tuple[str, str], ...] = (
    ("failure", "ERROR"),
    ("low storage", "WARN"),
    ("failover", "WARN"),
    ("availability", "WARN"),
    ("warning", "WARN"),
)
"""RDS event category → log level; the most severe category of an event wins, any other
category (notification, backup, configuration change, read replica, maintenance, …) is INFO."""
_RANK = {"INFO": 0, "WARN": 1, "ERROR": 2}

EVENT_SOURCE = "aws_rds_events"
"""The `source` of every converted RDS event (the event stream)."""
DB_LOAD_METRIC = "db.load.avg"
"""Performance Insights' db_load series (average active sessions), as PI names the metric."""
PI_KINDS: dict[str, str] = {
    "top_sql": "top_queries",
    "top_wait_events": "wait_events",
    "top_users": "load_by_user",
    "top_hosts": "load_by_host",
}
"""Performance Insights list → `inspect_postgres` kind."""


@dataclass(frozen=True, kw_only=True)
class Ref:
    """A citable item of the converted snapshot, as a tool call yields it."""

    tool: str
    """`query_logs`, `query_metrics` or `inspect_postgres`."""
    where: str
    """Where the item is in `tool_responses.yaml` (`logs[3]`, `postgres.top_queries[0]`)."""
    text: str
    """Its ref text (a series: `<metric>{labels} unit=<unit>`, the window-free parts)."""
    pieces: tuple[str, ...] = ()
    """A series: the parts a `match` string may be (the metric name, each `k="v"` label)."""


@dataclass(kw_only=True)
class Evidence:
    """A case's converted evidence."""

    logs: list[dict[str, Any]] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    postgres: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    start: datetime | None = None
    """The start of the evidence window (the metrics' and Performance Insights' `start_time`)."""
    end: datetime | None = None
    """The end of the evidence window: the latest window end, point or event."""
    refs: list[Ref] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def responses(self) -> dict[str, Any]:
        """The `tool_responses.yaml` document (plain data, timestamps as text)."""
        doc: dict[str, Any] = {"data_source": "snapshot"}
        if self.logs:
            doc["logs"] = [{**e, "ts": format_timestamp(e["ts"])} for e in self.logs]
        if self.metrics:
            doc["metrics"] = [
                {**s, "points": [[format_timestamp(t), v] for t, v in s["points"]]} for s in self.metrics
            ]
        if self.postgres:
            doc["postgres"] = self.postgres
        return doc


def event_level(categories: list[str]) -> str:
    """The log level of an RDS event, by `LEVELS`."""
    level = "INFO"
    for category in categories:
        c = " ".join(category.lower().split())
        for name, lv in LEVELS:
            if c == name and _RANK[lv] > _RANK[level]:
                level = lv
    return level


def labels_text(labels: dict[str, str]) -> str:
    """Labels as a metric ref prints them (`{k="v",…}` sorted; nothing without labels)."""
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{fmt_value(labels[k])}"' for k in sorted(labels)) + "}"


def _series_ref(i: int, s: dict[str, Any]) -> Ref:
    labels = s["labels"]
    pieces = (s["metric"], *(f'{k}="{fmt_value(labels[k])}"' for k in sorted(labels)))
    return Ref(
        tool="query_metrics",
        where=f"metrics[{i}]",
        text=f"{s['metric']}{labels_text(labels)} unit={s['unit']}",
        pieces=pieces,
    )


def _add_series(ev: Evidence, series: dict[str, Any], where: str) -> None:
    key = (series["metric"], tuple(sorted(series["labels"].items())))
    for other in ev.metrics:
        if (other["metric"], tuple(sorted(other["labels"].items()))) == key:
            if other["points"] == series["points"]:
                ev.warnings.append(
                    f"{where}: an exact copy of an earlier {series['metric']} series; kept once"
                )
                return
            ev.warnings.append(
                f"{where}: a second {series['metric']}{labels_text(series['labels'])} series with other points; both kept"
            )
            break
    ev.metrics.append(series)


def _metrics(case: CaseInput, ev: Evidence) -> None:
    for m in case.metrics or []:
        labels: dict[str, str] = {}
        for name, value in m.dimensions:
            if name in labels:
                ev.warnings.append(f"{m.where}: dimension {name} given twice; the last value kept")
            labels[name] = value
        if m.stat is not None:
            if "stat" in labels:
                ev.warnings.append(
                    f"{m.where}: a dimension is named stat; the statistic {m.stat!r} is not added as a label"
                )
            else:
                labels["stat"] = m.stat
        if m.status_code not in (None, "Complete"):
            ev.warnings.append(
                f"{m.where}: status_code {m.status_code!r}: the series is kept as given (the status is not shown)"
            )
        if not m.points:
            ev.warnings.append(
                f"{m.where}: {m.metric} has no points; left out (a series without points is never shown)"
            )
            continue
        _add_series(
            ev, {"metric": m.metric, "labels": labels, "unit": m.unit, "points": list(m.points)}, m.where
        )


def _pi(case: CaseInput, ev: Evidence) -> None:
    pi = case.pi
    if pi is None:
        return
    where = case.files["pi"][0]
    load = pi.get("db_load")
    if load is not None and load["points"]:
        instance = pi.get("db_instance_identifier") or case.meta.get("db_instance_identifier")
        labels = {"DBInstanceIdentifier": str(instance)} if instance else {}
        _add_series(
            ev,
            {
                "metric": DB_LOAD_METRIC,
                "labels": labels,
                "unit": load["unit"],
                "points": list(load["points"]),
            },
            f"{where}: db_load",
        )
    for key, kind in PI_KINDS.items():
        rows = pi.get(key)
        if rows is None:
            continue
        kept = []
        for i, row in enumerate(rows):
            if "data_source" in row:  # the format reads this key as a marking, never as data
                ev.warnings.append(
                    f"{where}: {key}[{i}].data_source: dropped (the scenario format reserves this key)"
                )
                row = {k: v for k, v in row.items() if k != "data_source"}
            kept.append(row)
        ev.postgres[kind] = kept


def _window(case: CaseInput, ev: Evidence) -> None:
    starts = [t for t in (case.metrics_window[0], (case.pi or {}).get("start_time")) if t is not None]
    ends = [t for t in (case.metrics_window[1], (case.pi or {}).get("end_time")) if t is not None]
    points = [t for s in ev.metrics for t, _ in s["points"]]
    events = [e["ts"] for e in ev.logs]
    if not starts:
        starts = [min(points)] if points else [min(events)] if events else []
    ev.start = min(starts) if starts else None
    latest = ends + ([max(points)] if points else []) + ([max(events)] if events else [])
    ev.end = max(latest) if latest else None


def convert_evidence(case: CaseInput) -> Evidence:
    """The case's evidence as snapshot sections, its window and its refs."""
    ev = Evidence()
    for e in case.events or []:
        ev.logs.append(
            {
                "ts": e["date"],
                "service": e["source_identifier"],
                "level": event_level(e["event_categories"]),
                "scope": "CLOUD",
                "source": EVENT_SOURCE,
                "message": e["message"],
            }
        )
    _metrics(case, ev)
    _pi(case, ev)
    _window(case, ev)
    for i, e in enumerate(ev.logs):
        text = f"{format_timestamp(e['ts'])} {e['level']} {e['service']} [{e['source']}] {e['message']}"
        ev.refs.append(Ref(tool="query_logs", where=f"logs[{i}]", text=text))
    for i, s in enumerate(ev.metrics):
        ev.refs.append(_series_ref(i, s))
    for kind, rows in ev.postgres.items():
        for i, row in enumerate(rows):
            ev.refs.append(
                Ref(tool="inspect_postgres", where=f"postgres.{kind}[{i}]", text=canonical_json(row))
            )
    return ev
