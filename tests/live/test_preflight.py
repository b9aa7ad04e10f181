"""A broken preflight or start is one clear error naming what failed (the live benchmark's future
`infra_invalid`), and whatever had been started is stopped: a missing binary (with its Debian
package), a port already taken, a component that exits at start, an exception inside the
`with` block, a live root the CLI cannot use. And a recycled pid is never signalled."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rootproof.errors import ConfigError, LiveConfigError, LiveEnvironmentError, MissingBinary, UsageError
from rootproof.live import LiveConfig, LiveEnvironment, list_runs, stop_run
from rootproof.live.layout import Owner, RunPaths, RunRecord, RunSpec, new_run_id, read_pidfiles, write_run
from rootproof.live.procs import (
    ProcessRecord,
    is_running,
    listening,
    processes_under,
    stop,
    unrecorded_components,
)

from .support import assert_gone, cli, fresh_root, need_binaries, owner, read_until, reap, remove_root

pytestmark = [pytest.mark.services, pytest.mark.slow]


@pytest.fixture
def root() -> Iterator[Path]:
    path = fresh_root()
    yield path
    remove_root(path)


def test_a_missing_binary_is_named_with_its_debian_package_and_claims_nothing(root: Path) -> None:
    cfg = LiveConfig(root=root, components=("redis",), binaries={"redis-server": str(root / "no" / "redis-server")})
    with pytest.raises(MissingBinary, match=re.escape(f"redis: redis-server is not installed (looked at {root / 'no' / 'redis-server'}); install the Debian package redis-server: apt-get install redis-server")) as info:
        LiveEnvironment(cfg).preflight()
    assert isinstance(info.value, ConfigError) and info.value.component == "redis"  # exit 2 from the CLI
    assert list_runs(root) == []


def test_a_port_already_in_use_fails_preflight_naming_the_component_and_the_port(root: Path) -> None:
    need_binaries(("redis",))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(LiveEnvironmentError, match=re.escape(f"redis: port 127.0.0.1:{port} (redis) is already in use")):
            LiveEnvironment(LiveConfig(root=root, components=("redis",), ports={"redis": port})).preflight()
    assert list_runs(root) == []


def test_a_component_that_exits_at_start_is_named_and_what_was_started_is_stopped(root: Path) -> None:
    need_binaries(("postgres", "redis"))
    env = LiveEnvironment(LiveConfig(root=root, components=("postgres", "redis"), binaries={"redis-server": "/bin/false"}))
    with pytest.raises(LiveEnvironmentError, match=r"^redis: exited with status 1 before it was ready") as info:
        env.start()
    assert info.value.component == "redis"
    assert not env.folder.exists() and list_runs(root) == []
    assert listening(env.spec.ports.values()) == []  # PostgreSQL, started first, was stopped


def test_an_exception_inside_the_with_block_stops_everything(root: Path) -> None:
    need_binaries(("redis",))
    with pytest.raises(RuntimeError, match="a phase failed"), LiveEnvironment(LiveConfig(root=root, components=("redis",))) as env:
        records = list(read_pidfiles(RunPaths(env.folder)).values())
        assert [r.component for r in records] == ["redis"] and all(is_running(r) for r in records)
        assert signal.getsignal(signal.SIGTERM) == env._on_signal  # installed for the block
        raise RuntimeError("a phase failed")
    assert_gone(records, list(env.spec.ports.values()), env.folder)
    assert signal.getsignal(signal.SIGTERM) is not env._on_signal  # and put back


def test_up_with_a_live_root_that_is_a_file_exits_2_with_one_line(root: Path) -> None:
    target = root / "a-file"
    target.write_text("not a folder\n", encoding="utf-8")
    p = cli("live", "up", root=root, ROOTPROOF_LIVE_ROOT=str(target))
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines() == [f"Error: ROOTPROOF_LIVE_ROOT: {target} is not a folder"]


def test_down_and_status_of_an_unknown_run_exit_2_naming_it(root: Path) -> None:
    for args in (("live", "down", "20260101-000000-abcdef"), ("live", "status", "../etc")):
        p = cli(*args, root=root)
        assert p.returncode == 2, (args, p.stderr)
        (line,) = p.stderr.strip().splitlines()
        assert line.startswith("Error: ") and args[2] in line and "Traceback" not in p.stderr
    with pytest.raises(UsageError, match=re.escape("'../etc' is not a run id")):
        stop_run(root, "../etc")


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs PostgreSQL as another OS user")
def test_a_root_the_postgres_user_cannot_reach_is_a_config_error_naming_the_fix(root: Path) -> None:
    need_binaries(("postgres",))
    closed = root / "closed"
    closed.mkdir(mode=0o700)
    closed.chmod(0o700)
    with pytest.raises(LiveConfigError, match=re.escape(f"{closed} has mode 700); set ROOTPROOF_LIVE_ROOT")):
        LiveEnvironment(LiveConfig(root=closed / "live", components=("postgres",))).preflight()


def test_a_recycled_pid_is_never_signalled() -> None:
    other = subprocess.Popen(["sleep", "30"])
    try:
        real = ProcessRecord.of("redis", other.pid, "sleep")
        assert real is not None
        recycled = ProcessRecord(component="redis", pid=other.pid, start_time=real.start_time - 1, argv0="redis-server")
        assert not is_running(recycled)
        assert stop(recycled, timeout_s=0.5) == "not_running"
        time.sleep(0.1)
        assert other.poll() is None and is_running(real)
        assert stop(real, timeout_s=5, child=other) == "stopped" and other.poll() is not None
    finally:
        if other.poll() is None:
            other.kill()
        other.wait()


def test_a_component_started_but_never_recorded_is_still_cleaned_and_a_shell_there_is_not(root: Path) -> None:
    need_binaries(("redis",))
    # A stale run whose owner died between starting a process and writing its pidfile.
    folder = root / new_run_id()
    (folder / "pids").mkdir(parents=True)
    spec = RunSpec(run_id=folder.name, folder=folder, config=LiveConfig(root=root), components=("redis",), ports={}, binaries={"sleep": "/usr/bin/sleep"}, pg_os_user=None)
    write_run(RunRecord(spec=spec, state="starting", owner=Owner(pid=2**22 + 11, start_time=1), created_at=""))
    orphan = subprocess.Popen(["/usr/bin/sleep", "60"], cwd=folder, start_new_session=True)
    bystander = subprocess.Popen(["/usr/bin/sleep", "60"], cwd=folder)  # not a session leader: someone's command
    try:
        found = unrecorded_components(folder, ["/usr/bin/sleep"])
        assert [r.pid for r in found] == [orphan.pid]
        assert unrecorded_components(folder, ["/usr/bin/redis-server"]) == []
        bystander.kill()
        bystander.wait()
        fresh = LiveEnvironment(LiveConfig(root=root, components=("redis",)))
        (cleaned,) = fresh.preflight().cleaned
        assert cleaned.run_id == folder.name and cleaned.stopped == {f"unrecorded-{orphan.pid}": "stopped"} and cleaned.residue == []
        assert not is_running(found[0]) and not folder.exists()  # (this test's process reaped it: no exit status to see)
        fresh.stop()
    finally:
        reap(orphan, bystander)


def test_sigterm_in_the_middle_of_a_start_stops_what_was_started_then_ends_the_process(root: Path) -> None:
    need_binaries(("order_service",))
    p = owner(root, "order_service")
    try:
        read_until(p, "redis ready")  # PostgreSQL and Redis are up; the order service is starting
        (run,) = list_runs(root)
        records = list(read_pidfiles(RunPaths(run.folder)).values())
        assert {r.component for r in records} >= {"postgres", "redis"}
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == -signal.SIGTERM  # re-raised with the default handler: the process ends by it
        assert_gone(records, [], run.folder)
        assert processes_under(run.folder) == [] and list_runs(root) == []
    finally:
        reap(p)
