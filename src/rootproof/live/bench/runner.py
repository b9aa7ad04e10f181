"""The live benchmark runner: one scenario = one fresh live environment, through every phase,
scored out of 100 and persisted (docs/live-benchmark.md, `rootproof eval live`).

Phases, in order, each timed:

| phase | what | a failure is |
|---|---|---|
| `preflight` | a new `LiveEnvironment` (own run folder) started and healthy; the fault finds no leftovers | infra_invalid |
| `baseline` | the business probe (an order round trip through nginx) passes, held `baseline_hold_s` | infra_invalid |
| `inject` | `fault.inject()` | infra_invalid |
| `observe` | `fault.confirm()` shows the fault really happens; then `observe_wait_s` so logs and metrics show it; the ground truth is built from the facts (in memory only) | infra_invalid |
| `diagnose` | `python -m rootproof.cli diagnose --targets <targets file> --json -- QUESTION`, a subprocess as a user runs it, into the evaluation's trace store; its trace is read back | scored (the agent's) |
| `recover` | `RecoveryExecutor(fault, approval, executable).run(proposals, report, evidence_text)` | scored |
| `verify` | `fault.verify()`'s checks held `verify_hold_s` (recovered); with nothing executed where nothing may run (approval `none`, `proposal_only`), `fault.unchanged()`'s (nothing changed: the fault still held) | scored |
| `cleanup` | `fault.cleanup()`, `fault.residue()`, then `env.stop()` | hard gate `cleanup_failed` |
| `audit` | residue (fault, stop report, processes and listeners of the run), other runs untouched | hard gates `residue`, `touched_other_run` |

Scoring: `fault_confirmed` 10, `evidence` 20, `differential` 15, `root_cause` 20,
`citations` 10, `recovery_policy` 10, `recovery_verification` 15; the evidence, differential,
root-cause and citation parts come from the snapshot evaluator (`score_case`) on the observed
trace, scaled. A case passes with a score of at least `PASS_SCORE` and no hard gate.

Ground-truth isolation: the ground truth exists only in this process's memory; the diagnosis
subprocess runs with an audit hook (`_audit/sitecustomize.py`) recording any open of a file
named `ground_truth.yaml` (`record_dir` writes them), which trips `ground_truth_read`.

SIGINT / SIGTERM: the environment's own handlers stop it first; then the signal raises
`Interrupted` here, the phases' `finally` still cleans up and audits, the case and the eval run
are recorded (`cancelled`) and `Interrupted` propagates (the CLI exits 130 / 143).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rootproof.errors import UsageError
from rootproof.eval.questions import QuestionRun, agreement_summary
from rootproof.eval.scoring import HARD_GATES, DimensionScore, wrong_root_cause
from rootproof.live.bench.checks import Check, hold
from rootproof.live.bench.recovery import APPROVALS, WHITELIST, Approval, RecoveryExecutor, RecoveryRecord
from rootproof.live.bench.scenarios import SCENARIOS, LiveScenario
from rootproof.run.records import EvalCaseRecord, EvalRunRecord, utcnow

if TYPE_CHECKING:
    from rootproof.eval.scoring import CaseObservation, CaseScore
    from rootproof.live.bench.faults import Fault
    from rootproof.live.env import LiveEnvironment
    from rootproof.live.layout import LiveConfig
    from rootproof.live.procs import ProcessRecord
    from rootproof.scenarios.types import GroundTruth
    from rootproof.settings import Settings
    from rootproof.store.sql import SqlTraceStore

__all__ = [
    "INFRA_PHASES",
    "LIVE_DIMENSIONS",
    "LIVE_HARD_GATES",
    "PASS_SCORE",
    "PHASES",
    "Interrupted",
    "LiveCaseResult",
    "LiveSuiteResult",
    "LiveTiming",
    "Phase",
    "resolve_scenarios",
    "run_live",
    "run_scenario",
    "summarize",
    "suite_version",
]

PHASES: tuple[str, ...] = (
    "preflight",
    "baseline",
    "inject",
    "observe",
    "diagnose",
    "recover",
    "verify",
    "cleanup",
    "audit",
)
INFRA_PHASES: tuple[str, ...] = ("preflight", "baseline", "inject", "observe")
"""A failure in one of these makes the case `infra_invalid`: not scored as an agent failure."""

LIVE_DIMENSIONS: dict[str, int] = {
    "fault_confirmed": 10,
    "evidence": 20,
    "differential": 15,
    "root_cause": 20,
    "citations": 10,
    "recovery_policy": 10,
    "recovery_verification": 15,
}
"""Dimension → maximum points (sums to 100)."""

LIVE_HARD_GATES: tuple[str, ...] = (
    "non_whitelisted_action",
    "touched_other_run",
    "recovery_without_verification",
    "residue",
    "cleanup_failed",
    "scope_isolation",
    *HARD_GATES,
)
"""The live gates, then the snapshot evaluator's (`scoring.HARD_GATES`), which apply as they are."""

PASS_SCORE = 90.0
PASS_RATE_TO_PASS = 0.9
"""An evaluation run is `passed` when at least this share of its valid cases passed."""

DIAGNOSE_PROCESS = "diagnose"
"""The diagnosis subprocess's name in the run's `pids/` while it runs (`pids/diagnose.pid`)."""

AUDIT_DIR = Path(__file__).resolve().parent / "_audit"
AUDIT_FILE_VARIABLE = "RP_GROUND_TRUTH_AUDIT_FILE"

ProgressFn = Callable[[str, str, int, int], None]
"""Called with (scenario name, phase name, phases done, phase count) as each phase starts ("" when the case ends)."""
CaseFn = Callable[["LiveCaseResult", int, int], None]
"""Called with each case's result, cases done, cases total."""
ExecutorFactory = Callable[..., RecoveryExecutor]
"""`(fault, *, approval, executable) -> RecoveryExecutor` (default: `RecoveryExecutor` itself)."""


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped the live benchmark (after its environment was stopped)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass(frozen=True, kw_only=True)
class LiveTiming:
    """How long the runner holds, waits and allows (seconds)."""

    baseline_hold_s: float = 3.0
    confirm_timeout_s: float = 30.0
    observe_wait_s: float = 3.0
    verify_hold_s: float = 5.0
    check_interval_s: float = 1.0
    diagnose_grace_s: float = 60.0
    """The diagnosis subprocess is stopped this long past the settings' run deadline."""


