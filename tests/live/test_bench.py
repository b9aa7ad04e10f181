"""The live benchmark runner (`rootproof eval live`) on real processes.

The five faults are built elsewhere (`rootproof.live.bench.faults`); these tests use a small
real fault of their own (tests/live/_bench_fault.py), registered under a test name: the order
service's delay switch above nginx's `proxy_read_timeout` (real 504s and real `upstream timed
out` lines), confirmed by the business probe, cleaned by resetting the switches, verified by
nginx's config and master pid being unchanged (the `proposal_only` contract: nothing changes).

- one scenario through every phase via the Python API, with a live run of another owner beside
  it (the audit finds it untouched), the diagnosis a real `rootproof diagnose` subprocess with
  the offline model, the eval run and its case persisted;
- SIGTERM during the diagnosis: the run is cleaned up and audited, the eval run `cancelled`;
- `eval live --scenario <unknown>`: exit 2, one line naming it and the known names;
- a preflight broken on purpose (a binary override pointing nowhere: `LiveConfig.binaries`) is
  `infra_invalid`, not a failed case.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rootproof.live import LiveConfig, list_runs
from rootproof.live.bench.faults import FAULTS
from rootproof.live.bench.report import render_html, report_json
from rootproof.live.bench.runner import LIVE_DIMENSIONS, PHASES, LiveTiming, run_live
from rootproof.live.bench.scenarios import SCENARIOS
from rootproof.live.layout import COMPONENTS, RunPaths, read_pidfiles
from rootproof.live.procs import is_running
from rootproof.settings import load_settings
from rootproof.store.sql import SqlTraceStore
from tests.service.support import SlowModelServer
from tests.services import inherited_env

from ._bench_fault import TEST_NAME, NginxTimeoutFault, executor, scenario
from .support import (
    ROOT,
    cli,
    need_binaries,
    owner,
    read_until,
    reap,
    root_cleaned_up,
)

pytestmark = [pytest.mark.services, pytest.mark.slow]


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(FAULTS, TEST_NAME, NginxTimeoutFault)
    monkeypatch.setitem(SCENARIOS, TEST_NAME, scenario())


root = pytest.fixture(root_cleaned_up)


def _why(settings: Any, case: Any) -> str:
    """A failed case's reasons with what its run concluded and called (the report's limitations
    say why no root cause was confirmed)."""
    trace = SqlTraceStore(settings.resolved_database_url()).trace(str(case.run_id)) or {}
    run = trace.get("run") or {}
    content = run.get("content") if isinstance(run.get("content"), dict) else {}
    report = content.get("report") if isinstance(content.get("report"), dict) else {}
    calls = [
        f"{i.get('tool_name')}({i.get('input_params', {}).get('kind', '')}) {i.get('status')}"
        + (f" {i.get('refusal_code')} {i.get('duration_ms')} ms: {i.get('message') or i.get('error_message')}" if i.get("refusal_code") else "")
        for i in trace.get("invocations") or []
    ]
    return f"{case.failure_reasons}; limitations: {report.get('limitations')}; calls: {calls}"


def test_one_scenario_runs_every_phase_scores_audits_and_persists(root: Path, registered: None) -> None:
    need_binaries(COMPONENTS)
    other = owner(root, "redis")  # another live run under the same root: the audit must find it untouched
    try:
        other_id = read_until(other, "READY").split()[1]
        other_records = read_pidfiles(RunPaths(root / other_id))
        settings = load_settings(data_dir=root / "home", live_root=root, model="offline")
        # Four seconds for the fault's 504s to pile up before the diagnosis reads them (two were
        # sometimes too few under the whole suite's load: one timeout line is not two records).
        timing = LiveTiming(baseline_hold_s=2, observe_wait_s=4, verify_hold_s=3)
        asked = "Users are complaining. What is going on?"  # the wording benchmark: one more question
        suite = run_live(
            [TEST_NAME],
            settings=settings,
            config=LiveConfig(root=root),
            timing=timing,
            executor=executor(),
            questions=[asked],
        )
        (case,) = suite.cases
        assert case.infra_invalid is None, case.infra_invalid
        assert {n: p.ok for n, p in case.phases.items()} == dict.fromkeys(PHASES, True), {
            n: p.detail for n, p in case.phases.items()
        }
        assert all(p.duration_ms > 0 for n, p in case.phases.items() if n != "recover")
        assert set(case.dimensions) == set(LIVE_DIMENSIONS)
        assert all(0 <= d.score <= d.max == LIVE_DIMENSIONS[k] for k, d in case.dimensions.items())
        assert case.score == round(sum(d.score for d in case.dimensions.values()), 2)
        assert case.dimensions["fault_confirmed"].score == 10
        assert case.dimensions["recovery_verification"].score == 15  # proposal_only: nothing changed, held
        assert (
            case.residue == []
            and "residue" not in case.hard_gates
            and "cleanup_failed" not in case.hard_gates
        )
        assert case.audit["other_runs"] == [other_id] and case.audit["touched_other_runs"] == []
        assert all(is_running(r) for r in other_records.values())
        assert "scope_isolation" not in case.hard_gates and "ground_truth_read" not in case.hard_gates
        assert case.root_cause == {"component": "nginx", "mechanism": "upstream_timeout"}, _why(settings, case)
        assert (
            case.recovery_dict()["executed"] is False and case.recovery_dict()["contract"] == "proposal_only"
        )
        assert (
            suite.summary["scenarios"] == 1
            and suite.summary["infra_invalid"] == 0
            and suite.summary["residue"] == 0
        )
        assert not (root / str(case.live_run_id)).exists()

        store = SqlTraceStore(settings.resolved_database_url())
        stored = store.get_eval_run(suite.eval_id)
        assert stored is not None and stored["kind"] == "live" and stored["state"] in ("passed", "failed")
        (row,) = stored["cases"]
        assert (
            row["case_id"] == f"live-{TEST_NAME}"
            and row["run_id"] == case.run_id
            and row["score"] == case.score
        )
        assert set(row["dimensions"]) == set(LIVE_DIMENSIONS) and row["tool_audit"]
        kept = stored["summary"]["cases"][f"live-{TEST_NAME}"]
        assert set(kept["phases"]) == set(PHASES) and all(
            p["duration_ms"] >= 0 for p in kept["phases"].values()
        )
        assert kept["recovery"]["actions"] == [r.as_dict() for r in case.recovery]
        assert store.trace(str(case.run_id)) is not None  # the diagnosis landed in the evaluation's store
        doc = report_json(suite)
        assert doc["kind"] == "live" and doc["scenarios"][0]["phases"].keys() == set(PHASES)
        assert {"scenarios", "mean_score", "pass_rate", "infra_invalid", "residue"} <= doc["summary"].keys()
        # The same injection answered the benchmark's question too; recovery ran once.
        (q,) = doc["scenarios"][0]["questions"]
        assert q["question"] == asked and q["run_id"] not in (None, case.run_id)
        assert q["agrees"] == (q["root_cause"] == case.root_cause) and q["false_confident"] is False
        s = doc["summary"]
        assert s["questions"] == 1 and s["question_runs"] == 1 and s["question_agreement"] in (0.0, 1.0)
        assert s["false_confident_rate"] == 0.0 and len(case.recovery) == len(case.recovery_dict()["actions"])
        assert f'id="live-{TEST_NAME}"' in render_html(suite)
    finally:
        reap(other)


def test_sigterm_during_the_diagnosis_cleans_up_and_records_the_eval_cancelled(root: Path) -> None:
    need_binaries(COMPONENTS)
    # The diagnosis asks a model server that holds every request for a minute: whenever the
    # signal arrives after the phase began (however loaded the machine), the diagnosis is running.
    with SlowModelServer(hold_s=60) as model:
        env = inherited_env() | {"PYTHONPATH": os.pathsep.join(sys.path)} | model.env()
        script = str(ROOT / "tests" / "live" / "_bench_fault.py")
        p = subprocess.Popen(
            [sys.executable, script, str(root), str(root / "home")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            read_until(p, "DIAGNOSE")
            p.send_signal(signal.SIGTERM)
            assert p.wait(timeout=60) == 128 + signal.SIGTERM, p.stderr.read() if p.stderr else ""
        finally:
            reap(p)
    assert list_runs(root) == []  # stopped and removed, folder and all
    store = SqlTraceStore(f"sqlite:///{root / 'home' / 'rootproof.db'}")
    (run,) = store.list_eval_runs(5)
    stored = store.get_eval_run(run["eval_id"])
    assert stored is not None and stored["state"] == "cancelled" and stored["kind"] == "live"
    kept = stored["summary"]["cases"][f"live-{TEST_NAME}"]
    assert kept["cancelled"] and kept["phases"]["diagnose"]["ok"] is False
    assert kept["phases"]["cleanup"]["ok"] and kept["phases"]["audit"]["ok"], kept["phases"]
    assert stored["cases"][0]["failure_class"] == "cancelled" and stored["cases"][0]["hard_gates"] == []


def test_unknown_scenario_is_one_line_and_exit_2(root: Path) -> None:
    p = cli("eval", "live", "--scenario", "no-such-fault", "--json", "-", root=root)
    assert p.returncode == 2, p.stderr
    assert p.stdout == ""
    (line,) = p.stderr.strip().splitlines()
    assert "no-such-fault" in line and all(
        name in line
        for name in (
            "pg-row-lock",
            "pg-deadlock",
            "redis-maxclients",
            "nginx-upstream-timeout",
            "order-pool-leak",
        )
    )


def test_a_broken_preflight_is_infra_invalid_not_a_failure(root: Path, registered: None) -> None:
    settings = load_settings(data_dir=root / "home", live_root=root, model="offline")
    config = LiveConfig(root=root, binaries={"redis-server": str(root / "no-such-redis-server")})
    suite = run_live([TEST_NAME], settings=settings, config=config, timing=LiveTiming(baseline_hold_s=1))
    (case,) = suite.cases
    assert (
        case.infra_invalid is not None
        and case.infra_invalid.startswith("preflight: ")
        and "redis-server" in case.infra_invalid
    )
    assert case.failure_class == "infra_invalid" and not case.passed and case.score == 0
    assert case.phases["preflight"].ok is False
    assert all(
        case.phases[p].ok is None for p in ("baseline", "inject", "observe", "diagnose", "recover", "verify")
    )
    assert case.phases["cleanup"].ok and case.phases["audit"].ok and case.residue == []
    assert (
        suite.state == "infra_invalid"
        and suite.summary["infra_invalid"] == 1
        and suite.summary["pass_rate"] == 0.0
    )
    stored = SqlTraceStore(settings.resolved_database_url()).get_eval_run(suite.eval_id)
    assert (
        stored is not None
        and stored["state"] == "infra_invalid"
        and stored["cases"][0]["failure_class"] == "infra_invalid"
    )
    assert list_runs(root) == []  # nothing claimed is left
