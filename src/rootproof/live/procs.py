"""Processes the live environment started: their records, stopping them by pid, and ports.

A `ProcessRecord` is a pid together with the process's start time (field 22 of
`/proc/<pid>/stat`, clock ticks since boot). A pid alone can be recycled by an unrelated
process once ours has exited; the pair cannot, so every check and every signal goes through
`is_running(record)` first and a recycled pid is never signalled.

Every component is started in a session of its own (`start_new_session`, or `setsid` inside
`pg_ctl`), so its pid is also its process group id and the group holds its helpers (nginx's
workers; PostgreSQL's backends each start a session of their own and end with their
postmaster). `stop()` signals the recorded process, waits a bound, then SIGKILLs its group,
and finally kills members of the group that outlived the leader. A
group is only signalled while it is provably ours: its leader is the recorded process, or the
leader is gone and the pid is not in use (Linux does not reuse a number while it is some
process group's id, so members of that group can only be the leader's).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "ProcessRecord",
    "StopOutcome",
    "group_members",
    "is_running",
    "listening",
    "port_free",
    "processes_under",
    "read_stat",
    "reserve_ports",
    "stop",
    "unrecorded_components",
]

StopOutcome = Literal["not_running", "stopped", "killed", "left_running"]
"""What `stop()` did: nothing to do, stopped by its signal, SIGKILLed, or could not stop it."""


@dataclass(frozen=True, kw_only=True)
class ProcStat:
    """The fields of `/proc/<pid>/stat` the manager uses."""

    pid: int
    state: str
    """`R`, `S`, `D`, `Z` (exited, not yet reaped), …"""
    pgrp: int
    start_time: int
    """Clock ticks after boot at which the process started."""


@dataclass(frozen=True, kw_only=True)
class ProcessRecord:
    """A process the environment started: what a pidfile holds."""

    component: str
    """The component it belongs to (`postgres`, `nginx`, …)."""
    pid: int
    start_time: int
    """Field 22 of `/proc/<pid>/stat` when it was recorded: with the pid, the process's identity."""
    argv0: str
    """The program it runs (for messages)."""

    def as_dict(self) -> dict[str, Any]:
        """The pidfile's JSON object."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProcessRecord:
        """A record from a pidfile's JSON object (ValueError/KeyError/TypeError when malformed)."""
        return cls(component=str(data["component"]), pid=int(data["pid"]), start_time=int(data["start_time"]), argv0=str(data["argv0"]))

    @classmethod
    def of(cls, component: str, pid: int, argv0: str) -> ProcessRecord | None:
        """The record of a process running now, None when `pid` is not running."""
        st = read_stat(pid)
        if st is None or st.state in ("Z", "X"):
            return None
        return cls(component=component, pid=pid, start_time=st.start_time, argv0=argv0)


def read_stat(pid: int) -> ProcStat | None:
    """`/proc/<pid>/stat` parsed, None when there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return None
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or parentheses itself.
    rest = raw[raw.rfind(")") + 2 :].split()
    try:
        return ProcStat(pid=pid, state=rest[0], pgrp=int(rest[2]), start_time=int(rest[19]))
    except (IndexError, ValueError):
        return None


def _reap(pid: int) -> None:
    """Collect `pid`'s exit status if it is our child (so it does not linger as a zombie)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def is_running(record: ProcessRecord) -> bool:
    """Whether the recorded process is still running (same pid and start time, not a zombie)."""
    _reap(record.pid)
    st = read_stat(record.pid)
    return st is not None and st.start_time == record.start_time and st.state not in ("Z", "X")


def _all_stats() -> Iterable[ProcStat]:
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            st = read_stat(int(entry.name))
            if st is not None:
                yield st


def group_members(record: ProcessRecord) -> list[int]:
    """Live pids of the recorded process's group (itself included) while the group is provably
    ours; empty when the group is gone or its id now belongs to an unrelated process."""
    leader = read_stat(record.pid)
    if leader is not None and leader.start_time != record.start_time:
        return []  # the pid was recycled: the group with that id (if any) is not ours
    return [st.pid for st in _all_stats() if st.pgrp == record.pid and st.state not in ("Z", "X")]


