"""Scenario folders: find, validate and load them (docs/scenario-files.md).

`load_scenario` gives the agent phase what it may see — the question, the alert, the clock,
the allowed tools and the frozen tool data — and never opens `ground_truth.yaml`;
`load_ground_truth` is for the evaluator only. Validation happens at this border with pydantic
models that forbid unknown fields (rows, settings, INFO sections and labels are free-form
mappings); every problem is reported as `<file>: <field path>: <what is expected> (line N)`.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from importlib.resources import files
from pathlib import Path
from typing import Any

from rootproof.errors import ScenarioError, UsageError
from rootproof.scenarios._schema import (
    LINE_FORMATS,
    GroundTruthModel,
    ProvenanceModel,
    ResponsesModel,
    ScenarioModel,
    _RequiredEvidenceModel,
    _RootCauseModel,
    line_time,
    problem,
    slowlog_time,
    validate,
)
from rootproof.scenarios.types import (
    Alert,
    Alternative,
    Effect,
    EvidenceMatch,
    ExpectedOutcome,
    GroundTruth,
    LogEntry,
    LogLine,
    MetricSeries,
    Recovery,
    RedHerring,
    RequiredEvidence,
    RootCause,
    Row,
    Scenario,
    ToolResponses,
)
from rootproof.scenarios.yamlio import DEFAULT_MAX_FILE_BYTES, YamlDocument, load_yaml
from rootproof.taxonomy import Taxonomy, recovery_policy
from rootproof.tools.refs import fmt_value
from rootproof.tools.results import ROW_KINDS

__all__ = ["list_scenarios", "load_ground_truth", "load_scenario", "scenario_folder", "validate_scenario"]

SCENARIO_FILE = "scenario.yaml"
RESPONSES_FILE = "snapshot/tool_responses.yaml"
GROUND_TRUTH_FILE = "ground_truth.yaml"
PROVENANCE_FILE = "provenance.yaml"
SECTIONS = ("logs", "metrics", "postgres", "redis", "nginx")
_ID = re.compile(r"^[a-z0-9-]+$")


# ---------------------------------------------------------------------------------------------
# Border models → dataclasses
# ---------------------------------------------------------------------------------------------


def _responses(doc: YamlDocument, m: ResponsesModel, problems: list[str]) -> ToolResponses:
    file_source = m.data_source
    marked = m.data_sources.model_dump(exclude_none=True) if m.data_sources else {}
    sources = {s: marked.get(s, file_source) for s in SECTIONS}

    logs = None
    if m.logs is not None:
        logs = tuple(
            LogEntry(
                ts=e.ts,
                service=e.service,
                level=e.level,
                message=e.message,
                scope=e.scope,
                source=e.source if e.source is not None else e.service,
                data_source=e.data_source or sources["logs"],
            )
            for e in m.logs
        )
    metrics = None
    if m.metrics is not None:
        metrics = tuple(
            MetricSeries(
                metric=s.metric,
                labels=dict(s.labels),
                unit=s.unit,
                points=tuple(sorted(((t, v) for t, v in s.points), key=lambda p: p[0])),
                data_source=s.data_source or sources["metrics"],
            )
            for s in m.metrics
        )

    rows: dict[str, tuple[Row, ...]] = {}
    lines: dict[str, tuple[LogLine, ...]] = {}
    settings: dict[str, Mapping[str, str]] = {}

    def take_rows(section: str, kind: str, items: list[dict[str, Any]] | None) -> None:
        if items is not None:
            rows[f"{section}.{kind}"] = tuple(_to_row(r, sources[section]) for r in items)

    def take_lines(section: str, kind: str, items: list[str] | None) -> None:
        if items is None:
            return
        key, out, last = f"{section}.{kind}", [], None
        for i, text in enumerate(items):
            try:
                ts = line_time(key, text)
            except ValueError as exc:
                problems.append(problem(doc, (section, kind, i), f"unreadable timestamp: {exc}"))
                ts = None
            if ts is None and last is None:
                problems.append(
                    problem(
                        doc,
                        (section, kind, i),
                        f"expected the line to start with a timestamp as {LINE_FORMATS[key]}",
                    )
                )
            last = ts if ts is not None else last
            out.append(LogLine(text=text, ts=(ts or last), data_source=sources[section]))
        lines[key] = tuple(out)

    if (pg := m.postgres) is not None:
        for kind in ROW_KINDS["inspect_postgres"]:
            take_rows("postgres", kind, getattr(pg, kind))
        if pg.settings is not None:
            settings["postgres.settings"] = dict(pg.settings)
        take_lines("postgres", "log", pg.log)
    info = None
    if (rd := m.redis) is not None:
        info = rd.info
        take_rows("redis", "clients", rd.clients)
        if rd.config is not None:
            settings["redis.config"] = dict(rd.config)
        take_lines("redis", "log", rd.log)
        if rd.slowlog is not None:
            slow: list[LogLine] = []
            for i, item in enumerate(rd.slowlog):
                if isinstance(item, str):
                    slow.append(LogLine(text=item, ts=None, data_source=sources["redis"]))
                    continue
                row = _to_row(item, sources["redis"])
                try:
                    ts = slowlog_time(row.values)
                except ValueError as exc:
                    problems.append(problem(doc, ("redis", "slowlog", i, "timestamp"), str(exc)))
                    ts = None
                text = " ".join(f"{k}={fmt_value(v)}" for k, v in row.values.items())
                slow.append(LogLine(text=text, ts=ts, data_source=row.data_source))
            lines["redis.slowlog"] = tuple(slow)
    nginx_config = nginx_status = None
    if (ng := m.nginx) is not None:
        take_lines("nginx", "error_log", ng.error_log)
        take_lines("nginx", "access_log", ng.access_log)
        if ng.config is not None:
            nginx_config = tuple(ng.config.splitlines())
        nginx_status = ng.status
    return ToolResponses(
        data_source=file_source,
        section_sources=sources,
        logs=logs,
        metrics=metrics,
        rows=rows,
        lines=lines,
        settings=settings,
        info=info,
        nginx_config=nginx_config,
        nginx_status=nginx_status,
    )


def _to_row(values: dict[str, Any], default: str) -> Row:
    data = dict(values)
    source = data.pop("data_source", None) or default
    return Row(values=data, data_source=source)


def _scenario(m: ScenarioModel, responses: ToolResponses) -> Scenario:
    alert = None
    if m.alert is not None:
        a = m.alert
        alert = Alert(
            name=a.name,
            severity=a.severity,
            service=a.service,
            starts_at=a.starts_at,
            labels=dict(a.labels),
            summary=a.summary,
        )
    return Scenario(
        id=m.id,
        title=m.title if m.title is not None else m.id,
        language=m.language,
        question=m.question,
        alert=alert,
        now=m.now,
        allowed_tools=tuple(m.allowed_tools),
        budget=m.budget.model_dump(exclude_none=True) if m.budget else {},
        tags=tuple(m.tags),
        responses=responses,
    )


def _cause(m: _RootCauseModel) -> RootCause:
    components = tuple(m.component) if isinstance(m.component, list) else (m.component,)
    mechanisms = tuple(m.mechanism) if isinstance(m.mechanism, list) else (m.mechanism,)
    return RootCause(
        component=components[0],
        mechanism=mechanisms[0],
        culprit=m.culprit,
        components=components,
        mechanisms=mechanisms,
    )


def _evidence(m: _RequiredEvidenceModel) -> RequiredEvidence:
    if m.any_of is not None:
        return RequiredEvidence(
            id=m.id, any_of=tuple(EvidenceMatch(tool=o.tool, match=tuple(o.match)) for o in m.any_of)
        )
    return RequiredEvidence(id=m.id, tool=m.tool or "", match=tuple(m.match or ()))


def _evidence_form(m: _RequiredEvidenceModel) -> tuple[str, str] | None:
    """(field, what is wrong) when a required evidence is not exactly one of its two forms."""
    if m.any_of is not None:
        extra = [f for f in ("tool", "match") if getattr(m, f) is not None]
        if extra:
            return extra[0], "expected either tool and match, or any_of, not both"
        return None
    for f in ("tool", "match"):
        if getattr(m, f) is None:
            return f, "required field missing (or give any_of: a list of {tool, match} alternatives)"
    return None


def _ground_truth(doc: YamlDocument, m: GroundTruthModel, problems: list[str]) -> GroundTruth:
    def bad(path: tuple[str | int, ...], what: str) -> None:
        problems.append(problem(doc, path, what))

    if not m.fault and m.root_cause is not None:
        bad(("root_cause",), "expected null when fault is false (a no-fault control names no root cause)")
    if m.fault and m.root_cause is None and m.expected_outcome is None:
        bad(("root_cause",), "expected a root cause when fault is true (or an expected_outcome)")
    ids: dict[str, int] = {}
    for i, ev in enumerate(m.required_evidence):
        if ev.id in ids:
            bad(
                ("required_evidence", i, "id"),
                f"duplicate id {ev.id!r} (also required_evidence[{ids[ev.id]}])",
            )
        ids.setdefault(ev.id, i)
        form = _evidence_form(ev)
        if form is not None:
            bad(("required_evidence", i, form[0]), form[1])
    # Alternatives and effects name required evidence by id.
    named = [("alternatives", i, "ruled_out_by", a.ruled_out_by) for i, a in enumerate(m.alternatives)]
    named += [("effects", i, "explained_by", e.explained_by) for i, e in enumerate(m.effects)]
    for section, i, field, refs in named:
        for j, ref in enumerate(refs):
            if ref not in ids:
                known = ", ".join(ids) or "none defined"
                bad((section, i, field, j), f"unknown required_evidence id {ref!r} (expected one of: {known})")
    rc = _cause(m.root_cause) if m.root_cause is not None else None
    contributing = tuple(_cause(c) for c in m.contributing_causes)
    if contributing and (not m.fault or rc is None):
        bad(
            ("contributing_causes",),
            "expected [] "
            + ("when fault is false" if not m.fault else "without a root_cause")
            + " (contributing causes go with a root cause)",
        )
    if rc is not None:
        for i, rh in enumerate(m.red_herrings):
            if rc.accepts(rh.component, rh.mechanism):
                bad(("red_herrings", i), "a red herring cannot be the root cause itself")
        for i, cause in enumerate(contributing):
            if cause.overlaps(rc):
                bad(("contributing_causes", i), f"duplicates the root cause ({rc.label})")
                continue
            twin = next((j for j in range(i) if contributing[j].overlaps(cause)), None)
            if twin is not None:
                bad(("contributing_causes", i), f"duplicates contributing_causes[{twin}] ({cause.label})")
            for j, rh in enumerate(m.red_herrings):
                if cause.accepts(rh.component, rh.mechanism):
                    bad(
                        ("contributing_causes", i),
                        f"a contributing cause cannot be a red herring (red_herrings[{j}] is {rh.component}/{rh.mechanism})",
                    )
    both = set(m.recovery.acceptable) & set(m.recovery.forbidden)
    if both:
        bad(("recovery", "forbidden"), f"actions both acceptable and forbidden: {', '.join(sorted(both))}")
    eo = m.expected_outcome
    if eo is not None:
        if eo.release_outcome == "FALLBACK" and eo.fallback_type is None:
            bad(("expected_outcome", "fallback_type"), "required when release_outcome is FALLBACK")
        if eo.release_outcome != "FALLBACK" and (eo.fallback_type is not None or eo.violations):
            bad(("expected_outcome",), "fallback_type and violations only go with release_outcome FALLBACK")
        if eo.violations and eo.fallback_type not in (None, "EVIDENCE_VALIDATION_FAILED"):
            bad(
                ("expected_outcome", "violations"),
                "EvidenceGuard violations imply fallback_type EVIDENCE_VALIDATION_FAILED",
            )
    rec = m.recovery
    approval = rec.requires_approval
    if approval is None:
        approval = [a for a in rec.acceptable if recovery_policy(a)[1]]
    return GroundTruth(
        fault=m.fault,
        expected_outcome=(
            ExpectedOutcome(
                release_outcome=eo.release_outcome,
                fallback_type=eo.fallback_type,
                violations=tuple(eo.violations),
            )
            if eo is not None
            else None
        ),
        root_cause=rc,
        contributing_causes=contributing,
        required_evidence=tuple(_evidence(e) for e in m.required_evidence),
        alternatives=tuple(
            Alternative(component=a.component, mechanism=a.mechanism, ruled_out_by=tuple(a.ruled_out_by))
            for a in m.alternatives
        ),
        red_herrings=tuple(
            RedHerring(description=r.description, component=r.component, mechanism=r.mechanism)
            for r in m.red_herrings
        ),
        effects=tuple(Effect(component=e.component, mechanism=e.mechanism, explained_by=tuple(e.explained_by)) for e in m.effects),
        recovery=Recovery(
            contract=rec.contract,
            acceptable=tuple(rec.acceptable),
            forbidden=tuple(rec.forbidden),
            requires_approval=tuple(approval),
            verification_required=rec.verification_required,
        ),
    )


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


def _builtin_root() -> Path:
    root = files("rootproof.scenarios") / "builtin"
    if not isinstance(root, Path):
        raise ScenarioError(
            f"built-in scenarios are not on the file system ({root}); reinstall rootproof unzipped"
        )
    return root


def _builtin_ids() -> list[str]:
    root = _builtin_root()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / SCENARIO_FILE).is_file())


def scenario_folder(ref: str | Path) -> Path:
    """Resolve a built-in scenario id or a folder path to the scenario's folder.

    A `Path`, or text with a path separator or leading dot, is a folder; other text is a
    built-in id first, then a folder. Raises `UsageError` when neither exists.
    """
    if isinstance(ref, str) and _ID.match(ref) and not ref.startswith("."):
        candidate = _builtin_root() / ref
        if (candidate / SCENARIO_FILE).is_file():
            return candidate
    path = Path(ref)
    if path.is_dir():
        return path
    known = ", ".join(_builtin_ids()) or "none"
    raise UsageError(
        f"scenario {str(ref)!r}: no built-in scenario of that id and no such folder (built-in: {known})"
    )


def list_scenarios(ref: str | Path | None = None) -> list[Path]:
    """Scenario folders: all built-in ones (None), one scenario folder, or a folder of them."""
    if ref is None:
        root = _builtin_root()
        return [root / i for i in _builtin_ids()]
    folder = scenario_folder(ref)
    if (folder / SCENARIO_FILE).is_file():
        return [folder]
    found = sorted(p for p in folder.iterdir() if p.is_dir() and (p / SCENARIO_FILE).is_file())
    if not found:
        raise UsageError(f"{folder}: no scenario folders (folders holding {SCENARIO_FILE}) found")
    return found


def _doc(folder: Path, rel: str, problems: list[str], max_bytes: int) -> YamlDocument | None:
    path = folder / rel
    name = f"{folder.name}/{rel}"
    if not path.is_file():
        problems.append(f"{name}: missing file (expected {rel} in the scenario folder)")
        return None
    try:
        return load_yaml(path, name, max_bytes=max_bytes)
    except ScenarioError as exc:
        problems.append(str(exc))
        return None


def _read_scenario(folder: Path, problems: list[str], max_bytes: int) -> Scenario | None:
    """Validate everything the agent phase may read; never opens the ground truth."""
    scenario_doc = _doc(folder, SCENARIO_FILE, problems, max_bytes)
    sm = validate(scenario_doc, ScenarioModel, problems) if scenario_doc else None
    raw_id = scenario_doc.data.get("id") if scenario_doc and isinstance(scenario_doc.data, dict) else None
    if scenario_doc is not None and isinstance(raw_id, str):  # checked even when other fields fail
        if not _ID.match(raw_id):
            problems.append(
                problem(
                    scenario_doc, ("id",), f"expected lower-case letters, digits and '-' (got {raw_id!r})"
                )
            )
        elif raw_id != folder.name:
            problems.append(
                problem(scenario_doc, ("id",), f"expected the folder name {folder.name!r} (got {raw_id!r})")
            )
    if sm is not None and scenario_doc is not None:
        for i, tool in enumerate(sm.allowed_tools):
            if tool in sm.allowed_tools[:i]:
                problems.append(problem(scenario_doc, ("allowed_tools", i), f"duplicate tool {tool!r}"))
        if sm.alert is not None and sm.alert.starts_at > sm.now:
            problems.append(
                problem(scenario_doc, ("alert", "starts_at"), "expected a time at or before `now`")
            )
    responses_doc = _doc(folder, RESPONSES_FILE, problems, max_bytes)
    responses = None
    if responses_doc is not None:
        if responses_doc.data is None:  # an empty file: every section missing
            responses = ToolResponses()
        elif (rm := validate(responses_doc, ResponsesModel, problems)) is not None:
            responses = _responses(responses_doc, rm, problems)
    if (folder / PROVENANCE_FILE).is_file():
        provenance_doc = _doc(folder, PROVENANCE_FILE, problems, max_bytes)
        if provenance_doc is not None:
            validate(provenance_doc, ProvenanceModel, problems)
    if problems or sm is None or responses is None:
        return None
    return _scenario(sm, responses)


def _read_ground_truth(
    folder: Path,
    problems: list[str],
    allowed_tools: Collection[str] | None,
    taxonomy: Taxonomy | None,
    max_bytes: int,
) -> GroundTruth | None:
    doc = _doc(folder, GROUND_TRUTH_FILE, problems, max_bytes)
    if doc is None:
        return None
    m = validate(doc, GroundTruthModel, problems, taxonomy)
    if m is None:
        return None
    before = len(problems)
    truth = _ground_truth(doc, m, problems)
    if allowed_tools is not None:
        for i, ev in enumerate(m.required_evidence):
            tools: list[tuple[tuple[str | int, ...], str | None]] = [
                (("required_evidence", i, "tool"), ev.tool)
            ]
            tools += [
                (("required_evidence", i, "any_of", j, "tool"), o.tool) for j, o in enumerate(ev.any_of or [])
            ]
            for path, tool in tools:
                if tool is not None and tool not in allowed_tools:
                    problems.append(problem(doc, path, f"{tool!r} is not in scenario.yaml allowed_tools"))
    return truth if len(problems) == before else None


def _raise(problems: list[str]) -> None:
    if problems:
        head = f"{len(problems)} problems:\n" if len(problems) > 1 else ""
        raise ScenarioError(head + "\n".join(problems))


def load_scenario(ref: str | Path, *, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> Scenario:
    """Load what the agent phase may see of a scenario (a built-in id or a folder).

    Validates `scenario.yaml`, `snapshot/tool_responses.yaml` and, if present,
    `provenance.yaml`; never opens `ground_truth.yaml`. Raises `ScenarioError` listing every
    problem as `<file>: <field path>: <what is expected>`; a file above `max_file_bytes`
    (`Settings.max_scenario_file_bytes`) is one of them.
    """
    folder = scenario_folder(ref)
    problems: list[str] = []
    scenario = _read_scenario(folder, problems, max_file_bytes)
    _raise(problems)
    assert scenario is not None
    return scenario


def load_ground_truth(
    folder: str | Path, taxonomy: Taxonomy | None = None, *, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
) -> GroundTruth:
    """Load a scenario's ground truth: for the evaluator only, after the run.

    Its labels must be in `taxonomy` (the built-in one plus the cards' labels; default: built-in).
    """
    problems: list[str] = []
    truth = _read_ground_truth(scenario_folder(folder), problems, None, taxonomy, max_file_bytes)
    _raise(problems)
    assert truth is not None
    return truth


def validate_scenario(
    folder: str | Path, taxonomy: Taxonomy | None = None, *, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
) -> list[str]:
    """Every problem of a scenario folder, ground truth included (empty when it is valid).

    Ground-truth labels are checked against `taxonomy` (default: the built-in one).
    """
    path = scenario_folder(folder)
    problems: list[str] = []
    scenario = _read_scenario(path, problems, max_file_bytes)
    _read_ground_truth(path, problems, scenario.allowed_tools if scenario else None, taxonomy, max_file_bytes)
    return problems
