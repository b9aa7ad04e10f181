"""Run folders under a live root: listing them, telling stale ones, stopping one from its pidfiles.

Everything here works from what a run folder holds (`run.json`, `pids/`), so it serves the
process that started a run (`LiveEnvironment.stop()`), another one (`rootproof live down`) and
the next preflight (stale runs of killed owners) alike. A run is **stale** when its owner is
gone (not running, or its pid is another process now), when it was left up (detached) and none
of its processes runs, or when it has no readable `run.json` (its start was killed before writing
it). `stop_folder` stops the recorded processes in the reverse start order, then any process of
the run no pidfile names (`procs.unrecorded_components`), lists the residue and removes the
folder when no process of the run is left.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rootproof.errors import LiveEnvironmentError, UsageError
from rootproof.live import procs
from rootproof.live.binaries import BINARIES, PG_BIN
from rootproof.live.components import COMPONENT_TYPES
from rootproof.live.components.postgres import postmaster_pid
from rootproof.live.layout import (
    COMPONENTS,
    RUN_ID_PATTERN,
    Owner,
    RunPaths,
    RunRecord,
    read_pidfiles,
    read_run,
    run_folders,
    write_run,
)
from rootproof.live.procs import ProcessRecord, StopOutcome

__all__ = [
    "CleanedRun",
    "RunInfo",
    "StopReport",
    "clean_stale",
    "list_runs",
    "owner_of_this_process",
    "records_of",
    "root_lock",
    "run_folder",
    "stop_folder",
    "stop_run",
]


@dataclass(frozen=True, kw_only=True)
class CleanedRun:
    """A stale run preflight cleaned up."""

    run_id: str
    reason: str
    """Why it was stale (`its owner, pid 123, is gone`)."""
    stopped: dict[str, StopOutcome]
    """Each recorded process and what stopping it took (`not_running` when it had already exited)."""
    residue: list[str]


@dataclass(frozen=True, kw_only=True)
class StopReport:
    """What stopping a run did and left."""

    run_id: str
    folder: Path
    stopped: dict[str, StopOutcome]
    residue: list[str]
    """Everything left behind: a process still running, a port still listened on, the folder; empty when clean."""
    folder_removed: bool

    def as_dict(self) -> dict[str, Any]:
        """A JSON object."""
        return {**asdict(self), "folder": str(self.folder)}


@dataclass(frozen=True, kw_only=True)
class RunInfo:
    """A run folder found under a root."""

    run_id: str
    folder: Path
    state: str | None
    """None when its `run.json` is missing or unreadable."""
    detached: bool
    owner_pid: int | None
    stale: str | None
    """Why the next preflight would clean it up; None for a live run."""


def owner_of_this_process() -> Owner:
    """This process as a run's owner (pid and start time)."""
    st = procs.read_stat(os.getpid())
    return Owner(pid=os.getpid(), start_time=st.start_time if st is not None else 0)


def _owner_alive(owner: Owner) -> bool:
    return procs.is_running(ProcessRecord(component="owner", pid=owner.pid, start_time=owner.start_time, argv0=""))


def records_of(paths: RunPaths) -> dict[str, ProcessRecord]:
    """The run's pidfiles, and a postmaster not recorded yet (killed while pg_ctl was starting it)."""
    records = read_pidfiles(paths)
    if "postgres" not in records:
        pid = postmaster_pid(paths.pg_data)
        rec = ProcessRecord.of("postgres", pid, "postgres") if pid is not None else None
        if rec is not None:
            records["postgres"] = rec
    return records


def _programs(paths: RunPaths) -> set[str]:
    """The programs a run's processes run: its resolved binaries, the PostgreSQL server, its Python."""
    record = read_run(paths.folder)
    if record is not None:
        found = set(record.spec.binaries.values()) | {record.spec.python}
    else:
        found = {str(b.debian_path) for b in BINARIES.values()} | {sys.executable}
    return found | {str(PG_BIN / "postgres")}


def _stale_reason(record: RunRecord | None, paths: RunPaths) -> str | None:
    if record is None:
        return "it has no readable run.json (its start was killed before it was written)"
    if record.owner is not None:
        return None if _owner_alive(record.owner) else f"its owner, pid {record.owner.pid}, is gone"
    if any(procs.is_running(r) for r in records_of(paths).values()):
        return None
    return "it was left up (detached) but none of its processes runs"


