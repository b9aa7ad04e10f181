"""Files the live backends read that are not regular files: a FIFO and a symlink to /dev/zero.

A plain `open()` of a FIFO waits for a writer for ever, and /dev/zero never ends; each of these
calls must fail (or warn) within 2 s, naming the path as "not a regular file". Each call runs in
a daemon thread joined with a timeout, and the FIFO's readers are released afterwards (a writer
opens and closes it), so a regression fails the test instead of hanging the run.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from rootproof.backends.live.logs import LogsBackend
from rootproof.backends.live.nginx import NginxBackend
from rootproof.backends.live.redis import RedisBackend
from rootproof.backends.live.tailfile import read_head, read_tail
from rootproof.errors import BackendQueryError
from rootproof.targets import LogsTarget, NginxTarget, RedisTarget
from rootproof.tools.base import InspectNginxArgs, InspectRedisArgs, QueryLogsArgs

from ._redis_server import free_port, private_redis

LIMIT_S = 2.0


def _release(fifo: Path) -> None:
    """Let any reader blocked opening `fifo` go (it reads end of file)."""
    for _ in range(20):
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # ENXIO: no reader is waiting
            return
        os.close(fd)
        time.sleep(0.01)


def _within(fn: Callable[[], Any], release: Path) -> Any:
    """Run `fn` in a thread; fail unless it returns (or raises) within LIMIT_S. Returns its result or exception."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box["value"] = exc

    thread = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(LIMIT_S)
    hung = thread.is_alive()
    if hung:
        _release(release)
        thread.join(LIMIT_S)
    assert not hung, f"still running after {LIMIT_S}s (blocked on {release})"
    assert time.monotonic() - started < LIMIT_S
    return box["value"]