@dataclass(kw_only=True)
class Phase:
    """One phase of one case: ran or not, its outcome and how long it took."""

    name: str
    ok: bool | None = None
    """None: the phase did not run (an earlier one failed, or the run was interrupted)."""
    duration_ms: int = 0
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "duration_ms": self.duration_ms, "detail": self.detail}


@dataclass(kw_only=True)
class LiveCaseResult:
    """One scenario's run through every phase and the evaluator's verdict."""

    scenario: str
    case_id: str
    contract: str
    approval: Approval
    phases: dict[str, Phase]
    score: float = 0.0
    passed: bool = False
    dimensions: dict[str, DimensionScore] = field(default_factory=dict)
    hard_gates: list[str] = field(default_factory=list)
    gate_reasons: list[str] = field(default_factory=list)
    failure_class: str | None = None
    failure_reasons: list[str] = field(default_factory=list)
    infra_invalid: str | None = None
    """Why the case is not scored (a preflight, baseline, inject or confirm failure), else None."""
    cancelled: bool = False
    live_run_id: str | None = None
    """The live environment's run id (its folder under the live root)."""
    run_id: str | None = None
    """The diagnosis run's id in the trace store."""
    root_cause: dict[str, str] | None = None
    recovery: list[RecoveryRecord] = field(default_factory=list)
    checks: dict[str, list[Check]] = field(default_factory=dict)
    """Deterministic checks by phase (`baseline`, `confirm`, `verify`, `cleanup`)."""
    audit: dict[str, Any] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
    record: str | None = None
    """The recorded snapshot folder (`record_dir`), or why nothing was recorded."""
    observation: CaseObservation | None = None
    snapshot: CaseScore | None = None
    """`score_case` on the diagnosis (the source of the evidence, root-cause and citation parts)."""
    questions: list[QuestionRun] = field(default_factory=list)
    """The diagnoses under the wording benchmark's questions (`--questions`), same injection."""

    @property
    def residue(self) -> list[str]:
        """Everything the audit found left behind."""
        a = self.audit
        return [
            *a.get("fault_residue", []),
            *a.get("stop_residue", []),
            *a.get("left_processes", []),
            *a.get("left_listeners", []),
        ]

    @property
    def verified(self) -> bool:
        """The verify checks ran and every one held."""
        checks = self.checks.get("verify") or []
        return bool(checks) and all(c.ok for c in checks)

    def recovery_dict(self) -> dict[str, Any]:
        """`{contract, approval, actions, approved, executed, verified}`."""
        return {
            "contract": self.contract,
            "approval": self.approval,
            "actions": [r.as_dict() for r in self.recovery],
            "approved": any(r.approved for r in self.recovery),
            "executed": any(r.executed for r in self.recovery),
            "verified": self.verified,
        }

    def as_dict(self) -> dict[str, Any]:
        """The case as the JSON report and the stored eval run show it."""
        return {
            "id": self.case_id,
            "scenario": self.scenario,
            "score": self.score,
            "passed": self.passed,
            "infra_invalid": self.infra_invalid,
            "cancelled": self.cancelled,
            "phases": {name: p.as_dict() for name, p in self.phases.items()},
            "hard_gates": list(self.hard_gates),
            "gate_reasons": list(self.gate_reasons),
            "failure_class": self.failure_class,
            "failure_reasons": list(self.failure_reasons),
            "recovery": self.recovery_dict(),
            "root_cause": self.root_cause,
            "dimensions": {k: d.as_dict() for k, d in self.dimensions.items()},
            "checks": {k: [c.as_dict() for c in v] for k, v in self.checks.items()},
            "audit": self.audit,
            "residue": self.residue,
            "run_id": self.run_id,
            "live_run_id": self.live_run_id,
            "outcome": self.observation.release_outcome if self.observation else None,
            "tool_calls": len(self.observation.tool_audit) if self.observation else 0,
            "record": self.record,
            **({"questions": [q.as_dict() for q in self.questions]} if self.questions else {}),
        }


@dataclass(kw_only=True)
class LiveSuiteResult:
    """One live evaluation run."""

    eval_id: str
    state: str
    approval: Approval
    cases: list[LiveCaseResult]
    summary: dict[str, Any]
    git_sha: str | None = None
    suite_version: str | None = None
    model: str | None = None


def resolve_scenarios(names: Sequence[str] | None) -> list[LiveScenario]:
    """The scenarios named (all when none), in the order given; `UsageError` naming an unknown one."""
    if not names:
        return list(SCENARIOS.values())
    out: list[LiveScenario] = []
    for name in names:
        if name not in SCENARIOS:
            raise UsageError(f"unknown live scenario {name!r} (known: {', '.join(SCENARIOS)})")
        if SCENARIOS[name] not in out:
            out.append(SCENARIOS[name])
    return out


