"""The adversarial evidence benchmark (`rootproof eval adversarial`).

Every built-in scenario without an `expected_outcome` (no-fault controls included) gets every
mutation kind in several seeded variants (`mutations.py`). Each mutant is a temporary copy of
the scenario folder — `scenario.yaml`, `provenance.yaml` and the mutated
`snapshot/tool_responses.yaml`, never `ground_truth.yaml` — run through the real pipeline
(offline planner, offline judge, the harness and its guards) in the snapshot benchmark's
worker processes (`snapshot.run_case`: the ground-truth audit hook included). The parent, as
the evaluator, reads each scenario's ground truth to aim the mutations and to judge the
published root cause; the built-in files are only read.

A run is `false_confident` when it published a root cause that is wrong (a component and
mechanism other than the ground truth's) or any root cause on a control; a fault run
`survived` when the true root cause is still the published one.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from rootproof.errors import UsageError
from rootproof.eval.adversarial.mutations import KINDS, LogStream, Mutation, Target, mutate
from rootproof.eval.scoring import CaseObservation, score_case
from rootproof.scenarios.types import GroundTruth, Scenario
from rootproof.settings import Settings
from rootproof.tools.refs import fold_text

__all__ = [
    "DEFAULT_VARIANTS",
    "MIN_RUNS",
    "MutantCase",
    "build_cases",
    "dump_responses",
    "run_adversarial",
    "scenario_target",
]

DEFAULT_VARIANTS = 3
"""Variants of each mutation kind per scenario (23 scenarios × 8–9 kinds × 3 ≈ 570 runs)."""
MIN_RUNS = 500
"""The benchmark's target: at least this many runs, no false-confident one, ≥ 80 % survived."""
MIN_SURVIVED_RATE = 0.8

ProgressFn = Callable[[int, int], None]
"""Called with (done, total) when the runs start and after each run."""

_RESPONSES = "snapshot/tool_responses.yaml"
_COPIED = ("scenario.yaml", "provenance.yaml")