@pytest.fixture(params=["fifo", "dev-zero"])
def special(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """A path that is not a regular file: a FIFO, or a symlink to /dev/zero."""
    path = tmp_path / "special.log"
    if request.param == "fifo":
        os.mkfifo(path)
    else:
        os.symlink("/dev/zero", path)
    yield path
    if request.param == "fifo":
        _release(path)


def test_reads_refuse_at_once(special: Path) -> None:
    """read_tail/read_head (the nginx and logs reads, also of a file swapped after the glob saw it) and open_regular."""
    for read in (lambda: read_tail(special, 1 << 20), lambda: read_head(special, 1 << 20)):
        got = _within(read, special)
        assert isinstance(got, BackendQueryError) and str(got) == f"{special}: not a regular file"
    from rootproof.backends.live.tailfile import open_regular

    got = _within(lambda: open_regular(special), special)
    assert isinstance(got, BackendQueryError) and str(got) == f"{special}: not a regular file"


def test_open_regular_reads_a_regular_file_and_a_symlink_to_one(tmp_path: Path) -> None:
    from rootproof.backends.live.tailfile import open_regular

    real = tmp_path / "real.log"
    real.write_bytes(b"one\ntwo\n")
    (tmp_path / "link.log").symlink_to(real)
    with open_regular(tmp_path / "link.log") as fh:
        assert fh.read() == b"one\ntwo\n"
    assert read_tail(real, 4096).lines == ["one", "two"]
    missing = _within(lambda: read_tail(tmp_path / "nope.log", 10), tmp_path / "nope.log")
    assert isinstance(missing, BackendQueryError) and "No such file" in str(missing)


def _nginx_call(backend: NginxBackend, kind: str) -> Any:
    return backend.call("inspect_nginx", InspectNginxArgs(kind=kind, query=""), now=datetime.now(UTC), run_id="t")  # type: ignore[arg-type]


def test_nginx_error_log_access_log_config_and_check(special: Path) -> None:
    backend = NginxBackend(NginxTarget(kind="nginx", name="edge", error_log=special, access_log=special, config=special), environ={})
    for kind in ("error_log", "access_log", "config"):
        got = _within(lambda kind=kind: _nginx_call(backend, kind), special)  # type: ignore[misc]
        assert isinstance(got, BackendQueryError) and f"{special}: not a regular file" in str(got), kind
    check = _within(backend.check, special)
    assert not check.usable and check.warnings == [f"{kind}: {special}: not a regular file" for kind in ("error_log", "access_log", "config")]


def test_logs_glob_matching_a_fifo_or_device(special: Path, tmp_path: Path) -> None:
    folder = tmp_path / "app"
    folder.mkdir()
    (folder / "b.log").symlink_to(special)
    (folder / "a.log").write_text(f'{{"ts": "{datetime.now(UTC).isoformat()}", "msg": "current line"}}\n')
    backend = LogsBackend([LogsTarget(kind="logs", name="app", paths=[str(folder / "*.log")], service="api")], environ={})
    out = _within(lambda: backend.call("query_logs", QueryLogsArgs(query=""), now=datetime.now(UTC), run_id="t"), special)
    assert [e.message for e in out.result.entries] == ["current line"]
    check = _within(backend.check, special)
    assert check.usable
    # a file the glob saw as regular, swapped for a FIFO before the read: read_tail refuses it (test_reads_refuse_at_once)


def test_redis_log_and_check(special: Path) -> None:
    dead = RedisBackend(RedisTarget(kind="redis", name="cache", url=f"redis://127.0.0.1:{free_port()}/0", log=special), environ={})
    args = InspectRedisArgs(kind="log", query="")
    got = _within(lambda: dead.call("inspect_redis", args, now=datetime.now(UTC), run_id="t"), special)
    assert isinstance(got, BackendQueryError) and f"{special}: not a regular file" in str(got)
    dead.close()
    with private_redis() as server:
        backend = RedisBackend(RedisTarget(kind="redis", name="cache", url=server.url, log=special), environ={})
        check = _within(backend.check, special)
        assert check.usable and f"log {special} is unreadable: {special}: not a regular file" in check.warnings
        backend.close()



CUT = 32 * 1024


def _cut(text: str) -> str:
    return text[:CUT] + f" …[cut: {len(text) - CUT} more characters]"


def test_long_nginx_lines_and_config_lines_are_cut(tmp_path: Path) -> None:
    stamp = datetime.now().strftime("%Y/%m/%d %H:%M:%S")  # nginx writes local time
    long_line = f"{stamp} [error] 7#7: *1 upstream timed out, request: \"GET /{'a' * 60_000} HTTP/1.1\""
    error_log = tmp_path / "error.log"
    error_log.write_text(f"{stamp} [warn] 7#7: short line\n{long_line}\n")
    config = tmp_path / "nginx.conf"
    config.write_text("events {}\n# " + "b" * 50_000 + "\n")
    backend = NginxBackend(NginxTarget(kind="nginx", name="edge", error_log=error_log, config=config), environ={})
    lines = _nginx_call(backend, "error_log").result.lines
    assert sorted(lines, key=len) == [f"{stamp} [warn] 7#7: short line", _cut(long_line)]
    assert _cut(long_line).endswith(f" …[cut: {len(long_line) - CUT} more characters]")
    assert _nginx_call(backend, "config").result.config == ["events {}", _cut("# " + "b" * 50_000)]


def test_long_log_messages_are_cut(tmp_path: Path) -> None:
    import json

    message = "deadlock detected " + "c" * 100_000
    log = tmp_path / "app.jsonl"
    log.write_text(json.dumps({"ts": datetime.now(UTC).isoformat(), "level": "error", "msg": message}) + "\n")
    backend = LogsBackend([LogsTarget(kind="logs", name="app", paths=[str(log)], service="api")], environ={})
    entries = backend.call("query_logs", QueryLogsArgs(query="deadlock"), now=datetime.now(UTC), run_id="t").result.entries
    assert [e.message for e in entries] == [_cut(message)]


def test_long_redis_log_lines_are_cut(tmp_path: Path) -> None:
    stamp = datetime.now().strftime("%d %b %Y %H:%M:%S.000")  # Redis writes local time
    line = f"1:M {stamp} # " + "d" * 40_000
    log = tmp_path / "redis.log"
    log.write_text(line + "\n")
    backend = RedisBackend(RedisTarget(kind="redis", name="cache", url=f"redis://127.0.0.1:{free_port()}/0", log=log), environ={})
    out = backend.call("inspect_redis", InspectRedisArgs(kind="log", query=""), now=datetime.now(UTC), run_id="t")
    assert out.result.lines == [_cut(line)]
    backend.close()
