"""Alert payloads (AIOps mode): Alertmanager v4 and Grafana webhooks, and the plain scenario alert.

All three parse into one validated `AlertPayload`: the primary alert (the firing alert of
highest severity, ties to the earliest start) and the related alerts, kept as context. A
malformed payload raises `AlertError` naming the field at fault (`alerts[1].startsAt`).

Conventions (Prometheus practice): severity is the `severity` label
(critical > error > warning > info > none); the service is the first of the labels
`service`, `app`, `job`, `container`; the alert's name is the `alertname` label.

Bounds (rootproof.limits, each a setting): a payload above `max_alert_bytes`, with more than
`max_alerts` alerts, a text field longer than `max_alert_field_chars` or nesting deeper than
`MAX_DEPTH` is refused before it is validated, naming the field; YAML anchors and aliases are
refused. A run's record keeps at most `max_stored_related_alerts` related alerts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from rootproof.errors import AlertError, ConfigError
from rootproof.limits import DEFAULT_LIMITS, InputLimits, clip_text

__all__ = [
    "SERVICE_LABELS",
    "SEVERITY_RANK",
    "AlertItem",
    "AlertPayload",
    "as_payload",
    "check_alert_size",
    "load_alert_file",
    "parse_alert",
]

SEVERITY_RANK: dict[str, int] = {"critical": 4, "error": 3, "warning": 2, "info": 1, "none": 0}
"""Severity order; a value outside it (after the aliases below) ranks as `none`."""
_SEVERITY_ALIASES = {"crit": "critical", "fatal": "critical", "page": "critical", "err": "error", "warn": "warning", "information": "info", "informational": "info"}
SERVICE_LABELS = ("service", "app", "job", "container")
_ZERO_TIME_YEAR = 1  # Alertmanager and Grafana send 0001-01-01T00:00:00Z for "not ended"
MAX_RELATED = 20
MAX_DEPTH = 16
"""Deepest nesting of mappings and lists an alert payload may use (webhooks use 4)."""
_SURROGATE = re.compile(r"[\ud800-\udfff]")
ROUTER_TEXT_CHARS = 2000
"""The router reads at most this much of an alert (its title and labels)."""


_QUESTION: dict[str, dict[str, str]] = {
    "en": {
        "head": "Alert {name} (severity {severity}) is {state} on {service} since {when}",
        "firing": "firing",
        "resolved": "resolved",
        "unknown": "an unknown service",
        "summary": "summary: {}",
        "labels": "labels: {}",
        "sep": "; ",
        "ask": ". What is causing it?",
    },
    "zh": {
        "head": "告警 {name}（级别 {severity}）自 {when} 起在 {service} 上{state}",
        "firing": "正在触发",
        "resolved": "已恢复",
        "unknown": "未知服务",
        "summary": "摘要：{}",
        "labels": "标签：{}",
        "sep": "；",
        "ask": "。根因是什么？",
    },
}


def _label_value(value: Any) -> Any:
    """Labels are strings; YAML files may hold numbers or booleans, which mean their text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return value


Labels = dict[str, Annotated[str, BeforeValidator(_label_value)]]


def _utc(value: datetime | None) -> datetime | None:
    if value is None or value.year <= _ZERO_TIME_YEAR:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class _WebhookAlert(BaseModel):
    """One alert of an Alertmanager or Grafana webhook (unknown fields are kept out, not refused)."""

    model_config = ConfigDict(extra="ignore")

    status: Literal["firing", "resolved"]
    labels: Labels
    annotations: Labels = Field(default_factory=dict)
    startsAt: datetime
    endsAt: datetime | None = None
    generatorURL: str | None = None
    fingerprint: str | None = None


class _Webhook(BaseModel):
    model_config = ConfigDict(extra="ignore")

    status: Literal["firing", "resolved"]
    receiver: str | None = None
    groupKey: str | None = None
    groupLabels: Labels = Field(default_factory=dict)
    commonLabels: Labels = Field(default_factory=dict)
    commonAnnotations: Labels = Field(default_factory=dict)
    externalURL: str | None = None
    truncatedAlerts: int = 0
    alerts: list[_WebhookAlert] = Field(min_length=1)


class _Alertmanager(_Webhook):
    version: Literal["4"]


class _Grafana(_Webhook):
    version: str | None = None
    orgId: int | None = None
    title: str | None = None
    state: str | None = None
    message: str | None = None