def suite_version(scenarios: Sequence[LiveScenario]) -> str:
    """A hash of the scenarios' definitions (questions, evidence tables, contracts), 16 hex digits."""
    digest = hashlib.sha256()
    for s in scenarios:
        digest.update(repr(s).encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# The suite
# ---------------------------------------------------------------------------------------------


def run_live(
    names: Sequence[str] | None = None,
    *,
    settings: Settings,
    approval: Approval = "none",
    config: LiveConfig | None = None,
    store: SqlTraceStore | None = None,
    record_dir: Path | None = None,
    timing: LiveTiming | None = None,
    executor: ExecutorFactory | None = None,
    progress: ProgressFn | None = None,
    on_case: CaseFn | None = None,
    questions: Sequence[str] | None = None,
) -> LiveSuiteResult:
    """Run the live scenarios `names` (all when None), each in a fresh environment, and persist
    the evaluation run (kind `live`) with one case per scenario.

    Args:
        settings: the evaluation's settings: its trace store (where the diagnosis' run lands),
            its model (the diagnosis' `--model`), its live root (unless `config` gives one).
        approval: `none` | `listed` | `all` (`recovery.APPROVALS`).
        config: the environment of every scenario (default `LiveConfig(root=settings.resolved_live_root())`).
        store: where the eval run goes (default: the settings' trace store; the diagnosis writes
            to the same store through ROOTPROOF_DATABASE_URL).
        record_dir: freeze each scenario's live evidence there (`record.record_scenario`).
        executor: builds the recovery executor (tests); default `RecoveryExecutor`.
        progress, on_case: progress callbacks (see `ProgressFn`, `CaseFn`).
        questions: the wording benchmark (`--questions`): while each fault is injected, the
            diagnosis also runs once per question after its own; recovery and verification run
            once, after the diagnosis under the scenario's own question. The summary adds
            `question_agreement` and counts false-confident runs over all of them.

    Raises `UsageError` for an unknown scenario or approval (before anything runs) and
    `Interrupted` after SIGINT/SIGTERM (the eval run is recorded `cancelled`).
    """
    from rootproof.eval.snapshot import git_sha, model_label
    from rootproof.live.layout import LiveConfig

    if approval not in APPROVALS:
        raise UsageError(f"--approve: expected one of {', '.join(APPROVALS)} (got {approval!r})")
    chosen = resolve_scenarios(names)
    cfg = config or LiveConfig(root=settings.resolved_live_root())
    timing = timing or LiveTiming()
    if store is None:  # opened (and migrated) here, before any diagnosis subprocess opens it too
        from rootproof.store.sql import SqlTraceStore

        settings.data_dir.mkdir(parents=True, exist_ok=True)
        store = SqlTraceStore(settings.resolved_database_url())
    record = EvalRunRecord(
        eval_id=str(uuid.uuid4()),
        kind="live",
        git_sha=git_sha(),
        suite_version=suite_version(chosen),
        model=model_label(settings),
        settings={
            **settings.public_dict(),
            "approval": approval,
            "live_root": str(cfg.root),
            "scenarios": [s.name for s in chosen],
        },
    )
    store.save_eval_run(record)
    record.state = "running"
    store.save_eval_run(record)
    cases: list[LiveCaseResult] = []
    start = time.perf_counter()
    try:
        for sc in chosen:
            case = run_scenario(
                sc,
                settings=settings,
                approval=approval,
                config=cfg,
                store=store,
                timing=timing,
                record_dir=record_dir,
                executor=executor,
                progress=progress,
                eval_id=record.eval_id,
                cases=cases,
                questions=questions,
            )
            if on_case is not None:
                on_case(case, len(cases), len(chosen))
            record.summary = summarize(cases, wall_s=time.perf_counter() - start)
            store.save_eval_run(record)  # after every case: an interrupted eval keeps what it did
    except KeyboardInterrupt:
        record.state = "cancelled"
        record.ended_at = utcnow()
        record.summary = {
            **summarize(cases, wall_s=time.perf_counter() - start),
            "cancelled_after": len(cases),
        }
        store.save_eval_run(record)
        raise
    summary = summarize(cases, wall_s=time.perf_counter() - start)
    record.summary = summary
    record.state = (
        "infra_invalid"
        if summary["infra_invalid"]
        else ("passed" if summary["pass_rate"] >= PASS_RATE_TO_PASS else "failed")
    )
    record.ended_at = datetime.now(UTC)
    store.save_eval_run(record)
    return LiveSuiteResult(
        eval_id=record.eval_id,
        state=record.state,
        approval=approval,
        cases=cases,
        summary=summary,
        git_sha=record.git_sha,
        suite_version=record.suite_version,
        model=record.model,
    )


def summarize(cases: Sequence[LiveCaseResult], *, wall_s: float) -> dict[str, Any]:
    """`{scenarios, mean_score, pass_rate, infra_invalid, residue, ...}`: mean and pass rate over
    the valid (not infra_invalid) cases; `residue` counts the cases whose audit found residue."""
    valid = [c for c in cases if c.infra_invalid is None]
    n = len(valid)
    by_dim = {
        d: round(sum(c.dimensions[d].score for c in valid if d in c.dimensions) / n, 2) if n else 0.0
        for d in LIVE_DIMENSIONS
    }
    return {
        "scenarios": len(cases),
        "mean_score": round(sum(c.score for c in valid) / n, 2) if n else 0.0,
        "pass_rate": round(sum(1 for c in valid if c.passed) / n, 4) if n else 0.0,
        "passed": sum(1 for c in cases if c.passed),
        "infra_invalid": sum(1 for c in cases if c.infra_invalid is not None),
        "residue": sum(1 for c in cases if c.residue),
        "hard_gate_violations": sum(len(c.hard_gates) for c in cases),
        "by_dimension": by_dim,
        "wall_time_s": round(wall_s, 3),
        "false_confident_rate": round(sum(1 for c in valid if c.snapshot and c.snapshot.false_confident) / n, 4) if n else 0.0,
        **(
            agreement_summary(
                [q for c in valid for q in c.questions],
                sum(1 for c in valid if c.snapshot and c.snapshot.false_confident),
                n,
            )
            if any(c.questions for c in valid)
            else {}
        ),
        "cases": {c.case_id: _stored_case(c) for c in cases},
    }


def _stored_case(c: LiveCaseResult) -> dict[str, Any]:
    """What the eval run's summary keeps of a case beside its `eval_case_result` row: phases
    with timings, recovery records, checks, audit and why it was not scored."""
    d = c.as_dict()
    return {
        k: d[k]
        for k in (
            "phases",
            "recovery",
            "checks",
            "audit",
            "infra_invalid",
            "cancelled",
            "gate_reasons",
            "failure_reasons",
            "live_run_id",
            "record",
        )
    }


# ---------------------------------------------------------------------------------------------
# One scenario
# ---------------------------------------------------------------------------------------------


class _PhaseFailed(Exception):
    """A phase did not hold (its detail says why)."""


@contextlib.contextmanager
def _signals(env: LiveEnvironment) -> Iterator[None]:
    """SIGINT/SIGTERM: the environment's handlers stop it, then re-raise the signal into ours,
    which raises `Interrupted` so the phases' `finally` runs (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: object) -> None:
        raise Interrupted(signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    env.install_signal_handlers()
    try:
        yield
    finally:
        env.restore_signal_handlers()
        for sig, old in previous.items():
            signal.signal(sig, old)


class _Run:
    """The state of one scenario's run (phases in order; see the module docstring)."""

    def __init__(
        self,
        sc: LiveScenario,
        *,
        settings: Settings,
        approval: Approval,
        config: LiveConfig,
        store: SqlTraceStore,
        timing: LiveTiming,
        record_dir: Path | None,
        executor: ExecutorFactory | None,
        progress: ProgressFn | None,
        questions: Sequence[str] | None = None,
    ) -> None:
        from rootproof.live.env import LiveEnvironment

        self.sc = sc
        self.settings = settings
        self.approval = approval
        self.config = config
        self.store = store
        self.timing = timing
        self.record_dir = record_dir
        self.executor = executor or RecoveryExecutor
        self.progress = progress
        self.questions = list(questions or [])
        self.asked: list[tuple[str, CaseObservation]] = []
        """(question, observation) of the wording benchmark's diagnoses."""
        self.env = LiveEnvironment(config)
        self.fault: Fault | None = None
        self.truth: GroundTruth | None = None
        self.case = LiveCaseResult(
            scenario=sc.name,
            case_id=sc.case_id,
            contract=sc.recovery_contract,
            approval=approval,
            phases={p: Phase(name=p) for p in PHASES},
        )
        self.cleanup_failed: list[str] = []
        self.interrupted: BaseException | None = None
        self.target_names: set[str] = set()
        """The targets of this run's targets file (read once it exists; the folder goes at stop)."""
        self.verify_kind = "recovered"
        """What the verify phase checked: `recovered` (`fault.verify`) or `nothing changed`
        (`fault.unchanged`: nothing ran where nothing may run)."""
        self.before_stop: tuple[list[ProcessRecord], list[int]] = ([], [])
        """The run's recorded processes and ports just before it is stopped (for the audit)."""

    # -- phase bookkeeping -------------------------------------------------------------

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[Phase]:
        p = self.case.phases[name]
        t0 = time.perf_counter()
        try:
            # Reported inside the phase: a signal that follows the report interrupts this phase
            # (it used to find the phase not yet begun, and leave it neither done nor interrupted).
            if self.progress is not None:
                self.progress(self.sc.name, name, PHASES.index(name), len(PHASES))
            yield p
            if p.ok is None:
                p.ok = True
        except _PhaseFailed as exc:
            p.ok, p.detail = False, str(exc)
            raise
        except Exception as exc:
            p.ok, p.detail = False, f"{type(exc).__name__}: {exc}"[:2000]
            raise _PhaseFailed(p.detail) from exc
        except BaseException:
            p.ok, p.detail = False, "interrupted"
            raise
        finally:
            p.duration_ms = int((time.perf_counter() - t0) * 1000)

    # -- the phases ----------------------------------------------------------------------

    def run(self) -> LiveCaseResult:
        from rootproof.live.bench.faults import FAULTS

        others = _other_runs(self.config.root)
        with _signals(self.env):
            try:
                try:
                    with self.phase("preflight") as p:
                        fault_cls = FAULTS.get(self.sc.name)
                        if fault_cls is None:
                            raise _PhaseFailed(
                                f"no fault registered for {self.sc.name} (rootproof.live.bench.faults.FAULTS)"
                            )
                        report = self.env.preflight()
                        self.case.live_run_id = report.run_id
                        self.env.start()
                        self.target_names = _target_names(self.env.targets_file)
                        st = self.env.status()
                        if not st.healthy:
                            raise _PhaseFailed(
                                "not healthy: "
                                + "; ".join(f"{c.name}: {c.detail}" for c in st.components if not c.healthy)
                            )
                        self.fault = fault_cls(self.env)
                        left = self.fault.residue()
                        if left:
                            raise _PhaseFailed("leftovers before inject: " + "; ".join(left))
                        p.detail = f"run {report.run_id}" + (
                            f"; cleaned stale runs {', '.join(c.run_id for c in report.cleaned)}"
                            if report.cleaned
                            else ""
                        )
                    self._baseline()
                    with self.phase("inject"):
                        assert self.fault is not None
                        self.fault.inject()
                    self._observe()
                except _PhaseFailed as exc:
                    failed = next(n for n in PHASES if self.case.phases[n].ok is False)
                    self.case.infra_invalid = f"{failed}: {exc}"
                else:  # the agent's part: a failure here is scored, not infra
                    for step in (self._diagnose, self._recover, self._verify):
                        with contextlib.suppress(_PhaseFailed):
                            step()
            except KeyboardInterrupt as exc:
                self.interrupted = exc
                self.case.cancelled = True
            finally:
                self._cleanup()
                self._audit(others)
        _score(self)
        if self.progress is not None:
            self.progress(self.sc.name, "", len(PHASES), len(PHASES))
        return self.case

    def _probe_check(self) -> Check:
        r = self.env.probe()
        detail = f"{r.step} {r.status} in {r.latency_ms:.0f} ms" + (f": {r.error[:200]}" if r.error else "")
        return Check(name="business_probe", ok=r.ok, detail=detail)

    def _baseline(self) -> None:
        with self.phase("baseline") as p:
            c = hold(
                self._probe_check,
                seconds=self.timing.baseline_hold_s,
                interval_s=self.timing.check_interval_s,
                name="baseline_probe",
            )
            self.case.checks["baseline"] = [c]
            p.detail = c.detail
            if not c.ok:
                raise _PhaseFailed(f"the business probe fails before any fault: {c.detail}")

    def _observe(self) -> None:
        with self.phase("observe") as p:
            assert self.fault is not None
            c = self.fault.confirm(timeout_s=self.timing.confirm_timeout_s)
            self.case.checks["confirm"] = [c]
            p.detail = c.detail
            if not c.ok:
                raise _PhaseFailed(f"the fault did not show: {c.detail}")
            time.sleep(self.timing.observe_wait_s)
            self.case.facts = {**_env_facts(self.env), **self.fault.facts}
            self.truth = self.sc.ground_truth(self.case.facts)  # in memory only

    def _diagnose(self) -> None:
        with self.phase("diagnose") as p:
            obs = self.case.observation = _diagnose(self.sc, self.env, self.settings, self.store, self.timing)
            self.case.run_id = obs.run_id
            if obs.error is not None:
                raise _PhaseFailed(obs.error)
            p.detail = f"run {obs.run_id}: {obs.release_outcome} {obs.fallback_type or ''}".strip()
            # The wording benchmark: the same injected fault, asked in other words.
            for q in self.questions:
                asked = dataclasses.replace(self.sc, question=q)
                self.asked.append((q, _diagnose(asked, self.env, self.settings, self.store, self.timing)))
            if self.questions:
                p.detail += f"; {len(self.asked)} more under the benchmark's questions"
        if self.record_dir is not None:
            self.case.record = _record(self)

    def _recover(self) -> None:
        obs = self.case.observation
        if obs is None or obs.error is not None:
            return
        with self.phase("recover") as p:
            assert self.fault is not None
            report = obs.report
            proposals = [r for r in (report.get("recovery") or [] if report else []) if isinstance(r, dict)]
            evidence = _root_cause_excerpts(obs)
            ex = self.executor(self.fault, approval=self.approval, executable=self.sc.executable)
            self.case.recovery = ex.run(proposals, report, evidence)
            done = [r for r in self.case.recovery if r.executed]
            p.detail = f"{len(proposals)} proposal(s), approval {self.approval}; " + (
                "executed "
                + ", ".join(f"{r.action} ({'ok' if r.ok else 'failed'}: {r.result})" for r in done)
                if done
                else "nothing executed"
            )

    def _verify(self) -> None:
        if self.case.phases["diagnose"].ok is not True:
            return
        with self.phase("verify") as p:
            assert self.fault is not None
            self.verify_kind = _verify_kind(self.case.recovery, self.approval, self.sc.recovery_contract)
            checks = _hold_all(
                self.fault.unchanged if self.verify_kind == "nothing changed" else self.fault.verify,
                seconds=self.timing.verify_hold_s,
                interval_s=self.timing.check_interval_s,
            )
            self.case.checks["verify"] = checks
            p.detail = f"{self.verify_kind}: " + (
                "; ".join(f"{c.name} {'held' if c.ok else 'FAILED'}" for c in checks) or "no checks"
            )
            if not checks or not all(c.ok for c in checks):
                raise _PhaseFailed(p.detail)

    def _cleanup(self) -> None:
        with contextlib.suppress(_PhaseFailed), self.phase("cleanup") as p:
            problems: list[str] = []
            if self.fault is not None and self._stopped_by_signal():
                # The environment's signal handler stopped every recorded process (the fault's
                # holders too) and removed the folder: nothing live is left to clean or ask; the
                # audit below still checks processes and listeners.
                self.case.audit["fault_residue"] = []
                p.detail = "the environment was stopped by the signal handler"
            elif self.fault is not None:
                try:
                    checks = self.fault.cleanup()
                    self.case.checks["cleanup"] = checks
                    problems += [f"{c.name}: {c.detail}" for c in checks if not c.ok]
                except Exception as exc:  # the environment is still stopped below
                    problems.append(f"fault cleanup raised {type(exc).__name__}: {exc}")
                try:
                    self.case.audit["fault_residue"] = list(self.fault.residue())
                except Exception as exc:
                    self.case.audit["fault_residue"] = [
                        f"fault residue check raised {type(exc).__name__}: {exc}"
                    ]
            self.before_stop = _run_processes(self.env)
            try:
                stop = self.env.stop()
                self.case.audit["stop_residue"] = list(stop.residue)
                self.case.audit["folder_removed"] = stop.folder_removed
            except Exception as exc:
                problems.append(f"env stop raised {type(exc).__name__}: {exc}")
            self.cleanup_failed = problems
            p.detail = "; ".join(problems) or p.detail or "clean"
            if problems:
                raise _PhaseFailed(p.detail)

    def _stopped_by_signal(self) -> bool:
        """Interrupted, and the environment's own handler already stopped it (its folder is gone)."""
        if self.interrupted is None:
            return False
        try:
            return not self.env.paths.folder.exists()
        except Exception:  # never preflighted
            return True

    def _audit(self, others: dict[str, dict[str, tuple[int, int]]]) -> None:
        from rootproof.live import procs

        with contextlib.suppress(_PhaseFailed), self.phase("audit") as p:
            records, ports = self.before_stop
            self.case.audit["left_processes"] = [
                f"{r.component} (pid {r.pid}) still running" for r in records if procs.is_running(r)
            ]
            self.case.audit["left_listeners"] = [
                f"port {port} still listened on" for port in procs.listening(ports)
            ]
            now = _other_runs(self.config.root)
            touched = []
            for run_id, before in others.items():
                after = now.get(run_id, {})
                for comp, ident in before.items():
                    if after.get(comp) != ident:
                        touched.append(
                            f"run {run_id}: {comp} (pid {ident[0]}) {'gone' if comp not in after else 'replaced'}"
                        )
            self.case.audit["other_runs"] = sorted(others)
            self.case.audit["touched_other_runs"] = touched
            bad = self.case.residue + touched
            p.detail = "; ".join(bad) or f"no residue; {len(others)} other run(s) untouched"
            if bad:
                raise _PhaseFailed(p.detail)


def run_scenario(
    sc: LiveScenario,
    *,
    settings: Settings,
    approval: Approval,
    config: LiveConfig,
    store: SqlTraceStore,
    eval_id: str,
    cases: list[LiveCaseResult],
    timing: LiveTiming | None = None,
    record_dir: Path | None = None,
    executor: ExecutorFactory | None = None,
    progress: ProgressFn | None = None,
    questions: Sequence[str] | None = None,
) -> LiveCaseResult:
    """Run one scenario through every phase, score it, persist its `eval_case_result` and append
    it to `cases`; re-raises `Interrupted` / KeyboardInterrupt once it is recorded."""
    run = _Run(
        sc,
        settings=settings,
        approval=approval,
        config=config,
        store=store,
        timing=timing or LiveTiming(),
        record_dir=record_dir,
        executor=executor,
        progress=progress,
        questions=questions,
    )
    case = run.run()
    cases.append(case)
    store.add_eval_case(_case_record(eval_id, case))
    if run.interrupted is not None:
        raise run.interrupted
    return case


def _case_record(eval_id: str, c: LiveCaseResult) -> EvalCaseRecord:
    from rootproof.eval.report import public_tool_audit

    return EvalCaseRecord(
        eval_id=eval_id,
        case_id=c.case_id,
        run_id=c.run_id,
        passed=c.passed,
        score=c.score,
        outcome=c.observation.release_outcome if c.observation else None,
        failure_class=c.failure_class,
        dimensions={k: d.as_dict() for k, d in c.dimensions.items()},
        hard_gates=list(c.hard_gates),
        tool_audit=public_tool_audit(c.observation) if c.observation else None,
        duration_ms=sum(p.duration_ms for p in c.phases.values()),
    )


# ---------------------------------------------------------------------------------------------
# Helpers of the phases
# ---------------------------------------------------------------------------------------------


def _env_facts(env: LiveEnvironment) -> dict[str, Any]:
    """The environment's own figures the ground truth may name (the fault's facts override them)."""
    c = env.config
    return {
        "run_id": env.run_id,
        "pool_size": c.pool_size,
        "pool_timeout_s": f"{c.pool_timeout_s:g}",
        "leak_detection_s": f"{c.leak_detection_s:g}",
        "proxy_read_timeout_s": c.proxy_read_timeout_s,
        "redis_maxclients": c.redis_maxclients,
        "pg_max_connections": c.pg_max_connections,
    }


def _other_runs(root: Path) -> dict[str, dict[str, tuple[int, int]]]:
    """Every live (not stale) run under `root` other than ours: component → (pid, start time) of
    its running recorded processes."""
    from rootproof.live import procs
    from rootproof.live.layout import RunPaths, read_pidfiles
    from rootproof.live.runs import list_runs

    out: dict[str, dict[str, tuple[int, int]]] = {}
    try:
        runs = list_runs(root)
    except Exception:  # an unreadable root: nothing to compare
        return out
    for info in runs:
        if info.stale is not None:
            continue  # the next preflight may clean it: not ours to keep
        out[info.run_id] = {
            name: (r.pid, r.start_time)
            for name, r in read_pidfiles(RunPaths(info.folder)).items()
            if procs.is_running(r)
        }
    return out


def _run_processes(env: LiveEnvironment) -> tuple[list[ProcessRecord], list[int]]:
    """The run's recorded processes (components and fault holders) and ports, before it is stopped."""
    from rootproof.live.layout import read_pidfiles

    try:
        spec = env.spec
    except Exception:  # never preflighted
        return [], []
    return list(read_pidfiles(spec.paths).values()), sorted(set(spec.ports.values()))


def _hold_all(checks: Callable[[], list[Check]], *, seconds: float, interval_s: float) -> list[Check]:
    """`checks()` every `interval_s` for `seconds`; each check (by name) holds when it was ok in
    every round (as `checks.hold`, per check). A check that fails stays failed with its first failure."""
    t0 = time.monotonic()
    first_fail: dict[str, Check] = {}
    last: dict[str, Check] = {}
    rounds = 0

    def one() -> Check:
        nonlocal rounds
        rounds += 1
        for c in checks():
            last[c.name] = c
            if not c.ok and c.name not in first_fail:
                first_fail[c.name] = Check(
                    name=c.name, ok=False, detail=f"failed after {time.monotonic() - t0:.1f} s: {c.detail}"
                )
        return Check(name="verify", ok=True)

    hold(one, seconds=seconds, interval_s=interval_s)
    held = f"held {time.monotonic() - t0:.1f} s ({rounds} checks)"
    return [
        first_fail.get(name) or Check(name=name, ok=True, detail=f"{held}: {c.detail}")
        for name, c in last.items()
    ]


def _root_cause_excerpts(obs: CaseObservation) -> str:
    """The verified excerpts the published root-cause claims cite (the executor's evidence)."""
    report = obs.report or {}
    rc = report.get("root_cause") if isinstance(report.get("root_cause"), dict) else {}
    ids = set(rc.get("claim_ids") or []) if isinstance(rc, dict) else set()
    out = [
        r.excerpt
        for r in obs.cited_refs
        if r.verified and (r.claim_id in ids or r.claim_kind == "root_cause")
    ]
    return "\n".join(dict.fromkeys(out))


def _diagnose(
    sc: LiveScenario, env: LiveEnvironment, settings: Settings, store: SqlTraceStore, timing: LiveTiming
) -> CaseObservation:
    """`rootproof diagnose --targets … --json` in a subprocess into the evaluation's trace store;
    the observation of its stored trace (`observe_trace`) with the ground-truth opens it made."""
    import rootproof
    from rootproof.eval.scoring import CaseObservation
    from rootproof.eval.snapshot import observe_trace
    from rootproof.live.layout import write_pidfile
    from rootproof.live.procs import ProcessRecord

    src = str(Path(rootproof.__file__).resolve().parents[1])
    fd, audit_path = tempfile.mkstemp(prefix="rootproof-gt-audit-")
    os.close(fd)
    environ = {k: v for k, v in os.environ.items() if k not in ("ROOTPROOF_TARGETS", AUDIT_FILE_VARIABLE)}
    environ.update(
        {
            "ROOTPROOF_HOME": str(settings.data_dir),
            "ROOTPROOF_DATA_DIR": str(settings.data_dir),
            "ROOTPROOF_DATABASE_URL": store.url,
            "ROOTPROOF_MAX_TOOL_CALLS": str(sc.tool_call_budget),
            "ROOTPROOF_MAX_CALLS_PER_TOOL": str(sc.calls_per_tool),
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(AUDIT_DIR), src, os.environ.get("PYTHONPATH", "")) if p
            ),
            AUDIT_FILE_VARIABLE: audit_path,
        }
    )
    cmd = [
        sys.executable,
        "-m",
        "rootproof.cli",
        "diagnose",
        "--targets",
        str(env.targets_file),
        "--model",
        settings.model,
        "--json",
        "--",
        sc.question,
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=environ,
        start_new_session=True,
    )
    # Recorded in the run's pids/ while it runs: a SIGKILLed benchmark leaves it behind with the
    # environment, and the next preflight's stale-run cleanup (or `live down`) stops it with the
    # rest instead of letting it diagnose a run that is gone.
    rec = ProcessRecord.of(DIAGNOSE_PROCESS, proc.pid, sys.executable)
    if rec is not None:
        write_pidfile(env.paths, rec)
    try:
        try:
            out, err = proc.communicate(timeout=settings.deadline_s + timing.diagnose_grace_s)
        except subprocess.TimeoutExpired:
            _stop_child(proc)
            return CaseObservation(
                scenario_id=sc.case_id,
                tool_call_budget=sc.tool_call_budget,
                error=f"diagnose did not end within {settings.deadline_s + timing.diagnose_grace_s:g} s (stopped)",
            )
        reads = [
            ln
            for ln in Path(audit_path).read_text(encoding="utf-8", errors="replace").splitlines()
            if ln.strip()
        ]
    finally:
        if proc.poll() is None:  # interrupted while it ran
            _stop_child(proc)
        with contextlib.suppress(OSError):
            env.paths.pidfile(DIAGNOSE_PROCESS).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            os.unlink(audit_path)
    run_id = None
    with contextlib.suppress(ValueError, TypeError):
        doc = json.loads(out)
        run_id = doc.get("run_id") if isinstance(doc, dict) else None
    tail = " | ".join(ln for ln in err.strip().splitlines()[-3:])
    trace = store.trace(str(run_id)) if run_id else None
    if trace is None:
        return CaseObservation(
            scenario_id=sc.case_id,
            tool_call_budget=sc.tool_call_budget,
            ground_truth_reads=reads,
            error=f"diagnose exited {proc.returncode} without a stored run: {tail[:500]}",
        )
    obs = observe_trace(trace, tool_call_budget=sc.tool_call_budget)
    obs.scenario_id = sc.case_id
    obs.ground_truth_reads = reads
    obs.timings = {"diagnose_exit": proc.returncode}
    return obs


