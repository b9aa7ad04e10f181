"""A live run's evidence frozen into a snapshot scenario folder (`rootproof eval live --record DIR`).

`record_scenario` runs right after a diagnosis, while the fault is still in place. It reads the
live systems through the live backends the run used (built from the same targets file; never
drivers of its own), at the run's clock `now`, and writes a folder that `load_scenario` loads and
`rootproof eval snapshot` runs, whose snapshot backend answers the run's calls as live did:

- `query_logs`: every entry of every logs target in the longest window asked (at least
  `BROAD_SINCE`), in the order the live backend returns them, so that ties keep its order;
- `query_metrics`: each series every recorded `query_metrics` call selected, with the points
  of each call (the union when several calls read one series);
- `inspect_postgres`, `inspect_redis`, `inspect_nginx`: every kind the target serves, whole
  (tables paged through, logs over the longest window asked for that kind or `BROAD_SINCE`),
  so a planner asking slightly different questions still gets real answers;
- `provenance.yaml` (`source: recorded_live_run`) with a `recording` section: when, which live
  run and diagnosis run, the targets (names and kinds only), the calls recorded, and the
  `limits` met (truncation, calls that failed live, differences found by the parity check).

Everything written passes through the redaction the tool boundary applies to results
(`boundary.redaction.redact_value`) and the targets' own secrets are replaced by `***`
wherever they occur. Every kind keeps at most `MAX_ITEMS` items (the tools' paging reaches no
further than offset 10 000 anyway).

`replay_matches` (also run by `record_scenario`, its findings kept in `recording.limits`)
compares the snapshot backend's evidence refs with the live ones, call by call.
What cannot be reproduced exactly is in docs/live-benchmark.md ("Recording a live run").
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError

from rootproof.backends.live import open_live_backends
from rootproof.backends.registry import BackendRegistry
from rootproof.backends.snapshot import SnapshotBackend
from rootproof.boundary.redaction import MASK, redact_value
from rootproof.errors import BackendError, ConfigError, LiveEnvironmentError, ScenarioError
from rootproof.scenarios._schema import GroundTruthModel, line_time
from rootproof.scenarios.loader import load_scenario, validate_scenario
from rootproof.scenarios.types import format_timestamp
from rootproof.scenarios.yamlio import parse_yaml
from rootproof.targets import (
    LokiTarget,
    PostgresTarget,
    PrometheusTarget,
    RedisTarget,
    load_targets,
    secret_of,
)
from rootproof.tools.base import TOOLS, ToolBackend, parse_since
from rootproof.tools.refs import NO_EVIDENCE_PATH, ref_items
from rootproof.tools.results import ROW_KINDS

__all__ = [
    "BROAD_SINCE",
    "MAX_ITEMS",
    "RECORDED_TOOLS",
    "VOLATILE",
    "live_refs",
    "record_scenario",
    "replay_matches",
    "snapshot_refs",
]

RECORDED_TOOLS = ("query_logs", "query_metrics", "inspect_postgres", "inspect_redis", "inspect_nginx")
"""The tools a snapshot serves (`lookup_knowledge` reads the knowledge base, never a snapshot)."""
BROAD_SINCE = "1h"
"""The shortest window recorded for logs and log-like kinds, whatever the calls asked."""
MAX_ITEMS = 10_000
"""Most items (log entries, lines, rows) recorded per kind."""
PAGE = 200
"""The tools' largest `limit`: the page size the recorder reads with."""
MAX_LIMITS = 50
"""Most `recording.limits` lines kept (each at most `LIMIT_CHARS` characters)."""
LIMIT_CHARS = 500
VOLATILE: dict[str, frozenset[str]] = {
    "query_metrics": frozenset({"*"}),
    "inspect_postgres": frozenset(ROW_KINDS["inspect_postgres"]),  # every table of the moment
    "inspect_redis": frozenset({"info", "clients"}),
    "inspect_nginx": frozenset({"status"}),
}
"""Kinds that are a picture of the moment they are read (sessions, counters, metric windows):
the recording reads them after the diagnosis, so their values may differ from what the run
saw. `replay_matches` compares only whether they found evidence (and which metric series)
unless `exact_volatile`."""

