"""The snapshot benchmark runner (docs/evaluation.md).

Each scenario runs the real pipeline (`Harness.diagnose` with the scenario's question, alert,
clock, allowed tools and budget) in a worker process; the parent (the evaluator) reads the
ground truth only after that scenario's run finished, scores it (`scoring.score_case`) and
persists the evaluation run and every case in the trace store.

Ground-truth isolation: the agent phase never gets a path to `ground_truth.yaml`
(`load_scenario` guarantees it), and every worker installs an audit hook (`sys.addaudithook`,
event `open`) that records any open of a file named `ground_truth.yaml` while the agent phase
runs. The hook is process-wide and cannot be removed, so every scenario — even at `--jobs 1` —
runs in a worker process of a `spawn` pool, one scenario at a time per worker: an access is
blamed on the scenario that made it. Workers trace to memory and return plain data.

Each scenario's run has its own deadline: `eval_case_timeout_s` (`ROOTPROOF_EVAL_CASE_TIMEOUT_S`)
when set, else `deadline_s`. A run that reaches it ends in its DEADLINE_EXCEEDED fallback and is
scored like any other row; a run still going `CASE_GRACE_S` past it (a part that does not watch
the deadline) is cancelled by the worker, so one slow scenario never stops the eval.

Lifecycle of the `eval_run` row: created → running → passed (pass rate ≥ 0.9) | failed |
infra_invalid (a worker crashed, a scenario or its ground truth failed to load) | cancelled
(KeyboardInterrupt).
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import importlib
import multiprocessing
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rootproof.errors import ConfigError, RootproofError, ScenarioError
from rootproof.eval.questions import QuestionRun, agreement_summary
from rootproof.eval.scoring import DIMENSIONS, CaseObservation, CaseScore, score_case
from rootproof.run.records import EvalCaseRecord, EvalRunRecord, utcnow
from rootproof.settings import Settings

if TYPE_CHECKING:
    from rootproof.agent.models.base import Model
    from rootproof.boundary.store import CanonicalInvocation
    from rootproof.harness import Harness, RunOutcome
    from rootproof.store.sql import SqlTraceStore

__all__ = [
    "CASE_GRACE_S",
    "GROUND_TRUTH_NAME",
    "PASS_RATE_TO_PASS",
    "CaseResult",
    "SuiteResult",
    "model_label",
    "observe_trace",
    "run_case",
    "run_suite",
    "suite_version",
]

GROUND_TRUTH_NAME = "ground_truth.yaml"
PASS_RATE_TO_PASS = 0.9
"""An evaluation run is `passed` when at least this share of its cases passed."""

CASE_GRACE_S = 5.0
"""Seconds past a scenario's deadline after which its worker cancels the run (a backstop: the
run's own deadline normally ends it first)."""

ProgressFn = Callable[[str, int, int], None]
"""Called with ("", 0, total) when the runs start, then after each case with (scenario id, done, total)."""


# ---------------------------------------------------------------------------------------------
# Worker side
# ---------------------------------------------------------------------------------------------


class _AgentPhase:
    """Worker-global flag and the ground-truth opens recorded while it is set."""

    active = False
    reads: list[str] = []
    hooked = False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    """Audit hook: record opens of `ground_truth.yaml` during the agent phase (never raises)."""
    if event != "open" or not _AgentPhase.active or not args:
        return
    try:
        path = args[0]
        if isinstance(path, int):
            return
        text = os.fsdecode(path)
        if os.path.basename(text) == GROUND_TRUTH_NAME:
            _AgentPhase.reads.append(text)
    except Exception:  # an audit hook must never break the audited call
        return


def _init_worker() -> None:
    """Install the audit hook once per worker process."""
    if not _AgentPhase.hooked:
        sys.addaudithook(_audit)
        _AgentPhase.hooked = True


_HARNESS: dict[str, Harness] = {}


def _harness(settings: Settings) -> Harness:
    """One harness per worker and settings (the knowledge base loads once per worker)."""
    from rootproof.harness import memory_harness

    key = settings.model_dump_json()
    h = _HARNESS.get(key)
    if h is None:
        h = _HARNESS[key] = memory_harness(settings)
    return h