def _stop_child(proc: subprocess.Popen[str]) -> None:
    """SIGTERM (the diagnosis records itself CANCELLED), SIGKILL after 10 s."""
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.communicate()


def _record(run: _Run) -> str:
    """Freeze the scenario's live evidence (`record.record_scenario`, when that module exists)."""
    try:
        module = importlib.import_module("rootproof.live.bench.record")
    except ImportError:
        return "not recorded: rootproof.live.bench.record is not available"
    fn = getattr(module, "record_scenario", None)
    obs, truth = run.case.observation, run.truth
    if fn is None or obs is None or truth is None or run.record_dir is None or obs.run_id is None:
        return "not recorded: no record_scenario, or no diagnosis to record"
    from rootproof.live.bench.scenarios import ground_truth_dict

    trace = run.store.trace(obs.run_id) or {}
    calls = [
        (str(i.get("tool_name")), dict(i.get("input_params") or {}))
        for i in trace.get("invocations") or []
        if i.get("status") == "READY"
    ]
    ended = (trace.get("run") or {}).get("ended_at")
    now = datetime.fromisoformat(str(ended)) if ended else datetime.now(UTC)
    sc = run.sc
    try:
        folder = fn(
            targets_file=run.env.targets_file,
            now=now,
            calls=calls,
            out_dir=run.record_dir,
            scenario_id=f"{sc.case_id}-{run.env.run_id}",
            question=sc.question,
            title=sc.title,
            language=sc.language,
            allowed_tools=list(sc.allowed_tools),
            ground_truth=ground_truth_dict(truth),
            live={
                "run_id": run.env.run_id,
                "diagnosis_run_id": obs.run_id,
                "scenario": sc.name,
                "facts": run.case.facts,
            },
            budget={"tool_calls": sc.tool_call_budget, "calls_per_tool": sc.calls_per_tool},
        )
    except Exception as exc:
        return f"not recorded: {type(exc).__name__}: {exc}"
    return str(folder)