_SYSTEM_OF_TOOL = {
    "query_logs": "logs",
    "query_metrics": "metrics",
    "inspect_postgres": "postgres",
    "inspect_redis": "redis",
    "inspect_nginx": "nginx",
}
_LINE_KINDS = {
    ("inspect_postgres", "log"): "postgres.log",
    ("inspect_redis", "log"): "redis.log",
    ("inspect_nginx", "error_log"): "nginx.error_log",
    ("inspect_nginx", "access_log"): "nginx.access_log",
}
_SLOWLOG = re.compile(
    r"^id=(\d+) timestamp=(\d+) duration_us=(\d+) command=(.*) client_addr=(\S*) client_name=(\S*)$", re.S
)
_MIN_SECRET = 4
"""Shorter secrets are not replaced (a one-letter password would garble every word)."""

Call = tuple[str, dict[str, Any]]


class _Dumper(yaml.SafeDumper):
    """Plain YAML: no anchors or aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _dump(data: Any, name: str) -> str:
    """YAML text for plain data, checked to read back as the same data with the scenario reader."""
    text = yaml.dump(data, Dumper=_Dumper, allow_unicode=True, sort_keys=False, width=1 << 20)
    if parse_yaml(text, name).data != data:
        raise LiveEnvironmentError(
            "record", f"{name}: the YAML written does not read back as the data recorded"
        )
    return text


# ---------------------------------------------------------------------------------------------
# Calls
# ---------------------------------------------------------------------------------------------


def _args(tool: str, arguments: Mapping[str, Any]) -> BaseModel:
    """A call's arguments as its tool's model (a `target` argument is dropped: one target per system)."""
    return TOOLS[tool].args_model.model_validate({k: v for k, v in arguments.items() if k != "target"})


def _recorded_calls(calls: Iterable[Call]) -> list[tuple[str, BaseModel]]:
    out: list[tuple[str, BaseModel]] = []
    for tool, arguments in calls:
        if tool not in RECORDED_TOOLS:
            continue
        try:
            out.append((tool, _args(tool, arguments)))
        except ValidationError:
            continue  # the run refused it too: nothing was read
    return out


def _longest(calls: Sequence[tuple[str, BaseModel]], tool: str, kind: str | None) -> str:
    """The longest `since` the calls asked of `tool` (and `kind`), at least `BROAD_SINCE`."""
    sinces = [BROAD_SINCE] + [
        str(getattr(a, "since", BROAD_SINCE))
        for t, a in calls
        if t == tool and (kind is None or getattr(a, "kind", None) == kind)
    ]
    return max(sinces, key=parse_since)


# ---------------------------------------------------------------------------------------------
# Reading through the live backends
# ---------------------------------------------------------------------------------------------


class _Reader:
    """The live backends of a targets file, read at the run's clock; what could not be read is noted."""

    def __init__(self, registry: BackendRegistry, now: datetime, secrets: list[str]) -> None:
        self.registry = registry
        self.now = now
        self.secrets = secrets
        self.limits: list[str] = []

    def backend(self, tool: str) -> ToolBackend | None:
        resolved = self.registry.resolve(_SYSTEM_OF_TOOL[tool])
        return resolved.backend if resolved is not None else None

    def clean(self, value: Any) -> Any:
        """What the boundary stores of a value (redacted), with the targets' secrets masked too."""
        return _mask(redact_value(value), self.secrets)

    def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any] | None:
        backend = self.backend(tool)
        if backend is None:
            return None
        model = TOOLS[tool].args_model.model_validate(args)
        try:
            out: dict[str, Any] = backend.call(tool, model, now=self.now, run_id="record").json()
        except BackendError as exc:
            self.limits.append(f"{tool} {_args_text(args)}: not recorded, the live backend failed: {exc}")
            return None
        return out

    def pages(self, tool: str, args: dict[str, Any], field: str) -> list[Any] | None:
        """Every item of `field` the call finds (paged through, at most `MAX_ITEMS`), None if unread."""
        items: list[Any] = []
        total = 0
        while len(items) < MAX_ITEMS:
            page = self.call(tool, {**args, "limit": PAGE, "offset": len(items)})
            if page is None:
                return None if not items else items
            got = page.get(field) or []
            items.extend(got)
            total = int(page.get("total_matches") or 0)
            if not got or len(items) >= total:
                break
        if total > len(items):
            self.limits.append(f"{tool} {_args_text(args)}: {total} items, the first {len(items)} recorded")
        return items[:MAX_ITEMS]


