"""Reading OpenSRE case folders: bounded, shape-checked, every problem one line naming the file.

An OpenSRE synthetic RDS case (`tests/synthetic/rds_postgres/<case>/` of Tracer-Cloud/opensre)
is a folder of `scenario.yml`, `alert.json`, `answer.yml` and evidence files. Files are
untrusted: each is refused above the size cap before it is parsed, JSON with NaN/Infinity,
numbers of thousands of digits or nesting deeper than 64 levels is refused, YAML anchors and
aliases are refused, counts (series, points, events, rows) and text lengths are capped. A
problem raises `ScenarioError("<case>/<file>: <field>: <what is expected>")`.

Inheritance (`base: 000-healthy`): the case's `scenario.yml` fields win over its base's (a
shallow merge, as OpenSRE does), and each evidence kind the case leaves out is taken whole from
the base: a case that ships its own metrics file gets none of the base's series, so a metric it
leaves out on purpose stays out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import yaml

from rootproof.errors import ScenarioError
from rootproof.limits import SCENARIO_FILE_BYTES
from rootproof.scenarios.yamlio import MAX_DEPTH, parse_yaml_values, read_capped

__all__ = [
    "ALERT_FILE",
    "ANSWER_FILE",
    "CASE_FILE",
    "EVIDENCE_KINDS",
    "SOURCE_NAMES",
    "CaseInput",
    "EvidenceKind",
    "ImportLimits",
    "MetricInput",
    "Shape",
    "find_cases",
    "read_case",
    "read_json",
    "read_yaml",
]

CASE_FILE = "scenario.yml"
ALERT_FILE = "alert.json"
ANSWER_FILE = "answer.yml"
MAX_BASE_CHAIN = 8
"""Longest `base:` chain followed (OpenSRE itself allows one level)."""

EvidenceKind = Literal["metrics", "events", "pi"]
EVIDENCE_KINDS: tuple[EvidenceKind, ...] = ("metrics", "events", "pi")

SINGLE_FILES: dict[EvidenceKind, tuple[str, ...]] = {
    "metrics": ("aws_cloudwatch_metrics.json", "cloudwatch_metrics.json"),
    "events": ("aws_rds_events.json", "rds_events.json"),
    "pi": ("aws_performance_insights.json", "performance_insights.json"),
}
"""Each evidence kind's file, newest name first (older OpenSRE versions drop the `aws_` prefix)."""
SPLIT_PREFIXES = ("aws_cloudwatch_metrics_", "cloudwatch_metrics_")
"""Split metrics: `<prefix>envelope.json` plus one `<prefix><Metric>.json` per series."""

SOURCE_NAMES: dict[str, EvidenceKind] = {
    "aws_cloudwatch_metrics": "metrics",
    "cloudwatch_metrics": "metrics",
    "rds_metrics": "metrics",
    "aws_rds_events": "events",
    "rds_events": "events",
    "aws_performance_insights": "pi",
    "performance_insights": "pi",
}
"""`available_evidence` and `required_evidence_sources` names → evidence kind (all versions)."""


@dataclass(frozen=True, kw_only=True)
class ImportLimits:
    """Caps on what one import reads (files are untrusted)."""

    file_bytes: int = SCENARIO_FILE_BYTES
    """Largest input file, bytes (`ROOTPROOF_MAX_SCENARIO_FILE_BYTES`)."""
    cases: int = 10_000
    """Most case folders in one DIR."""
    metric_files: int = 2_000
    """Most split per-metric files in one case folder."""
    series: int = 10_000
    """Most metric series in one case."""
    points: int = 100_000
    """Most points in one series."""
    events: int = 500_000
    """Most RDS events in one case."""
    rows: int = 100_000
    """Most rows in one Performance Insights list."""
    text_chars: int = 1_048_576
    """Longest text value (a message, a statement), characters."""