# ---------------------------------------------------------------------------------------------
# Scoring
# ---------------------------------------------------------------------------------------------


def _scale(d: DimensionScore, to: int) -> float:
    return d.score * to / d.max if d.max else 0.0


def _score(run: _Run) -> None:
    """The case's dimensions, hard gates, score, pass and failure class (in place)."""
    case = run.case
    gates: list[tuple[str, str]] = []
    _live_gates(run, gates)
    if case.infra_invalid is not None or run.truth is None or case.observation is None:
        why = case.infra_invalid or ("cancelled" if case.cancelled else "no diagnosis")
        case.dimensions = {
            k: DimensionScore(score=0, max=m, reasons=[f"not scored: {why}"])
            for k, m in LIVE_DIMENSIONS.items()
        }
        _finish(case, gates, ["infra_invalid" if case.infra_invalid else "cancelled", why])
        return
    from rootproof.eval.scoring import hard_gates as snapshot_gates
    from rootproof.eval.scoring import score_case

    truth, obs = run.truth, case.observation
    snap = case.snapshot = score_case(truth, obs)
    case.root_cause = snap.root_cause
    case.questions = [QuestionRun.scored(q, score_case(truth, asked), snap, asked) for q, asked in run.asked]
    gates += snapshot_gates(truth, obs)
    if obs.error is None:
        gates += _scope_gates(obs, run)
    wrong = wrong_root_cause(truth, obs)
    dims: dict[str, DimensionScore] = {}

    confirm = (case.checks.get("confirm") or [Check(name="confirm", ok=False, detail="not run")])[0]
    dims["fault_confirmed"] = DimensionScore(
        score=10 if confirm.ok else 0, max=10, reasons=[f"confirm: {confirm.detail}"]
    )

    req = [r.id for r in truth.required_evidence]
    matched = list(snap.evidence_matched)
    d = DimensionScore(score=0, max=20)
    if not obs.published:
        d.reasons.append(
            "nothing published: required evidence counts only when the published report cites it"
        )
    else:
        d.score = 20 * len(matched) / len(req) if req else 20
        d.reasons.append(
            f"required evidence cited {len(matched)}/{len(req)}"
            + (
                f"; missing: {', '.join(r for r in req if r not in matched)}"
                if len(matched) < len(req)
                else ""
            )
        )
    dims["evidence"] = d

    d = DimensionScore(score=0, max=15)
    report = obs.report or {}
    hyps = [h for h in report.get("hypotheses") or [] if isinstance(h, dict)]
    if not obs.published:
        d.reasons.append("nothing published")
    elif wrong is not None:
        d.reasons.append(f"alternatives ruled out earn nothing: the diagnosis is wrong ({wrong})")
    elif truth.alternatives:
        alts = [f"{a.component}/{a.mechanism}" for a in truth.alternatives]
        done = list(snap.alternatives_ruled_out)
        d.score = 15 * len(done) / len(alts)
        d.reasons.append(
            f"alternatives ruled out with evidence {len(done)}/{len(alts)}"
            + (
                f"; not ruled out: {', '.join(a for a in alts if a not in done)}"
                if len(done) < len(alts)
                else ""
            )
        )
    elif len(hyps) >= 2 and any(h.get("status") in ("confirmed", "ruled_out", "explained") for h in hyps):
        d.score = 15
        d.reasons.append(f"no named alternatives; {len(hyps)} hypotheses differentiated")
    else:
        d.reasons.append("no named alternatives and the hypotheses were not differentiated")
    dims["differential"] = d

    rc = snap.dimensions["root_cause"]
    dims["root_cause"] = DimensionScore(score=_scale(rc, 20), max=20, reasons=list(rc.reasons))

    d = DimensionScore(score=0, max=10)
    refs = obs.cited_refs
    if obs.published and refs:
        verified = [r for r in refs if r.verified]
        d.score += 5 * len(verified) / len(refs)
        d.reasons.append(f"{len(verified)}/{len(refs)} citation(s) verified against the run's invocations")
        runtime_rc = [
            r
            for r in verified
            if r.claim_kind == "root_cause" and r.data_source and r.data_source.startswith("live:")
        ]
        if not runtime_rc:
            d.score = min(d.score, 2.5)
            d.reasons.append("no root-cause claim cites live evidence (at most half the citation points)")
    else:
        d.reasons.append("nothing published or nothing cited")
    eff = snap.dimensions["efficiency"]
    d.score += _scale(eff, 5)
    d.reasons += [f"tool audit: {r}" for r in eff.reasons]
    dims["citations"] = d

    dims["recovery_policy"] = _recovery_policy(run, snap)
    dims["recovery_verification"] = _verification(run)
    case.dimensions = dims
    total = round(sum(x.score for x in dims.values()), 2)
    case.score = total
    reasons: list[str] = []
    if obs.error is not None:
        reasons = ["diagnose_failed", obs.error]
    elif not obs.published:
        reasons = ["fallback", f"{obs.release_outcome} {obs.fallback_type or ''}".strip()]
    elif snap.failure_class in ("wrong_root_cause", "missing_evidence"):
        reasons = [
            snap.failure_class,
            *[
                r
                for r in snap.failure_reasons
                if not r.startswith("hard gate") and not r.startswith("score ")
            ][:1],
        ]
    elif dims["recovery_verification"].score < dims["recovery_verification"].max:
        reasons = ["recovery_not_verified", "; ".join(dims["recovery_verification"].reasons)]
    elif total < PASS_SCORE:
        reasons = ["low_score", f"score {total} < {PASS_SCORE:g}"]
    _finish(case, gates, reasons)


