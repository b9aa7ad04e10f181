"""The border of scenario files: pydantic models (unknown fields forbidden), the problems
they report as `<file>: <field path>: <what is expected> (line N)`, and the timestamps each
system writes on its own log lines."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    Tag,
    ValidationError,
    ValidationInfo,
)

from rootproof.scenarios.types import format_timestamp
from rootproof.scenarios.yamlio import YamlDocument
from rootproof.taxonomy import BUILTIN_TAXONOMY, LabelKind, Taxonomy
from rootproof.tools.base import TOOLS, LogScope
from rootproof.tools.refs import fmt_value

_M = TypeVar("_M", bound=BaseModel)

DataSourceName = Literal["snapshot", "mock"]
LogLevel = Literal["DEBUG", "INFO", "WARN", "ERROR", "FATAL"]
FallbackType = Literal[
    "EVIDENCE_VALIDATION_FAILED",
    "SEMANTIC_UNSUPPORTED",
    "GUARD_UNAVAILABLE",
    "NO_DRAFT",
    "BUDGET_EXHAUSTED",
    "INSUFFICIENT_EVIDENCE",
    "DEADLINE_EXCEEDED",
    "MODEL_UNAVAILABLE",
    "INTERNAL_ERROR",
]
GuardCode = Literal[
    "DRAFT_INVALID",
    "CITATION_MISSING",
    "UNKNOWN_INVOCATION",
    "FOREIGN_INVOCATION",
    "INVOCATION_NOT_READY",
    "TOOL_MISMATCH",
    "PATH_NOT_IN_REFS",
    "PATH_UNRESOLVED",
    "EXCERPT_MISMATCH",
    "NEGATIVE_MISCITED",
    "ROOT_CAUSE_KNOWLEDGE_ONLY",
    "ROOT_CAUSE_MOCK_ONLY",
    "ROOT_CAUSE_INJECTED",
    "CLAIM_REF_UNKNOWN",
]


def _aware(value: Any) -> datetime:
    if isinstance(value, datetime):
        ts = value
    elif isinstance(value, str):
        try:
            ts = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(
                f"expected an ISO 8601 timestamp like 2026-07-22T17:39:02.113Z (got {value!r})"
            ) from None
    else:
        raise ValueError(f"expected a timestamp like 2026-07-22T17:39:02.113Z (got {value!r})")
    if ts.tzinfo is None or ts.utcoffset() is None:
        raise ValueError(
            f"expected a timezone: end the timestamp with Z or an offset like +00:00 (got {value!s})"
        )
    return ts.astimezone(UTC)


def _known(what: str, allowed: Collection[str]) -> Callable[[str], str]:
    def check(value: str) -> str:
        if value not in allowed:
            raise ValueError(f"unknown {what} {value!r} (expected one of {', '.join(sorted(allowed))})")
        return value

    return check


def _label(kind: LabelKind) -> Callable[[str, ValidationInfo], str]:
    """A taxonomy label: built-in, or declared by a loaded card (the context's `taxonomy`)."""

    def check(value: str, info: ValidationInfo) -> str:
        taxonomy = info.context.get("taxonomy") if isinstance(info.context, dict) else None
        wrong = (taxonomy if isinstance(taxonomy, Taxonomy) else BUILTIN_TAXONOMY).unknown(kind, value)
        if wrong:
            raise ValueError(wrong)
        return value

    return check


def _distinct_labels(value: list[str]) -> list[str]:
    if not value:
        raise ValueError("expected at least one label (or a single label)")
    for i, label in enumerate(value):
        if label in value[:i]:
            raise ValueError(f"duplicate label {label!r}")
    return value


def _label_or_list(value: Any) -> str:
    return "list" if isinstance(value, list) else "label"


def _finite(value: int | float) -> int | float:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"expected a finite number (got {value!r})")
    if isinstance(value, int) and not -(2**1000) < value < 2**1000:  # summaries compute in floats
        raise ValueError("expected a number a float can hold (at most about 1e308)")
    return value