@dataclass(frozen=True, kw_only=True)
class MetricInput:
    """One CloudWatch series as the case writes it."""

    metric: str
    dimensions: tuple[tuple[str, str], ...]
    stat: str | None
    unit: str
    points: tuple[tuple[datetime, int | float], ...]
    status_code: str | None
    where: str
    """`<file>: metric_data_results[i]`, for warnings."""


@dataclass(kw_only=True)
class CaseInput:
    """A case's inputs after `base:` inheritance, parsed and shape-checked."""

    name: str
    """The case folder's name (`003-storage-full`)."""
    folder: Path
    meta: dict[str, Any]
    """`scenario.yml`, merged over its bases' (the `base` key removed)."""
    bases: tuple[str, ...]
    """The base chain, nearest first."""
    alert: dict[str, Any]
    answer: dict[str, Any]
    metrics: list[MetricInput] | None = None
    metrics_window: tuple[datetime | None, datetime | None] = (None, None)
    """The metrics envelope's `start_time`, `end_time`."""
    events: list[dict[str, Any]] | None = None
    """Each: `date` (datetime), `message`, `source_identifier`, `event_categories`."""
    pi: dict[str, Any] | None = None
    files: dict[EvidenceKind, list[str]] = field(default_factory=dict)
    """The files each evidence kind was read from, as `<folder>/<file>`."""
    warnings: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")


def _depth_ok(value: Any) -> bool:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth > MAX_DEPTH:
                return False
            children = node.values() if isinstance(node, dict) else node
            stack.extend((c, depth + 1) for c in children)
    return True