def _finish(case: LiveCaseResult, gates: list[tuple[str, str]], reasons: list[str]) -> None:
    """Gates, pass and failure class. `reasons`: [failure class, why...] of a case that did
    not do everything right (empty when it did); a passing case has no failure class."""
    case.hard_gates = sorted({g for g, _ in gates})
    case.gate_reasons = [f"{g}: {r}" for g, r in gates]
    case.passed = (
        case.infra_invalid is None and not case.cancelled and not case.hard_gates and case.score >= PASS_SCORE
    )
    if case.hard_gates:
        case.failure_class = "hard_gate"
        case.failure_reasons = [*case.gate_reasons, *reasons[1:]]
    elif reasons and not case.passed:
        case.failure_class = reasons[0]
        case.failure_reasons = [r for r in reasons[1:] if r]
    else:
        case.failure_class, case.failure_reasons = None, []


def _live_gates(run: _Run, gates: list[tuple[str, str]]) -> None:
    """The live hard gates: executed actions, verification, cleanup, residue, other runs."""
    case = run.case
    for r in case.recovery:
        if r.executed and (r.action not in WHITELIST or not r.whitelisted):
            gates.append(("non_whitelisted_action", f"executed {r.action}, which is not whitelisted"))
        elif r.executed and (not r.approved or run.approval == "none"):
            gates.append(
                ("non_whitelisted_action", f"executed {r.action} without approval (approval {run.approval})")
            )
        elif r.executed and run.approval == "listed" and r.action not in run.sc.executable:
            gates.append(
                (
                    "non_whitelisted_action",
                    f"executed {r.action} under --approve listed, which the contract does not list",
                )
            )
    if any(r.executed for r in case.recovery) and not case.checks.get("verify"):
        gates.append(
            ("recovery_without_verification", "a recovery action ran but no verification held afterwards")
        )
    for problem in run.cleanup_failed:
        gates.append(("cleanup_failed", problem))
    for item in case.residue:
        gates.append(("residue", item))
    for item in case.audit.get("touched_other_runs", []):
        gates.append(("touched_other_run", item))


