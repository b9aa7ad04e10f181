"""`scenario.yaml` and `provenance.yaml` of a converted OpenSRE case.

What the agent may see comes from the alert and the evidence only: the question is the alert's
title, the alert is `commonLabels.alertname` / `severity` / `service` with the summary
annotation, and the other labels and annotations become labels — except any whose key names
the answer (`rds_failure_mode`, anything with `failure_mode`, `root_cause`, `answer`,
`scenario`, `expected`, `ground_truth`, `difficulty` in it) or whose value is the case's
`failure_mode`. `now` is the end of the evidence window; the alert carries no start time, so
`starts_at` is the start of the evidence window (the alert describes the whole window: "for 15
minutes"), unless the payload has a `startsAt`.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from rootproof.errors import ScenarioError
from rootproof.scenarios.importers._opensre_evidence import Evidence
from rootproof.scenarios.importers._opensre_prose import fold
from rootproof.scenarios.importers._opensre_read import ALERT_FILE, CASE_FILE, CaseInput, ImportLimits, Shape
from rootproof.scenarios.types import format_timestamp

__all__ = [
    "ALLOWED_TOOLS",
    "ANSWER_KEYS",
    "SEVERITIES",
    "case_id",
    "provenance_document",
    "scenario_document",
]

ALLOWED_TOOLS = ("lookup_knowledge", "query_logs", "query_metrics", "inspect_postgres")
ANSWER_KEYS = ("failure_mode", "root_cause", "answer", "scenario", "expected", "ground_truth", "difficulty")
"""A label or annotation whose key contains one of these is dropped: it names the answer."""
SEVERITIES: dict[str, str] = {
    "critical": "critical",
    "crit": "critical",
    "fatal": "critical",
    "page": "critical",
    "high": "critical",
    "error": "critical",
    "err": "critical",
    "major": "critical",
    "warning": "warning",
    "warn": "warning",
    "medium": "warning",
    "minor": "warning",
    "info": "info",
    "informational": "info",
    "low": "info",
    "none": "info",
    "ok": "info",
}
"""An alert's severity label → the scenario alert's severity."""
USED_LABELS = ("alertname", "severity", "service")
REPO = "https://github.com/Tracer-Cloud/opensre"
SUITE = "tests/synthetic/rds_postgres"


def case_id(name: str) -> str:
    """The scenario id of a case folder: `opensre-` + the name lower-cased, other characters as `-`."""
    slug = re.sub(r"[^a-z0-9-]+", "-", name.lower())
    slug = re.sub(r"-{2,}", "-", slug).strip("-")
    return f"opensre-{slug}" if slug else "opensre-case"


def _names_failure_mode(value: str, failure_mode: str) -> bool:
    if not failure_mode:
        return False
    v, fm = fold(value), fold(failure_mode)
    variants = {fm, fm.replace("_", " "), fm.replace("_", "-")}
    return v in variants or ("_" in fm and any(x in v for x in variants))


def _alert_time(alert: dict[str, Any], shape: Shape) -> datetime | None:
    for key in ("startsAt", "starts_at"):
        if alert.get(key) not in (None, ""):
            return shape.time(alert[key], key)
    alerts = alert.get("alerts")
    if isinstance(alerts, list) and alerts and isinstance(alerts[0], dict) and alerts[0].get("startsAt"):
        return shape.time(alerts[0]["startsAt"], "alerts[0].startsAt")
    return None


def _labels(case: CaseInput, shape: Shape, failure_mode: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in ("commonLabels", "commonAnnotations"):
        raw = case.alert.get(part)
        if raw is None:
            continue
        for key, value in shape.mapping(raw, part).items():
            if (
                part == "commonLabels"
                and key in USED_LABELS
                or part == "commonAnnotations"
                and key == "summary"
            ):
                continue
            where = f"{case.name}/{ALERT_FILE}: {part}.{key}"
            if any(k in fold(key) for k in ANSWER_KEYS):
                case.warnings.append(f"{where}: dropped (its key names the answer)")
                continue
            if isinstance(value, dict | list):
                case.warnings.append(
                    f"{where}: dropped (a {'mapping' if isinstance(value, dict) else 'list'}, labels are text)"
                )
                continue
            if value is None or value == "":
                continue
            text = shape.scalar_text(value, f"{part}.{key}")
            if _names_failure_mode(text, failure_mode):
                case.warnings.append(f"{where}: dropped (its value is the case's failure_mode)")
                continue
            if key in out:
                case.warnings.append(f"{where}: dropped (commonLabels has {key} already)")
                continue
            out[key] = text
    return out


def scenario_document(case: CaseInput, ev: Evidence, limits: ImportLimits) -> dict[str, Any]:
    """The `scenario.yaml` document of a case (`ScenarioError` naming alert.json when it cannot be read)."""
    shape = Shape(f"{case.name}/{ALERT_FILE}", limits)
    meta = Shape(f"{case.name}/{CASE_FILE}", limits)
    failure_mode = (
        ""
        if case.meta.get("failure_mode") is None
        else meta.text(case.meta["failure_mode"], "failure_mode").strip()
    )
    labels = shape.mapping(case.alert.get("commonLabels", {}), "commonLabels")
    annotations = shape.mapping(case.alert.get("commonAnnotations", {}) or {}, "commonAnnotations")
    name = shape.scalar_text(labels.get("alertname"), "commonLabels.alertname").strip()
    if not name:
        raise shape.fail("commonLabels.alertname", "expected the alert's name")
    title = "" if case.alert.get("title") is None else shape.text(case.alert["title"], "title").strip()
    if not title:
        title = name
        case.warnings.append(f"{shape.display}: title: missing; the question is the alert name")
    raw_severity = labels.get("severity", case.meta.get("severity"))
    severity = SEVERITIES.get(fold(str(raw_severity or "")))
    if severity is None:
        severity = "warning"
        case.warnings.append(
            f"{shape.display}: commonLabels.severity: {raw_severity!r} is not a known severity; written as warning"
        )
    if ev.end is None:
        raise ScenarioError(
            f"{case.name}: no evidence with a time (metrics, events, Performance Insights): the scenario clock `now` cannot be set"
        )
    starts = _alert_time(case.alert, shape) or ev.start or ev.end
    if starts > ev.end:
        case.warnings.append(
            f"{shape.display}: the alert starts after the evidence ends; starts_at set to the end of the evidence"
        )
        starts = ev.end
    for text, what in (
        (title, "title"),
        (str(annotations.get("summary") or ""), "commonAnnotations.summary"),
    ):
        if _names_failure_mode(text, failure_mode):
            case.warnings.append(
                f"{shape.display}: {what} names the case's failure_mode; kept (it is the alert's own wording)"
            )
    alert: dict[str, Any] = {"name": name, "severity": severity, "starts_at": format_timestamp(starts)}
    if labels.get("service") not in (None, ""):
        alert["service"] = shape.scalar_text(labels["service"], "commonLabels.service")
    alert["labels"] = _labels(case, shape, failure_mode)
    alert["summary"] = (
        ""
        if annotations.get("summary") is None
        else shape.scalar_text(annotations["summary"], "commonAnnotations.summary")
    )
    engine = (
        "" if case.meta.get("engine") is None else meta.scalar_text(case.meta["engine"], "engine").strip()
    )
    tags = ["opensre", "aws-rds", *([engine] if engine else [])]
    return {
        "id": case_id(case.name),
        "title": title,
        "language": "en",
        "question": title,
        "now": format_timestamp(ev.end),
        "allowed_tools": list(ALLOWED_TOOLS),
        "alert": alert,
        "tags": tags,
    }


def provenance_document(case: CaseInput, ev: Evidence) -> dict[str, Any]:
    """Where the converted case came from, its license, and what the conversion did."""
    files = [f for kind in ("metrics", "events", "pi") for f in case.files.get(kind, [])]
    shown = files if len(files) <= 6 else [*files[:3], f"… {len(files) - 3} more"]
    counts = [f"{len(ev.logs)} RDS events as CLOUD log entries", f"{len(ev.metrics)} metric series"]
    counts += [f"{len(rows)} {kind} rows" for kind, rows in ev.postgres.items()]
    inherited = (
        f"; inherits from {', '.join(case.bases)} (scenario.yml fields and the evidence files it leaves out)"
        if case.bases
        else ""
    )
    notes = (
        f"Converted by `rootproof import opensre` from OpenSRE's synthetic RDS PostgreSQL case {case.name}{inherited}. "
        f"The data is synthetic (written for OpenSRE's benchmark), not a real incident. Evidence kept as given: "
        f"{', '.join(counts)}; read from {', '.join(shown) or 'no evidence file'}. Dropped: CloudWatch series ids, "
        f"labels and status codes, the RDS events' source_type and event_categories (the level is read from the categories), "
        f"the alert's state and alert_source, and every field of scenario.yml and answer.yml the agent must not see; "
        f"ground_truth.yaml is derived from answer.yml by the importer's rules (docs/importing.md). "
        f"License: Apache-2.0, Copyright 2026 Tracer Cloud; this is a modified (converted) form of the original files."
    )
    return {
        "source": "derived_from_public_incident",
        "formats": "OpenSRE synthetic RDS case files: CloudWatch GetMetricData-like series (AWS/RDS), RDS DescribeEvents-like events, Performance Insights db_load, top SQL and load by wait event, user and host",
        "references": [
            f"{REPO} ({SUITE}/{case.name}), Apache-2.0, Copyright 2026 Tracer Cloud",
            *(f"{REPO} ({SUITE}/{b}): its base case" for b in case.bases),
        ],
        "notes": notes,
    }