def read_json(path: Path, display: str, limits: ImportLimits) -> Any:
    """A JSON file's value; `ScenarioError` naming `display` when it is too big or not JSON."""
    raw = read_capped(path, display, limits.file_bytes, "ROOTPROOF_MAX_SCENARIO_FILE_BYTES")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{display}: not UTF-8 text (byte {exc.start})") from None
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise ScenarioError(
            f"{display}: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except RecursionError:
        raise ScenarioError(f"{display}: not usable JSON: nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # NaN/Infinity, or an integer of thousands of digits
        raise ScenarioError(f"{display}: not usable JSON: {exc}") from None
    if not _depth_ok(value):
        raise ScenarioError(f"{display}: not usable JSON: nested deeper than {MAX_DEPTH} levels")
    return value


def read_yaml(path: Path, display: str, limits: ImportLimits) -> Any:
    """A YAML file's value (safe loader, no anchors or aliases); `ScenarioError` naming `display`."""
    raw = read_capped(path, display, limits.file_bytes, "ROOTPROOF_MAX_SCENARIO_FILE_BYTES")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{display}: not UTF-8 text (byte {exc.start})") from None
    try:
        return parse_yaml_values(raw, display)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        what = " ".join(p for p in (exc.context, exc.problem) if p) or "invalid YAML"
        raise ScenarioError(f"{display}: not valid YAML: {what}{where}") from None
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{display}: not valid YAML: {exc}") from None


# ---------------------------------------------------------------------------------------------
# Shapes
# ---------------------------------------------------------------------------------------------


def _got(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "text"
    return (
        "a list"
        if isinstance(value, list)
        else "a mapping"
        if isinstance(value, dict)
        else type(value).__name__
    )


class Shape:
    """Checks on one parsed file; every failure names the file and the field."""

    def __init__(self, display: str, limits: ImportLimits) -> None:
        self.display = display
        self.limits = limits

    def fail(self, where: str, what: str) -> ScenarioError:
        """The error for field `where` (empty: the whole file)."""
        return ScenarioError(f"{self.display}: {where + ': ' if where else ''}{what}")

    def mapping(self, value: Any, where: str) -> dict[str, Any]:
        """`value` as a mapping with text keys."""
        if not isinstance(value, dict):
            raise self.fail(where, f"expected a mapping (got {_got(value)})")
        for k in value:
            if not isinstance(k, str):
                raise self.fail(where, f"expected text keys (got {k!r})")
        return value

    def text(self, value: Any, where: str, *, empty: bool = True) -> str:
        """`value` as text, within the length cap."""
        if not isinstance(value, str):
            raise self.fail(where, f"expected text (got {_got(value)})")
        if not empty and not value.strip():
            raise self.fail(where, "expected non-empty text")
        if len(value) > self.limits.text_chars:
            raise self.fail(where, f"{len(value)} characters, more than the cap of {self.limits.text_chars}")
        return value

    def scalar_text(self, value: Any, where: str) -> str:
        """A text, number or boolean written as text (dimension values, labels)."""
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int | float):
            return repr(value)
        return self.text(value, where)

    def items(self, value: Any, where: str, cap: int, what: str) -> list[Any]:
        """`value` as a list of at most `cap` items."""
        if not isinstance(value, list):
            raise self.fail(where, f"expected a list (got {_got(value)})")
        if len(value) > cap:
            raise self.fail(where, f"{len(value)} {what}, more than the cap of {cap}")
        return value

    def texts(self, value: Any, where: str) -> list[str]:
        """An optional list of texts (None → [])."""
        if value is None:
            return []
        return [
            self.text(v, f"{where}[{i}]") for i, v in enumerate(self.items(value, where, 10_000, "items"))
        ]

    def number(self, value: Any, where: str) -> int | float:
        """A finite number (not a boolean)."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(where, f"expected a number (got {_got(value)})")
        if isinstance(value, float) and not math.isfinite(value):
            raise self.fail(where, "expected a finite number")
        return value

    def time(self, value: Any, where: str) -> datetime:
        """An ISO 8601 time with a zone (`2026-03-27T02:12:33Z`)."""
        text = self.text(value, where)
        try:
            ts = datetime.fromisoformat(text.strip())
        except ValueError:
            raise self.fail(
                where, f"expected an ISO 8601 time such as 2026-03-27T02:12:33Z (got {text[:60]!r})"
            ) from None
        if ts.tzinfo is None:
            raise self.fail(where, f"expected a time with a zone (Z or +hh:mm), got {text[:60]!r}")
        return ts

    def optional_time(self, value: Any, where: str) -> datetime | None:
        """An optional time (absent or empty text → None)."""
        return None if value is None or value == "" else self.time(value, where)

    def series(self, times: Any, values: Any, where: str) -> tuple[tuple[datetime, int | float], ...]:
        """`timestamps` and `values` side by side, as points."""
        ts = self.items(
            times, f"{where}.timestamps" if where else "timestamps", self.limits.points, "timestamps"
        )
        vs = self.items(values, f"{where}.values" if where else "values", self.limits.points, "values")
        if len(ts) != len(vs):
            raise self.fail(
                where or "values", f"{len(ts)} timestamps but {len(vs)} values (expected as many of each)"
            )
        pre = f"{where}." if where else ""
        return tuple(
            (self.time(t, f"{pre}timestamps[{i}]"), self.number(v, f"{pre}values[{i}]"))
            for i, (t, v) in enumerate(zip(ts, vs, strict=True))
        )

    def rows(self, value: Any, where: str) -> list[dict[str, Any]]:
        """A list of free-form rows (mappings with text keys; texts within the cap)."""
        out = []
        for i, row in enumerate(self.items(value, where, self.limits.rows, "rows")):
            out.append(self._plain(self.mapping(row, f"{where}[{i}]"), f"{where}[{i}]"))
        return out

    def _plain(self, value: Any, where: str) -> Any:
        if isinstance(value, dict):
            return {k: self._plain(v, f"{where}.{k}") for k, v in self.mapping(value, where).items()}
        if isinstance(value, list):
            return [self._plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, str):
            return self.text(value, where)
        return value  # JSON scalars: numbers are finite (NaN is refused at parse time), booleans, null


# ---------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------


def find_cases(src: Path, limits: ImportLimits) -> list[Path]:
    """`src` itself when it is a case folder (it holds `scenario.yml`), else its case subfolders."""
    if not src.is_dir():
        raise ScenarioError(f"{src}: not a folder (expected an OpenSRE case folder or a folder of them)")
    if (src / CASE_FILE).is_file():
        return [src]
    found = []
    for p in sorted(src.iterdir()):
        if p.is_dir() and (p / CASE_FILE).is_file():
            found.append(p)
            if len(found) > limits.cases:
                raise ScenarioError(f"{src}: more than {limits.cases} case folders (the cap of one import)")
    if not found:
        raise ScenarioError(f"{src}: no OpenSRE case folder (a folder holding {CASE_FILE}) found")
    return found


def _base_name(shape: Shape, value: Any) -> str:
    name = shape.text(value, "base", empty=False).strip()
    if name in (".", "..") or "/" in name or "\\" in name or len(name) > 255:
        raise shape.fail("base", f"expected the name of a sibling case folder (got {name!r})")
    return name


def _resolve_base(case: Path, name: str, base_dir: Path | None, shape: Shape) -> Path:
    """The folder of base `name`: under `--base DIR` (or `--base` naming it), else a sibling of the case."""
    looked: list[Path] = []
    if base_dir is not None:
        if base_dir.name == name and (base_dir / CASE_FILE).is_file():
            return base_dir
        looked.append(base_dir / name)
    else:
        looked.append(case.parent / name)
    for folder in looked:
        if folder.is_dir() and (folder / CASE_FILE).is_file():
            return folder
    where = " or ".join(str(p) for p in looked)
    raise shape.fail(
        "base", f"base case {name!r} not found (looked for {where}/{CASE_FILE}); give --base DIR"
    )


def _meta(path: Path, display: str, limits: ImportLimits) -> dict[str, Any]:
    shape = Shape(display, limits)
    return shape.mapping(read_yaml(path, display, limits), "")


def _chain(case: Path, base_dir: Path | None, limits: ImportLimits) -> tuple[dict[str, Any], list[Path]]:
    """The merged `scenario.yml` and the base folders, nearest first."""
    display = f"{case.name}/{CASE_FILE}"
    metas = [_meta(case / CASE_FILE, display, limits)]
    folders: list[Path] = []
    current, current_display = case, display
    while "base" in metas[-1] and metas[-1]["base"] not in (None, ""):
        shape = Shape(current_display, limits)
        name = _base_name(shape, metas[-1]["base"])
        folder = _resolve_base(current, name, base_dir, shape)
        if folder.resolve() in {p.resolve() for p in [case, *folders]}:
            raise shape.fail("base", f"base case {name!r} inherits from itself (a cycle)")
        if len(folders) >= MAX_BASE_CHAIN:
            raise shape.fail("base", f"more than {MAX_BASE_CHAIN} levels of base cases")
        folders.append(folder)
        current, current_display = folder, f"{folder.name}/{CASE_FILE}"
        metas.append(_meta(folder / CASE_FILE, current_display, limits))
    merged: dict[str, Any] = {}
    for m in reversed(metas):  # farthest base first, the case last: the case wins
        merged.update(m)
    merged.pop("base", None)
    return merged, folders


def _evidence_files(folder: Path, kind: EvidenceKind, limits: ImportLimits) -> tuple[list[Path], list[str]]:
    """The files of one evidence kind in `folder` ([] when it has none), and warnings."""
    warnings: list[str] = []
    singles = [folder / n for n in SINGLE_FILES[kind] if (folder / n).is_file()]
    if kind == "metrics":
        for prefix in SPLIT_PREFIXES:
            envelope = folder / f"{prefix}envelope.json"
            if envelope.is_file():
                if singles:
                    warnings.append(
                        f"{folder.name}/{envelope.name}: ignored: {singles[0].name} holds this case's metrics"
                    )
                    break
                parts = sorted(
                    p for p in folder.glob(f"{prefix}*.json") if p.name != envelope.name and p.is_file()
                )
                if len(parts) > limits.metric_files:
                    raise ScenarioError(
                        f"{folder.name}: {len(parts)} {prefix}*.json files, more than the cap of {limits.metric_files}"
                    )
                return [envelope, *parts], warnings
    for extra in singles[1:]:
        warnings.append(f"{folder.name}/{extra.name}: ignored: {singles[0].name} holds this case's {kind}")
    return singles[:1], warnings


def _display(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def _read_metrics(case: CaseInput, paths: list[Path], limits: ImportLimits) -> None:
    results: list[tuple[Any, str, str]] = []  # (result, display, field prefix)
    first = paths[0]
    head = Shape(_display(first), limits)
    doc = head.mapping(read_json(first, _display(first), limits), "")
    if first.name.endswith("envelope.json"):  # split: the envelope, then one series per file
        for p in paths[1:]:
            results.append((read_json(p, _display(p), limits), _display(p), ""))
    else:
        items = head.items(doc.get("metric_data_results"), "metric_data_results", limits.series, "series")
        results.extend((r, head.display, f"metric_data_results[{i}]") for i, r in enumerate(items))
    if len(results) > limits.series:
        raise head.fail("", f"{len(results)} series, more than the cap of {limits.series}")
    case.metrics_window = (
        head.optional_time(doc.get("start_time"), "start_time"),
        head.optional_time(doc.get("end_time"), "end_time"),
    )
    series: list[MetricInput] = []
    for raw, display, where in results:
        shape = Shape(display, limits)
        r = shape.mapping(raw, where)
        pre = f"{where}." if where else ""
        metric = shape.text(r.get("metric_name"), f"{pre}metric_name", empty=False)
        dims = []
        for i, d in enumerate(shape.items(r.get("dimensions", []), f"{pre}dimensions", 64, "dimensions")):
            dm = shape.mapping(d, f"{pre}dimensions[{i}]")
            dims.append(
                (
                    shape.text(dm.get("Name"), f"{pre}dimensions[{i}].Name", empty=False),
                    shape.scalar_text(dm.get("Value"), f"{pre}dimensions[{i}].Value"),
                )
            )
        stat = r.get("stat")
        series.append(
            MetricInput(
                metric=metric,
                dimensions=tuple(dims),
                stat=None if stat is None else shape.text(stat, f"{pre}stat"),
                unit="" if r.get("unit") is None else shape.text(r.get("unit"), f"{pre}unit"),
                points=shape.series(r.get("timestamps"), r.get("values"), where),
                status_code=None
                if r.get("status_code") is None
                else shape.text(r.get("status_code"), f"{pre}status_code"),
                where=f"{display}{': ' + where if where else ''}",
            )
        )
    case.metrics = series


def _read_events(case: CaseInput, path: Path, limits: ImportLimits) -> None:
    shape = Shape(_display(path), limits)
    doc = shape.mapping(read_json(path, shape.display, limits), "")
    out = []
    for i, raw in enumerate(shape.items(doc.get("events"), "events", limits.events, "events")):
        where = f"events[{i}]"
        e = shape.mapping(raw, where)
        out.append(
            {
                "date": shape.time(e.get("date"), f"{where}.date"),
                "message": shape.text(e.get("message"), f"{where}.message"),
                "source_identifier": shape.text(
                    e.get("source_identifier"), f"{where}.source_identifier", empty=False
                ),
                "event_categories": shape.texts(e.get("event_categories"), f"{where}.event_categories"),
            }
        )
    case.events = out


def _read_pi(case: CaseInput, path: Path, limits: ImportLimits) -> None:
    shape = Shape(_display(path), limits)
    doc = shape.mapping(read_json(path, shape.display, limits), "")
    pi: dict[str, Any] = {
        "db_instance_identifier": None
        if doc.get("db_instance_identifier") is None
        else shape.text(doc["db_instance_identifier"], "db_instance_identifier"),
        "start_time": shape.optional_time(doc.get("start_time"), "start_time"),
        "end_time": shape.optional_time(doc.get("end_time"), "end_time"),
        "db_load": None,
    }
    if doc.get("db_load") is not None:
        load = shape.mapping(doc["db_load"], "db_load")
        pi["db_load"] = {
            "points": shape.series(load.get("timestamps"), load.get("values"), "db_load"),
            "unit": "" if load.get("unit") is None else shape.text(load["unit"], "db_load.unit"),
        }
    for key in ("top_sql", "top_wait_events", "top_users", "top_hosts"):
        pi[key] = None if doc.get(key) is None else shape.rows(doc[key], key)
    for i, row in enumerate(pi["top_sql"] or []):
        if "statement" in row:
            shape.text(row["statement"], f"top_sql[{i}].statement")
    case.pi = pi


def _declared(case: CaseInput, limits: ImportLimits) -> set[EvidenceKind] | None:
    """The evidence kinds `available_evidence` declares (None when the case declares none)."""
    raw = case.meta.get("available_evidence")
    if raw is None:
        return None
    shape = Shape(f"{case.name}/{CASE_FILE}", limits)
    names = shape.texts(raw, "available_evidence")
    kinds: set[EvidenceKind] = set()
    for n in names:
        kind = SOURCE_NAMES.get(n.strip())
        if kind is None:
            case.warnings.append(
                f"{case.name}/{CASE_FILE}: available_evidence: {n!r} is not an RDS evidence source; not converted"
            )
        else:
            kinds.add(kind)
    return kinds


def _sources(
    case: CaseInput, folders: list[Path], limits: ImportLimits
) -> Iterator[tuple[EvidenceKind, list[Path]]]:
    declared = _declared(case, limits)
    for kind in EVIDENCE_KINDS:
        found: list[Path] = []
        for folder in folders:
            found, warnings = _evidence_files(folder, kind, limits)
            case.warnings.extend(warnings)
            if found:
                break
        if declared is not None and kind not in declared:
            if found:
                case.warnings.append(
                    f"{_display(found[0])}: ignored: scenario.yml available_evidence does not list it"
                )
            continue
        if not found:
            if declared is not None:
                case.warnings.append(
                    f"{case.name}: no {kind} file ({' or '.join(SINGLE_FILES[kind])}): that evidence is absent"
                )
            continue
        yield kind, found


def read_case(folder: Path, *, base_dir: Path | None, limits: ImportLimits) -> CaseInput:
    """Read and check one case folder, with its base's fields and evidence files."""
    meta, bases = _chain(folder, base_dir, limits)
    for need in (ALERT_FILE, ANSWER_FILE):
        if not (folder / need).is_file():
            raise ScenarioError(f"{folder.name}/{need}: missing file (every OpenSRE case folder has one)")
    alert_display, answer_display = f"{folder.name}/{ALERT_FILE}", f"{folder.name}/{ANSWER_FILE}"
    alert = Shape(alert_display, limits).mapping(read_json(folder / ALERT_FILE, alert_display, limits), "")
    answer = Shape(answer_display, limits).mapping(
        read_yaml(folder / ANSWER_FILE, answer_display, limits), ""
    )
    case = CaseInput(
        name=folder.name,
        folder=folder,
        meta=meta,
        bases=tuple(b.name for b in bases),
        alert=alert,
        answer=answer,
    )
    for kind, paths in _sources(case, [folder, *bases], limits):
        case.files[kind] = [_display(p) for p in paths]
        if kind == "metrics":
            _read_metrics(case, paths, limits)
        elif kind == "events":
            _read_events(case, paths[0], limits)
        else:
            _read_pi(case, paths[0], limits)
    return case