def _factory(spec: str) -> Callable[[], Model]:
    """Import `module:callable` (a test hook returning an agent `Model`)."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ConfigError(f"model_factory {spec!r}: expected 'module:callable'")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"model_factory {spec!r}: cannot import ({exc})") from None
    if not callable(fn):
        raise ConfigError(f"model_factory {spec!r}: not callable")
    return fn  # type: ignore[no-any-return]


def _citations(report: dict[str, Any], invocations: dict[str, Any]) -> list[dict[str, Any]]:
    """Each citation of `report` resolved against this run's canonical invocations."""
    out: list[dict[str, Any]] = []
    for claim in report.get("claims") or []:
        if not isinstance(claim, dict):
            continue
        for c in claim.get("citations") or []:
            if not isinstance(c, dict):
                continue
            inv = invocations.get(str(c.get("invocation_id")))
            ref = inv.ref(str(c.get("raw_path"))) if inv is not None else None
            out.append(
                {
                    "claim_id": str(claim.get("id")),
                    "claim_kind": str(claim.get("kind")),
                    "invocation_id": str(c.get("invocation_id")),
                    "tool_name": str(c.get("tool_name")),
                    "raw_path": str(c.get("raw_path")),
                    "excerpt": str(c.get("excerpt") or ""),
                    "canonical_tool": inv.tool_name if inv is not None else None,
                    "text": ref.text if ref is not None else None,
                    "data_source": ref.data_source if ref is not None else None,
                }
            )
    return out


def _audit_row(inv: CanonicalInvocation) -> dict[str, Any]:
    """One invocation as the tool audit records it (no payload)."""
    return {
        "invocation_id": inv.invocation_id,
        "tool": inv.tool_name,
        "status": str(inv.status),
        "code": inv.refusal_code,
        "evidence_status": inv.evidence_status,
        "scope_key": inv.scope_key,
        "data_source": inv.data_source,
        "step_index": inv.step_index,
        "duration_ms": inv.duration_ms,
        "evidence_count": len(inv.evidence_refs),
    }


def _observe(scenario_id: str, h: Harness, out: RunOutcome, budget: int, model_name: str) -> dict[str, Any]:
    """The run's outcome as plain data for the evaluator."""
    invocations = {inv.invocation_id: inv for inv in h.canonical.for_run(out.run_id)}
    for o in out.outcomes:
        invocations.setdefault(o.invocation.invocation_id, o.invocation)
    audit = [_audit_row(o.invocation) for o in out.outcomes]
    draft = out.draft.model_dump(mode="json") if out.draft is not None else None
    content = out.content
    published = None
    if out.release_outcome == "PUBLISHED" and content and content.get("content_type") == "DIAGNOSIS_REPORT":
        r = content.get("report")
        published = r if isinstance(r, dict) else None
    return {
        "scenario_id": scenario_id,
        "run_id": out.run_id,
        "status": out.status,
        "release_outcome": out.release_outcome,
        "fallback_type": out.fallback_type,
        "content": content,
        "draft": draft,
        "guard_codes": [str(c) for c in out.evidence.codes] if out.evidence is not None else [],
        "guard_passed": out.evidence.passed if out.evidence is not None else None,
        "semantic": [
            {"claim_id": v.claim_id, "verdict": str(v.verdict), "reason": v.reason, "coverage": v.coverage}
            for v in (out.semantic.verdicts if out.semantic is not None else [])
        ],
        "tool_audit": audit,
        "aiops": out.aiops_rule_evaluation,
        "cited_refs": _citations(published, invocations) if published is not None else [],
        "draft_refs": _citations(draft, invocations) if draft is not None else [],
        "tool_call_budget": budget,
        "model": model_name,
        "duration_ms": out.duration_ms,
    }


def _stored_invocation(row: dict[str, Any]) -> CanonicalInvocation:
    """A `tool_invocation` row of a stored trace as the canonical invocation it recorded."""
    from rootproof.boundary.store import CanonicalInvocation, InvocationStatus
    from rootproof.tools.refs import EvidenceRef

    refs = [
        EvidenceRef(raw_path=str(r.get("raw_path")), text=str(r.get("text") or ""), data_source=str(r.get("data_source") or ""))
        for r in row.get("evidence_refs") or []
        if isinstance(r, dict)
    ]
    return CanonicalInvocation(
        invocation_id=str(row["invocation_id"]),
        run_id=str(row.get("run_id")),
        session_id=str(row.get("session_id")),
        step_index=int(row.get("step_index") or 0),
        tool_name=str(row.get("tool_name")),
        arguments=row.get("input_params") or {},
        scope_key=row.get("scope_key"),
        status=InvocationStatus(str(row.get("status"))),
        refusal_code=row.get("refusal_code"),
        evidence_status=row.get("evidence_status"),
        data_source=row.get("data_source"),
        evidence_refs=refs,
        duration_ms=int(row.get("duration_ms") or 0),
    )