def _args_text(args: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in args.items() if k not in ("limit", "offset"))


def _mask(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, MASK)
        return value
    if isinstance(value, list):
        return [_mask(v, secrets) for v in value]
    if isinstance(value, dict):
        return {_mask(k, secrets): _mask(v, secrets) for k, v in value.items()}
    return value


def _file_order(key: str, lines: list[str]) -> list[str]:
    """Lines as a live backend returns them (newest first, equal times as read) back in the file's
    order, which the snapshot loader needs (a line without a time continues the one before it)."""
    runs: list[list[str]] = []
    last: datetime | None = None
    for text in lines:
        try:
            ts = line_time(key, text)
        except ValueError:
            ts = None
        if runs and (ts is None or ts == last):
            runs[-1].append(text)
        else:
            runs.append([text])
        last = ts if ts is not None else last
    return [text for run in reversed(runs) for text in run]


def _slowlog_item(text: str) -> str | dict[str, Any]:
    """A live SLOWLOG line as a snapshot mapping (so its time windows it); the text if it does not parse back."""
    m = _SLOWLOG.match(text)
    if m is None:
        return text
    ident, stamp, micros, command, addr, name = m.groups()
    item: dict[str, Any] = {
        "id": int(ident),
        "timestamp": int(stamp),
        "duration_us": int(micros),
        "command": command,
        "client_addr": addr,
        "client_name": name,
    }
    rebuilt = " ".join(f"{k}={v}" for k, v in item.items())
    return item if rebuilt == text else text


def _logs(reader: _Reader, calls: Sequence[tuple[str, BaseModel]]) -> list[dict[str, Any]] | None:
    since = _longest(calls, "query_logs", None)
    entries = reader.pages("query_logs", {"since": since, "scope": "ALL"}, "entries")
    if entries is None:
        return None
    out = []
    for e in reader.clean(entries):
        out.append(
            {
                "ts": e["ts"],
                "service": e["service"],
                "level": e["level"],
                "scope": e["scope"],
                "source": e["source"],
                "message": e["message"],
            }
        )
    return out


def _metrics(reader: _Reader, calls: Sequence[tuple[str, BaseModel]]) -> list[dict[str, Any]] | None:
    if reader.backend("query_metrics") is None:
        return None
    series: dict[tuple[str, tuple[tuple[str, str], ...]], dict[str, Any]] = {}
    asked = [a for t, a in calls if t == "query_metrics"]
    for args in sorted(asked, key=lambda a: parse_since(str(getattr(a, "since", BROAD_SINCE))), reverse=True):
        result = reader.call("query_metrics", args.model_dump(exclude_none=True))
        if result is None:
            continue
        if result.get("total_matches"):
            reader.limits.append(
                f"query_metrics {_args_text(args.model_dump(exclude_none=True))}: {result['total_matches']} series matched, {len(result.get('series') or [])} recorded"
            )
        for s in reader.clean(result.get("series") or []):
            key = (s["metric"], tuple(sorted(s["labels"].items())))
            kept = series.setdefault(
                key, {"metric": s["metric"], "labels": dict(s["labels"]), "unit": s["unit"], "points": {}}
            )
            for ts, value in s["points"]:
                kept["points"][ts] = value
    out = []
    for s in series.values():
        points = sorted(s["points"].items())
        out.append(
            {
                "metric": s["metric"],
                "labels": s["labels"],
                "unit": s["unit"],
                "points": [[t, v] for t, v in points],
            }
        )
    return out


