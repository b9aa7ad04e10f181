"""The live benchmark's five faults: inject, confirm, verify, cleanup, residue.

A fault is held by processes outside the agent's reach (holder processes started by the
benchmark, `rootproof.live.bench.holder`, or the order service's admin switch); the agent only
observes them through the targets file. Every holder process is recorded in the run's
`pids/fault_<scenario>.pid` (a `ProcessRecord`, e.g. `fault_pg_row_lock`), so `rootproof live
down` and the next preflight's stale-run cleanup stop it like any component. Holders work in
`<run>/faults/` (their state files and stdout), a folder the targets file does not name.

Facts the ground truth and the recovery preconditions need (the blocker's pid, the idle
clients' ids, …) are in `Fault.facts` after `inject` (JSON values only).

| scenario | held by | facts |
|---|---|---|
| `pg-row-lock` | holder `row-lock`: `stock-recount` idle in transaction on SKU-0003/0007/0011 | `blocker_pid`, `blocker_backend_start`, `skus`, `application_name`, `holder_pid` |
| `pg-deadlock` | holder `deadlock`: two `inventory-sync` sessions, 3 rounds of opposite lock order | `deadlocks`, `session_pids`, `skus`, `aborted`, `application_name`, `deadlocks_before`, `log_file`, `holder_pid` |
| `redis-maxclients` | holder `redis-clients`: idle `cart-worker` clients up to `maxclients` | `client_ids`, `client_name`, `idle_since`, `maxclients`, `holder_pid` |
| `nginx-upstream-timeout` | switch `delay_s=7` (> proxy_read_timeout 5 s) | `nginx_conf_sha256`, `nginx_master_pid`, `delay_s` |
| `order-pool-leak` | switch `leak=True` until the pool is exhausted | `pool_size`, `service_pid` |

Redis at `maxclients` refuses every new connection, the recovery's too, and Redis 7 reserves
no slot for an operator: `RedisMaxclients.inject` therefore opens the rig's own admin
connection (client name `rootproof-bench`) before the leak starts, as an operator console
already connected, and the checks and `kill_idle_clients` use it (`Fault.redis_call`).
"""

from __future__ import annotations

import hashlib
import json
import re
import signal
import subprocess
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

import httpx

from rootproof.errors import LiveEnvironmentError
from rootproof.live import procs
from rootproof.live.bench import holder
from rootproof.live.bench.checks import Check
from rootproof.live.components.base import spawn_process
from rootproof.live.components.orders import python_env
from rootproof.live.env import LiveEnvironment
from rootproof.live.layout import read_pidfiles, write_pidfile
from rootproof.live.load import ProbeResult

__all__ = [
    "FAULTS",
    "Fault",
    "client_list",
    "NginxUpstreamTimeout",
    "OrderPoolLeak",
    "PgDeadlock",
    "PgRowLock",
    "RedisMaxclients",
]

LOCK_WAIT_S = 1.0
"""A lock ungranted for longer than this counts as a waiter (shorter waits are ordinary traffic)."""
BENCH_CLIENT = "rootproof-bench"
"""Client name / application_name of the rig's own Redis and PostgreSQL connections."""