class _Plain(BaseModel):
    """The `alert` of scenario.yaml (docs/scenario-files.md)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    severity: str = "none"
    service: str | None = None
    starts_at: datetime
    ends_at: datetime | None = None
    status: Literal["firing", "resolved"] = "firing"
    labels: Labels = Field(default_factory=dict)
    summary: str = ""
    description: str = ""


class AlertItem(BaseModel):
    """One alert, normalised."""

    model_config = ConfigDict(frozen=True)

    name: str
    status: Literal["firing", "resolved"]
    severity: str
    """One of SEVERITY_RANK's keys."""
    service: str | None
    starts_at: datetime
    ends_at: datetime | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    summary: str = ""
    description: str = ""
    fingerprint: str | None = None
    generator_url: str | None = None

    @property
    def rank(self) -> int:
        """Severity rank (higher is more severe)."""
        return SEVERITY_RANK[self.severity]

    def brief(self) -> dict[str, Any]:
        """Compact form for the agent and the trace."""
        out: dict[str, Any] = {"name": self.name, "status": self.status, "severity": self.severity, "service": self.service, "starts_at": self.starts_at.isoformat()}
        if self.ends_at is not None:
            out["ends_at"] = self.ends_at.isoformat()
        if self.summary:
            out["summary"] = self.summary
        if self.description and self.description != self.summary:
            out["description"] = self.description[:500]
        labels = {k: v for k, v in self.labels.items() if k not in ("alertname", "severity")}
        if labels:
            out["labels"] = labels
        return out


class AlertPayload(BaseModel):
    """A validated alert payload: the primary alert, and the related ones as context."""

    model_config = ConfigDict(frozen=True)

    source: Literal["alertmanager", "grafana", "plain"]
    status: Literal["firing", "resolved"]
    title: str | None = None
    primary: AlertItem
    related: list[AlertItem] = Field(default_factory=list)
    group_labels: dict[str, str] = Field(default_factory=dict)
    common_labels: dict[str, str] = Field(default_factory=dict)
    truncated_alerts: int = 0

    @property
    def language(self) -> Literal["en", "zh"]:
        """zh when the primary alert's own text (name, summary, description) or the title is Chinese."""
        p = self.primary
        text = " ".join(x for x in (p.name, p.summary, p.description, self.title or "") if x)
        return "zh" if sum(1 for ch in text if "\u4e00" <= ch <= "\u9fff") >= 2 else "en"

    def question(self, language: str | None = None) -> str:
        """The question asked when the user gave none: the primary alert, in the alert's language."""
        p = self.primary
        lang = language or self.language
        labels = ", ".join(f"{k}={v}" for k, v in p.labels.items() if k not in ("alertname", "severity"))
        when = p.starts_at.strftime("%Y-%m-%d %H:%M:%SZ")
        t = _QUESTION[lang if lang in _QUESTION else "en"]
        parts = [t["head"].format(name=p.name, severity=p.severity, service=p.service or t["unknown"], when=when, state=t[p.status])]
        if p.summary:
            parts.append(t["summary"].format(p.summary))
        if labels:
            parts.append(t["labels"].format(labels))
        return t["sep"].join(parts) + t["ask"]

    def router_text(self) -> str:
        """The router's bounded input: the alert's title and labels (at most ROUTER_TEXT_CHARS)."""
        p = self.primary
        text = f"{self.title or p.name} " + " ".join(f"{k}={v}" for k, v in p.labels.items())
        return clip_text(text, ROUTER_TEXT_CHARS)

    def for_agent(self) -> dict[str, Any]:
        """What the agent sees: the primary alert, and the related ones marked as context."""
        out: dict[str, Any] = {"source": self.source, "primary_alert": self.primary.brief()}
        if self.related:
            out["related_alerts"] = [a.brief() for a in self.related[:MAX_RELATED]]
            out["related_alerts_note"] = "context only: diagnose the primary alert; do not open a new incident for these"
        return out

    def trace(self, max_related: int | None = None) -> dict[str, Any]:
        """What the trace keeps of the input (everything but raw unknown fields); with
        `max_related`, only that many related alerts and `related_omitted`, the count of the rest."""
        if max_related is None or len(self.related) <= max_related:
            return self.model_dump(mode="json")
        data = self.model_dump(mode="json", exclude={"related"})
        data["related"] = [a.model_dump(mode="json") for a in self.related[:max_related]]
        data["related_omitted"] = len(self.related) - max_related
        return data


def _severity(labels: Mapping[str, str]) -> str:
    raw = str(labels.get("severity", "")).strip().casefold()
    raw = _SEVERITY_ALIASES.get(raw, raw)
    return raw if raw in SEVERITY_RANK else "none"