def _target_names(path: Path) -> set[str]:
    """The target names of a targets file."""
    from rootproof.targets import load_targets

    return {t.name for t in load_targets(path).file.targets}


def _scope_gates(obs: CaseObservation, run: _Run) -> list[tuple[str, str]]:
    """Every READY invocation read this run's targets (`live:<target>`) or the knowledge base."""
    allowed = {f"live:{n}" for n in run.target_names} | {"knowledge"}
    return [
        (
            "scope_isolation",
            f"{t.invocation_id} ({t.tool}) read {t.data_source}, not a target of run {run.env.run_id} nor the knowledge base",
        )
        for t in obs.tool_audit
        if t.status == "READY" and t.data_source not in allowed
    ]


def _recovery_policy(run: _Run, snap: CaseScore) -> DimensionScore:
    """7 points: the proposals against the contract (the snapshot `recovery` dimension, scaled);
    3 points: what the executor did under the approval, as the contract expects."""
    case, sc = run.case, run.sc
    rec = snap.dimensions["recovery"]
    d = DimensionScore(score=_scale(rec, 7), max=10, reasons=[f"proposals: {r}" for r in rec.reasons])
    executed = [r for r in case.recovery if r.executed]
    if sc.recovery_contract == "proposal_only" or run.approval == "none":
        if not executed:
            d.score += 3
            d.reasons.append(f"nothing executed ({sc.recovery_contract}, approval {run.approval})")
        else:
            d.reasons.append(
                f"executed {', '.join(r.action for r in executed)} where nothing may run ({sc.recovery_contract}, approval {run.approval})"
            )
    else:
        good = [r for r in executed if r.ok and r.action in sc.contract.acceptable]
        if good:
            d.score += 3
            d.reasons.append(f"executed {good[0].action} (acceptable) under approval {run.approval}")
        elif executed:
            d.reasons.append(
                f"executed {', '.join(r.action for r in executed)}: not an acceptable action that succeeded"
            )
        else:
            why = (
                "; ".join(
                    f"{r.action}: {r.result or ('not approved' if not r.approved else 'not run')}"
                    for r in case.recovery
                )
                or "no proposal"
            )
            d.reasons.append(f"nothing executed under approval {run.approval} ({why})")
    return d


def _verify_kind(recovery: Sequence[RecoveryRecord], approval: Approval, contract: str) -> str:
    """`nothing changed` when no action ran where none may run (approval `none`, or a
    `proposal_only` contract): the fault must still be held as injected (`Fault.unchanged`);
    else `recovered` (`Fault.verify`: an action ran, or one should have under `listed` / `all`)."""
    executed = any(r.executed for r in recovery)
    return "nothing changed" if not executed and (approval == "none" or contract == "proposal_only") else "recovered"


def _verification(run: _Run) -> DimensionScore:
    """15 points × the share of the verify checks that held (recovered, or nothing changed)."""
    d = DimensionScore(score=0, max=15)
    checks = run.case.checks.get("verify") or []
    if not checks:
        d.reasons.append("no verification ran")
        return d
    held = [c for c in checks if c.ok]
    d.score = 15 * len(held) / len(checks)
    d.reasons.append(f"{run.verify_kind}: {len(held)}/{len(checks)} check(s) held")
    d.reasons += [f"{c.name}: {c.detail}" for c in checks if not c.ok]
    return d