class _Dumper(yaml.SafeDumper):
    """Plain YAML: no anchors or aliases (shared objects are written out twice)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _plain(value: Any) -> Any:
    from rootproof.scenarios.types import format_timestamp

    if isinstance(value, datetime):
        return format_timestamp(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def dump_responses(data: dict[str, Any]) -> str:
    """`tool_responses.yaml` text for plain data (timestamps as ISO-8601 text, no aliases)."""
    return yaml.dump(_plain(data), Dumper=_Dumper, allow_unicode=True, sort_keys=False, width=1 << 20)


# ---------------------------------------------------------------------------------------------
# Aiming: where the fault shows
# ---------------------------------------------------------------------------------------------


def _ts(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def _log_entries(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in data.get("logs") or [] if isinstance(e, dict)]


def scenario_target(scenario: Scenario, truth: GroundTruth, data: dict[str, Any]) -> Target:
    """Where the fault shows in a scenario's logs: the alert's service, else the service whose
    entries the ground truth requires, else the one with the most WARN-or-worse entries, else
    the most entries (its loudest log file); and the span of that service's entries inside
    the default window."""
    entries = _log_entries(data)
    required = [o for r in truth.required_evidence for o in r.options if o.tool == "query_logs"]

    def text(e: dict[str, Any]) -> str:
        return fold_text(
            f"{e.get('ts')} {e.get('level')} {e.get('service')} [{e.get('source')}] {e.get('message')}"
        )

    hits = Counter(
        str(e.get("service"))
        for e in entries
        for r in required
        if all(fold_text(m) in text(e) for m in r.match)
    )
    loud = Counter(
        str(e.get("service")) for e in entries if str(e.get("level")) in ("WARN", "ERROR", "FATAL")
    )
    every = Counter(str(e.get("service")) for e in entries)
    alert = scenario.alert.service if scenario.alert is not None else None
    if alert and alert in every:
        service = alert
    elif hits:
        service = hits.most_common(1)[0][0]
    elif loud:
        service = loud.most_common(1)[0][0]
    elif every:
        service = every.most_common(1)[0][0]
    else:
        service = alert or "app"
    own = [e for e in entries if str(e.get("service")) == service]
    loud_own = [e for e in own if str(e.get("level")) in ("WARN", "ERROR", "FATAL")] or own
    source = Counter(str(e.get("source") or service) for e in loud_own).most_common(1)
    scope = next((str(e.get("scope")) for e in loud_own if e.get("scope")), "APPLICATION")
    stream = LogStream(service=service, scope=scope, source=source[0][0] if source else f"{service}.log")
    # Inside the 30-minute default window (ending a minute before the clock), where the
    # service's own entries are; the last third of that window when it has none there.
    lo_bound, hi_bound = scenario.now - timedelta(minutes=28), scenario.now - timedelta(minutes=1)
    times = sorted(t for e in own if (t := _ts(e.get("ts"))) is not None and lo_bound <= t <= hi_bound)
    if len(times) >= 2 and times[-1] > times[0]:
        window = (times[0], times[-1])
    else:
        window = (scenario.now - timedelta(minutes=10), hi_bound)
    rc = truth.root_cause
    return Target(
        scenario_id=scenario.id,
        now=scenario.now,
        truth=(rc.component, rc.mechanism) if truth.fault and rc is not None else None,
        faulty=stream,
        window=window,
    )


# ---------------------------------------------------------------------------------------------
# Building the mutants
# ---------------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class MutantCase:
    """One mutant: its scenario, its mutation and (after the run) the verdict."""

    scenario_id: str
    source: Path
    """The built-in scenario folder (read only)."""
    truth: GroundTruth
    mutation: Mutation
    folder: Path | None = None
    """The temporary mutant folder the worker runs."""
    result: dict[str, Any] | None = None


def build_cases(
    *,
    seed: int,
    variants: int = DEFAULT_VARIANTS,
    scenarios: Sequence[str] | None = None,
    kinds: Sequence[str] | None = None,
) -> list[MutantCase]:
    """Every mutant of the selected built-in scenarios (default: all without `expected_outcome`)."""
    from rootproof.scenarios.loader import list_scenarios, load_ground_truth, load_scenario
    from rootproof.scenarios.yamlio import load_yaml

    chosen = list(kinds) if kinds else list(KINDS)
    unknown = [k for k in chosen if k not in KINDS]
    if unknown:
        raise UsageError(
            f"--mutations: unknown kind(s) {', '.join(unknown)} (expected some of {', '.join(KINDS)})"
        )
    if variants < 1:
        raise UsageError(f"--variants: expected at least 1 (got {variants})")
    folders = list_scenarios()
    if scenarios:
        by_id = {f.name: f for f in folders}
        missing = [s for s in scenarios if s not in by_id]
        if missing:
            raise UsageError(
                f"--scenarios: no built-in scenario {', '.join(missing)} (built-in: {', '.join(by_id)})"
            )
        folders = [by_id[s] for s in scenarios]
    cases: list[MutantCase] = []
    for folder in folders:
        truth = load_ground_truth(folder)
        if truth.expected_outcome is not None:
            continue
        scenario = load_scenario(folder)
        data = load_yaml(folder / _RESPONSES, f"{folder.name}/{_RESPONSES}").data or {}
        target = scenario_target(scenario, truth, data)
        for kind in chosen:
            for v in range(variants):
                m = mutate(kind, data, target, seed=seed, variant=v)
                if m is not None:
                    cases.append(MutantCase(scenario_id=scenario.id, source=folder, truth=truth, mutation=m))
    return cases


def _write(case: MutantCase, root: Path, n: int) -> Path:
    folder = root / f"{n:05d}" / case.scenario_id
    (folder / "snapshot").mkdir(parents=True)
    for name in _COPIED:
        if (case.source / name).is_file():
            shutil.copyfile(case.source / name, folder / name)
    (folder / _RESPONSES).write_text(dump_responses(case.mutation.data), encoding="utf-8")
    return folder


# ---------------------------------------------------------------------------------------------
# Running and judging
# ---------------------------------------------------------------------------------------------


def _rc_name(rc: dict[str, str] | None) -> str | None:
    return f"{rc['component']}/{rc['mechanism']}" if rc else None


def _verdict(case: MutantCase) -> dict[str, Any]:
    data = case.result or {"scenario_id": case.scenario_id, "error": "not run"}
    obs = CaseObservation.from_dict(data)
    truth = case.truth
    gt = truth.root_cause
    expected = f"{gt.component}/{gt.mechanism}" if truth.fault and gt is not None else None
    m = case.mutation
    row: dict[str, Any] = {
        "scenario": case.scenario_id,
        "mutation": m.kind,
        "variant": m.variant,
        "form": m.form,
        "wrong_signal": m.wrong.name,
        "planted": m.planted[0][:240],
        "fault": truth.fault,
    }
    if obs.error is not None:
        row.update(
            release_outcome=None,
            published_root_cause=None,
            expected_root_cause=expected,
            false_confident=False,
            survived=False,
            error=obs.error,
        )
        return row
    score = score_case(truth, obs)
    published = _rc_name(score.root_cause)
    row.update(
        release_outcome=obs.release_outcome,
        fallback_type=obs.fallback_type,
        guard_codes=sorted(set(obs.guard_codes)),
        published_root_cause=published,
        expected_root_cause=expected,
        false_confident=score.false_confident,
        survived=bool(
            truth.fault
            and gt is not None
            and score.root_cause is not None
            and gt.accepts(score.root_cause["component"], score.root_cause["mechanism"])
        ),
    )
    if obs.ground_truth_reads:
        row["ground_truth_reads"] = list(obs.ground_truth_reads)
    return row


def summarize(rows: list[dict[str, Any]], *, seed: int, seconds: float, jobs: int) -> dict[str, Any]:
    """The JSON summary of judged cases (keys in docs/evaluation.md)."""
    fault = [r for r in rows if r["fault"]]
    by_mutation: dict[str, dict[str, int]] = {}
    for kind in KINDS:
        mine = [r for r in rows if r["mutation"] == kind]
        if mine:
            by_mutation[kind] = {
                "runs": len(mine),
                "fault_runs": sum(1 for r in mine if r["fault"]),
                "false_confident": sum(1 for r in mine if r["false_confident"]),
                "survived": sum(1 for r in mine if r["survived"]),
            }
    survived = sum(1 for r in fault if r["survived"])
    false_confident = sum(1 for r in rows if r["false_confident"])
    errors = [r for r in rows if r.get("error")]
    gt_reads = sum(1 for r in rows if r.get("ground_truth_reads"))
    survived_rate = round(survived / len(fault), 4) if fault else 0.0
    failed = []
    if len(rows) < MIN_RUNS:
        failed.append(f"runs {len(rows)} < {MIN_RUNS}")
    if false_confident:
        failed.append(f"false_confident {false_confident} > 0")
    if survived_rate < MIN_SURVIVED_RATE:
        failed.append(f"survived_rate {survived_rate} < {MIN_SURVIVED_RATE}")
    if errors:
        failed.append(f"{len(errors)} run(s) failed")
    if gt_reads:
        failed.append(f"{gt_reads} run(s) read the ground truth")
    return {
        "seed": seed,
        "runs": len(rows),
        "fault_runs": len(fault),
        "control_runs": len(rows) - len(fault),
        "false_confident": false_confident,
        "survived": survived,
        "survived_rate": survived_rate,
        "by_mutation": by_mutation,
        "false_confident_by_signal": dict(
            sorted(Counter(r["wrong_signal"] for r in rows if r["false_confident"]).items())
        ),
        "errors": len(errors),
        "seconds": round(seconds, 1),
        "jobs": jobs,
        "targets": {"met": not failed, "failed": failed},
        "cases": rows,
    }


def run_adversarial(
    *,
    settings: Settings,
    seed: int = 0,
    jobs: int = 1,
    variants: int = DEFAULT_VARIANTS,
    scenarios: Sequence[str] | None = None,
    kinds: Sequence[str] | None = None,
    progress: ProgressFn | None = None,
) -> dict[str, Any]:
    """Build every mutant, run each in a worker process, judge it; return the JSON summary.

    Args:
        settings: the base settings; the runs use the offline planner and judge and a trace
            store in a temporary folder whatever they say.
        seed: seeds every mutation (the same seed gives the same mutants).
        jobs: worker processes (≥ 1; every run happens in a worker, even at 1).
        variants: variants of each kind per scenario.
        scenarios: built-in scenario ids (default: all without `expected_outcome`).
        kinds: mutation kinds (default: all of `KINDS`).
        progress: called with (done, total).

    Raises `UsageError` for an unknown scenario or kind, or `jobs` < 1.
    """
    from rootproof.eval.snapshot import _init_worker, run_case

    if jobs < 1:
        raise UsageError(f"--jobs: expected at least 1 (got {jobs})")
    cases = build_cases(seed=seed, variants=variants, scenarios=scenarios, kinds=kinds)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rootproof-adversarial-") as tmp:
        root = Path(tmp)
        run_settings = settings.model_copy(
            update={"model": "offline", "judge": "offline", "database_url": f"sqlite:///{root / 'trace.db'}"}
        )
        for n, case in enumerate(cases):
            case.folder = _write(case, root, n)
        if progress is not None:
            progress(0, len(cases))
        pool = cf.ProcessPoolExecutor(
            max_workers=jobs, mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker
        )
        try:
            futures = {
                pool.submit(
                    run_case, {"folder": str(c.folder), "settings": run_settings, "model": "offline"}
                ): c
                for c in cases
            }
            for done, fut in enumerate(cf.as_completed(futures), start=1):
                case = futures[fut]
                try:
                    case.result = fut.result()
                except Exception as exc:  # the worker died (BrokenProcessPool) or could not pickle
                    case.result = {
                        "scenario_id": case.scenario_id,
                        "error": f"worker crashed: {type(exc).__name__}: {exc}",
                    }
                if progress is not None:
                    progress(done, len(cases))
        except KeyboardInterrupt:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
    rows = [_verdict(c) for c in cases]
    return summarize(rows, seed=seed, seconds=time.perf_counter() - start, jobs=jobs)