def _service(labels: Mapping[str, str]) -> str | None:
    for key in SERVICE_LABELS:
        if labels.get(key):
            return labels[key]
    return None


def _primary_first(items: list[AlertItem]) -> list[AlertItem]:
    """The primary alert first: firing before resolved, then severity, then the earliest start."""
    return sorted(items, key=lambda a: (a.status != "firing", -a.rank, a.starts_at))


def _field(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(payload)"


def _validate(model: type[BaseModel], data: Mapping[str, Any], source: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errs = exc.errors(include_url=False)
        first = errs[0]
        more = f" (and {len(errs) - 1} more problem{'s' if len(errs) > 2 else ''})" if len(errs) > 1 else ""
        msg = str(first["msg"])
        if first["type"] == "missing":
            msg = "missing (required)"
        elif first["type"] == "extra_forbidden":
            msg = "unknown field"
        raise AlertError(_field(tuple(first["loc"])), msg + more, source=source) from None


def _from_webhook(hook: _Webhook, kind: Literal["alertmanager", "grafana"], source: str) -> AlertPayload:
    items: list[AlertItem] = []
    for i, a in enumerate(hook.alerts):
        name = a.labels.get("alertname", "").strip()
        if not name:
            raise AlertError(f"alerts[{i}].labels.alertname", "missing (every alert needs its alertname label)", source=source)
        starts = _utc(a.startsAt)
        if starts is None:
            raise AlertError(f"alerts[{i}].startsAt", "expected a real start time, not the zero time", source=source)
        ann = dict(a.annotations)
        summary = ann.get("summary") or hook.commonAnnotations.get("summary") or ann.get("message") or ""
        description = ann.get("description") or hook.commonAnnotations.get("description") or ""
        items.append(
            AlertItem(
                name=name,
                status=a.status,
                severity=_severity(a.labels),
                service=_service(a.labels),
                starts_at=starts,
                ends_at=_utc(a.endsAt),
                labels=dict(a.labels),
                annotations=ann,
                summary=summary.strip(),
                description=description.strip(),
                fingerprint=a.fingerprint,
                generator_url=a.generatorURL,
            )
        )
    ordered = _primary_first(items)
    title = hook.title if isinstance(hook, _Grafana) else None
    return AlertPayload(
        source=kind,
        status=hook.status,
        title=title,
        primary=ordered[0],
        related=ordered[1:],
        group_labels=dict(hook.groupLabels),
        common_labels=dict(hook.commonLabels),
        truncated_alerts=hook.truncatedAlerts,
    )


def check_alert_size(data: Any, limits: InputLimits = DEFAULT_LIMITS, *, source: str = "") -> None:
    """Refuse a payload above the caps before anything is validated (`AlertError` naming the field).

    One pass over the data: the number of alerts, the length of every text (keys included), the
    nesting depth and the total size (about the size of its JSON) are checked.
    """
    alerts = data.get("alerts") if isinstance(data, Mapping) else None
    if isinstance(alerts, list) and len(alerts) > limits.alerts:
        raise AlertError("alerts", f"{len(alerts)} alerts, more than the cap of {limits.alerts} (ROOTPROOF_MAX_ALERTS)", source=source)
    cap, total = limits.alert_field_chars, 0
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        value, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise AlertError(path, f"nested deeper than {MAX_DEPTH} levels", source=source)
        if isinstance(value, str):
            if len(value) > cap:
                raise AlertError(path or "(payload)", f"{len(value)} characters, more than the cap of {cap} (ROOTPROOF_MAX_ALERT_FIELD_CHARS)", source=source)
            if _SURROGATE.search(value):  # JSON's `\ud800` escape: no text can be stored or printed with it
                raise AlertError(path or "(payload)", "holds a lone surrogate (an invalid \\uD800-\\uDFFF escape)", source=source)
            total += len(value) + 3
        elif isinstance(value, Mapping):
            for k, v in value.items():
                key = str(k)
                where = f"{path}.{key[:80]}" if path else key[:80]
                if _SURROGATE.search(key):
                    raise AlertError(where.encode("utf-8", "replace").decode(), "a key holds a lone surrogate (an invalid \\uD800-\\uDFFF escape)", source=source)
                if len(key) > cap:
                    raise AlertError(where + "…", f"a key of {len(key)} characters, more than the cap of {cap} (ROOTPROOF_MAX_ALERT_FIELD_CHARS)", source=source)
                total += len(key) + 4
                stack.append((v, where, depth + 1))
        elif isinstance(value, list | tuple):
            total += len(value) + 2
            stack.extend((v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value))
        else:
            total += 8
        if total > limits.alert_bytes:
            raise AlertError("(payload)", f"more than the cap of {limits.alert_bytes} bytes (ROOTPROOF_MAX_ALERT_BYTES)", source=source)


def parse_alert(data: Any, *, source: str = "", limits: InputLimits = DEFAULT_LIMITS) -> AlertPayload:
    """Parse an Alertmanager v4 webhook, a Grafana webhook or a plain alert; `source` names the file in errors.

    A payload above the caps of `limits` is refused first (`check_alert_size`).
    """
    if isinstance(data, AlertPayload):
        return data
    if not isinstance(data, Mapping):
        raise AlertError("(payload)", f"expected a mapping (an Alertmanager or Grafana webhook, or a plain alert), got {type(data).__name__}", source=source)
    check_alert_size(data, limits, source=source)
    if "alerts" in data:
        if str(data.get("version", "")) == "4" and not any(k in data for k in ("orgId", "title", "state")):
            return _from_webhook(_validate(_Alertmanager, data, source), "alertmanager", source)
        if any(k in data for k in ("orgId", "title", "state")):
            return _from_webhook(_validate(_Grafana, data, source), "grafana", source)
        raise AlertError("version", 'expected "4" for an Alertmanager webhook (a Grafana webhook has title and state)', source=source)
    if "name" in data:
        p: _Plain = _validate(_Plain, data, source)
        starts = _utc(p.starts_at)
        if starts is None:
            raise AlertError("starts_at", "expected a real start time", source=source)
        item = AlertItem(
            name=p.name,
            status=p.status,
            severity=_severity({"severity": p.severity}),
            service=p.service or _service(p.labels),
            starts_at=starts,
            ends_at=_utc(p.ends_at),
            labels=dict(p.labels),
            summary=p.summary.strip(),
            description=p.description.strip(),
        )
        return AlertPayload(source="plain", status=p.status, primary=item)
    raise AlertError("alerts", "missing (expected an Alertmanager or Grafana webhook with alerts[], or a plain alert with a name)", source=source)


def load_alert_file(path: Path, limits: InputLimits = DEFAULT_LIMITS) -> AlertPayload:
    """Read a payload file (JSON, or YAML without anchors and aliases) of at most
    `limits.alert_bytes` and parse it."""
    import json

    import yaml

    from rootproof.scenarios.yamlio import parse_yaml_values

    try:
        size = path.stat().st_size
        if size > limits.alert_bytes:
            raise AlertError("(file)", f"{size} bytes, more than the cap of {limits.alert_bytes} bytes (ROOTPROOF_MAX_ALERT_BYTES)", source=str(path))
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise AlertError("(file)", "alert file not found", source=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise AlertError("(file)", f"cannot read it: {exc}", source=str(path)) from None
    try:
        data = json.loads(text)  # most payloads are JSON, which has no aliases
    except RecursionError:
        raise AlertError("(file)", f"nested deeper than {MAX_DEPTH} levels", source=str(path)) from None
    except ValueError as exc:
        if not isinstance(exc, json.JSONDecodeError):  # a number of more than 4300 digits
            raise AlertError("(file)", "a number of more than 4300 digits", source=str(path)) from None
        try:
            data = parse_yaml_values(text, str(path))
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"line {mark.line + 1}" if mark is not None else "(file)"
            raise AlertError(where, "not valid JSON or YAML", source=str(path)) from None
        except ConfigError as exc:  # an anchor, an alias or too deep: the message names the line
            raise AlertError("(file)", str(exc).removeprefix(f"{path}: "), source=str(path)) from None
    if data is None:
        raise AlertError("(file)", "empty: expected an Alertmanager or Grafana webhook, or a plain alert", source=str(path))
    return parse_alert(data, source=str(path), limits=limits)


def as_payload(alert: Any, *, source: str = "", limits: InputLimits = DEFAULT_LIMITS) -> AlertPayload | None:
    """Any accepted alert form as one AlertPayload: a payload, a mapping, or a scenario's `Alert`."""
    if alert is None or isinstance(alert, AlertPayload):
        return alert
    if isinstance(alert, Mapping):
        return parse_alert(alert, source=source, limits=limits)
    fields = ("name", "severity", "service", "starts_at", "labels", "summary")
    return parse_alert({f: getattr(alert, f) for f in fields if getattr(alert, f, None) is not None}, source=source, limits=limits)
