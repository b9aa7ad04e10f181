"""The live benchmark's five faults on real servers, each through inject → confirm → the
recovery executor (approval `listed`) → verify (held a few seconds) → cleanup → no residue;
and the executor's refusals: approval `none` runs nothing (the fault is still confirmed after
it), a precondition that fails (a wrong pid in the evidence) runs nothing, a proposal outside
the whitelist is never run.

One environment for the module; each test leaves it as it found it (its fault cleaned up).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from rootproof.live import LiveConfig, LiveEnvironment
from rootproof.live.bench.checks import Check, hold
from rootproof.live.bench.faults import (
    FAULTS,
    Fault,
    NginxUpstreamTimeout,
    OrderPoolLeak,
    PgDeadlock,
    PgRowLock,
    RedisMaxclients,
)
from rootproof.live.bench.recovery import RecoveryExecutor, evidence_pids
from rootproof.live.layout import COMPONENTS, read_pidfiles
from rootproof.live.procs import is_running

from .support import fresh_root, need_binaries, remove_root

pytestmark = [pytest.mark.services, pytest.mark.slow]


@pytest.fixture(scope="module")
def env() -> Iterator[LiveEnvironment]:
    need_binaries(COMPONENTS)
    root = fresh_root()
    try:
        with LiveEnvironment(LiveConfig(root=root)) as live:
            yield live
            assert live.stop().residue == []
    finally:
        remove_root(root)


def held(fault: Fault, seconds: float = 3.0) -> Check:
    """The fault's verify checks, all of them, held `seconds`."""

    def once() -> Check:
        checks = fault.verify()
        return Check(
            name="verify",
            ok=all(c.ok for c in checks),
            detail="; ".join(f"{c.name}={'ok' if c.ok else 'FAILED'} ({c.detail})" for c in checks),
        )

    return hold(once, seconds=seconds)


def finish(fault: Fault) -> None:
    """Cleanup succeeds, twice, and leaves nothing."""
    assert all(c.ok for c in fault.cleanup()), fault.cleanup()
    assert all(c.ok for c in fault.cleanup())  # idempotent
    assert fault.residue() == []
    assert fault.component not in read_pidfiles(fault.env.paths)


def test_the_registry_names_the_five_scenarios() -> None:
    assert sorted(FAULTS) == [
        "nginx-upstream-timeout",
        "order-pool-leak",
        "pg-deadlock",
        "pg-row-lock",
        "redis-maxclients",
    ]
    assert all(FAULTS[name].name == name for name in FAULTS)


def test_evidence_pids_prefers_what_names_the_blocker() -> None:
    assert evidence_pids('{"pid": 11, "blocking_pids": [42]}') == {42}
    assert evidence_pids("DETAIL:  Process holding the lock: 77. Wait queue: 80.") == {77}
    assert evidence_pids('{\\"pid\\":1234, \\"state\\": \\"idle in transaction\\"}') == {1234}
    assert evidence_pids("nothing here") == set()


def test_pg_row_lock_is_recovered_only_when_approved_and_the_evidence_names_the_blocker(
    env: LiveEnvironment,
) -> None:
    fault = PgRowLock(env)
    try:
        fault.inject()
        blocker = fault.facts["blocker_pid"]
        assert set(fault.facts) >= {"blocker_pid", "blocker_backend_start", "skus", "application_name"}
        assert fault.facts["application_name"] == "stock-recount" and fault.facts["skus"] == [
            "SKU-0003",
            "SKU-0007",
            "SKU-0011",
        ]
        assert is_running(read_pidfiles(env.paths)[fault.component])
        confirmed = fault.confirm()
        assert confirmed.ok, confirmed
        proposal = [{"action": "terminate_blocking_session", "target": f"pid {blocker}"}]
        evidence = f'DETAIL:  Process holding the lock: {blocker}. Wait queue: 4242.\n{{"pid": {blocker}, "state": "idle in transaction"}}'

        (none,) = RecoveryExecutor(fault, approval="none", executable=("terminate_blocking_session",)).run(
            proposal, None, evidence
        )
        assert (none.whitelisted, none.approved, none.executed) == (
            True,
            False,
            False,
        ) and "not approved" in none.result
        (wrong,) = RecoveryExecutor(fault, approval="listed", executable=("terminate_blocking_session",)).run(
            [{"action": "terminate_blocking_session"}],
            None,
            "DETAIL:  Process holding the lock: 999999. Wait queue: .",
        )
        assert wrong.approved and not wrong.executed
        assert [c.name for c in wrong.preconditions if not c.ok] == ["evidence_names_blocker"], (
            wrong.as_dict()
        )
        assert fault.confirm(timeout_s=15).ok  # nothing ran: the fault is still there

        records = RecoveryExecutor(fault, approval="listed", executable=("terminate_blocking_session",)).run(
            [{"action": "drop_table"}, *proposal, {"action": "restart_service"}], None, evidence
        )
        assert [(r.action, r.whitelisted, r.approved, r.executed) for r in records] == [
            ("drop_table", False, False, False),
            ("terminate_blocking_session", True, True, True),
            ("restart_service", True, False, False),
        ]
        assert records[1].ok and all(c.ok for c in records[1].preconditions), records[1].as_dict()
        assert [c.name for c in records[1].preconditions] == [
            "evidence_names_blocker",
            "blocker_same_backend",
            "blocker_idle_in_transaction",
            "blocker_not_order_service",
        ]
        json.dumps([r.as_dict() for r in records])
        verified = held(fault)
        assert verified.ok, verified
    finally:
        finish(fault)