def _key_text(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bool | int | float) or key is None:
        return fmt_value(key)
    raise ValueError(f"expected a text key (got {key!r})")


def _plain(value: Any, where: str) -> Any:
    """Free-form YAML data as plain JSON data; timestamps become ISO 8601 UTC text."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        try:
            return _finite(value)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
    if isinstance(value, datetime):
        try:
            return format_timestamp(_aware(value))
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, list):
        return [_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {
            _key_text(k): _plain(v, f"{where}.{_key_text(k)}" if where else _key_text(k))
            for k, v in value.items()
        }
    raise ValueError(f"{where}: unsupported value {value!r}")


def _scalar_text(value: Any, where: str) -> str:
    plain = _plain(value, where)
    if isinstance(plain, dict | list):
        raise ValueError(
            f"{where}: expected a single value, not a {'mapping' if isinstance(plain, dict) else 'list'}"
        )
    return fmt_value(plain)


def _row(value: dict[Any, Any]) -> dict[str, Any]:
    row: dict[str, Any] = _plain(value, "")
    source = row.get("data_source")
    if "data_source" in row and source not in ("snapshot", "mock"):
        raise ValueError(f"data_source: expected 'snapshot' or 'mock' (got {source!r})")
    return row


def _text_mapping(value: dict[Any, Any]) -> dict[str, str]:
    return {_key_text(k): _scalar_text(v, _key_text(k)) for k, v in value.items()}


def _scalar_mapping(value: dict[Any, Any]) -> dict[str, Any]:
    out: dict[str, Any] = _plain(value, "")
    for k, v in out.items():
        if isinstance(v, dict | list):
            raise ValueError(f"{k}: expected a single value")
    return out


def _info(value: dict[Any, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for section, fields in value.items():
        name = _key_text(section)
        if not isinstance(fields, dict):
            raise ValueError(f"{name}: expected a mapping of INFO fields (got {fields!r})")
        out[name] = _scalar_mapping(fields)
    return out


Timestamp = Annotated[datetime, BeforeValidator(_aware)]
Number = Annotated[StrictInt | StrictFloat, AfterValidator(_finite)]
Text = Annotated[StrictStr, Field(min_length=1)]
ToolName = Annotated[StrictStr, AfterValidator(_known("tool", TOOLS))]
ComponentName = Annotated[StrictStr, AfterValidator(_label("component"))]
MechanismName = Annotated[StrictStr, AfterValidator(_label("mechanism"))]
ActionName = Annotated[StrictStr, AfterValidator(_label("recovery action"))]
# A label, or a non-empty list of labels of which any is accepted (an ambiguous root cause).
ComponentNames = Annotated[
    Annotated[ComponentName, Tag("label")]
    | Annotated[list[ComponentName], AfterValidator(_distinct_labels), Tag("list")],
    Discriminator(_label_or_list),
]
MechanismNames = Annotated[
    Annotated[MechanismName, Tag("label")]
    | Annotated[list[MechanismName], AfterValidator(_distinct_labels), Tag("list")],
    Discriminator(_label_or_list),
]
RowData = Annotated[dict[Any, Any], AfterValidator(_row)]
TextMapping = Annotated[dict[Any, Any], AfterValidator(_text_mapping)]
ScalarMapping = Annotated[dict[Any, Any], AfterValidator(_scalar_mapping)]
InfoMapping = Annotated[dict[Any, Any], AfterValidator(_info)]
PlainMapping = Annotated[dict[Any, Any], AfterValidator(lambda v: _plain(v, ""))]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _AlertModel(_Model):
    name: Text
    severity: Literal["info", "warning", "critical"]
    starts_at: Timestamp
    service: StrictStr | None = None
    labels: TextMapping = Field(default_factory=dict)
    summary: StrictStr = ""


class _BudgetModel(_Model):
    tool_calls: Annotated[StrictInt, Field(ge=1)] | None = None
    calls_per_tool: Annotated[StrictInt, Field(ge=1)] | None = None
    model_calls: Annotated[StrictInt, Field(ge=1)] | None = None


class ScenarioModel(_Model):
    id: Text
    language: Literal["en", "zh"]
    question: Text
    now: Timestamp
    allowed_tools: Annotated[list[ToolName], Field(min_length=1)]
    title: StrictStr | None = None
    alert: _AlertModel | None = None
    budget: _BudgetModel | None = None
    tags: list[StrictStr] = Field(default_factory=list)


class _LogEntryModel(_Model):
    ts: Timestamp
    service: Text
    level: LogLevel
    message: StrictStr
    scope: LogScope = "APPLICATION"
    source: StrictStr | None = None
    data_source: DataSourceName | None = None


class _SeriesModel(_Model):
    metric: Text
    points: list[tuple[Timestamp, Number]]
    labels: TextMapping = Field(default_factory=dict)
    unit: StrictStr = ""
    data_source: DataSourceName | None = None


class _PostgresModel(_Model):
    activity: list[RowData] | None = None
    locks: list[RowData] | None = None
    settings: TextMapping | None = None
    database_stats: list[RowData] | None = None
    replication: list[RowData] | None = None
    top_queries: list[RowData] | None = None
    log: list[StrictStr] | None = None
    wait_events: list[RowData] | None = None
    load_by_user: list[RowData] | None = None
    load_by_host: list[RowData] | None = None


class _RedisModel(_Model):
    info: InfoMapping | None = None
    clients: list[RowData] | None = None
    slowlog: list[StrictStr | RowData] | None = None
    config: TextMapping | None = None
    log: list[StrictStr] | None = None


class _NginxModel(_Model):
    error_log: list[StrictStr] | None = None
    access_log: list[StrictStr] | None = None
    config: StrictStr | None = None
    status: ScalarMapping | None = None


class _SectionSourcesModel(_Model):
    logs: DataSourceName | None = None
    metrics: DataSourceName | None = None
    postgres: DataSourceName | None = None
    redis: DataSourceName | None = None
    nginx: DataSourceName | None = None


class ResponsesModel(_Model):
    data_source: DataSourceName = "snapshot"
    data_sources: _SectionSourcesModel | None = None
    logs: list[_LogEntryModel] | None = None
    metrics: list[_SeriesModel] | None = None
    postgres: _PostgresModel | None = None
    redis: _RedisModel | None = None
    nginx: _NginxModel | None = None


class _ExpectedOutcomeModel(_Model):
    release_outcome: Literal["PUBLISHED", "FALLBACK", "NONE"]
    fallback_type: FallbackType | None = None
    violations: list[GuardCode] = Field(default_factory=list)


class _RootCauseModel(_Model):
    component: ComponentNames
    mechanism: MechanismNames
    culprit: StrictStr = ""


class _EvidenceMatchModel(_Model):
    tool: ToolName
    match: Annotated[list[Text], Field(min_length=1)]


class _RequiredEvidenceModel(_Model):
    """`{id, tool, match}` or `{id, any_of: [{tool, match}, ...]}`; the loader checks it is one form."""

    id: Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9_.-]+$")]
    tool: ToolName | None = None
    match: Annotated[list[Text], Field(min_length=1)] | None = None
    any_of: Annotated[list[_EvidenceMatchModel], Field(min_length=1)] | None = None


class _AlternativeModel(_Model):
    component: ComponentName
    mechanism: MechanismName
    ruled_out_by: list[StrictStr] = Field(default_factory=list)


class _EffectModel(_Model):
    component: ComponentName
    mechanism: MechanismName
    explained_by: list[StrictStr] = Field(default_factory=list)


class _RedHerringModel(_Model):
    description: Text
    component: ComponentName
    mechanism: MechanismName


class _RecoveryModel(_Model):
    contract: Literal["executed_recovery", "proposal_only", "none"] = "none"
    acceptable: list[ActionName] = Field(default_factory=list)
    forbidden: list[ActionName] = Field(default_factory=list)
    requires_approval: list[ActionName] | None = None
    verification_required: StrictBool = False


class GroundTruthModel(_Model):
    fault: StrictBool
    root_cause: _RootCauseModel | None
    contributing_causes: list[_RootCauseModel] = Field(default_factory=list)
    required_evidence: list[_RequiredEvidenceModel]
    expected_outcome: _ExpectedOutcomeModel | None = None
    alternatives: list[_AlternativeModel] = Field(default_factory=list)
    effects: list[_EffectModel] = Field(default_factory=list)
    red_herrings: list[_RedHerringModel] = Field(default_factory=list)
    recovery: _RecoveryModel = Field(default_factory=_RecoveryModel)


class _RecordedTargetModel(_Model):
    name: Text
    kind: Text


class _RecordedCallModel(_Model):
    tool: ToolName
    arguments: PlainMapping = Field(default_factory=dict)


class _RecordingModel(_Model):
    """How a `recorded_live_run` scenario was recorded (`rootproof.live.bench.record`)."""

    recorded_at: Timestamp
    live_run: StrictStr | None = None
    diagnosis_run: StrictStr | None = None
    targets: list[_RecordedTargetModel] = Field(default_factory=list)
    calls: list[_RecordedCallModel] = Field(default_factory=list)
    limits: list[StrictStr] = Field(default_factory=list)


class ProvenanceModel(_Model):
    source: Literal["handwritten", "derived_from_public_incident", "recorded_live_run"]
    formats: StrictStr | None = None
    references: list[StrictStr] = Field(default_factory=list)
    validated: StrictBool | None = None
    notes: StrictStr | None = None
    recording: _RecordingModel | None = None


# ---------------------------------------------------------------------------------------------
# Error reporting
# ---------------------------------------------------------------------------------------------


def _fmt_path(path: tuple[str | int, ...]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(document)"


def _data_path(data: Any, loc: tuple[str | int, ...], keep_last: bool) -> tuple[str | int, ...]:
    """The part of a pydantic error location that exists in the data (drops union tags)."""
    node: Any = data
    path: list[str | int] = []
    for i, elem in enumerate(loc):
        if isinstance(node, dict) and not isinstance(elem, int):
            match = next((k for k in node if _safe_key(k) == elem), None)
            if match is None:
                if keep_last and i == len(loc) - 1:
                    path.append(elem)
                break
            path.append(elem)
            node = node[match]
        elif isinstance(node, list) and isinstance(elem, int) and elem < len(node):
            path.append(elem)
            node = node[elem]
        elif isinstance(node, list) and isinstance(elem, str):
            continue  # a union branch's tag (`list`): the list itself is the data
        else:
            break
    return tuple(path)


def _safe_key(key: Any) -> str:
    try:
        return _key_text(key)
    except ValueError:
        return repr(key)


def _model_at(model: type[BaseModel], path: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The border model that validates the mapping at `path`, if one does."""
    current: Any = model
    for elem in path:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel) and isinstance(elem, str):
            info = current.model_fields.get(elem)
            if info is None:
                return None
            current = info.annotation
        elif get_origin(current) is list and isinstance(elem, int):
            current = get_args(current)[0]
        else:
            return None
    current = _unwrap(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(tp: Any) -> Any:
    while True:
        origin = get_origin(tp)
        if origin is Annotated:
            tp = get_args(tp)[0]
        elif origin is Union or str(origin) == "<class 'types.UnionType'>":
            args = [a for a in get_args(tp) if a is not type(None)]
            models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
            lists = [a for a in args if get_origin(a) is list]
            tp = (models or lists or args)[0]
        else:
            return tp


_TYPE_ERRORS = frozenset(
    {
        "string_type",
        "int_type",
        "float_type",
        "bool_type",
        "dict_type",
        "list_type",
        "tuple_type",
        "model_type",
    }
)


def _got(value: Any) -> str:
    if isinstance(value, dict | list):
        return f" (got a {'mapping' if isinstance(value, dict) else 'list'})"
    if isinstance(value, str | int | float | bool) or value is None:
        shown = repr(value)
        return f" (got {shown if len(shown) <= 80 else shown[:77] + '...'})"
    return ""


def _describe(err: Any, model: type[BaseModel], path: tuple[str | int, ...]) -> str:
    kind = err["type"]
    if kind == "missing":
        missing = err["loc"][len(path)] if len(err["loc"]) > len(path) else None
        return f"item {missing} is missing" if isinstance(missing, int) else "required field missing"
    if kind == "extra_forbidden":
        owner = _model_at(model, path[:-1])
        allowed = f" (expected one of {', '.join(owner.model_fields)})" if owner else ""
        return f"unknown field {path[-1]!r}{allowed}" if path else "unknown field"
    if kind == "value_error":
        return str(err["msg"]).removeprefix("Value error, ")
    return str(err["msg"]).replace("Input should be ", "expected ") + _got(err.get("input"))


def _problems(doc: YamlDocument, exc: ValidationError, model: type[BaseModel]) -> list[str]:
    """One problem per place; the branches of a union that all failed on type become one."""
    grouped: dict[tuple[str | int, ...], list[Any]] = {}
    for err in exc.errors(include_url=False):
        path = _data_path(
            doc.data, tuple(err["loc"]), keep_last=err["type"] in ("missing", "extra_forbidden")
        )
        grouped.setdefault(path, []).append(err)
    out: list[str] = []
    for path, errs in grouped.items():
        specific = [e for e in errs if e["type"] not in _TYPE_ERRORS]
        if specific:
            whats = [_describe(e, model, path) for e in specific]
        else:  # every union branch rejected the type: say what any of them would accept
            wanted = [str(e["msg"]).removeprefix("Input should be ") for e in errs]
            whats = ["expected " + " or ".join(dict.fromkeys(wanted)) + _got(errs[0].get("input"))]
        line = doc.line_of(path)
        for what in dict.fromkeys(whats):
            out.append(
                f"{doc.name}: {_fmt_path(path)}: {what}" + (f" (line {line})" if line is not None else "")
            )
    return out


def problem(doc: YamlDocument, path: tuple[str | int, ...], what: str) -> str:
    """`<file>: <field path>: <what> (line N)` for a check made outside the models."""
    line = doc.line_of(path)
    return f"{doc.name}: {_fmt_path(path)}: {what}" + (f" (line {line})" if line is not None else "")


def validate(
    doc: YamlDocument, model: type[_M], problems: list[str], taxonomy: Taxonomy | None = None
) -> _M | None:
    """Validate a document against a border model; append its problems and return None on failure.

    Taxonomy labels are checked against `taxonomy` (default: the built-in one).
    """
    if not isinstance(doc.data, dict):
        problems.append(f"{doc.name}: expected a mapping at the top level (got {type(doc.data).__name__})")
        return None
    try:
        return model.model_validate(doc.data, context={"taxonomy": taxonomy})
    except ValidationError as exc:
        problems.extend(_problems(doc, exc, model))
        return None


# ---------------------------------------------------------------------------------------------
# Raw log lines: each system's own timestamp
# ---------------------------------------------------------------------------------------------

_MONTHS = {
    m: i
    for i, m in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}
# PostgreSQL `%m`/`%t`: `2026-07-22 17:36:01.512 UTC [5120] ...`
_PG_TS = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?(?: ([A-Za-z]{1,5}|[+-]\d{2}(?::?\d{2})?))?(?=\s|$)"
)
# Redis: `1:M 22 Jul 2026 17:36:12.004 # ...` (pid:role day month year time level)
_REDIS_TS = re.compile(
    r"^\d+:[XCSM] (\d{1,2}) ([A-Z][a-z]{2}) (\d{4}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))? [.\-*#] "
)
# nginx error_log: `2026/07/22 17:37:40 [error] 31#31: ...`
_NGINX_ERROR_TS = re.compile(r"^(\d{4})/(\d{2})/(\d{2}) (\d{2}):(\d{2}):(\d{2}) \[")
# nginx access_log `$time_local`: `[22/Jul/2026:17:37:40 +0000]`
_NGINX_ACCESS_TS = re.compile(
    r"\[(\d{2})/([A-Z][a-z]{2})/(\d{4}):(\d{2}):(\d{2}):(\d{2}) ([+-])(\d{2})(\d{2})\]"
)
_ISO_TS = re.compile(r"\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?(?:Z|[+-]\d{2}:?\d{2})")

