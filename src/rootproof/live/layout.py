"""A live run's folder: its layout, its `run.json`, its pidfiles, and the configuration it was made from.

```
<root>/<run_id>/
  run.json               RunRecord: spec (ports, binaries, config), state, owner pid + start time
  pids/<component>.pid   ProcessRecord (JSON): pid + start time of each process started
  secrets/               role passwords (0600), referenced by targets.yaml, never in it
  targets.yaml           the targets file naming every instance (docs/targets.md)
  postgres/              data/ (initdb), log/postgresql.log, sock/ (unix socket), startup.log
  redis/                 redis.conf (the diagnosis' ACL user), redis.log, working dir
  orders/                config.json, logs/order-service.jsonl, stdout.log
  nginx/                 nginx.conf, nginx.pid, logs/{error,access}.log, tmp/
  prometheus/            prometheus.yml, data/, *.log of Prometheus and both exporters
  load/                  stats.json, stdout.log
```

Everything a later command needs to find, check or stop a run is in `run.json` and the
pidfiles, so `rootproof live status` / `down` work from another process than the one that
started the run.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, get_args

from rootproof.live.procs import ProcessRecord

__all__ = [
    "COMPONENTS",
    "PORTS",
    "REQUIRES",
    "RUN_ID_PATTERN",
    "ComponentName",
    "LiveConfig",
    "Owner",
    "RunPaths",
    "RunRecord",
    "RunSpec",
    "RunState",
    "new_run_id",
    "read_pidfiles",
    "read_run",
    "run_folders",
    "with_requirements",
    "write_pidfile",
    "write_run",
]

ComponentName = Literal[
    "postgres", "redis", "order_service", "nginx", "postgres_exporter", "redis_exporter", "prometheus", "load"
]
"""The parts of an environment, each one recorded process (with its helpers: nginx's workers, PostgreSQL's backends)."""
COMPONENTS: tuple[ComponentName, ...] = get_args(ComponentName)
"""Every component, in start order (stopped in the reverse order)."""
REQUIRES: dict[ComponentName, tuple[ComponentName, ...]] = {
    "postgres": (),
    "redis": (),
    "order_service": ("postgres", "redis"),
    "nginx": ("order_service",),
    "postgres_exporter": ("postgres",),
    "redis_exporter": ("redis",),
    "prometheus": ("postgres_exporter", "redis_exporter", "order_service"),
    "load": ("nginx",),
}
"""What each component needs running first (added to a run that asks for the component)."""
PORTS: dict[ComponentName, tuple[str, ...]] = {
    "postgres": ("postgres",),
    "redis": ("redis",),
    "order_service": ("order_service", "order_admin"),
    "nginx": ("nginx",),
    "postgres_exporter": ("postgres_exporter",),
    "redis_exporter": ("redis_exporter",),
    "prometheus": ("prometheus",),
    "load": (),
}
"""The loopback ports each component listens on, by port name (the keys of `LiveConfig.ports`)."""
RUN_ID_PATTERN = re.compile(r"^[0-9]{8}-[0-9]{6}-[0-9a-f]{6}$")
"""A run id: UTC date and time of its start and 6 random hex digits (`20261201-120000-3fa9c2`)."""
RUN_FILE = "run.json"

RunState = Literal["starting", "up", "stopping", "failed"]
"""`starting` until every component is ready; `up`; `stopping` while being stopped; `failed`
when a start failed and its cleanup left something behind."""


@dataclass(frozen=True, kw_only=True)
class LiveConfig:
    """How to build an environment. Every default is what `rootproof live up` uses."""

    root: Path
    """The folder of run folders (`Settings.resolved_live_root()`: `<data dir>/live` by default)."""
    components: tuple[ComponentName, ...] = COMPONENTS
    """Which components to run; the ones they require are added (`REQUIRES`)."""
    redis_maxclients: int = 64
    """Redis `--maxclients`: kept small so a client leak reaches it."""
    pg_max_connections: int = 40
    """PostgreSQL `max_connections`."""
    pool_size: int = 5
    """The order service's SQLAlchemy QueuePool size (max_overflow is 0)."""
    pool_timeout_s: float = 3.0
    """Seconds a request waits for a pooled connection before `QueuePool limit … reached`."""
    leak_detection_s: float = 5.0
    """The order service logs a connection checked out longer than this (seconds) as a suspected leak."""
    proxy_read_timeout_s: int = 5
    """nginx `proxy_read_timeout` (seconds): the order service's delay knob can exceed it. Above
    `pool_timeout_s`, so a pool timeout reaches the client as the service's own 503, not a 504."""
    scrape_interval_s: int = 2
    """Prometheus' scrape (and evaluation) interval, seconds."""
    load_rate_per_s: float = 2.0
    """Requests per second of the background load through nginx (0 to 20)."""
    ports: Mapping[str, int] = field(default_factory=dict)
    """Fixed ports by port name (`PORTS`); the others are free loopback ports chosen at preflight."""
    binaries: Mapping[str, str] = field(default_factory=dict)
    """Paths overriding `rootproof.live.binaries.BINARIES` by binary name."""
    ready_timeout_s: float = 60.0
    """Longest wait for one component to become ready, seconds."""
    stop_timeout_s: float = 10.0
    """Seconds between a component's stop signal and SIGKILL."""

    def __post_init__(self) -> None:
        unknown = [c for c in self.components if c not in COMPONENTS]
        if unknown:
            raise ValueError(f"unknown component {unknown[0]!r} (expected some of {', '.join(COMPONENTS)})")
        names = {p for ps in PORTS.values() for p in ps}
        bad = [p for p in self.ports if p not in names]
        if bad:
            raise ValueError(f"unknown port name {bad[0]!r} (expected some of {', '.join(sorted(names))})")
        if not 0 <= self.load_rate_per_s <= 20:
            raise ValueError(f"load_rate_per_s must be 0 to 20 (got {self.load_rate_per_s})")
        if self.redis_maxclients < 8 or self.pool_size < 1 or self.pg_max_connections < 10:
            raise ValueError("redis_maxclients >= 8, pool_size >= 1 and pg_max_connections >= 10 are required")

    def to_json(self) -> dict[str, Any]:
        """A JSON object (paths as text)."""
        data = asdict(self)
        data["root"] = str(self.root)
        data["components"] = list(self.components)
        data["ports"] = dict(self.ports)
        data["binaries"] = dict(self.binaries)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LiveConfig:
        """The config `to_json` wrote (unknown keys ignored: a newer writer)."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["root"] = Path(str(values["root"]))
        values["components"] = tuple(values.get("components", COMPONENTS))
        return cls(**values)


def with_requirements(components: tuple[ComponentName, ...]) -> tuple[ComponentName, ...]:
    """`components` and everything they require, in start order."""
    wanted: set[ComponentName] = set()
    todo = list(components)
    while todo:
        c = todo.pop()
        if c not in wanted:
            wanted.add(c)
            todo.extend(REQUIRES[c])
    return tuple(c for c in COMPONENTS if c in wanted)


def new_run_id() -> str:
    """A fresh run id (`RUN_ID_PATTERN`)."""
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


@dataclass(frozen=True)
class RunPaths:
    """Where everything of one run lives (the layout in this module's docstring)."""

    folder: Path

    @property
    def run_file(self) -> Path:
        return self.folder / RUN_FILE

    @property
    def pids(self) -> Path:
        return self.folder / "pids"

    @property
    def secrets(self) -> Path:
        return self.folder / "secrets"

    @property
    def targets(self) -> Path:
        return self.folder / "targets.yaml"

    @property
    def pg(self) -> Path:
        return self.folder / "postgres"

    @property
    def pg_data(self) -> Path:
        return self.folder / "postgres" / "data"

    @property
    def pg_log_dir(self) -> Path:
        return self.folder / "postgres" / "log"

    @property
    def pg_log(self) -> Path:
        return self.folder / "postgres" / "log" / "postgresql.log"

    @property
    def pg_sock(self) -> Path:
        return self.folder / "postgres" / "sock"

    @property
    def redis(self) -> Path:
        return self.folder / "redis"

    @property
    def redis_log(self) -> Path:
        return self.folder / "redis" / "redis.log"

    @property
    def orders(self) -> Path:
        return self.folder / "orders"

    @property
    def orders_logs(self) -> Path:
        return self.folder / "orders" / "logs"

    @property
    def orders_log(self) -> Path:
        return self.folder / "orders" / "logs" / "order-service.jsonl"

    @property
    def nginx(self) -> Path:
        return self.folder / "nginx"

    @property
    def nginx_conf(self) -> Path:
        return self.folder / "nginx" / "nginx.conf"

    @property
    def nginx_error_log(self) -> Path:
        return self.folder / "nginx" / "logs" / "error.log"

    @property
    def nginx_access_log(self) -> Path:
        return self.folder / "nginx" / "logs" / "access.log"

    @property
    def prometheus(self) -> Path:
        return self.folder / "prometheus"

    @property
    def load(self) -> Path:
        return self.folder / "load"

    @property
    def load_stats(self) -> Path:
        return self.folder / "load" / "stats.json"


    def secret(self, role: str) -> Path:
        """The password file of database or cache role `role`."""
        return self.secrets / f"{role}.password"

    def pidfile(self, component: str) -> Path:
        """The pidfile of `component`."""
        return self.pids / f"{component}.pid"


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """One run, resolved: what was asked for and what preflight chose (ports, binaries)."""

    run_id: str
    folder: Path
    config: LiveConfig
    components: tuple[ComponentName, ...]
    """The components of this run, requirements added, in start order."""
    ports: Mapping[str, int]
    """Every port of the run's components, by port name."""
    binaries: Mapping[str, str]
    """Resolved binary paths by name."""
    pg_os_user: str | None
    """The OS user PostgreSQL runs as (`postgres` when rootproof runs as root), None: this user."""
    python: str = sys.executable
    """The interpreter that runs the order service and the load generator."""

    @property
    def paths(self) -> RunPaths:
        """The run folder's layout."""
        return RunPaths(self.folder)

    def port(self, name: str) -> int:
        """The port named `name` (KeyError when the run has no such component)."""
        return int(self.ports[name])

    def to_json(self) -> dict[str, Any]:
        """`run.json`'s `spec`."""
        return {
            "run_id": self.run_id,
            "folder": str(self.folder),
            "config": self.config.to_json(),
            "components": list(self.components),
            "ports": dict(self.ports),
            "binaries": dict(self.binaries),
            "pg_os_user": self.pg_os_user,
            "python": self.python,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunSpec:
        """The spec `to_json` wrote."""
        return cls(
            run_id=str(data["run_id"]),
            folder=Path(str(data["folder"])),
            config=LiveConfig.from_json(data["config"]),
            components=tuple(data["components"]),
            ports={str(k): int(v) for k, v in data["ports"].items()},
            binaries={str(k): str(v) for k, v in data["binaries"].items()},
            pg_os_user=data.get("pg_os_user"),
            python=str(data.get("python") or sys.executable),
        )


@dataclass(frozen=True, kw_only=True)
class Owner:
    """The process a run belongs to: while it runs, no other process cleans the run up."""

    pid: int
    start_time: int


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    """`run.json`: the spec, the state and the owner."""

    spec: RunSpec
    state: RunState
    owner: Owner | None
    """None for a detached run (`rootproof live up`): it stays until `rootproof live down`."""
    created_at: str

    def with_state(self, state: RunState, *, owner: Owner | None | Literal["keep"] = "keep") -> RunRecord:
        """The same record in another state (and, when given, with another owner)."""
        return replace(self, state=state, owner=self.owner if owner == "keep" else owner)


def _write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def write_run(record: RunRecord) -> None:
    """Write `run.json` atomically (a reader sees the old or the new file, never half of one)."""
    doc = {
        "version": 1,
        "spec": record.spec.to_json(),
        "state": record.state,
        "owner": None if record.owner is None else {"pid": record.owner.pid, "start_time": record.owner.start_time},
        "created_at": record.created_at,
    }
    _write_atomic(RunPaths(record.spec.folder).run_file, json.dumps(doc, indent=1) + "\n")


def read_run(folder: Path) -> RunRecord | None:
    """The run folder's record; None when it has no readable, well-formed `run.json`."""
    try:
        doc = json.loads((folder / RUN_FILE).read_text(encoding="utf-8"))
        owner = doc.get("owner")
        return RunRecord(
            spec=RunSpec.from_json(doc["spec"]),
            state=doc["state"],
            owner=None if owner is None else Owner(pid=int(owner["pid"]), start_time=int(owner["start_time"])),
            created_at=str(doc.get("created_at", "")),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def write_pidfile(paths: RunPaths, record: ProcessRecord) -> None:
    """Record a started process in the run folder (atomically)."""
    paths.pids.mkdir(parents=True, exist_ok=True)
    _write_atomic(paths.pidfile(record.component), json.dumps(record.as_dict()) + "\n")


def read_pidfiles(paths: RunPaths) -> dict[str, ProcessRecord]:
    """Every well-formed pidfile of the run, by component (malformed ones are skipped)."""
    out: dict[str, ProcessRecord] = {}
    try:
        entries = sorted(paths.pids.glob("*.pid"))
    except OSError:
        return out
    for path in entries:
        try:
            rec = ProcessRecord.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        out[rec.component] = rec
    return out


def run_folders(root: Path) -> list[Path]:
    """The run folders under `root` (names matching `RUN_ID_PATTERN`), oldest first."""
    try:
        return sorted(p for p in root.iterdir() if p.is_dir() and RUN_ID_PATTERN.match(p.name))
    except OSError:
        return []
