"""AiOpsRuleEvaluation (docs/alerts.md): deterministic checks of an alert-mode run, after release.

It records whether the run stayed on the input alert; it never blocks release (the guards do).
Rules:
- `report_present`: the user received a report (published) or the safe fallback.
- `focus_on_primary_alert`: the diagnosis's root cause, if any, is about the primary alert: its
  culprit or its cited evidence names the primary alert's service (or an identifying label value:
  instance, pod, server, route, a managed resource's identifier such as `db_instance_identifier`, …), or its cited evidence comes from a component that this run's
  evidence links to that service (one runtime ref names both, or a ref naming the service shows
  the root cause's mechanism itself, e.g. `DiskFull` for disk_full).
- `evidence_tools_used`: lookup_knowledge and at least one of query_logs / query_metrics
  returned READY.
- `no_related_alert_promoted`: the root cause is not a related alert's incident instead of the
  primary one (it names a related alert or its service and is not tied to the primary).

The root cause judged is the agent's draft: the published report is that draft unchanged; when
a fallback was released the withheld draft is judged, and the detail says so.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from rootproof.agent.draft import DiagnosisDraft
from rootproof.alerts import AlertPayload
from rootproof.boundary.store import CanonicalInvocation, InvocationStatus
from rootproof.tools.refs import parse_log_ref

__all__ = ["AIOPS_RULE_SET_VERSION", "AiOpsCheck", "AiOpsRuleEvaluation", "evaluate_aiops"]

AIOPS_RULE_SET_VERSION = "aiops-rules-v1"

# The component a tool inspects, and the words by which evidence names a component.
_TOOL_COMPONENT = {"inspect_postgres": "postgresql", "inspect_redis": "redis", "inspect_nginx": "nginx"}
_COMPONENT_WORDS: dict[str, tuple[str, ...]] = {
    "postgresql": ("postgresql", "postgres", "psql", "pgbouncer", "jdbc:postgresql"),
    "mysql": ("mysql", "mariadb", "mysqld"),
    "redis": ("redis", "jedis", "lettuce"),
    "nginx": ("nginx", "upstream"),
    "jvm": ("jvm", "java", "gc"),
    "connection_pool": ("hikari", "hikaricp", "hikaripool", "pool"),
    "kubernetes": ("kubelet", "kubernetes", "pod", "oomkilled"),
    "message_queue": ("kafka", "rabbitmq", "consumer"),
    "dns": ("dns", "nxdomain", "resolve"),
    "disk": ("disk", "filesystem"),
    "tls": ("tls", "ssl", "certificate"),
}
# Labels that identify what an alert is about (beyond team or environment): their values, when
# evidence names them, tie that evidence to the alert (nginx's `server: api.example.com`).
_IDENTIFYING_LABELS = (
    "service", "app", "job", "container", "pod", "instance", "host", "hostname", "server", "node", "route", "path",
    "endpoint", "deployment", "statefulset", "daemonset", "datname", "database", "db", "queue", "topic", "consumergroup",
    # A managed resource's identifier (AWS RDS/Aurora/ElastiCache, GCP Cloud SQL, Azure): the
    # alert's `service` is then often the provider's service (`rds`), the resource is named here.
    "db_instance_identifier", "db_instance", "DBInstanceIdentifier", "db_cluster_identifier", "DBClusterIdentifier",
    "cluster", "cache_cluster_id", "CacheClusterId", "database_id", "resource", "resource_id", "resourceId",
)  # fmt: skip
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
# Hosts the cited evidence talks to or serves (nginx `server:` / `host:`, URLs): a ref of the
# alerted service naming the same host ties the service to that evidence.
_HOST = re.compile(r'(?:\bserver:\s*|\bhost:\s*"?|[a-z]+://)([A-Za-z0-9][A-Za-z0-9.-]*[A-Za-z0-9])')
_RUNTIME = frozenset({"query_logs", "query_metrics", "inspect_postgres", "inspect_redis", "inspect_nginx"})


@dataclass(frozen=True, kw_only=True)
class AiOpsCheck:
    """One rule's outcome."""

    rule: str
    passed: bool
    detail: str


@dataclass(kw_only=True)
class AiOpsRuleEvaluation:
    """`self_evaluation.aiops_rule_evaluation`."""

    rule_set_version: str = AIOPS_RULE_SET_VERSION
    checks: list[AiOpsCheck] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Every rule passed."""
        return all(c.passed for c in self.checks)

    def as_dict(self) -> dict[str, Any]:
        """For the trace."""
        return {"rule_set_version": self.rule_set_version, "passed": self.passed, "checks": [asdict(c) for c in self.checks]}


def _names(text: str, name: str) -> bool:
    """`text` names `name` as a word (service names are matched whole, case-insensitively)."""
    n = name.strip()
    return bool(n) and re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", text, re.I) is not None


def _any_named(text: str, names: Iterable[str]) -> str | None:
    return next((n for n in names if _names(text, n)), None)


def _ready(invocations: list[CanonicalInvocation], tool: str) -> bool:
    return any(i.tool_name == tool and i.status is InvocationStatus.READY for i in invocations)


def evaluate_aiops(
    alert: AlertPayload,
    *,
    content: dict[str, Any] | None,
    draft: DiagnosisDraft | None,
    invocations: list[CanonicalInvocation],
) -> AiOpsRuleEvaluation:
    """Run every rule; pure and deterministic."""
    ev = AiOpsRuleEvaluation()
    kind = (content or {}).get("content_type")
    published = kind not in (None, "SAFE_FALLBACK")
    if kind is None:
        ev.checks.append(AiOpsCheck(rule="report_present", passed=False, detail="no content was released"))
    else:
        what = "published report" if published else f"safe fallback {(content or {}).get('fallback_type', '')}".strip()
        ev.checks.append(AiOpsCheck(rule="report_present", passed=True, detail=what))

    focused, focus_detail = _focus(alert, draft, invocations)
    withheld = " (the withheld draft)" if draft is not None and draft.root_cause is not None and not published else ""
    ev.checks.append(AiOpsCheck(rule="focus_on_primary_alert", passed=focused, detail=focus_detail + withheld))

    logs_or_metrics = [t for t in ("query_logs", "query_metrics") if _ready(invocations, t)]
    knowledge = _ready(invocations, "lookup_knowledge")
    ok = knowledge and bool(logs_or_metrics)
    detail = f"lookup_knowledge {'READY' if knowledge else 'not READY'}; " + (f"{', '.join(logs_or_metrics)} READY" if logs_or_metrics else "neither query_logs nor query_metrics READY")
    ev.checks.append(AiOpsCheck(rule="evidence_tools_used", passed=ok, detail=detail))

    ev.checks.append(_promotion(alert, draft, focused))
    return ev


def _root_cause_text(draft: DiagnosisDraft) -> tuple[str, list[tuple[str, str]]]:
    """The root cause's own words (culprit and its claims) and its citations (invocation id, path)."""
    rc = draft.root_cause
    assert rc is not None
    claims = [c for c in draft.claims if c.id in set(rc.claim_ids) or c.kind == "root_cause"]
    text = " ".join([rc.culprit or ""] + [c.text for c in claims])
    cites = [(ci.invocation_id, ci.raw_path) for c in claims for ci in c.citations]
    return text, cites


