"""The live benchmark's `--approve none` through `rootproof eval live`, as a user runs it, on
the real pg-row-lock and order-pool-leak: nothing executed, the verify phase holds the "nothing
changed" checks (`Fault.unchanged`: the blocker session and the leak still there right before
cleanup), cleanup and audit ok, residue 0. (A module of its own: it is the longest of the real
live-benchmark tests, and pytest-xdist gives a whole module to one worker.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from rootproof.live.layout import COMPONENTS

from .bench_real_support import assert_nothing_left, eval_live, one_case_ok
from .support import need_binaries, root_cleaned_up

pytestmark = [pytest.mark.services, pytest.mark.slow]


root = pytest.fixture(root_cleaned_up)


def test_approve_none_executes_nothing_and_verifies_nothing_changed(root: Path) -> None:
    need_binaries(COMPONENTS)
    _p, doc = eval_live(
        root, "--scenario", "pg-row-lock", "--scenario", "order-pool-leak", "--approve", "none", timeout=240
    )
    assert doc["approval"] == "none"
    assert doc["summary"]["scenarios"] == 2 and doc["summary"]["residue"] == 0
    assert doc["summary"]["infra_invalid"] == 0
    cases = {c["scenario"]: c for c in doc["scenarios"]}
    assert set(cases) == {"pg-row-lock", "order-pool-leak"}
    expected = {
        "pg-row-lock": {"blocker_still_open", "holder_running"},
        "order-pool-leak": {"service_not_restarted", "pool_still_exhausted", "leak_switch_on"},
    }
    for name, case in cases.items():
        one_case_ok(case)
        rec = case["recovery"]
        assert rec["approval"] == "none" and rec["executed"] is False and rec["approved"] is False
        assert rec["actions"], f"{name}: no proposal recorded"
        assert all(a["executed"] is False and a["approved"] is False for a in rec["actions"]), rec["actions"]
        assert all(a["approval"] == "none" for a in rec["actions"])
        verify = case["checks"]["verify"]
        assert {c["name"] for c in verify} == expected[name], verify
        assert all(c["ok"] for c in verify), verify
        assert rec["verified"] is True
        assert case["phases"]["verify"]["detail"].startswith("nothing changed: ")
        dim = case["dimensions"]["recovery_verification"]
        assert dim["score"] == 15 and dim["reasons"][0].startswith("nothing changed: "), dim
        assert case["dimensions"]["recovery_policy"]["reasons"][-1].startswith("nothing executed")
    # The fault was still held at verify, right before cleanup: the blocker session with the
    # pid and backend start the fault recorded; the cleanup then stopped the holder.
    row = cases["pg-row-lock"]
    (blocker,) = [c for c in row["checks"]["verify"] if c["name"] == "blocker_still_open"]
    assert "idle in transaction" in blocker["detail"]
    cleanup = {c["name"]: c for c in row["checks"]["cleanup"]}
    assert cleanup["holder_stopped"]["ok"] and "stopped" in cleanup["holder_stopped"]["detail"]
    pool = cases["order-pool-leak"]
    (svc,) = [c for c in pool["checks"]["verify"] if c["name"] == "service_not_restarted"]
    assert "pid" in svc["detail"]
    assert_nothing_left(root, doc)