def test_pg_deadlock_is_detected_logged_and_its_aborted_work_commits_on_retry(env: LiveEnvironment) -> None:
    fault = PgDeadlock(env)
    try:
        fault.inject()
        assert (
            fault.facts["deadlocks"] >= 1
            and len(fault.facts["session_pids"]) == 2
            and fault.facts["skus"] == ["SKU-0005", "SKU-0009"]
        )
        confirmed = fault.confirm()
        assert confirmed.ok, confirmed
        lines = [json.loads(line) for line in (env.folder / fault.facts["log_file"]).read_text().splitlines()]
        errors = [d for d in lines if d["level"] == "ERROR"]
        assert len(errors) == fault.facts["deadlocks"]
        assert (
            errors[0]["service"] == "inventory-sync"
            and errors[0]["sqlstate"] == "40P01"
            and "deadlock detected" in errors[0]["message"]
        )
        assert (
            "Process " in errors[0]["detail"] and "psycopg.errors.DeadlockDetected" in errors[0]["exception"]
        )
        (rec,) = RecoveryExecutor(fault, approval="listed", executable=("no_action",)).run(
            [{"action": "no_action"}], None, ""
        )
        assert rec.executed and rec.ok
        verified = held(fault)
        assert verified.ok, verified
    finally:
        finish(fault)


def test_redis_maxclients_refuses_new_clients_until_the_idle_ones_are_killed(env: LiveEnvironment) -> None:
    fault = RedisMaxclients(env)
    try:
        fault.inject()
        assert (
            len(fault.facts["client_ids"]) >= 50
            and fault.facts["maxclients"] == 64
            and fault.facts["client_name"] == "cart-worker"
        )
        confirmed = fault.confirm()
        assert confirmed.ok, confirmed
        assert env.probe().ok  # the cache's errors are swallowed: orders still work
        executor = RecoveryExecutor(fault, approval="none", executable=("kill_idle_clients",))
        assert [r.executed for r in executor.run([{"action": "kill_idle_clients"}], None, "")] == [False]
        time.sleep(max(0.0, fault.idle_min_s + 0.5 - (time.time() - _epoch(fault.facts["idle_since"]))))
        (rec,) = RecoveryExecutor(fault, approval="listed", executable=("kill_idle_clients",)).run(
            [{"action": "kill_idle_clients", "target": "cart-worker"}], None, ""
        )
        assert rec.executed and rec.ok, rec.as_dict()
        verified = held(fault)
        assert verified.ok, verified
    finally:
        finish(fault)


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso).timestamp()


def test_nginx_upstream_timeout_is_proposal_only_and_nothing_changes(env: LiveEnvironment) -> None:
    fault = NginxUpstreamTimeout(env)
    try:
        fault.inject()
        assert (
            fault.facts["delay_s"] == 7
            and fault.facts["nginx_master_pid"] == env.pids()["nginx"]
            and len(fault.facts["nginx_conf_sha256"]) == 64
        )
        confirmed = fault.confirm()
        assert confirmed.ok, confirmed
        (rec,) = RecoveryExecutor(fault, approval="listed", executable=()).run(
            [{"action": "restart_service", "target": "nginx"}], None, ""
        )
        assert rec.approved is False and rec.executed is False
        verified = held(fault, seconds=2)
        assert verified.ok, verified
    finally:
        finish(fault)
    assert (
        "upstream timed out (110: Connection timed out) while reading response header from upstream"
        in env.paths.nginx_error_log.read_text()
    )


def test_order_pool_leak_is_recovered_by_a_restart(env: LiveEnvironment) -> None:
    fault = OrderPoolLeak(env)
    try:
        fault.inject()
        assert fault.facts == {"pool_size": 5, "service_pid": env.pids()["order_service"]}
        confirmed = fault.confirm()
        assert confirmed.ok, confirmed
        (rec,) = RecoveryExecutor(fault, approval="listed", executable=("restart_service",)).run(
            [{"action": "restart_service", "target": "order-service"}], None, ""
        )
        assert (
            rec.executed
            and rec.ok
            and [c.name for c in rec.preconditions] == ["target_is_order_service", "pool_exhausted"]
        ), rec.as_dict()
        verified = held(fault)
        assert verified.ok, verified
    finally:
        finish(fault)