def _inspector(reader: _Reader, tool: str, calls: Sequence[tuple[str, BaseModel]]) -> dict[str, Any] | None:
    if reader.backend(tool) is None:
        return None
    model = TOOLS[tool].args_model
    kinds: tuple[str, ...] = get_args(model.model_fields["kind"].annotation)
    section: dict[str, Any] = {}
    for kind in kinds:
        if (tool, kind) in _LINE_KINDS or (tool, kind) == ("inspect_redis", "slowlog"):
            lines = reader.pages(tool, {"kind": kind, "since": _longest(calls, tool, kind)}, "lines")
            if lines is None:
                continue
            lines = [str(x) for x in reader.clean(lines)]
            if (tool, kind) == ("inspect_redis", "slowlog"):
                section[kind] = [_slowlog_item(x) for x in lines]
            else:
                section[kind] = _file_order(_LINE_KINDS[(tool, kind)], lines)
        elif kind in ROW_KINDS.get(tool, ()):
            rows = reader.pages(tool, {"kind": kind}, "rows")
            if rows is not None:
                section[kind] = reader.clean(rows)
        else:  # one mapping or the config, not paged
            result = reader.call(tool, {"kind": kind})
            if result is None:
                continue
            field = {
                "info": "info",
                "config": "config" if tool == "inspect_nginx" else "settings",
                "status": "status",
            }.get(kind, "settings")
            value = reader.clean(result.get(field))
            if value is None:
                continue
            section[kind] = "\n".join(value) if field == "config" else value
    return section


def _secrets(targets: Iterable[Any]) -> list[str]:
    """Every target's secret (password, token), to be masked wherever it occurs."""
    out: list[str] = []
    for t in targets:
        if isinstance(t, PostgresTarget | RedisTarget | LokiTarget | PrometheusTarget):
            try:
                secret = secret_of(t, os.environ)
            except ConfigError:
                secret = None
            if secret and len(secret) >= _MIN_SECRET:
                out.append(secret)
    return sorted(set(out), key=len, reverse=True)


# ---------------------------------------------------------------------------------------------
# Parity
# ---------------------------------------------------------------------------------------------