def observe_trace(trace: dict[str, Any], *, tool_call_budget: int) -> CaseObservation:
    """The evaluator's observation of a run made elsewhere (`rootproof diagnose`), from its
    stored trace (`rootproof trace RUN --json`, `SqlTraceStore.trace`) alone.

    What a stored trace cannot give: the draft of a run whose draft the guards withheld (only
    released content is stored), so the process points read from a draft (plan, hypotheses)
    count for published reports only; a run in the worker (`run_suite`) sees its draft.
    `tool_call_budget` is the run's (`Harness.budget(scenario).tool_calls`).
    """
    run = trace["run"]
    invocations = {inv.invocation_id: inv for inv in (_stored_invocation(r) for r in trace.get("invocations") or [])}
    content = run.get("content") if isinstance(run.get("content"), dict) else None
    published = None
    if run.get("release_outcome") == "PUBLISHED" and content and content.get("content_type") == "DIAGNOSIS_REPORT":
        r = content.get("report")
        published = r if isinstance(r, dict) else None
    evaluation = run.get("self_evaluation") if isinstance(run.get("self_evaluation"), dict) else {}
    guard = evaluation.get("evidence_guard") if isinstance(evaluation.get("evidence_guard"), dict) else None
    return CaseObservation.from_dict(
        {
            "scenario_id": str(run.get("scenario_id")),
            "run_id": run.get("run_id"),
            "status": run.get("status"),
            "release_outcome": run.get("release_outcome"),
            "fallback_type": run.get("fallback_type"),
            "content": content,
            "draft": published,
            "guard_codes": [str(c) for c in guard.get("codes") or []] if guard else [],
            "guard_passed": guard.get("passed") if guard else None,
            "tool_audit": [_audit_row(inv) for inv in invocations.values()],
            "aiops": evaluation.get("aiops_rule_evaluation"),
            "cited_refs": _citations(published, invocations) if published is not None else [],
            "draft_refs": _citations(published, invocations) if published is not None else [],
            "tool_call_budget": tool_call_budget,
            "model": run.get("model"),
            "duration_ms": int(run.get("duration_ms") or 0),
        }
    )


def run_case(job: dict[str, Any]) -> dict[str, Any]:
    """Worker entry: run one scenario's agent phase under the audit hook; return plain data.

    `job`: `folder` (the scenario folder), `settings` (a `Settings`), `model` (`offline` |
    `openai` | None for the settings' choice), `model_factory` (`module:callable` returning
    a `Model`, a test hook), `question` (the wording benchmark's question in place of the
    scenario's own) — all picklable. Never raises: a failure becomes `error`.
    """
    _init_worker()
    folder = Path(job["folder"])
    t0 = time.perf_counter()
    _AgentPhase.reads = []
    data: dict[str, Any] = {"scenario_id": folder.name}
    try:
        from rootproof.run.context import RunCancellation
        from rootproof.scenarios.loader import load_scenario

        settings: Settings = job["settings"]
        h = _harness(settings)
        spec = job.get("model_factory")
        cancellation = RunCancellation()
        backstop = threading.Timer(
            settings.deadline_s + CASE_GRACE_S, cancellation.cancel, kwargs={"reason": "eval case timeout"}
        )
        backstop.daemon = True
        t1 = time.perf_counter()
        _AgentPhase.active = True  # from the agent's construction to the released content
        try:
            model: Model = _factory(spec)() if spec else h.model(job.get("model"))
            scenario = load_scenario(folder)
            backstop.start()
            t_run = time.perf_counter()
            question = job.get("question") or scenario.question  # the wording benchmark's question
            out = h.diagnose(question, scenario=scenario, alert=scenario.alert, model=model, cancellation=cancellation)
        finally:
            _AgentPhase.active = False
            backstop.cancel()
        t2 = time.perf_counter()
        data = _observe(scenario.id, h, out, h.budget(scenario).tool_calls, model.name)
        data["tokens"] = out.tokens
        data["timings"] = {
            "setup_ms": int((t1 - t0) * 1000),
            "agent_ms": int((t2 - t1) * 1000),
            "run_ms": int((t2 - t_run) * 1000),
        }
    except Exception as exc:
        data["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
    data["ground_truth_reads"] = list(_AgentPhase.reads)
    data.setdefault("timings", {})["worker_ms"] = int((time.perf_counter() - t0) * 1000)
    data["timings"]["pid"] = os.getpid()
    return data


# ---------------------------------------------------------------------------------------------
# Parent side
# ---------------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class CaseResult:
    """One scenario: what the run did and the evaluator's verdict."""

    scenario_id: str
    folder: Path
    observation: CaseObservation
    score: CaseScore
    tokens: int = 0
    """Model tokens of the run, all calls counted (router, agent, judge)."""
    wall_time_s: float = 0.0
    """Wall-clock seconds of the run (`Harness.diagnose` in the worker); the worker's whole time
    when no run finished (a worker error)."""
    questions: list[QuestionRun] = field(default_factory=list)
    """The runs under the wording benchmark's questions (`--questions`), in the list's order."""

    @property
    def tokens_per_second(self) -> float:
        """`tokens / wall_time_s` (0 when either is 0)."""
        return round(self.tokens / self.wall_time_s, 1) if self.tokens and self.wall_time_s > 0 else 0.0


CaseFn = Callable[[CaseResult, int, int], None]
"""Called after each case with (its result, done, total)."""


@dataclass(kw_only=True)
class SuiteResult:
    """One evaluation run."""

    eval_id: str
    state: str
    cases: list[CaseResult]
    summary: dict[str, Any]
    git_sha: str | None = None
    suite_version: str | None = None
    model: str | None = None
    errors: list[str] = field(default_factory=list)


def git_sha() -> str | None:
    """`git rev-parse HEAD` of the source tree (or the working folder), None when unavailable."""
    for cwd in (Path(__file__).resolve().parent, Path.cwd()):
        try:
            done = subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5, check=False
            )
        except (OSError, subprocess.SubprocessError):
            continue
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.strip()
    return None