def _wait_gone(record: ProcessRecord, timeout_s: float, child: subprocess.Popen[bytes] | None) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if child is not None:
            child.poll()
        if not is_running(record):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def _kill(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def stop(
    record: ProcessRecord,
    sig: int = signal.SIGTERM,
    *,
    timeout_s: float = 10.0,
    child: subprocess.Popen[bytes] | None = None,
) -> StopOutcome:
    """Stop the recorded process by its own pid: `sig`, then SIGKILL to its group after
    `timeout_s`; then SIGKILL what is left of its group. `child` is its Popen when this process
    started it (to reap it). Never signals a recycled pid."""
    outcome: StopOutcome = "not_running"
    if is_running(record):
        _kill(record.pid, sig)
        outcome = "stopped"
        if not _wait_gone(record, timeout_s, child):
            for pid in group_members(record):
                _kill(pid, signal.SIGKILL)
            outcome = "killed" if _wait_gone(record, 5.0, child) else "left_running"
    # Helpers of the group that outlived their leader (nginx workers, PostgreSQL backends that
    # have not noticed yet): a short grace, then SIGKILL.
    deadline = time.monotonic() + 2.0
    members = group_members(record)
    while members and time.monotonic() < deadline:
        time.sleep(0.05)
        members = group_members(record)
    for pid in members:
        _kill(pid, signal.SIGKILL)
        outcome = "killed" if outcome != "left_running" else outcome
    if members:
        time.sleep(0.05)
        if group_members(record):
            outcome = "left_running"
    if child is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=0.5)
    return outcome


def unrecorded_components(folder: Path, programs: Iterable[str]) -> list[ProcessRecord]:
    """Processes that are components of the run in `folder` although no pidfile names them
    (their starter was killed between starting and recording them): session leaders (every
    component starts a session) working inside `folder` and running one of `programs` (the
    run's binaries and interpreter). A shell or a `tail -f` someone runs there is not one."""
    wanted = {os.path.realpath(p) for p in programs}
    out = []
    for pid, _cmd in processes_under(folder):
        try:
            leader = os.getsid(pid) == pid
            exe = os.path.realpath(os.readlink(f"/proc/{pid}/exe"))
        except OSError:
            continue
        if leader and exe in wanted:
            rec = ProcessRecord.of(f"unrecorded-{pid}", pid, exe)
            if rec is not None:
                out.append(rec)
    return out


def processes_under(folder: Path) -> list[tuple[int, str]]:
    """Processes whose working folder is `folder` or inside it, as (pid, command): what a run
    folder's residue check reports (a component's helpers start in its folder)."""
    out: list[tuple[int, str]] = []
    root = str(folder.resolve())
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry.name}/cwd")
        except OSError:
            continue
        if cwd == root or cwd.startswith(root + "/"):
            try:
                cmd = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                cmd = "?"
            st = read_stat(int(entry.name))
            if st is not None and st.state not in ("Z", "X"):
                out.append((int(entry.name), cmd[:200]))
    return out


def _listening_ports() -> set[int]:
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text(encoding="ascii", errors="replace").splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) > 3 and parts[3] == "0A":  # TCP_LISTEN
                ports.add(int(parts[1].rsplit(":", 1)[1], 16))
    return ports


def listening(ports: Iterable[int]) -> list[int]:
    """Which of `ports` some socket listens on now (any address), sorted."""
    now = _listening_ports()
    return sorted(p for p in set(ports) if p in now)


def reserve_ports(count: int, *, taken: Iterable[int] = ()) -> list[int]:
    """`count` distinct loopback ports nothing listens on now (bound all at once, then released),
    none of them in `taken`."""
    socks: list[socket.socket] = []
    out: list[int] = []
    avoid = set(taken)
    try:
        while len(out) < count:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
            if port not in avoid:
                out.append(port)
                avoid.add(port)
    finally:
        for s in socks:
            s.close()
    return out


def port_free(port: int) -> bool:
    """Whether 127.0.0.1:`port` can be bound now (nothing listens there)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind: TIME_WAIT is no obstacle
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return port not in _listening_ports()