LINE_FORMATS = {
    "postgres.log": "PostgreSQL's '2026-07-22 17:36:01.512 UTC [pid] ...'",
    "redis.log": "Redis's '1:M 22 Jul 2026 17:36:12.004 # ...'",
    "nginx.error_log": "nginx's '2026/07/22 17:37:40 [error] ...'",
    "nginx.access_log": "nginx's '[22/Jul/2026:17:37:40 +0000]'",
}


def _micro(fraction: str | None) -> int:
    return int((fraction or "0").ljust(6, "0")[:6])


def _month(name: str) -> int:
    if name not in _MONTHS:
        raise ValueError(f"unknown month {name!r}")
    return _MONTHS[name]


def _pg_zone(zone: str | None) -> timezone:
    if zone is None or zone.upper() in ("UTC", "GMT", "Z"):
        return UTC
    if zone[0] in "+-":
        digits = zone[1:].replace(":", "")
        delta = timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0))
        return timezone(-delta if zone[0] == "-" else delta)
    raise ValueError(f"time zone {zone!r}: expected UTC or a numeric offset (log_timezone = 'UTC')")


def line_time(key: str, text: str) -> datetime | None:
    """The timestamp a system wrote on a log line; None if the line carries none."""
    if key == "postgres.log" and (m := _PG_TS.match(text)):
        y, mo, d, h, mi, s, frac, zone = m.groups()
        return datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), _micro(frac), tzinfo=_pg_zone(zone))
    if key == "redis.log" and (m := _REDIS_TS.match(text)):
        d, mon, y, h, mi, s, frac = m.groups()
        return datetime(int(y), _month(mon), int(d), int(h), int(mi), int(s), _micro(frac), tzinfo=UTC)
    if key == "nginx.error_log" and (m := _NGINX_ERROR_TS.match(text)):
        y, mo, d, h, mi, s = (int(g) for g in m.groups())
        return datetime(y, mo, d, h, mi, s, tzinfo=UTC)
    if key == "nginx.access_log":
        if m := _NGINX_ACCESS_TS.search(text):
            d, mon, y, h, mi, s, sign, oh, om = m.groups()
            offset = timedelta(hours=int(oh), minutes=int(om))
            tz = timezone(-offset if sign == "-" else offset)
            return datetime(int(y), _month(mon), int(d), int(h), int(mi), int(s), tzinfo=tz)
        if m := _ISO_TS.search(text):  # `$time_iso8601` formats
            return datetime.fromisoformat(m.group(0))
    return None


def slowlog_time(values: Mapping[str, Any]) -> datetime | None:
    """The time of a SLOWLOG entry written as a mapping (`timestamp`: unix seconds or ISO text)."""
    stamp = values.get("timestamp")
    if isinstance(stamp, int) and not isinstance(stamp, bool):
        try:
            return datetime.fromtimestamp(stamp, UTC)
        except (OverflowError, OSError) as exc:
            raise ValueError(f"expected unix seconds within years 1-9999 (got {stamp})") from exc
    if isinstance(stamp, str):
        return _aware(stamp)
    return None
