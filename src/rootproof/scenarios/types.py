"""What a loaded scenario holds: the agent-phase view, the frozen tool data, the ground truth."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

__all__ = [
    "Alert",
    "Alternative",
    "EvidenceMatch",
    "ExpectedOutcome",
    "GroundTruth",
    "LogEntry",
    "LogLine",
    "MetricSeries",
    "Recovery",
    "RedHerring",
    "RequiredEvidence",
    "RootCause",
    "Row",
    "Scenario",
    "ToolResponses",
    "format_timestamp",
]


def format_timestamp(ts: datetime) -> str:
    """ISO 8601 UTC with milliseconds and `Z` (`2026-07-22T17:39:02.113Z`), as refs print time."""
    return ts.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, kw_only=True)
class LogEntry:
    """One `query_logs` entry."""

    ts: datetime
    """When it was written (UTC)."""
    service: str
    level: str
    """DEBUG | INFO | WARN | ERROR | FATAL."""
    message: str
    scope: str = "APPLICATION"
    """APPLICATION | DATABASE | CACHE | PROXY | SYSTEM | CLOUD (`tools.base.LogScope`)."""
    source: str = ""
    """The log file or stream (defaults to the service)."""
    data_source: str = "snapshot"
    """snapshot | mock, the narrowest marking winning."""


@dataclass(frozen=True, kw_only=True)
class MetricSeries:
    """One `query_metrics` series."""

    metric: str
    labels: Mapping[str, str]
    unit: str
    points: tuple[tuple[datetime, int | float], ...]
    """(time UTC, value), sorted by time."""
    data_source: str = "snapshot"


@dataclass(frozen=True, kw_only=True)
class Row:
    """A table row (PostgreSQL views, CLIENT LIST, a SLOWLOG entry written as a mapping)."""

    values: Mapping[str, Any]
    """Plain JSON data in the order written; timestamps as ISO 8601 UTC text."""
    data_source: str = "snapshot"
    ts: datetime | None = None
    """When it happened, for rows that are events (SLOWLOG `timestamp`)."""


@dataclass(frozen=True, kw_only=True)
class LogLine:
    """A raw log line (server logs, slowlog lines)."""

    text: str
    ts: datetime | None
    """Parsed from the line, or the previous line's for continuation lines; None if unknown."""
    data_source: str = "snapshot"


@dataclass(frozen=True, kw_only=True)
class ToolResponses:
    """A scenario's frozen tool data, with the data source of every item.

    Inspector data is keyed `<section>.<kind>` (`postgres.activity`, `redis.config`); a key
    that is absent means the snapshot has no such data.
    """

    data_source: str = "snapshot"
    """The file's default."""
    section_sources: Mapping[str, str] = field(default_factory=dict)
    """Effective default per top-level section (logs, metrics, postgres, redis, nginx)."""
    logs: tuple[LogEntry, ...] | None = None
    metrics: tuple[MetricSeries, ...] | None = None
    rows: Mapping[str, tuple[Row, ...]] = field(default_factory=dict)
    lines: Mapping[str, tuple[LogLine, ...]] = field(default_factory=dict)
    settings: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    info: Mapping[str, Mapping[str, Any]] | None = None
    """Redis INFO: section → field → value."""
    nginx_config: tuple[str, ...] | None = None
    nginx_status: Mapping[str, Any] | None = None

    def source_of(self, section: str) -> str:
        """The default data source of a top-level section."""
        return self.section_sources.get(section, self.data_source)


@dataclass(frozen=True, kw_only=True)
class Alert:
    """An alert payload (AIOps mode)."""

    name: str
    severity: str
    """info | warning | critical."""
    service: str | None
    starts_at: datetime
    labels: Mapping[str, str]
    summary: str


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """What the agent phase may see of a scenario: no ground truth, no path to it."""

    id: str
    title: str
    language: Literal["en", "zh"]
    question: str
    alert: Alert | None
    now: datetime
    """The scenario clock (UTC): relative windows end here."""
    allowed_tools: tuple[str, ...]
    budget: Mapping[str, int]
    """Overrides of tool_calls, calls_per_tool, model_calls (only those written)."""
    tags: tuple[str, ...]
    responses: ToolResponses


