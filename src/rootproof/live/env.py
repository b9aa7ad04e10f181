"""`LiveEnvironment`: the live benchmark's private systems, started and stopped by their own pids.

One environment is one run folder `<root>/<run_id>/` (layout: `rootproof.live.layout`) holding
PostgreSQL 15, Redis, the order service, nginx in front of it, Prometheus with the PostgreSQL
and Redis exporters, and a bounded background load, each on free loopback ports, each process
recorded in a pidfile (pid + start time) the moment it is started, and the targets file that
names them for the diagnosis.

```python
with LiveEnvironment(LiveConfig(root=settings.resolved_live_root())) as env:  # preflight + start
    env.probe()                     # one order round trip through nginx
    env.targets_file                # for `rootproof diagnose --targets`
    env.superuser_dsn()             # the fault injector's seams: superuser, fault switch, pids
    env.order_admin().set_faults(leak=True)
# stopped by pid (also on SIGINT/SIGTERM or an exception), folder removed; env.stop() reports residue
```

Lifecycle: `preflight()` finds the binaries, checks the root folder, cleans stale runs (below),
picks the ports and claims the run folder (`run.json`, owner = this process); `start()` starts
every component in order and waits until each is healthy, or stops whatever it had started and
raises `LiveEnvironmentError` naming the component; `stop()` stops every recorded process
(its stop signal, then SIGKILL after `stop_timeout_s`), checks that no process, listener or
file is left and removes the folder, returning a `StopReport` whose `residue` must be empty.
`start(detach=True)` (`rootproof live up`) gives the run up: it stays after this process exits
until `rootproof live down` stops it from its pidfiles.

Stale runs (`rootproof.live.runs`): a run folder whose owner process is gone (a SIGKILLed
benchmark) or a detached run none of whose processes is alive is stale; the next `preflight()`
under the same root stops its processes that are still the same processes (pid and start time)
and removes it. A run whose owner runs, or a detached run with a live process, is never
touched. Preflights hold `<root>/.lock` while they look, so two never clean (or claim) the same
folder.

Signals: inside `with LiveEnvironment(...)` (or after `install_signal_handlers()`), SIGINT and
SIGTERM stop everything first and are then re-raised with the handler they had before
(KeyboardInterrupt, the default exit, …). Spawning a process and recording it is one critical
section, and so is `stop()`: a signal arriving inside waits for its end.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rootproof.errors import LiveConfigError, LiveEnvironmentError, UsageError
from rootproof.live import procs
from rootproof.live.admin import OrderServiceAdmin
from rootproof.live.binaries import resolve
from rootproof.live.components import COMPONENT_TYPES, Component, Health, Started, component
from rootproof.live.components.orders import admin_url, nginx_url
from rootproof.live.components.postgres import superuser_dsn
from rootproof.live.layout import (
    PORTS,
    ComponentName,
    LiveConfig,
    RunPaths,
    RunRecord,
    RunSpec,
    new_run_id,
    read_run,
    with_requirements,
    write_pidfile,
    write_run,
)
from rootproof.live.load import LoadStats, ProbeResult, probe, read_stats
from rootproof.live.procs import ProcessRecord
from rootproof.live.runs import (
    CleanedRun,
    StopReport,
    clean_stale,
    owner_of_this_process,
    records_of,
    root_lock,
    run_folder,
    stop_folder,
)

__all__ = ["ComponentStatus", "LiveEnvironment", "PreflightReport", "RunStatus"]

SOCKET_PATH_MAX = 107
"""Longest unix socket path Linux accepts (PostgreSQL's socket lives in the run folder)."""
_PORT_COMPONENT = {port: comp for comp, ports in PORTS.items() for port in ports}


@dataclass(frozen=True, kw_only=True)
class PreflightReport:
    """What preflight checked, cleaned and claimed."""

    run_id: str
    folder: Path
    ports: dict[str, int]
    binaries: dict[str, str]
    cleaned: list[CleanedRun]
    """Stale runs of earlier, killed processes that were stopped and removed."""

    def as_dict(self) -> dict[str, Any]:
        """A JSON object."""
        return {**asdict(self), "folder": str(self.folder)}


@dataclass(frozen=True, kw_only=True)
class ComponentStatus:
    """One component of a running environment, as `rootproof live status` shows it."""

    name: str
    pid: int | None
    alive: bool
    """The recorded process runs (same pid and start time)."""
    ports: dict[str, int]
    listening: bool
    """Every one of its ports is listened on (true for a component without ports when alive)."""
    healthy: bool
    """It is alive, listening and its health check passes."""
    detail: str


@dataclass(frozen=True, kw_only=True)
class RunStatus:
    """A run and each of its components."""

    run_id: str
    folder: Path
    state: str
    detached: bool
    owner_pid: int | None
    components: list[ComponentStatus]
    targets_file: Path

    @property
    def healthy(self) -> bool:
        """Every component is healthy."""
        return bool(self.components) and all(c.healthy for c in self.components)

    def as_dict(self) -> dict[str, Any]:
        """A JSON object."""
        return {
            "run_id": self.run_id,
            "folder": str(self.folder),
            "state": self.state,
            "detached": self.detached,
            "owner_pid": self.owner_pid,
            "healthy": self.healthy,
            "targets_file": str(self.targets_file),
            "components": [asdict(c) for c in self.components],
        }


class LiveEnvironment:
    """The private systems of one live run (see the module docstring)."""

    def __init__(self, config: LiveConfig, *, progress: Callable[[str], None] | None = None) -> None:
        self.config = config
        self._progress = progress or (lambda _line: None)
        self._spec: RunSpec | None = None
        self._record: RunRecord | None = None
        self._report: PreflightReport | None = None
        self._started: dict[str, ProcessRecord] = {}
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._critical = 0
        self._pending: list[int] = []
        self._previous: dict[int, Any] = {}
        self._interrupted: int | None = None
        self._attached = False

    @classmethod
    def attach(cls, root: Path, run_id: str, *, progress: Callable[[str], None] | None = None) -> LiveEnvironment:
        """The environment of an existing run (for status, probe, down from another process).
        UsageError when `root` has no such run."""
        record = read_run(run_folder(root, run_id))
        if record is None:
            raise UsageError(f"live run {run_id} under {root} has no readable run.json (`rootproof live down {run_id}` removes it)")
        env = cls(record.spec.config, progress=progress)
        env._spec, env._record, env._attached = record.spec, record, True
        return env

    # -- what the run is ---------------------------------------------------------------

    @property
    def spec(self) -> RunSpec:
        """The run's resolved spec (after preflight)."""
        if self._spec is None:
            raise LiveEnvironmentError("environment", "no run yet: call preflight() or start() first")
        return self._spec

    @property
    def run_id(self) -> str:
        """The run id (the folder's name)."""
        return self.spec.run_id

    @property
    def folder(self) -> Path:
        """The run folder."""
        return self.spec.folder

    @property
    def paths(self) -> RunPaths:
        """The run folder's layout (logs, configs, secrets)."""
        return self.spec.paths

    @property
    def targets_file(self) -> Path:
        """`<run>/targets.yaml` (written once every component is ready)."""
        return self.paths.targets

    def urls(self) -> dict[str, str]:
        """Base URLs of the HTTP parts: nginx (the front door), the order service's admin app, Prometheus."""
        spec, out = self.spec, {}
        if "nginx" in spec.components:
            out["nginx"] = nginx_url(spec)
        if "order_service" in spec.components:
            out["order_service"] = f"http://127.0.0.1:{spec.port('order_service')}"
            out["order_admin"] = admin_url(spec)
        if "prometheus" in spec.components:
            out["prometheus"] = f"http://127.0.0.1:{spec.port('prometheus')}"
        if "redis" in spec.components:
            out["redis"] = f"redis://127.0.0.1:{spec.port('redis')}/0"
        return out

    def superuser_dsn(self, dbname: str = "orders") -> str:
        """The PostgreSQL superuser over the run's unix socket (the fault injector's; never the diagnosis')."""
        return superuser_dsn(self.spec, dbname)

    def redis_url(self) -> str:
        """Redis as its default user (the order service's and the fault injector's)."""
        return f"redis://127.0.0.1:{self.spec.port('redis')}/0"

    def order_admin(self) -> OrderServiceAdmin:
        """The order service's fault switch and pool state."""
        return OrderServiceAdmin(admin_url(self.spec))

    def pids(self) -> dict[str, int]:
        """The pid of each running component (from its pidfile, checked to be the same process)."""
        return {name: r.pid for name, r in records_of(self.paths).items() if procs.is_running(r)}

    def process(self, name: ComponentName) -> ProcessRecord | None:
        """The recorded process of component `name` (pid and start time), None if not running."""
        rec = records_of(self.paths).get(name)
        return rec if rec is not None and procs.is_running(rec) else None

    def probe(self, *, timeout_s: float = 10.0, sku: str | None = None) -> ProbeResult:
        """One real order round trip through nginx (POST, then GET)."""
        return probe(nginx_url(self.spec), timeout_s=timeout_s, sku=sku)

    def load_stats(self) -> LoadStats | None:
        """The background load's counts so far (None before its first write)."""
        return read_stats(self.paths.load_stats)

    # -- preflight ---------------------------------------------------------------------

    def preflight(self) -> PreflightReport:
        """Check what the run needs, clean stale runs and claim a run folder (see the module docstring).

        Raises MissingBinary, LiveConfigError (the root folder or the postgres user) or
        LiveEnvironmentError (a fixed port in use, a stale run that cannot be cleaned)."""
        if self._report is not None:
            return self._report
        if self._attached:
            raise LiveEnvironmentError("environment", f"run {self.run_id} was started elsewhere: status, probe, restart and stop it; start a new LiveEnvironment for a new run")
        cfg = self.config
        components = with_requirements(cfg.components)
        root_user = os.geteuid() == 0
        binaries: dict[str, str] = {}
        for name in components:
            for binary in COMPONENT_TYPES[name].binaries:
                binaries[binary] = resolve(binary, cfg.binaries, component=name)
        pg_user: str | None = None
        if "postgres" in components and root_user:
            binaries["runuser"] = resolve("runuser", cfg.binaries, component="postgres")
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                raise LiveConfigError("postgres", "rootproof runs as root and PostgreSQL refuses to; its OS user postgres does not exist (apt-get install postgresql-15 makes it)") from None
            pg_user = "postgres"
        root = cfg.root.expanduser().absolute()
        self._make_root(root, pg_user, binaries.get("runuser"))
        run_id = new_run_id()
        folder = root / run_id
        sock = folder / "postgres" / "sock" / ".s.PGSQL.65535"
        if "postgres" in components and len(str(sock)) > SOCKET_PATH_MAX:
            raise LiveConfigError(
                "postgres", f"the run folder's socket path {sock} is longer than {SOCKET_PATH_MAX} characters; choose a shorter root (ROOTPROOF_LIVE_ROOT)"
            )
        names = [p for c in components for p in PORTS[c]]
        with root_lock(root):
            cleaned = clean_stale(root, cfg.stop_timeout_s, self._progress)
            ports = self._ports(names)
            folder.mkdir(mode=0o755)
            folder.chmod(0o755)  # not the umask's: the postgres user walks through it
            RunPaths(folder).pids.mkdir()
            RunPaths(folder).secrets.mkdir(mode=0o700)
            spec = RunSpec(run_id=run_id, folder=folder, config=cfg, components=components, ports=ports, binaries=binaries, pg_os_user=pg_user)
            record = RunRecord(spec=spec, state="starting", owner=owner_of_this_process(), created_at=datetime.now(UTC).isoformat(timespec="seconds"))
            write_run(record)
        self._spec, self._record = spec, record
        self._report = PreflightReport(run_id=run_id, folder=folder, ports=dict(ports), binaries=binaries, cleaned=cleaned)
        return self._report

    def _make_root(self, root: Path, pg_user: str | None, runuser: str | None) -> None:
        if root.exists() and not root.is_dir():
            raise LiveConfigError("environment", f"the live root {root} is not a folder (ROOTPROOF_LIVE_ROOT)")
        try:
            root.mkdir(parents=True, exist_ok=True, mode=0o755)
        except OSError as exc:
            raise LiveConfigError("environment", f"cannot create the live root {root}: {exc.strerror or exc} (ROOTPROOF_LIVE_ROOT)") from exc
        if pg_user is None or runuser is None:
            return
        test = [runuser, "-u", pg_user, "--", "test", "-x", str(root), "-a", "-r", str(root)]
        if subprocess.run(test, capture_output=True, timeout=30).returncode == 0:
            return
        closed = next((str(p) for p in [*reversed(root.parents), root] if p.exists() and not p.stat().st_mode & 0o001), str(root))
        mode = oct(Path(closed).stat().st_mode & 0o777) if Path(closed).exists() else "?"
        raise LiveConfigError(
            "postgres",
            f"PostgreSQL runs as the OS user {pg_user}, which cannot reach the live root {root} ({closed} has mode {mode[2:]}); "
            "set ROOTPROOF_LIVE_ROOT to a folder it can reach, such as /var/tmp/rootproof-live",
        )

    def _ports(self, names: list[str]) -> dict[str, int]:
        fixed = {n: int(self.config.ports[n]) for n in names if n in self.config.ports}
        for name, port in fixed.items():
            if not procs.port_free(port):
                raise LiveEnvironmentError(_PORT_COMPONENT.get(name, name), f"port 127.0.0.1:{port} ({name}) is already in use")
        free = iter(procs.reserve_ports(len(names) - len(fixed), taken=fixed.values()))
        return {n: fixed[n] if n in fixed else next(free) for n in names}

    # -- start -------------------------------------------------------------------------

    def start(self, *, detach: bool = False) -> None:
        """Start every component and wait until each is healthy; write the targets file.

        On any failure (or interruption) everything started is stopped and the folder
        removed before the error is raised: `LiveEnvironmentError` naming the component."""
        self.preflight()
        spec = self.spec
        current = "environment"
        early: dict[str, tuple[Started, float]] = {}
        try:
            for name in spec.components:
                comp = component(name)
                if comp.spawn_early:
                    current = name
                    t0 = time.monotonic()
                    comp.prepare(spec)
                    early[name] = (self._spawn(name, comp), t0)
            for name in spec.components:
                current = name
                self._check_interrupted()
                comp = component(name)
                t0 = time.monotonic()
                if name in early:
                    started, t0 = early[name]
                else:
                    comp.prepare(spec)
                    started = self._spawn(name, comp)
                comp.wait_ready(spec, started)
                comp.after_ready(spec)
                self._progress(f"{name} ready (pid {started.record.pid}, {time.monotonic() - t0:.1f} s)")
            current = "environment"
            self._check_interrupted()
            from rootproof.live.targets_file import write_targets

            write_targets(spec)
            assert self._record is not None
            self._record = self._record.with_state("up", owner=None if detach else "keep")
            write_run(self._record)
        except BaseException as exc:
            report = self.stop()
            left = f" (cleanup left: {'; '.join(report.residue)})" if report.residue else ""
            if isinstance(exc, LiveEnvironmentError):
                if left:
                    raise LiveEnvironmentError(exc.component, exc.problem + left) from exc
                raise
            if isinstance(exc, Exception):
                raise LiveEnvironmentError(current, f"{type(exc).__name__}: {exc}{left}") from exc
            raise

    def _check_interrupted(self) -> None:
        if self._interrupted is not None:
            raise LiveEnvironmentError("environment", f"interrupted by {signal.Signals(self._interrupted).name}")

    def _spawn(self, name: ComponentName, comp: Component) -> Started:
        with self._critical_section():
            started = comp.spawn(self.spec)
            self._started[name] = started.record
            if started.child is not None:
                self._children[name] = started.child
            write_pidfile(self.paths, started.record)
        return started

    def restart(self, name: ComponentName) -> ProcessRecord:
        """Stop component `name` by its pid and start it again (same ports and files), waiting
        until it is healthy: the seam of a `restart_service` recovery. Returns its new record.
        Others catch up on their own (Prometheus sees it `up` again at its next scrape)."""
        spec = self.spec
        comp = component(name)
        old = records_of(self.paths).get(name)
        if old is not None:
            procs.stop(old, comp.stop_signal, timeout_s=self.config.stop_timeout_s, child=self._children.pop(name, None))
        started = self._spawn(name, comp)
        comp.wait_ready(spec, started)
        return started.record

    # -- stop --------------------------------------------------------------------------

    def stop(self) -> StopReport:
        """Stop every process of the run by its pid, check for residue, remove the folder.

        Idempotent; safe after a failed or interrupted start and from another process
        (`attach`). `residue` lists anything left (empty when clean)."""
        if self._spec is None:
            return StopReport(run_id="", folder=self.config.root, stopped={}, residue=[], folder_removed=False)
        with self._critical_section():
            report = stop_folder(self._spec.paths, timeout_s=self.config.stop_timeout_s, extra=self._started, children=self._children)
            self._started.clear()
            self._children.clear()
        return report

    def reap(self) -> list[str]:
        """Collect the exit status of the processes this object started that another process
        has stopped since (`live down` on an attached environment), so none is left a zombie;
        returns the components still running (left as they are)."""
        running = []
        for name, child in list(self._children.items()):
            if child.poll() is None:
                running.append(name)
            else:
                del self._children[name]
        return sorted(running)

    # -- status ------------------------------------------------------------------------

    def status(self) -> RunStatus:
        """Each component: its process alive, its ports listened on, its health check."""
        spec = self.spec
        record = read_run(spec.folder) or self._record
        records = records_of(spec.paths)
        rows = []
        for name in spec.components:
            rec = records.get(name)
            alive = rec is not None and procs.is_running(rec)
            ports = {p: spec.port(p) for p in PORTS[name]}
            listening = alive and len(procs.listening(ports.values())) == len(ports)
            health = component(name).health(spec) if alive else Health(ok=False, detail="not running")
            if alive and not listening:
                health = Health(ok=False, detail=f"not listening on {', '.join(map(str, ports.values()))}; {health.detail}")
            rows.append(
                ComponentStatus(
                    name=name, pid=rec.pid if rec else None, alive=alive, ports=ports, listening=listening, healthy=alive and listening and health.ok, detail=health.detail
                )
            )
        return RunStatus(
            run_id=spec.run_id,
            folder=spec.folder,
            state=record.state if record else "gone",
            detached=record is not None and record.owner is None,
            owner_pid=record.owner.pid if record and record.owner else None,
            components=rows,
            targets_file=spec.paths.targets,
        )

    # -- signals and context -----------------------------------------------------------

    @contextlib.contextmanager
    def _critical_section(self) -> Iterator[None]:
        self._critical += 1
        try:
            yield
        finally:
            self._critical -= 1
            if not self._critical and self._pending:
                signum = self._pending[0]
                self._pending.clear()
                self._interrupt(signum)

    def _on_signal(self, signum: int, frame: object) -> None:
        if self._critical:
            self._pending.append(signum)
            return
        self._interrupt(signum)

    def _interrupt(self, signum: int) -> None:
        self._interrupted = signum
        self.stop()
        self.restore_signal_handlers()
        signal.raise_signal(signum)  # now with the handler it had before: KeyboardInterrupt, exit, …

    def install_signal_handlers(self) -> None:
        """SIGINT and SIGTERM stop the environment, then act as before (main thread only; no-op elsewhere)."""
        if threading.current_thread() is not threading.main_thread() or self._previous:
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._on_signal)

    def restore_signal_handlers(self) -> None:
        """Put back the handlers `install_signal_handlers` replaced."""
        previous, self._previous = self._previous, {}
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    def __enter__(self) -> LiveEnvironment:
        self.install_signal_handlers()
        try:
            self.start()
        except BaseException:
            self.restore_signal_handlers()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            self.restore_signal_handlers()