def suite_version(folders: list[Path]) -> str:
    """A hash of every file of the scenarios (relative path and bytes), 16 hex digits."""
    digest = hashlib.sha256()
    for folder in sorted(folders, key=lambda p: p.name):
        for path in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            digest.update(f"{folder.name}/{path.relative_to(folder).as_posix()}\0".encode())
            digest.update(path.read_bytes())
            digest.update(b"\0")
    return digest.hexdigest()[:16]


def model_label(settings: Settings, model_factory: str | None = None) -> str:
    """The model an evaluation ran, as reports name it: `offline`, `openai:<model>` or `factory:<spec>`."""
    if model_factory:
        return f"factory:{model_factory}"
    if settings.model == "openai":
        return f"openai:{settings.openai_model}"
    return settings.model


def _case_result(folder: Path, data: dict[str, Any], truth: Any) -> CaseResult:
    """Score the worker's data against `truth` (None: the ground truth failed to load)."""
    data = dict(data)
    tokens = int(data.pop("tokens", 0) or 0)
    obs = CaseObservation.from_dict(data)
    ms = obs.timings.get("run_ms", obs.timings.get("worker_ms", 0))
    score = score_case(truth, obs) if truth is not None else _infra_score(obs)
    return CaseResult(
        scenario_id=obs.scenario_id,
        folder=folder,
        observation=obs,
        score=score,
        tokens=tokens,
        wall_time_s=round(ms / 1000, 3),
    )


def summarize(cases: list[CaseResult], *, wall_s: float, jobs: int) -> dict[str, Any]:
    """The report's summary: scores, pass rate, trust metrics and throughput."""
    n = len(cases)
    scores = [c.score for c in cases]
    alerts = [c for c in cases if c.observation.aiops is not None]
    by_dim = {d: round(sum(s.dimensions[d].score for s in scores) / n, 2) if n else 0.0 for d in DIMENSIONS}
    return {
        "scenarios": n,
        "mean_score": round(sum(s.score for s in scores) / n, 2) if n else 0.0,
        "pass_rate": round(sum(1 for s in scores if s.passed) / n, 4) if n else 0.0,
        "hard_gate_violations": sum(len(s.hard_gates) for s in scores),
        "by_dimension": by_dim,
        "publish_rate": round(sum(1 for c in cases if c.observation.release_outcome == "PUBLISHED") / n, 4)
        if n
        else 0.0,
        "fallback_rate": round(sum(1 for c in cases if c.observation.release_outcome == "FALLBACK") / n, 4)
        if n
        else 0.0,
        "false_confident_rate": round(sum(1 for s in scores if s.false_confident) / n, 4) if n else 0.0,
        "alert_scenarios": len(alerts),
        "aiops_pass_rate": round(sum(1 for c in alerts if c.observation.aiops and c.observation.aiops["passed"]) / len(alerts), 4) if alerts else None,
        "wall_time_s": round(wall_s, 3),
        "scenarios_per_second": round(n / wall_s, 4) if wall_s > 0 else 0.0,
        "jobs": jobs,
    }


