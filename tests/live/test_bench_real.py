"""The live benchmark's real scenarios through `rootproof eval live`, as a user runs it.

tests/live/test_bench.py exercises the runner with a test-only fault; these tests run the real
ones (`pg-row-lock`, `order-pool-leak`) from the command line, in a subprocess, into a root of
their own:

- `--approve listed` on pg-row-lock: exit 0, the case passes (score ≥ 90), exactly
  `terminate_blocking_session` executed and verified, every phase ok, residue 0, and nothing of
  the run left (processes, listeners, run folder);
- `--approve none` (in test_bench_real_none.py, a module of its own so that the two run on
  different workers);
- SIGKILL of the eval process during the diagnosis (its environment's processes are detached and
  left behind, as a real kill leaves them): the next preflight cleans that stale run — every
  recorded pid gone, its ports free, its folder removed, no process with the folder in its
  command line or working folder.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rootproof.live import LiveConfig, list_runs
from rootproof.live.bench.runner import PASS_SCORE
from rootproof.live.env import LiveEnvironment
from rootproof.live.layout import COMPONENTS, RunPaths, read_run, run_folders
from rootproof.live.procs import is_running, listening
from rootproof.live.runs import records_of
from tests.services import inherited_env

from .bench_real_support import assert_nothing_left, eval_live, mentioning, one_case_ok
from .support import ROOT, need_binaries, reap, root_cleaned_up, wait_for

pytestmark = [pytest.mark.services, pytest.mark.slow]

HOLDER_PIDFILE = "fault_pg_row_lock.pid"


root = pytest.fixture(root_cleaned_up)


def test_pg_row_lock_approve_listed_terminates_the_blocker_and_passes(root: Path) -> None:
    need_binaries(COMPONENTS)
    p, doc = eval_live(root, "--scenario", "pg-row-lock", "--approve", "listed", timeout=150)
    assert doc["kind"] == "live" and doc["approval"] == "listed"
    assert doc["summary"]["scenarios"] == 1 and doc["summary"]["residue"] == 0
    assert doc["summary"]["infra_invalid"] == 0 and doc["summary"]["hard_gate_violations"] == 0
    (case,) = doc["scenarios"]
    assert case["scenario"] == "pg-row-lock"
    assert case["passed"] is True and case["score"] >= PASS_SCORE, (case["failure_class"], case["failure_reasons"])
    assert case["root_cause"] == {"component": "postgresql", "mechanism": "row_lock_contention"}
    one_case_ok(case)

    rec = case["recovery"]
    assert rec["contract"] == "executed_recovery" and rec["approval"] == "listed"
    executed = [a for a in rec["actions"] if a["executed"]]
    assert [a["action"] for a in executed] == ["terminate_blocking_session"], rec["actions"]
    (action,) = executed
    assert action["ok"] and action["approved"] and action["whitelisted"]
    assert action["preconditions"] and all(c["ok"] for c in action["preconditions"])
    assert str(case["checks"]["confirm"][0]["detail"]).count("waiters blocked by") == 1
    assert rec["executed"] is True and rec["verified"] is True
    verify = {c["name"]: c["ok"] for c in case["checks"]["verify"]}
    assert verify == {"probe_locked_sku": True, "no_ungranted_locks": True, "blocker_gone": True}
    assert case["phases"]["verify"]["detail"].startswith("recovered: ")
    assert case["dimensions"]["recovery_verification"]["score"] == 15
    assert "PASS" in p.stdout and "residue 0" in p.stdout
    assert_nothing_left(root, doc)


def _diagnosis_started(root: Path) -> Path | None:
    """The run folder whose fault holder is recorded and whose diagnosis subprocess runs."""
    for folder in run_folders(root):
        if not (folder / "pids" / HOLDER_PIDFILE).exists():
            continue
        if any("diagnose" in cmd and "--targets" in cmd for _pid, cmd in mentioning(folder)):
            return folder
    return None


def test_a_killed_eval_leaves_its_run_and_the_next_preflight_cleans_it(root: Path) -> None:
    need_binaries(COMPONENTS)
    env = inherited_env() | {
        "ROOTPROOF_HOME": str(root / "home"),
        "ROOTPROOF_LIVE_ROOT": str(root),
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    p = subprocess.Popen(
        [sys.executable, "-m", "rootproof.cli", "eval", "live", "--scenario", "pg-row-lock", "--approve", "listed"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=ROOT,
        start_new_session=True,
    )
    second: LiveEnvironment | None = None
    try:
        found: list[Path] = []

        def started() -> bool:
            assert p.poll() is None, f"eval live exited ({p.returncode}) before its diagnosis started"
            folder = _diagnosis_started(root)
            if folder is not None:
                found.append(folder)
            return folder is not None

        wait_for("the fault holder recorded and the diagnosis started", started, timeout_s=90)
        folder = found[0]
        os.kill(p.pid, signal.SIGKILL)  # the eval process only: what it started stays behind
        assert p.wait(timeout=10) == -signal.SIGKILL

        paths = RunPaths(folder)
        records = records_of(paths)
        run = read_run(folder)
        assert run is not None
        ports = sorted(set(run.spec.ports.values()))
        assert folder.exists()
        assert "fault_pg_row_lock" in records and "postgres" in records, sorted(records)
        alive = {name for name, r in records.items() if is_running(r)}
        assert {"postgres", "fault_pg_row_lock", "diagnose"} <= alive, alive  # the diagnosis: pids/diagnose.pid
        assert listening(ports), "the killed run's services should still listen"
        (info,) = [r for r in list_runs(root) if r.folder == folder]
        assert info.stale is not None and "owner" in info.stale

        second = LiveEnvironment(LiveConfig(root=root))
        report = second.preflight()
        cleaned = {c.run_id: c for c in report.cleaned}
        assert folder.name in cleaned, report.as_dict()
        assert cleaned[folder.name].residue == []
        assert {"postgres", "fault_pg_row_lock", "diagnose"} <= set(cleaned[folder.name].stopped)
        running = [f"{name} (pid {r.pid})" for name, r in records.items() if is_running(r)]
        assert running == [], f"still running after the preflight: {running}"
        assert listening(ports) == [], f"still listened on: {listening(ports)}"
        assert not folder.exists(), sorted(x.name for x in folder.iterdir())
        left = mentioning(folder)
        assert left == [], f"processes naming the killed run's folder: {left}"
    finally:
        reap(p)
        if second is not None:
            second.stop()  # a preflight only claims a folder and ports: nothing else to stop