def _identifiers(alert: AlertPayload) -> list[str]:
    """The primary alert's service and identifying label values (an instance without its port)."""
    p = alert.primary
    out = [p.service] if p.service else []
    for key in _IDENTIFYING_LABELS:
        value = p.labels.get(key, "")
        if key == "instance":
            value = value.rsplit(":", 1)[0] if re.search(r":\d+$", value) else value
        if len(value) >= 3 and value not in out:
            out.append(value)
    return out


def _tokens(text: str) -> set[str]:
    return {t.casefold() for t in re.split(r"[^0-9A-Za-z]+", _CAMEL.sub(" ", text)) if t}


def _focus(alert: AlertPayload, draft: DiagnosisDraft | None, invocations: list[CanonicalInvocation]) -> tuple[bool, str]:
    ids = _identifiers(alert)
    if draft is None or draft.root_cause is None:
        return True, "no root cause named, so nothing strays from the primary alert"
    if not ids:
        return True, "the primary alert names no service; focus cannot be judged"
    service = ids[0]
    rc = draft.root_cause
    hit = _any_named(rc.culprit or "", ids)
    if hit:
        return True, f"the culprit names the primary alert's {hit}"
    _, cites = _root_cause_text(draft)
    by_id = {i.invocation_id: i for i in invocations}
    sources: set[str] = set(_COMPONENT_WORDS.get(rc.component, ()))
    for inv_id, path in cites:
        inv = by_id.get(inv_id)
        ref = inv.ref(path) if inv is not None else None
        if inv is None or ref is None:
            continue
        hit = _any_named(ref.text, ids)
        if hit:
            return True, f"cited evidence {inv.tool_name} {path} names {hit}"
        log = parse_log_ref(ref.text) if inv.tool_name == "query_logs" else None
        if log:
            sources.add(log.service)
        comp = _TOOL_COMPONENT.get(inv.tool_name)
        if comp:
            sources |= set(_COMPONENT_WORDS.get(comp, ()))
        sources |= {h for h in _HOST.findall(ref.text) if len(h) >= 4}
    sources -= set(ids)
    signature = set(rc.mechanism.split("_"))
    for inv in invocations:
        if inv.tool_name not in _RUNTIME or inv.status is not InvocationStatus.READY:
            continue
        from_component = _TOOL_COMPONENT.get(inv.tool_name)
        for ref in inv.evidence_refs:
            hit = _any_named(ref.text, ids)
            if not hit:
                continue
            if from_component and set(_COMPONENT_WORDS.get(from_component, ())) & sources:
                return True, f"{inv.tool_name} {ref.raw_path} links {hit} to the cited component {from_component}"
            linked = _any_named(ref.text, sorted(sources))
            if linked:
                return True, f"{inv.tool_name} {ref.raw_path} links {hit} to {linked}, where the cited evidence comes from"
            if signature <= _tokens(ref.text):
                return True, f"{inv.tool_name} {ref.raw_path} shows {rc.mechanism} at {hit} itself"
    return False, f"neither the culprit nor the cited evidence names {service}, and no evidence links it to the cited components ({', '.join(sorted(sources)) or 'none'})"


def _promotion(alert: AlertPayload, draft: DiagnosisDraft | None, focused: bool) -> AiOpsCheck:
    rule = "no_related_alert_promoted"
    if not alert.related:
        return AiOpsCheck(rule=rule, passed=True, detail="no related alerts")
    if draft is None or draft.root_cause is None:
        return AiOpsCheck(rule=rule, passed=True, detail="no root cause named")
    if focused:
        return AiOpsCheck(rule=rule, passed=True, detail=f"the root cause stays on {alert.primary.name}")
    text, _ = _root_cause_text(draft)
    text = f"{draft.summary} {text}"
    primary_service = alert.primary.service or ""
    for a in alert.related:
        names = [a.name] + ([a.service] if a.service and a.service != primary_service else [])
        hit = _any_named(text, names)
        if hit:
            return AiOpsCheck(rule=rule, passed=False, detail=f"the root cause is about related alert {a.name} ({hit}), not the primary alert {alert.primary.name}")
    return AiOpsCheck(rule=rule, passed=True, detail="the root cause names no related alert")