def stop_folder(
    paths: RunPaths,
    *,
    timeout_s: float,
    extra: Mapping[str, ProcessRecord] | None = None,
    children: Mapping[str, subprocess.Popen[bytes]] | None = None,
) -> StopReport:
    """Stop every process of the run in `paths.folder`, check for residue, and remove the folder
    when no process of the run is left. `extra`: records not in a pidfile yet; `children`: the
    Popen of those this process started (to reap them)."""
    record = read_run(paths.folder)
    if record is not None:
        with contextlib.suppress(OSError):
            write_run(record.with_state("stopping"))
    ports = dict(record.spec.ports) if record is not None else {}
    records = {**(extra or {}), **records_of(paths)}
    stopped: dict[str, StopOutcome] = {}
    order = [c for c in reversed(COMPONENTS) if c in records] + [c for c in records if c not in COMPONENTS]
    for name in order:
        sig = next((t.stop_signal for c, t in COMPONENT_TYPES.items() if c == name), signal.SIGTERM)
        stopped[name] = procs.stop(records[name], sig, timeout_s=timeout_s, child=(children or {}).get(name))
    # What no record names but is the run's: a process whose starter was killed before recording
    # it, or a PostgreSQL backend (each is a session of its own) that outlived a killed postmaster.
    if paths.folder.exists():
        for rec in procs.unrecorded_components(paths.folder, _programs(paths)):
            records[rec.component] = rec
            stopped[rec.component] = procs.stop(rec, signal.SIGTERM, timeout_s=timeout_s)
    residue = [f"process {r.pid} ({name}: {r.argv0}) still running" for name, r in records.items() if procs.is_running(r)]
    if paths.folder.exists():
        residue += [f"process {pid} still runs in the run folder: {cmd}" for pid, cmd in procs.processes_under(paths.folder)]
    residue += [f"port 127.0.0.1:{port} ({name}) still listened on" for name, port in ports.items() if procs.listening([port])]
    removed = False
    if not any(r.startswith("process") for r in residue):
        problems: list[str] = []
        shutil.rmtree(paths.folder, onerror=lambda fn, path, exc: problems.append(f"{path}: {exc[1]}"))
        removed = not paths.folder.exists()
        if not removed:
            residue.append(f"folder {paths.folder} could not be removed: {'; '.join(problems[:3]) or 'still there'}")
    else:
        residue.append(f"folder {paths.folder} kept (processes of the run still run; `rootproof live down` retries)")
        if record is not None:
            with contextlib.suppress(OSError):
                write_run(record.with_state("failed"))
    return StopReport(run_id=paths.folder.name, folder=paths.folder, stopped=stopped, residue=residue, folder_removed=removed)


@contextlib.contextmanager
def root_lock(root: Path) -> Iterator[None]:
    """Hold `<root>/.lock` (exclusive): preflights look for stale runs and claim folders under it."""
    fd = os.open(root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def list_runs(root: Path) -> list[RunInfo]:
    """Every run folder under `root`, oldest first, with why it is stale (if it is)."""
    out = []
    for folder in run_folders(root):
        record = read_run(folder)
        out.append(
            RunInfo(
                run_id=folder.name,
                folder=folder,
                state=record.state if record else None,
                detached=record is not None and record.owner is None,
                owner_pid=record.owner.pid if record and record.owner else None,
                stale=_stale_reason(record, RunPaths(folder)),
            )
        )
    return out


def run_folder(root: Path, run_id: str) -> Path:
    """The folder of run `run_id` under `root`; UsageError naming the runs there when there is none."""
    if not RUN_ID_PATTERN.match(run_id):
        raise UsageError(f"{run_id!r} is not a run id (expected the form 20261201-120000-3fa9c2)")
    folder = root / run_id
    if not folder.is_dir():
        known = ", ".join(r.run_id for r in list_runs(root)) or "none"
        raise UsageError(f"no live run {run_id} under {root} (runs there: {known})")
    return folder


def stop_run(root: Path, run_id: str, *, timeout_s: float | None = None) -> StopReport:
    """Stop run `run_id` under `root` from its pidfiles and remove its folder (`rootproof live
    down`), whoever started it; a folder without a readable run.json is stopped from what
    pidfiles it has. `timeout_s`: default the run's `stop_timeout_s`. UsageError when there is no
    such run folder."""
    folder = run_folder(root, run_id)
    record = read_run(folder)
    bound = timeout_s if timeout_s is not None else record.spec.config.stop_timeout_s if record is not None else 10.0
    return stop_folder(RunPaths(folder), timeout_s=bound)


def clean_stale(root: Path, timeout_s: float, progress: Callable[[str], None] | None = None) -> list[CleanedRun]:
    """Stop and remove every stale run under `root` (call it holding `root_lock`); LiveEnvironmentError
    when one cannot be cleaned. Live runs are not touched."""
    cleaned = []
    for folder in run_folders(root):
        record = read_run(folder)
        paths = RunPaths(folder)
        reason = _stale_reason(record, paths)
        if reason is None:
            continue
        report = stop_folder(paths, timeout_s=timeout_s)
        stopped, residue = report.stopped, report.residue
        cleaned.append(CleanedRun(run_id=folder.name, reason=reason, stopped=stopped, residue=residue))
        if progress is not None:
            progress(f"cleaned stale run {folder.name}: {reason}")
        if residue:
            raise LiveEnvironmentError("environment", f"stale run {folder.name} ({reason}) could not be cleaned: {'; '.join(residue)}")
    return cleaned


