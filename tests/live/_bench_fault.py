"""The live benchmark tests' own fault (real, not one of the five): the order service's delay
switch above nginx's `proxy_read_timeout`, registered under a test name by `register()`.
Also run as a script by the signal test: `python tests/live/_bench_fault.py ROOT HOME` runs the
scenario (exit 128 + signal number when SIGINT/SIGTERM stops it; `DIAGNOSE` is printed when the
diagnose phase starts) with the model `ROOTPROOF_MODEL` names (default offline).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
import time
from pathlib import Path
from typing import Any

from rootproof.live.bench.checks import Check
from rootproof.live.bench.faults import FAULTS, Fault
from rootproof.live.bench.recovery import RecoveryExecutor, RecoveryRecord
from rootproof.live.bench.scenarios import SCENARIOS, LiveScenario

TEST_NAME = "test-nginx-timeout"


class NginxTimeoutFault(Fault):
    """The order service answers after 7 s; nginx gives up after 5 s (504)."""

    name = TEST_NAME
    delay_s = 7.0

    def _sha(self) -> str:
        return hashlib.sha256(self.env.paths.nginx_conf.read_bytes()).hexdigest()

    def inject(self) -> None:
        self.facts["nginx_conf_sha256"] = self._sha()
        self.facts["nginx_pid"] = self.env.pids()["nginx"]
        self.env.order_admin().set_faults(delay_s=self.delay_s)
        self.facts["delay_s"] = self.delay_s

    def confirm(self, *, timeout_s: float = 30.0) -> Check:
        deadline = time.monotonic() + timeout_s
        while True:
            r = self.env.probe(timeout_s=10)
            if not r.ok and r.status == 504:
                return Check(name="probe_504", ok=True, detail=f"{r.step} 504 after {r.latency_ms:.0f} ms")
            if time.monotonic() > deadline:
                return Check(name="probe_504", ok=False, detail=f"{r.step} {r.status}")
            time.sleep(0.5)

    def verify(self) -> list[Check]:
        sha, pid = self._sha(), self.env.pids().get("nginx")
        return [
            Check(
                name="nginx_config_unchanged",
                ok=sha == self.facts["nginx_conf_sha256"],
                detail=f"sha256 {sha[:12]}",
            ),
            Check(name="nginx_master_unchanged", ok=pid == self.facts["nginx_pid"], detail=f"pid {pid}"),
        ]

    def cleanup(self) -> list[Check]:
        state = self.env.order_admin().reset()
        return [
            Check(
                name="switches_reset",
                ok=not state.get("leak") and not state.get("delay_s"),
                detail=str(state),
            )
        ]

    def residue(self) -> list[str]:
        state = self.env.order_admin().faults()
        return (
            []
            if not state["leak"] and not state["delay_s"] and not state["leaked_connections"]
            else [f"order service switches still set: {state}"]
        )


class NoneApprovalExecutor(RecoveryExecutor):
    """Stand-in while `RecoveryExecutor.run` is the contract's stub: what `--approve none`
    does (nothing runs; each proposal recorded)."""

    def run(
        self, proposals: list[dict[str, Any]], report: dict[str, Any] | None, evidence_text: str
    ) -> list[RecoveryRecord]:
        assert self.approval == "none", "the stand-in only knows approval none"
        return [
            RecoveryRecord(
                action=str(p.get("action")),
                target=str(p.get("target") or ""),
                whitelisted=False,
                approved=False,
                approval="none",
                result="approval none: recorded only",
            )
            for p in proposals
        ]


def executor() -> type[RecoveryExecutor] | None:
    """None (the real executor) once it is implemented, else the stand-in."""
    try:
        RecoveryExecutor(None, approval="none", executable=()).run([], None, "")  # type: ignore[arg-type]
    except NotImplementedError:
        return NoneApprovalExecutor
    return None


def scenario() -> LiveScenario:
    """The nginx-upstream-timeout scenario under the test name."""
    return dataclasses.replace(SCENARIOS["nginx-upstream-timeout"], name=TEST_NAME)


def register() -> None:
    """Put the fault and its scenario in the registries (the script's way; tests use monkeypatch)."""
    FAULTS[TEST_NAME] = NginxTimeoutFault
    SCENARIOS[TEST_NAME] = scenario()


def main() -> int:
    from rootproof.live import LiveConfig
    from rootproof.live.bench.runner import Interrupted, LiveTiming, run_live
    from rootproof.settings import load_settings

    root, home = Path(sys.argv[1]), Path(sys.argv[2])
    register()

    def progress(_name: str, phase: str, _done: int, _total: int) -> None:
        if phase == "diagnose":
            print("DIAGNOSE", flush=True)

    # The model the caller's environment names (the signal test points it at a model server that
    # holds every request, so the diagnosis is still running whenever the signal comes).
    settings = load_settings(data_dir=home, live_root=root, model=os.environ.get("ROOTPROOF_MODEL", "offline"))
    try:
        suite = run_live(
            [TEST_NAME],
            settings=settings,
            config=LiveConfig(root=root),
            timing=LiveTiming(baseline_hold_s=1, observe_wait_s=1),
            executor=executor(),
            progress=progress,
        )
    except Interrupted as exc:
        return 128 + exc.signum
    print(f"DONE {suite.eval_id}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