class Fault:
    """One fault of one scenario in one live environment."""

    name: ClassVar[str]
    """The scenario name (`pg-row-lock`, `pg-deadlock`, `redis-maxclients`, `nginx-upstream-timeout`, `order-pool-leak`)."""
    application_name: ClassVar[str | None] = None
    """The application_name of the PostgreSQL sessions the fault opens (None: it opens none)."""
    uses_switches: ClassVar[bool] = False
    """The fault turns the order service's admin switches."""

    def __init__(self, env: LiveEnvironment) -> None:
        self.env = env
        self.facts: dict[str, Any] = {}
        self._child: subprocess.Popen[bytes] | None = None

    # -- the contract ---------------------------------------------------------------------

    def inject(self) -> None:
        """Make the fault happen (run-scoped); fill `facts`. Raises LiveEnvironmentError when it cannot."""
        raise NotImplementedError

    def confirm(self, *, timeout_s: float = 30.0) -> Check:
        """Wait (bounded) until a probe shows the fault really happens (business probe failing,
        waiters present, clients at the maximum, …)."""
        raise NotImplementedError

    def verify(self) -> list[Check]:
        """After recovery (or none): the checks of the recovery contract, each one instant;
        the runner holds them for several seconds (`checks.hold`)."""
        raise NotImplementedError

    def unchanged(self) -> list[Check]:
        """With nothing executed where nothing may run (approval `none`, or a `proposal_only`
        contract): the instant checks that nothing changed, i.e. the fault is still held as
        injected (the runner holds them as it holds `verify`'s). The default is `verify()`, for
        faults whose recovery checks already describe the untouched state (a deadlock PostgreSQL
        resolved by itself, a proposal-only timeout); a fault whose recovery must act overrides it."""
        return self.verify()

    def _holder_running(self) -> Check:
        rec = read_pidfiles(self.env.paths).get(self.component)
        running = rec is not None and procs.is_running(rec)
        return Check(
            name="holder_running",
            ok=running,
            detail=f"holder {rec.pid if rec else '-'} ({self.component}) {'running' if running else 'gone'}",
        )

    def cleanup(self) -> list[Check]:
        """Remove everything the fault made (holders stopped, switches reset, sessions
        terminated); safe to call twice and after a failed inject."""
        checks = [self._stop_holder()]
        if self.application_name:
            checks.append(self._terminate_sessions(self.application_name))
        if self.uses_switches:
            checks.append(self._reset_switches())
        return checks

    def residue(self) -> list[str]:
        """What the fault left behind (sessions, locks, clients, holder processes, switches); empty when clean."""
        out: list[str] = []
        rec = read_pidfiles(self.env.paths).get(self.component)
        if rec is not None and procs.is_running(rec):
            out.append(f"holder process {rec.pid} ({self.component}) still running")
        if self.application_name:
            try:
                rows = self._su(
                    "SELECT pid, state FROM pg_stat_activity WHERE application_name = %s",
                    (self.application_name,),
                )
                out += [
                    f"session {r['pid']} ({self.application_name}, {r['state']}) still open" for r in rows
                ]
                out += [
                    f"ungranted lock of pid {r['pid']} (blocked by {r['blocking']})" for r in self.waiters()
                ]
            except Exception as exc:  # noqa: BLE001 - a residue check reports, never raises
                out.append(f"PostgreSQL not checkable: {type(exc).__name__}: {exc}")
        if self.uses_switches:
            try:
                f = self.env.order_admin().faults()
                if f.get("leak") or f.get("delay_s") or f.get("leaked_connections"):
                    out.append(f"order service switches not reset: {f}")
            except LiveEnvironmentError as exc:
                out.append(f"order service switches not checkable: {exc.problem}")
        return out

    # -- seams the recovery executor uses ---------------------------------------------------

    @property
    def component(self) -> str:
        """The holder's pidfile name: `fault_<scenario>` with underscores."""
        return "fault_" + self.name.replace("-", "_")

    def superuser_rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        """One query as the PostgreSQL superuser over the run's socket."""
        return self._su(sql, params)

    def redis_call(self, *args: Any) -> Any:
        """One Redis command as the default user: over the rig's admin connection when the fault
        opened one, else over a fresh connection (raises redis-py's errors)."""
        conn = holder.redis_connection(self.env.redis_url(), name=BENCH_CLIENT)
        try:
            return conn.command(*args)
        finally:
            conn.close()

    def waiters(self) -> list[dict[str, Any]]:
        """Locks ungranted for more than `LOCK_WAIT_S`, with the pids blocking each."""
        return self._su(
            "SELECT pid, locktype, mode, pg_blocking_pids(pid) AS blocking FROM pg_locks "
            "WHERE NOT granted AND waitstart < now() - make_interval(secs => %s)",
            (LOCK_WAIT_S,),
        )

    # -- shared helpers ---------------------------------------------------------------------

    @property
    def folder(self) -> Path:
        """`<run>/faults/`: the holders' working folder, state files and stdout."""
        return self.env.folder / "faults"

    @property
    def state_file(self) -> Path:
        return self.folder / f"{self.component}.json"

    def _su(self, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        return holder.pg_rows(self.env.superuser_dsn(), sql, params)

    def _start_holder(self, kind: str, args: list[str], *, ready_timeout_s: float = 60.0) -> dict[str, Any]:
        """Start the holder in a session of its own, record it, wait for its state file."""
        self.folder.mkdir(mode=0o755, exist_ok=True)
        self.state_file.unlink(missing_ok=True)
        argv = [
            self.env.spec.python,
            "-m",
            "rootproof.live.bench.holder",
            kind,
            "--state",
            str(self.state_file),
            *args,
        ]
        log = self.folder / f"{self.component}.log"
        started = spawn_process(self.component, argv, cwd=self.folder, log=log, env=python_env())
        write_pidfile(self.env.paths, started.record)
        self._child = started.child
        deadline = time.monotonic() + ready_timeout_s
        while time.monotonic() < deadline:
            if self.state_file.exists():
                state: dict[str, Any] = json.loads(self.state_file.read_text(encoding="utf-8"))
                return state
            assert self._child is not None
            if self._child.poll() is not None:
                tail = log.read_text(encoding="utf-8", errors="replace")[-800:] if log.exists() else ""
                raise LiveEnvironmentError(
                    self.name,
                    f"holder {kind} exited with status {self._child.returncode} before holding the fault: {tail}",
                )
            time.sleep(0.1)
        self._stop_holder()
        raise LiveEnvironmentError(
            self.name, f"holder {kind} did not hold the fault within {ready_timeout_s:g} s"
        )

    def _stop_holder(self) -> Check:
        rec = read_pidfiles(self.env.paths).get(self.component)
        if rec is None:
            return Check(name="holder_stopped", ok=True, detail="no holder")
        outcome = procs.stop(rec, signal.SIGTERM, timeout_s=10.0, child=self._child)
        running = procs.is_running(rec)
        if not running:
            self.env.paths.pidfile(self.component).unlink(missing_ok=True)
            self._child = None
        return Check(name="holder_stopped", ok=not running, detail=f"holder {rec.pid}: {outcome}")

    def _terminate_sessions(self, application_name: str) -> Check:
        try:
            rows = self._su(
                "SELECT pid, pg_terminate_backend(pid) AS ok FROM pg_stat_activity WHERE application_name = %s AND pid <> pg_backend_pid()",
                (application_name,),
            )
        except Exception as exc:  # noqa: BLE001 - reported as a failed check
            return Check(name="sessions_terminated", ok=False, detail=f"{type(exc).__name__}: {exc}")
        deadline = time.monotonic() + 5
        left = rows
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = self._su(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (application_name,)
            )
        return Check(
            name="sessions_terminated",
            ok=not left,
            detail=f"{len(rows)} {application_name} sessions terminated; {len(left)} left",
        )

    def _reset_switches(self, *, settle_s: float = 1.0, bound_s: float = 12.0) -> Check:
        """Every switch off and every leaked connection returned, and still so `settle_s` later: a
        request that was waiting for a connection when the switch went off (the pool's 3 s
        checkout timeout) may still leak the one it then gets, so the reset is repeated (bounded)."""
        admin = self.env.order_admin()
        deadline = time.monotonic() + bound_s
        f: dict[str, Any] = {}
        try:
            while True:
                admin.reset()
                time.sleep(settle_s)
                f = admin.faults()
                clean = not (f.get("leak") or f.get("delay_s") or f.get("leaked_connections"))
                if clean or time.monotonic() >= deadline:
                    break
        except LiveEnvironmentError as exc:
            return Check(name="switches_reset", ok=False, detail=exc.problem)
        return Check(name="switches_reset", ok=clean, detail=json.dumps(f))

    def _probe(self, sku: str | None = None, *, timeout_s: float = 10.0) -> ProbeResult:
        return self.env.probe(timeout_s=timeout_s, sku=sku)

    def _probe_passes(self, sku: str | None = None, name: str = "business_probe") -> Check:
        r = self._probe(sku)
        return Check(
            name=name,
            ok=r.ok,
            detail=f"{r.step} {r.status} {r.latency_ms:.0f} ms" + (f": {r.error[:200]}" if r.error else ""),
        )

    def _no_waiters(self) -> Check:
        rows = self.waiters()
        return Check(
            name="no_ungranted_locks",
            ok=not rows,
            detail=f"{len(rows)} locks waiting > {LOCK_WAIT_S:g} s" + (f": {rows[:3]}" if rows else ""),
        )


# -- PostgreSQL ------------------------------------------------------------------------------------


class PgRowLock(Fault):
    """A `stock-recount` batch session holds row locks on three SKUs, idle in transaction:
    orders of those SKUs wait on it (8 s statement timeout, nginx 504 after 5 s)."""

    name = "pg-row-lock"
    application_name = "stock-recount"
    skus: ClassVar[tuple[str, ...]] = ("SKU-0003", "SKU-0007", "SKU-0011")

    def inject(self) -> None:
        state = self._start_holder(
            "row-lock",
            [
                "--dsn",
                self.env.superuser_dsn(),
                "--app",
                str(self.application_name),
                "--skus",
                ",".join(self.skus),
            ],
        )
        assert self._child is not None
        self.facts = {
            "blocker_pid": int(state["pid"]),
            "blocker_backend_start": state["backend_start"],
            "skus": list(self.skus),
            "application_name": self.application_name,
            "holder_pid": self._child.pid,
        }

    def confirm(self, *, timeout_s: float = 30.0) -> Check:
        deadline = time.monotonic() + timeout_s
        detail = "not tried"
        while time.monotonic() < deadline:
            result: list[ProbeResult] = []
            t = threading.Thread(target=lambda out=result: out.append(self._probe(self.skus[0])), daemon=True)
            t.start()
            seen: list[dict[str, Any]] = []
            while t.is_alive() and not seen:
                time.sleep(0.3)
                seen = [w for w in self.waiters() if self.facts["blocker_pid"] in (w["blocking"] or [])]
            t.join(15)
            r = result[0] if result else None
            failed = r is not None and not r.ok and r.status in (503, 504)
            detail = f"probe {self.skus[0]}: {r.status if r else 'no answer'}; waiters blocked by {self.facts['blocker_pid']}: {len(seen)}"
            if failed and seen:
                return Check(name="fault_confirmed", ok=True, detail=detail)
        return Check(name="fault_confirmed", ok=False, detail=detail)

    def verify(self) -> list[Check]:
        rows = self._su(
            "SELECT pid FROM pg_stat_activity WHERE pid = %s AND backend_start = %s::timestamptz",
            (self.facts["blocker_pid"], self.facts["blocker_backend_start"]),
        )
        return [
            self._probe_passes(self.skus[0], "probe_locked_sku"),
            self._no_waiters(),
            Check(
                name="blocker_gone",
                ok=not rows,
                detail=f"session {self.facts['blocker_pid']} {'still open' if rows else 'gone'}",
            ),
        ]

    def unchanged(self) -> list[Check]:
        rows = self._su(
            "SELECT pid, state FROM pg_stat_activity WHERE pid = %s AND backend_start = %s::timestamptz",
            (self.facts["blocker_pid"], self.facts["blocker_backend_start"]),
        )
        state = rows[0]["state"] if rows else None
        return [
            Check(
                name="blocker_still_open",
                ok=state == "idle in transaction",
                detail=f"session {self.facts['blocker_pid']} " + (f"{state}" if rows else "gone"),
            ),
            self._holder_running(),
        ]


class PgDeadlock(Fault):
    """An `inventory-sync` job's two sessions lock two SKUs in opposite order, three rounds
    about 2 s apart; PostgreSQL aborts one side of each with 40P01, which the job logs to
    `orders/logs/inventory-sync.jsonl`. The holder then stays alive with both sessions idle."""

    name = "pg-deadlock"
    application_name = "inventory-sync"
    skus: ClassVar[tuple[str, ...]] = ("SKU-0005", "SKU-0009")
    rounds: ClassVar[int] = 3

    @property
    def log_file(self) -> Path:
        return self.env.paths.orders_logs / "inventory-sync.jsonl"

    def _deadlocks(self) -> int:
        return int(
            self._su("SELECT deadlocks FROM pg_stat_database WHERE datname = 'orders'")[0]["deadlocks"]
        )

    def inject(self) -> None:
        before = self._deadlocks()
        args = [
            "--dsn",
            self.env.superuser_dsn(),
            "--app",
            str(self.application_name),
            "--skus",
            ",".join(self.skus),
        ]
        args += ["--rounds", str(self.rounds), "--interval", "2", "--log", str(self.log_file)]
        state = self._start_holder("deadlock", args, ready_timeout_s=90)
        assert self._child is not None
        self.facts = {
            "deadlocks": int(state["deadlocks"]),
            "session_pids": [int(p) for p in state["pids"]],
            "skus": list(self.skus),
            "aborted": state["aborted"],
            "application_name": self.application_name,
            "deadlocks_before": before,
            "log_file": str(self.log_file.relative_to(self.env.folder)),
            "holder_pid": self._child.pid,
        }
        if not self.facts["deadlocks"]:
            raise LiveEnvironmentError(self.name, f"no deadlock in {self.rounds} rounds (state {state})")

    def confirm(self, *, timeout_s: float = 30.0) -> Check:
        deadline = time.monotonic() + timeout_s
        while True:
            now = self._deadlocks()
            if now > self.facts["deadlocks_before"] or time.monotonic() >= deadline:
                ok = now > self.facts["deadlocks_before"]
                return Check(
                    name="fault_confirmed",
                    ok=ok,
                    detail=f"pg_stat_database.deadlocks {self.facts['deadlocks_before']} -> {now}; holder saw {self.facts['deadlocks']}",
                )
            time.sleep(0.5)

    def verify(self) -> list[Check]:
        order = self.facts["aborted"][0] if self.facts.get("aborted") else list(self.skus)
        try:
            holder.pg_exec(
                self.env.superuser_dsn(),
                [(holder.LOCK_SQL, (sku,)) for sku in order],
                application_name=f"{self.application_name}-retry",
            )
            retry = Check(
                name="aborted_work_commits",
                ok=True,
                detail=f"the aborted transaction ({', '.join(order)}) committed on retry",
            )
        except Exception as exc:  # noqa: BLE001 - the check's outcome
            retry = Check(name="aborted_work_commits", ok=False, detail=f"{type(exc).__name__}: {exc}"[:300])
        return [self._no_waiters(), retry, self._probe_passes(self.skus[0])]


# -- Redis ------------------------------------------------------------------------------------------


def client_list(text: str) -> list[dict[str, str]]:
    """`CLIENT LIST`'s reply as one dict per client."""
    return [
        dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        for line in text.splitlines()
        if line.strip()
    ]


def _info_field(text: str, key: str) -> int:
    m = re.search(rf"^{key}:(\d+)", text, re.M)
    return int(m.group(1)) if m else -1


class RedisMaxclients(Fault):
    """A `cart-worker` leaks idle Redis connections up to `maxclients`: Redis refuses every new
    client (`max number of clients reached`): the order service's per-call cache connections
    (logged, swallowed), the exporter's scrapes (`redis_up 0`), the diagnosis' observer."""

    name = "redis-maxclients"
    client_name: ClassVar[str] = "cart-worker"
    protected: ClassVar[tuple[str, ...]] = ("order-service", "redis_exporter", "rootproof")
    """Client names (prefixes) `kill_idle_clients` never kills."""
    idle_min_s: ClassVar[float] = 5.0
    """How long a client must have been idle for `kill_idle_clients`."""

    def __init__(self, env: LiveEnvironment) -> None:
        super().__init__(env)
        self._admin: holder.RedisClient | None = None
        self._admin_lock = threading.Lock()

    def redis_call(self, *args: Any) -> Any:
        with self._admin_lock:
            if self._admin is None:
                return super().redis_call(*args)
            return self._admin.command(*args)

    def clients(self) -> list[dict[str, str]]:
        """`CLIENT LIST`, one dict per client."""
        return client_list(str(self.redis_call("CLIENT", "LIST")))

    def _cache_errors(self) -> float:
        url = f"http://127.0.0.1:{self.env.spec.port('order_service')}/metrics"
        text = httpx.get(url, timeout=5, trust_env=False).text
        m = re.search(r"^order_service_cache_errors_total (\S+)", text, re.M)
        return float(m.group(1)) if m else -1.0

    def inject(self) -> None:
        maxclients = int(self.env.config.redis_maxclients)
        with self._admin_lock:
            if self._admin is None:
                self._admin = holder.redis_connection(self.env.redis_url(), name=BENCH_CLIENT)
        args = [
            "--url",
            self.env.redis_url(),
            "--name",
            self.client_name,
            "--ramp-s",
            "8",
            "--expect",
            str(maxclients),
        ]
        state = self._start_holder("redis-clients", args)
        assert self._child is not None
        self.facts = {
            "client_ids": [int(c) for c in state["client_ids"]],
            "client_name": self.client_name,
            "idle_since": datetime.fromtimestamp(float(state["idle_since"]), UTC).isoformat(timespec="seconds"),
            "maxclients": maxclients,
            "holder_pid": self._child.pid,
        }
        self._errors_at_inject = self._cache_errors()

    def _fresh_connect(self) -> str | None:
        """None when a fresh connection succeeds, else redis-py's error."""
        try:
            conn = holder.redis_connection(self.env.redis_url(), name=BENCH_CLIENT)
        except Exception as exc:  # noqa: BLE001 - the outcome
            return f"{type(exc).__name__}: {exc}"
        conn.close()
        return None

    def confirm(self, *, timeout_s: float = 30.0) -> Check:
        deadline = time.monotonic() + timeout_s
        detail = "not tried"
        while True:
            refused = self._fresh_connect()
            connected = _info_field(str(self.redis_call("INFO", "clients")), "connected_clients")
            before = self._cache_errors()
            self._probe()
            errors = self._cache_errors() - before
            detail = f"fresh connection: {refused or 'accepted'}; connected_clients {connected} of {self.facts['maxclients']}; order-service cache errors +{errors:g} over one probe"
            ok = (
                refused is not None
                and "max number of clients reached" in refused
                and connected >= self.facts["maxclients"]
                and errors > 0
            )
            if ok or time.monotonic() >= deadline:
                return Check(name="fault_confirmed", ok=ok, detail=detail)
            time.sleep(1)

    def verify(self) -> list[Check]:
        refused = self._fresh_connect()
        connected = _info_field(str(self.redis_call("INFO", "clients")), "connected_clients")
        before = self._cache_errors()
        probe = self._probe()
        after = self._cache_errors()
        return [
            Check(name="fresh_connection_accepted", ok=refused is None, detail=refused or "accepted"),
            Check(
                name="clients_below_max",
                ok=0 <= connected <= self.facts["maxclients"] // 2,
                detail=f"connected_clients {connected} of {self.facts['maxclients']}",
            ),
            Check(
                name="cache_errors_stopped",
                ok=after == before and probe.ok,
                detail=f"cache errors {before:g} -> {after:g} over one probe ({probe.step} {probe.status})",
            ),
        ]

    def unchanged(self) -> list[Check]:
        connected = _info_field(str(self.redis_call("INFO", "clients")), "connected_clients")
        ids = {int(c["id"]) for c in self.clients() if c.get("id", "").isdigit()}
        gone = [cid for cid in self.facts["client_ids"] if cid not in ids]
        return [
            Check(
                name="clients_still_at_max",
                ok=connected >= self.facts["maxclients"],
                detail=f"connected_clients {connected} of {self.facts['maxclients']}",
            ),
            Check(
                name="leaked_clients_still_connected",
                ok=not gone,
                detail=f"{len(self.facts['client_ids']) - len(gone)}/{len(self.facts['client_ids'])} {self.client_name} clients connected",
            ),
            self._holder_running(),
        ]

    def cleanup(self) -> list[Check]:
        checks = [self._stop_holder()]
        try:
            left = [c["id"] for c in self.clients() if c.get("name") == self.client_name]
            for cid in left:
                self.redis_call("CLIENT", "KILL", "ID", cid)
            checks.append(
                Check(
                    name="clients_killed",
                    ok=True,
                    detail=f"{len(left)} {self.client_name} clients left after the holder, killed",
                )
            )
        except Exception as exc:  # noqa: BLE001 - reported as a failed check
            checks.append(Check(name="clients_killed", ok=False, detail=f"{type(exc).__name__}: {exc}"))
        with self._admin_lock:
            if self._admin is not None:
                self._admin.close()
                self._admin = None
        return checks

    def residue(self) -> list[str]:
        out = super().residue()
        try:
            out += [
                f"redis client {c['id']} ({self.client_name}) still connected"
                for c in self.clients()
                if c.get("name") == self.client_name
            ]
        except Exception as exc:  # noqa: BLE001 - a residue check reports, never raises
            out.append(f"Redis not checkable: {type(exc).__name__}: {exc}")
        if self._admin is not None:
            out.append(f"the rig's admin connection ({BENCH_CLIENT}) is still open")
        return out


# -- the order service's switches -------------------------------------------------------------------


class NginxUpstreamTimeout(Fault):
    """The order service answers `/orders` after 7 s, above nginx's `proxy_read_timeout` 5 s:
    504 `upstream timed out (110: Connection timed out) while reading response header from
    upstream`. Proposal only: verify checks that nothing was changed (nginx untouched, the fault
    still there)."""

    name = "nginx-upstream-timeout"
    uses_switches = True
    delay_s: ClassVar[float] = 7.0

    def _conf_sha256(self) -> str:
        return hashlib.sha256(self.env.paths.nginx_conf.read_bytes()).hexdigest()

    def inject(self) -> None:
        pid = self.env.pids().get("nginx")
        if pid is None:
            raise LiveEnvironmentError(self.name, "nginx is not running")
        self.facts = {
            "nginx_conf_sha256": self._conf_sha256(),
            "nginx_master_pid": pid,
            "delay_s": self.delay_s,
        }
        self.env.order_admin().set_faults(delay_s=self.delay_s)

    def confirm(self, *, timeout_s: float = 30.0) -> Check:
        deadline = time.monotonic() + timeout_s
        while True:
            r = self._probe()
            if r.status == 504 or time.monotonic() >= deadline:
                return Check(
                    name="fault_confirmed",
                    ok=r.status == 504,
                    detail=f"probe {r.step} {r.status} after {r.latency_ms:.0f} ms",
                )

    def verify(self) -> list[Check]:
        sha, pid = self._conf_sha256(), self.env.pids().get("nginx")
        try:
            delay = float(self.env.order_admin().faults().get("delay_s") or 0)
        except LiveEnvironmentError as exc:
            delay, why = -1.0, exc.problem
        else:
            why = f"delay_s {delay:g}"
        return [
            Check(
                name="nginx_conf_unchanged",
                ok=sha == self.facts["nginx_conf_sha256"],
                detail=f"sha256 {sha[:12]}… (was {self.facts['nginx_conf_sha256'][:12]}…)",
            ),
            Check(
                name="nginx_master_unchanged",
                ok=pid == self.facts["nginx_master_pid"],
                detail=f"master pid {pid} (was {self.facts['nginx_master_pid']})",
            ),
            Check(name="fault_still_present", ok=delay == self.facts["delay_s"], detail=why),
        ]


class OrderPoolLeak(Fault):
    """The order service's leaking code path holds every pooled connection `idle in
    transaction`: each request waits 3 s for the pool and fails with `QueuePool limit … reached`
    (503). Restarting the service gives the connections back."""

    name = "order-pool-leak"
    uses_switches = True

    def inject(self) -> None:
        admin = self.env.order_admin()
        pid = self.env.pids().get("order_service")
        if pid is None:
            raise LiveEnvironmentError(self.name, "the order service is not running")
        size = int(admin.pool()["size"])
        self.facts = {"pool_size": size, "service_pid": pid}
        admin.set_faults(leak=True)
        deadline = time.monotonic() + 30
        while int(admin.pool()["checked_out"]) < size:
            if time.monotonic() > deadline:
                raise LiveEnvironmentError(
                    self.name, f"the pool was not exhausted within 30 s: {admin.pool()}"
                )
            self._probe(timeout_s=5)  # orders take the leaking path: one connection each

    def _exhausted(self) -> tuple[bool, str]:
        pool = self.env.order_admin().pool()
        return int(pool["checked_out"]) >= int(
            pool["size"]
        ), f"pool checked_out {pool['checked_out']} of {pool['size']}"

    def confirm(self, *, timeout_s: float = 30.0) -> Check:
        deadline = time.monotonic() + timeout_s
        while True:
            r = self._probe()
            exhausted, pool = self._exhausted()
            ok = r.status == 503 and exhausted
            if ok or time.monotonic() >= deadline:
                return Check(
                    name="fault_confirmed",
                    ok=ok,
                    detail=f"probe {r.step} {r.status}: {(r.error or '')[:120]}; {pool}",
                )

    def verify(self) -> list[Check]:
        checks = [self._probe_passes()]
        try:
            exhausted, pool = self._exhausted()
            leak = bool(self.env.order_admin().faults().get("leak"))
            checks += [
                Check(name="pool_not_exhausted", ok=not exhausted, detail=pool),
                Check(name="leak_switch_off", ok=not leak, detail=f"leak {leak}"),
            ]
        except LiveEnvironmentError as exc:
            checks += [
                Check(name="pool_not_exhausted", ok=False, detail=exc.problem),
                Check(name="leak_switch_off", ok=False, detail=exc.problem),
            ]
        pid = self.env.pids().get("order_service")
        checks.append(
            Check(
                name="service_restarted",
                ok=pid is not None and pid != self.facts["service_pid"],
                detail=f"order service pid {pid} (was {self.facts['service_pid']})",
            )
        )
        return checks

    def unchanged(self) -> list[Check]:
        pid = self.env.pids().get("order_service")
        checks = [
            Check(
                name="service_not_restarted",
                ok=pid == self.facts["service_pid"],
                detail=f"order service pid {pid} (was {self.facts['service_pid']})",
            )
        ]
        try:
            exhausted, pool = self._exhausted()
            leak = bool(self.env.order_admin().faults().get("leak"))
            checks += [
                Check(name="pool_still_exhausted", ok=exhausted, detail=pool),
                Check(name="leak_switch_on", ok=leak, detail=f"leak {leak}"),
            ]
        except LiveEnvironmentError as exc:
            checks += [
                Check(name="pool_still_exhausted", ok=False, detail=exc.problem),
                Check(name="leak_switch_on", ok=False, detail=exc.problem),
            ]
        return checks


FAULTS: dict[str, type[Fault]] = {
    f.name: f for f in (PgRowLock, PgDeadlock, RedisMaxclients, NginxUpstreamTimeout, OrderPoolLeak)
}
"""Scenario name → its fault class."""