def live_refs(tool: str, result: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The evidence refs the boundary stores for a result (redacted): `(path, text)`, `$.no_evidence` last."""
    data = redact_value(dict(result))
    refs = ref_items(tool, data)
    if "no_evidence" in data and data["no_evidence"] is not None:
        refs.append((NO_EVIDENCE_PATH, str(data["no_evidence"])))
    return refs


def snapshot_refs(folder: Path, calls: Iterable[Call]) -> list[list[tuple[str, str]] | str]:
    """What the snapshot backend at the scenario's `now` answers each call with: its refs, or the
    error text; calls of tools a snapshot does not serve are skipped (as in `replay_matches`)."""
    scenario = load_scenario(folder)
    backend = SnapshotBackend(scenario)
    out: list[list[tuple[str, str]] | str] = []
    for tool, arguments in calls:
        if tool not in RECORDED_TOOLS:
            continue
        try:
            result = backend.call(tool, _args(tool, arguments), now=scenario.now, run_id="replay")
        except (BackendError, ValidationError) as exc:
            out.append(f"{type(exc).__name__}: {exc}")
            continue
        out.append(live_refs(tool, result.json()))
    return out


def _volatile(tool: str, arguments: Mapping[str, Any]) -> bool:
    kinds = VOLATILE.get(tool, frozenset())
    return "*" in kinds or str(arguments.get("kind")) in kinds


def _series_names(refs: Mapping[str, str]) -> list[str]:
    """Each series' metric and labels (its ref text before the summary)."""
    return [text.split(" first=", 1)[0] for path, text in refs.items() if path != NO_EVIDENCE_PATH]


def replay_matches(
    folder: Path,
    calls: Sequence[Call],
    live_results: Sequence[Sequence[tuple[str, str]] | None],
    *,
    exact_volatile: bool = False,
) -> list[str]:
    """The differences between the snapshot backend's answers and the live ones, one line each.

    `calls` and `live_results` pair up after dropping calls of tools a snapshot does not serve:
    `live_results[i]` is the live refs `(path, text)` of that call (`live_refs` of its result,
    or a trace invocation's `evidence_refs`), None to skip it (it failed or was refused live).
    Refs compare path by path; a `$.no_evidence` compares by presence only (its wording names
    the backend). For `VOLATILE` kinds only whether evidence was found (and the metric series'
    names) compare, unless `exact_volatile`. Empty when the snapshot answers every call as live did."""
    served = [(t, a) for t, a in calls if t in RECORDED_TOOLS]
    if len(served) != len(live_results):
        raise ValueError(f"{len(served)} calls of snapshot tools but {len(live_results)} live results")
    answers = snapshot_refs(folder, served)
    diffs: list[str] = []
    for i, ((tool, arguments), live, snap) in enumerate(zip(served, live_results, answers, strict=True)):
        if live is None:
            continue
        head = f"call {i} {tool} {_args_text(arguments)}"
        if isinstance(snap, str):
            diffs.append(f"{head}: the snapshot failed: {snap}")
            continue
        want, got = dict(live), dict(snap)
        if not exact_volatile and _volatile(tool, arguments):
            found, shown = NO_EVIDENCE_PATH not in want, NO_EVIDENCE_PATH not in got
            if found != shown:
                diffs.append(
                    f"{head}: live {'found evidence' if found else 'found none'}, the snapshot {'did' if shown else 'did not'}"
                )
            elif tool == "query_metrics" and (names := _series_names(want)) != (other := _series_names(got)):
                diffs.append(f"{head}: series live {names[:5]} != snapshot {other[:5]}")
            continue
        if list(want) != list(got):
            missing = [p for p in want if p not in got][:5]
            extra = [p for p in got if p not in want][:5]
            diffs.append(
                f"{head}: {len(want)} refs live, {len(got)} from the snapshot (live only: {missing}; snapshot only: {extra})"
            )
            continue
        for path, text in want.items():
            if path != NO_EVIDENCE_PATH and text != got[path]:
                diffs.append(f"{head}: {path}: live {text[:200]!r} != snapshot {got[path][:200]!r}")
                break
    return diffs


# ---------------------------------------------------------------------------------------------
# The folder
# ---------------------------------------------------------------------------------------------


def _clip(lines: Iterable[str]) -> list[str]:
    out = list(dict.fromkeys(" ".join(x.split())[:LIMIT_CHARS] for x in lines))
    if len(out) > MAX_LIMITS:
        out = out[: MAX_LIMITS - 1] + [f"… and {len(out) - MAX_LIMITS + 1} more"]
    return out


def _live_facts(live: Mapping[str, Any]) -> dict[str, str]:
    facts = {}
    for key, name in (("run_id", "live_run"), ("diagnosis_run_id", "diagnosis_run")):
        value = live.get(key)
        if isinstance(value, str) and value:
            facts[name] = value
    return facts


def record_scenario(
    *,
    targets_file: Path,
    now: datetime,
    calls: list[tuple[str, dict[str, Any]]],
    out_dir: Path,
    scenario_id: str,
    question: str,
    title: str,
    language: str,
    allowed_tools: list[str],
    ground_truth: dict[str, Any],
    live: dict[str, Any],
    budget: dict[str, int] | None = None,
) -> Path:
    """Freeze what the live systems show at `now` into `out_dir/<scenario_id>/`; returns the folder.

    `calls`: the diagnosis run's tool calls (name, arguments) from its trace; `live`: `run_id`
    (the live environment's run) and `diagnosis_run_id` (the rootproof run), kept in the
    provenance; `budget`: the run's `{tool_calls, calls_per_tool}`, kept as the scenario's.
    `ground_truth` is validated as `ground_truth.yaml`. Raises
    `LiveEnvironmentError("record", …)` when the targets cannot be read, the folder exists, or
    what was written does not validate (nothing is left behind then)."""
    if now.tzinfo is None:
        raise LiveEnvironmentError(
            "record", f"the run's clock must be timezone-aware (got {now.isoformat()})"
        )
    now = now.astimezone(UTC)
    # as `now` is written (milliseconds): the live backends read at the very clock the snapshot has
    now = now.replace(microsecond=now.microsecond // 1000 * 1000)
    folder = out_dir / scenario_id
    if folder.exists():
        raise LiveEnvironmentError("record", f"{folder} exists already: record into a new scenario id")
    try:
        GroundTruthModel.model_validate(ground_truth)
    except ValidationError as exc:
        raise LiveEnvironmentError("record", f"the ground truth does not validate: {exc}") from None
    try:
        targets = load_targets(targets_file).file
        mounts = open_live_backends(targets, os.environ)
    except ConfigError as exc:
        raise LiveEnvironmentError("record", f"cannot open the live targets: {exc}") from None
    registry = BackendRegistry(mounts)
    recorded = _recorded_calls(calls)
    recorded_at = datetime.now(UTC)
    reader = _Reader(registry, now, _secrets(targets.targets))
    several = [s for s in ("postgres", "redis", "nginx", "metrics") if len(registry.targets(s)) > 1]
    for system in several:
        reader.limits.append(
            f"{system}: several targets; only {registry.targets(system)[0]} is recorded (a snapshot holds one per system)"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{scenario_id}.", dir=out_dir))
    try:
        responses: dict[str, Any] = {"data_source": "snapshot"}
        if (logs := _logs(reader, recorded)) is not None:
            responses["logs"] = logs
        if (metrics := _metrics(reader, recorded)) is not None:
            responses["metrics"] = metrics
        for tool in ("inspect_postgres", "inspect_redis", "inspect_nginx"):
            if (section := _inspector(reader, tool, recorded)) is not None:
                responses[_SYSTEM_OF_TOOL[tool]] = section
        live_answers = [
            live_refs(tool, result)
            if (result := reader.call(tool, args.model_dump(exclude_none=True))) is not None
            else None
            for tool, args in recorded
        ]
        scenario: dict[str, Any] = {
            "id": scenario_id,
            "title": title,
            "language": language,
            "question": question,
            "now": format_timestamp(now),
            "allowed_tools": list(allowed_tools),
            "tags": ["recorded-live-run"],
        }
        if budget:
            scenario["budget"] = dict(budget)  # the live run's, so the replay may spend as much
        draft = staging / scenario_id
        (draft / "snapshot").mkdir(parents=True)
        (draft / "scenario.yaml").write_text(_dump(scenario, "scenario.yaml"), encoding="utf-8")
        (draft / "snapshot" / "tool_responses.yaml").write_text(
            _dump(responses, "tool_responses.yaml"), encoding="utf-8"
        )
        (draft / "ground_truth.yaml").write_text(_dump(ground_truth, "ground_truth.yaml"), encoding="utf-8")
        try:
            differences = replay_matches(
                draft, [(t, a.model_dump(exclude_none=True)) for t, a in recorded], live_answers
            )
        except ScenarioError as exc:
            raise LiveEnvironmentError("record", f"the recorded snapshot does not load: {exc}") from None
        provenance = {
            "source": "recorded_live_run",
            "formats": "as the live environment's systems wrote them, read through rootproof's live backends",
            "references": [f"rootproof live run {v}" for v in _live_facts(live).values()],
            "validated": True,
            "notes": (
                "Frozen from a live run right after its diagnosis (docs/live-benchmark.md, 'Recording a live run'). "
                "Sessions, counters and metric windows are as read at recording time."
            ),
            "recording": {
                "recorded_at": format_timestamp(recorded_at),
                **_live_facts(live),
                "targets": [{"name": t.name, "kind": t.kind} for t in targets.targets],
                "calls": [
                    {"tool": t, "arguments": reader.clean(a.model_dump(exclude_none=True))}
                    for t, a in recorded
                ],
                "limits": _clip(
                    [*reader.limits, *(f"parity with live at recording: {d}" for d in differences)]
                ),
            },
        }
        (draft / "provenance.yaml").write_text(_dump(provenance, "provenance.yaml"), encoding="utf-8")
        problems = validate_scenario(draft)
        if problems:
            raise LiveEnvironmentError(
                "record", "the recorded scenario does not validate: " + "; ".join(problems[:5])
            )
        os.replace(draft, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        registry.close()
    return folder