@dataclass(frozen=True, kw_only=True)
class ExpectedOutcome:
    """How the run must end when the right end is not a published report."""

    release_outcome: str
    fallback_type: str | None
    violations: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class RootCause:
    """The right root cause (or one contributing cause): any of its labels is accepted."""

    component: str
    """The first accepted component (how scores name it)."""
    mechanism: str
    """The first accepted mechanism."""
    culprit: str
    components: tuple[str, ...] = ()
    """Every accepted component, `component` first (default: just `component`)."""
    mechanisms: tuple[str, ...] = ()
    """Every accepted mechanism, `mechanism` first (default: just `mechanism`)."""

    def __post_init__(self) -> None:
        if not self.components:
            object.__setattr__(self, "components", (self.component,))
        if not self.mechanisms:
            object.__setattr__(self, "mechanisms", (self.mechanism,))

    def accepts(self, component: str, mechanism: str) -> bool:
        """A published (component, mechanism) names this cause."""
        return component in self.components and mechanism in self.mechanisms

    def overlaps(self, other: RootCause) -> bool:
        """Some (component, mechanism) names both causes."""
        return bool(set(self.components) & set(other.components)) and bool(
            set(self.mechanisms) & set(other.mechanisms)
        )

    @property
    def label(self) -> str:
        """`component/mechanism`, alternatives in parentheses (`postgresql/(disk_full|storage_full)`)."""

        def part(labels: tuple[str, ...]) -> str:
            return labels[0] if len(labels) == 1 else f"({'|'.join(labels)})"

        return f"{part(self.components)}/{part(self.mechanisms)}"


@dataclass(frozen=True, kw_only=True)
class EvidenceMatch:
    """One way to match a required evidence: all `match` strings in one cited ref of `tool`."""

    tool: str
    match: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class RequiredEvidence:
    """Evidence a published draft must cite: all `match` strings in one cited ref of `tool`, or,
    written as `any_of`, any one of several such alternatives."""

    id: str
    tool: str = ""
    """The tool of the single form (empty when `any_of` is given)."""
    match: tuple[str, ...] = ()
    any_of: tuple[EvidenceMatch, ...] = ()
    """The alternatives of the `any_of` form (empty for the single form)."""

    @property
    def options(self) -> tuple[EvidenceMatch, ...]:
        """The ways it can be matched: the `any_of` alternatives, else its one tool and match."""
        return self.any_of or (EvidenceMatch(tool=self.tool, match=self.match),)


@dataclass(frozen=True, kw_only=True)
class Alternative:
    """A hypothesis a good agent rules out, and the required evidence that rules it out."""

    component: str
    mechanism: str
    ruled_out_by: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Effect:
    """A symptom the root cause produces (a proxy's 504s behind a frozen upstream): never the root
    cause; a draft that marks it `explained` (or `ruled_out`), citing the evidence that links it
    to the root cause (`explained_by`: required-evidence ids; none listed: any runtime citation),
    earns what a rule-out earns."""

    component: str
    mechanism: str
    explained_by: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class RedHerring:
    """A loud signal that is not the cause."""

    description: str
    component: str
    mechanism: str


@dataclass(frozen=True, kw_only=True)
class Recovery:
    """The recovery contract."""

    contract: str = "none"
    """executed_recovery | proposal_only | none."""
    acceptable: tuple[str, ...] = ()
    forbidden: tuple[str, ...] = ()
    requires_approval: tuple[str, ...] = ()
    """Default: the acceptable actions the taxonomy marks as needing approval."""
    verification_required: bool = False


@dataclass(frozen=True, kw_only=True)
class GroundTruth:
    """The answer of a scenario; read by the evaluator only, after the run."""

    fault: bool
    expected_outcome: ExpectedOutcome | None
    root_cause: RootCause | None
    required_evidence: tuple[RequiredEvidence, ...]
    alternatives: tuple[Alternative, ...]
    red_herrings: tuple[RedHerring, ...]
    recovery: Recovery
    effects: tuple[Effect, ...] = ()
    """Symptoms of the root cause (`Effect`): named as the root cause they fail it."""
    contributing_causes: tuple[RootCause, ...] = ()
    """Further independent causes of a compositional incident: a right diagnosis names the root
    cause and each of these (as its root cause or its contributing causes, in any order)."""

    @property
    def causes(self) -> tuple[RootCause, ...]:
        """The root cause and the contributing causes (empty without a root cause)."""
        return (self.root_cause, *self.contributing_causes) if self.root_cause is not None else ()
