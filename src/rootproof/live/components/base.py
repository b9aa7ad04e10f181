"""What every component of the live environment is: prepared once, spawned, waited for, checked.

A `Component` is one process of the environment (with its helpers in its process group). The
environment calls, in order, `prepare` (files, `initdb`: once per run), `spawn` (start the
process and return its `Started`: the environment writes the pidfile at once), `wait_ready`
(bounded; the default polls `health` and fails as soon as the process exits) and `after_ready`
(PostgreSQL's schema and roles). `health` is also what `rootproof live status` shows. Nothing
here keeps state between calls: everything a component needs is in the `RunSpec`, so a run
started by one process can be checked and restarted by another.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from rootproof.errors import LiveEnvironmentError
from rootproof.live.layout import ComponentName, RunSpec
from rootproof.live.procs import ProcessRecord, is_running, read_stat

__all__ = ["Component", "Health", "Started", "http_health", "log_tail", "redis_ping", "spawn_process"]


@dataclass(frozen=True, kw_only=True)
class Health:
    """One health check's answer."""

    ok: bool
    detail: str
    """What was checked and what it answered (`GET /healthz: 200`), or why it failed."""


@dataclass(frozen=True, kw_only=True)
class Started:
    """A process the environment has just started."""

    record: ProcessRecord
    child: subprocess.Popen[bytes] | None = None
    """Its Popen when this process is its parent (kept to reap it); None for a daemon (PostgreSQL)."""


def log_tail(path: Path | None, lines: int = 8) -> str:
    """The last lines of a log file, for failure messages ('' when there is none)."""
    if path is None:
        return ""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 8192))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text.splitlines()[-lines:] if line.strip())


def spawn_process(
    component: str,
    argv: list[str],
    *,
    cwd: Path,
    log: Path,
    env: Mapping[str, str] | None = None,
) -> Started:
    """Start `argv` in a session of its own (its pid is its process group), stdin from
    /dev/null, stdout and stderr appended to `log`, and record it."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        child = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            start_new_session=True,
            close_fds=True,
        )
    # The child exists from fork on; even if it has exited already it is our unreaped child, so
    # its stat (and start time) is still there to be recorded.
    st = read_stat(child.pid)
    start_time = st.start_time if st is not None else 0
    record = ProcessRecord(component=component, pid=child.pid, start_time=start_time, argv0=argv[0])
    return Started(record=record, child=child)


def http_health(url: str, *, expect: str | None = None, timeout_s: float = 2.0) -> Health:
    """GET `url` (no proxy, no redirects): healthy on 200 (and `expect` in the body, if given)."""
    import httpx

    try:
        resp = httpx.get(url, timeout=timeout_s, trust_env=False, follow_redirects=False)
    except httpx.HTTPError as exc:
        return Health(ok=False, detail=f"GET {url}: {type(exc).__name__}: {exc}"[:300])
    if resp.status_code != 200:
        return Health(ok=False, detail=f"GET {url}: HTTP {resp.status_code}")
    if expect is not None and expect not in resp.text:
        return Health(ok=False, detail=f"GET {url}: 200 without {expect!r}")
    return Health(ok=True, detail=f"GET {url}: 200")


def redis_ping(port: int, *, timeout_s: float = 2.0) -> Health:
    """`PING` on a new connection to 127.0.0.1:`port` (RESP, no client library): +PONG is healthy."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
            s.sendall(b"PING\r\n")
            reply = s.recv(256)
    except OSError as exc:
        return Health(ok=False, detail=f"PING 127.0.0.1:{port}: {exc}")
    if reply.startswith(b"+PONG"):
        return Health(ok=True, detail="PING: PONG")
    return Health(ok=False, detail=f"PING: {reply[:120].decode(errors='replace').strip()}")


class Component(ABC):
    """One process of the environment (see the module docstring for the calling order)."""

    name: ClassVar[ComponentName]
    binaries: ClassVar[tuple[str, ...]] = ()
    """The binaries (`rootproof.live.binaries.BINARIES` names) preflight must find."""
    stop_signal: ClassVar[int] = signal.SIGTERM
    """The signal that stops it quickly and cleanly (SIGKILL follows after the run's bound)."""
    spawn_early: ClassVar[bool] = False
    """Spawned before the others (its slow start overlaps theirs); still waited for in its turn,
    when what its readiness needs runs."""

    def prepare(self, spec: RunSpec) -> None:  # noqa: B027 - optional step
        """Write its files (config, data folder) before the first start; default: nothing."""

    @abstractmethod
    def spawn(self, spec: RunSpec) -> Started:
        """Start the process (not waiting for it to be ready)."""

    @abstractmethod
    def health(self, spec: RunSpec) -> Health:
        """Whether it serves now (a real request: SQL readiness, PING, HTTP)."""

    def log_file(self, spec: RunSpec) -> Path | None:
        """Its log, quoted in failure messages."""
        return None

    def after_ready(self, spec: RunSpec) -> None:  # noqa: B027 - optional step
        """Work once it is ready for the first time (PostgreSQL's schema); default: nothing."""

    def wait_ready(self, spec: RunSpec, started: Started) -> None:
        """Poll `health` until it passes; LiveEnvironmentError when the process exits first or
        `ready_timeout_s` passes (quoting the end of its log)."""
        deadline = time.monotonic() + spec.config.ready_timeout_s
        health = Health(ok=False, detail="not checked yet")
        while True:
            if started.child is not None:
                started.child.poll()
            if not is_running(started.record):
                code = started.child.returncode if started.child is not None else None
                status = f" with status {code}" if code is not None else ""
                raise LiveEnvironmentError(self.name, f"exited{status} before it was ready{self._log_hint(spec)}")
            health = self.health(spec)
            if health.ok:
                return
            if time.monotonic() >= deadline:
                raise LiveEnvironmentError(
                    self.name, f"not ready after {spec.config.ready_timeout_s:g} s ({health.detail}){self._log_hint(spec)}"
                )
            time.sleep(0.1)

    def _log_hint(self, spec: RunSpec) -> str:
        path = self.log_file(spec)
        tail = log_tail(path)
        return f"; {path}: {tail}" if tail else (f"; see {path}" if path else "")