def _open_store(settings: Settings) -> SqlTraceStore:
    from rootproof.store.sql import SqlTraceStore

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    return SqlTraceStore(settings.resolved_database_url())


def _case_record(eval_id: str, c: CaseResult) -> EvalCaseRecord:
    from rootproof.eval.report import public_tool_audit

    return EvalCaseRecord(
        eval_id=eval_id,
        case_id=c.scenario_id,
        run_id=c.observation.run_id,
        passed=c.score.passed,
        score=c.score.score,
        outcome=c.observation.release_outcome,
        failure_class=c.score.failure_class,
        dimensions=c.score.dimensions_dict(),
        hard_gates=list(c.score.hard_gates),
        tool_audit=public_tool_audit(c.observation),
        duration_ms=c.observation.duration_ms,
    )


def run_suite(
    scenarios: str | Path | None = None,
    *,
    settings: Settings,
    model: str | None = None,
    jobs: int = 1,
    model_factory: str | None = None,
    store: SqlTraceStore | None = None,
    progress: ProgressFn | None = None,
    on_case: CaseFn | None = None,
    questions: list[str] | None = None,
) -> SuiteResult:
    """Run a snapshot suite and persist it.

    Args:
        scenarios: a built-in id, one scenario folder or a folder of them (None: all built-in).
        settings: the settings for every run (their `model` unless `model` is given).
        model: `offline` | `openai`, overriding the settings.
        jobs: worker processes (≥ 1; every scenario runs in a worker, even at 1).
        model_factory: `module:callable` returning the agent `Model` (tests); importable in a worker.
        store: where the eval run goes (default: the settings' trace store).
        progress: called when the runs start and after each case.
        on_case: called with each case's result as it is scored.
        questions: the wording benchmark (`--questions`): every scenario also runs once per
            question, in place of its own; the summary adds `question_agreement` and counts
            false-confident runs over all of them; each case lists its `questions` runs.

    Each run's deadline is `settings.eval_case_timeout_s`, else `settings.deadline_s`.

    Raises `UsageError` for an unknown scenario (before any eval run exists) and
    `ScenarioError` when a scenario fails to load (the eval run is recorded `infra_invalid`).
    """
    from rootproof.kb.cards import taxonomy_for
    from rootproof.scenarios.loader import list_scenarios, load_ground_truth, load_scenario

    if jobs < 1:
        raise ConfigError(f"--jobs: expected at least 1 (got {jobs})")
    if model is not None and model not in ("offline", "openai"):
        raise ConfigError(f"--model: expected offline or openai (got {model!r})")
    folders = list_scenarios(scenarios)
    taxonomy = taxonomy_for(settings.cards_dir)  # ground truth may use the cards' namespaced labels
    update: dict[str, Any] = {"model": model} if model is not None else {}
    if settings.eval_case_timeout_s is not None:
        update["deadline_s"] = settings.eval_case_timeout_s
    run_settings = settings.model_copy(update=update) if update else settings
    store = store or _open_store(settings)
    record = EvalRunRecord(
        eval_id=str(uuid.uuid4()),
        kind="snapshot",
        git_sha=git_sha(),
        suite_version=suite_version(folders),
        model=model_label(run_settings, model_factory),
        settings=run_settings.public_dict(),
    )
    store.save_eval_run(record)

    problems: list[str] = []
    for folder in folders:  # what the agent phase may see must load before anything runs
        try:
            load_scenario(folder)
        except ScenarioError as exc:
            problems.append(str(exc))
    if problems:
        record.state = "infra_invalid"
        record.summary = {"error": "scenarios failed to load", "problems": problems}
        record.ended_at = utcnow()
        store.save_eval_run(record)
        lines = [
            ln
            for p in problems
            for ln in p.splitlines()
            if ln.strip() and not ln.rstrip().endswith("problems:")
        ]
        more = (
            f" (+{len(lines) - 1} more; `rootproof scenarios validate` lists them)" if len(lines) > 1 else ""
        )
        raise ScenarioError(
            f"{lines[0] if lines else 'scenario failed to load'}{more}; eval run {record.eval_id} recorded infra_invalid"
        )

    record.state = "running"
    store.save_eval_run(record)
    asked = questions or []
    total = len(folders) * (1 + len(asked))
    if progress is not None:
        progress("", 0, total)
    results: dict[str, CaseResult] = {}
    errors: list[str] = []
    start = time.perf_counter()
    job_base = {"settings": run_settings, "model": model, "model_factory": model_factory}
    asked_results: dict[tuple[str, int], CaseResult] = {}
    pool = cf.ProcessPoolExecutor(
        max_workers=jobs, mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker
    )
    try:
        futures = {pool.submit(run_case, {**job_base, "folder": str(f)}): (f, -1) for f in folders}
        futures |= {
            pool.submit(run_case, {**job_base, "folder": str(f), "question": q}): (f, i)
            for f in folders
            for i, q in enumerate(asked)
        }
        for fut in cf.as_completed(futures):
            folder, qi = futures[fut]
            try:
                data = fut.result()
            except Exception as exc:  # the worker process died (BrokenProcessPool) or could not pickle
                data = {"scenario_id": folder.name, "error": f"worker crashed: {type(exc).__name__}: {exc}"}
            try:
                truth = load_ground_truth(folder, taxonomy)  # the evaluator reads the answer after the run
            except RootproofError as exc:
                data = {**data, "error": data.get("error") or f"ground truth failed to load: {exc}"}
                truth = None
            if qi >= 0:
                asked_case = asked_results[(folder.name, qi)] = _case_result(folder, data, truth)
                if asked_case.observation.error:
                    errors.append(f"{folder.name} (question {qi + 1}): {asked_case.observation.error}")
                if progress is not None:
                    progress(folder.name, len(results) + len(asked_results), total)
                continue
            case = results[folder.name] = _case_result(folder, data, truth)
            if case.observation.error:
                errors.append(f"{folder.name}: {case.observation.error}")
            store.add_eval_case(_case_record(record.eval_id, case))
            if on_case is not None:
                on_case(case, len(results), len(folders))
            if progress is not None:
                progress(folder.name, len(results) + len(asked_results), total)
    except KeyboardInterrupt:
        pool.shutdown(wait=False, cancel_futures=True)
        record.state = "cancelled"
        record.ended_at = utcnow()
        record.summary = {"cancelled_after": len(results), "scenarios": len(folders)}
        store.save_eval_run(record)
        raise
    pool.shutdown(wait=True)
    wall = time.perf_counter() - start
    cases = [results[f.name] for f in folders if f.name in results]
    for c in cases:
        for i, q in enumerate(asked):
            r = asked_results.get((c.scenario_id, i))
            if r is not None:
                c.questions.append(QuestionRun.scored(q, r.score, c.score, r.observation))
    summary = summarize(cases, wall_s=wall, jobs=jobs)
    if questions:
        summary |= agreement_summary(
            [r for c in cases for r in c.questions], sum(1 for c in cases if c.score.false_confident), len(cases)
        )
    summary["model"] = record.model
    summary["timings"] = {c.scenario_id: c.observation.timings for c in cases}
    if errors:
        summary["errors"] = errors
    record.state = (
        "infra_invalid" if errors else ("passed" if summary["pass_rate"] >= PASS_RATE_TO_PASS else "failed")
    )
    record.summary = summary
    record.ended_at = datetime.now(UTC)
    store.save_eval_run(record)
    return SuiteResult(
        eval_id=record.eval_id,
        state=record.state,
        cases=cases,
        summary=summary,
        git_sha=record.git_sha,
        suite_version=record.suite_version,
        model=record.model,
        errors=errors,
    )


def _infra_score(obs: CaseObservation) -> CaseScore:
    from rootproof.eval.scoring import DimensionScore

    return CaseScore(
        scenario_id=obs.scenario_id,
        score=0.0,
        passed=False,
        dimensions={
            k: DimensionScore(score=0, max=m, reasons=[obs.error or "infrastructure failure"])
            for k, m in DIMENSIONS.items()
        },
        hard_gates=["ground_truth_read"] if obs.ground_truth_reads else [],
        gate_reasons=[f"the agent phase opened {p}" for p in obs.ground_truth_reads],
        failure_class="infra_error",
        failure_reasons=[obs.error or "infrastructure failure"],
        root_cause=None,
        false_confident=False,
    )
