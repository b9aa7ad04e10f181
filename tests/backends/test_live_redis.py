"""The live Redis backend against private redis-servers: a saturated server (maxclients
reached) read through the observer opened before, no client-side retries, secrets never
returned, an unreachable or silent target, ACL denials, and the server log windowed."""

from __future__ import annotations

import json
import os
import secrets
import socket
import time
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis

from rootproof.backends.live._redis_text import log_time, parse_info, slowlog_line
from rootproof.backends.live.redis import RedisBackend
from rootproof.errors import BackendQueryError, BackendUnavailable, ConfigError
from rootproof.targets import RedisTarget
from rootproof.tools.base import BackendResult, InspectRedisArgs
from rootproof.tools.refs import ref_text

from ._redis_server import PrivateRedis, client, free_port, private_redis

MAXCLIENTS = 8


def _target(server: PrivateRedis | None = None, **kw: Any) -> RedisTarget:
    values: dict[str, Any] = {"name": "cache", "kind": "redis", "url": server.url if server else "redis://127.0.0.1:1/0"}
    if server is not None:
        values["log"] = server.log
    values.update(kw)
    return RedisTarget.model_validate(values)


def _call(backend: RedisBackend, kind: str, now: datetime | None = None, **kw: Any) -> BackendResult:
    args = InspectRedisArgs(kind=kind, **kw)  # type: ignore[arg-type]
    return backend.call("inspect_redis", args, now=now or datetime.now(UTC), run_id="test")


def _info(backend: RedisBackend) -> dict[str, dict[str, Any]]:
    return dict(_call(backend, "info").json()["info"])


@pytest.fixture(scope="module")
def server() -> Iterator[PrivateRedis]:
    with private_redis(maxclients=MAXCLIENTS) as s:
        yield s


# -- a saturated server ------------------------------------------------------------------------


def test_the_observer_opened_before_saturation_still_reads_info_and_clients(server: PrivateRedis) -> None:
    observer = RedisBackend(_target(server, timeout_s=2), environ={})
    idle: list[redis.Redis] = []
    try:
        assert observer.last_error is None
        refused = None
        for i in range(MAXCLIENTS + 2):
            try:
                c = client(server, f"idle-{i}")
                c.ping()
                idle.append(c)
            except redis.ConnectionError as exc:
                refused = str(exc)
                break
        assert refused == "max number of clients reached"
        assert len(idle) == MAXCLIENTS - 1  # the observer holds the eighth slot

        started = time.perf_counter()
        info = _info(observer)
        info_ms = (time.perf_counter() - started) * 1000
        assert info["clients"]["connected_clients"] == MAXCLIENTS == info["clients"]["maxclients"]
        rejected = info["stats"]["rejected_connections"]
        assert isinstance(rejected, int) and rejected > 0
        assert info_ms < 1000

        rows = _call(observer, "clients", limit=200).json()["rows"]
        assert sorted(r["name"] for r in rows) == sorted(f"idle-{i}" for i in range(MAXCLIENTS - 1))
        assert all(isinstance(r["idle"], int) and r["cmd"] == "ping" for r in rows)
        assert list(rows[0])[:4] == ["id", "addr", "laddr", "fd"]  # CLIENT LIST's own order
        assert "rootproof" not in {r["name"] for r in rows}  # the observer is left out
        assert any("close to refusing" in w for w in observer.check().warnings)

        # A backend built now cannot connect: refused at once, tried once (no redis-py retries).
        started = time.perf_counter()
        late = RedisBackend(_target(server, timeout_s=2), environ={})
        build_s = time.perf_counter() - started
        assert late.last_error is not None and "max number of clients reached" in late.last_error
        started = time.perf_counter()
        # The refusal is the call's result (evidence of the limit), not a failed call.
        assert _call(late, "info").json() == {"kind": "info", "info": {}, "refused": "max number of clients reached"}
        call_s = time.perf_counter() - started
        check = late.check()
        assert not check.usable and check.problem is not None and "refused while connecting: max number of clients reached" in check.problem
        late.close()
        assert build_s < 1.0 and call_s < 1.0, (build_s, call_s)
        # three connects (build, call, check), three rejections: nothing retried them
        assert _info(observer)["stats"]["rejected_connections"] == rejected + 3
        print(f"\nINFO over the observer while saturated: {info_ms:.2f} ms; refused connect: "
              f"build {build_s * 1000:.2f} ms, call {call_s * 1000:.2f} ms")
    finally:
        for c in idle:
            c.close()
        observer.close()


def test_a_dropped_observer_is_reopened_once_on_the_next_call(server: PrivateRedis) -> None:
    backend = RedisBackend(_target(server), environ={})
    admin = client(server, "admin")
    try:
        assert _info(backend)
        observer = [c["id"] for c in admin.client_list() if c["name"] == "rootproof"]
        assert len(observer) == 1 and admin.client_kill_filter(_id=observer[0]) == 1
        assert _info(backend)["clients"]["connected_clients"] >= 2  # reopened at once, no error
        assert [c["id"] for c in admin.client_list() if c["name"] == "rootproof"] not in ([], observer)
    finally:
        admin.close()
        backend.close()


def test_a_unix_socket_url_is_read_the_same_way() -> None:
    with private_redis("--unixsocket", "{folder}/redis.sock") as server:
        backend = RedisBackend(_target(url=f"unix://{server.folder}/redis.sock?db=0", timeout_s=2), environ={})
        try:
            assert backend.last_error is None
            assert _info(backend)["server"]["tcp_port"] == server.port
        finally:
            backend.close()


# -- unreachable and silent targets ------------------------------------------------------------


def test_a_dead_target_is_unavailable_and_check_says_unreachable() -> None:
    port = free_port()
    started = time.perf_counter()
    backend = RedisBackend(RedisTarget.model_construct(name="cache", kind="redis", url=f"redis://:inline-secret@127.0.0.1:{port}/0", timeout_s=1), environ={})  # built in code, past the file's checks: the backend still masks it
    with pytest.raises(BackendUnavailable, match="unreachable") as err:
        _call(backend, "info")
    check = backend.check()
    elapsed = time.perf_counter() - started
    assert not check.usable and check.problem and "unreachable" in check.problem
    for text in (str(err.value), check.problem, backend.last_error or ""):
        assert "inline-secret" not in text and "redis://:***@127.0.0.1" in text
    assert elapsed < 2.0
    backend.close()
    backend.close()  # idempotent


def test_a_server_that_never_answers_times_out_within_timeout_s() -> None:
    with closing(socket.socket()) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # accepts in the kernel, never replies
        port = listener.getsockname()[1]
        started = time.perf_counter()
        backend = RedisBackend(_target(url=f"redis://127.0.0.1:{port}/0", timeout_s=0.5), environ={})
        with pytest.raises(BackendUnavailable, match="timed out after 0.5 s"):
            _call(backend, "info")
        elapsed = time.perf_counter() - started
        backend.close()
    assert 0.9 <= elapsed < 2.5, elapsed  # two bounded attempts (build, call), none retried


def test_a_bad_url_or_secret_reference_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="cache: url"):
        RedisBackend(RedisTarget.model_construct(name="cache", kind="redis", url="http://127.0.0.1:6379"), environ={})  # past the file's checks
    with pytest.raises(ConfigError, match="RP_NO_SUCH_VARIABLE"):
        RedisBackend(_target(password_env="RP_NO_SUCH_VARIABLE"), environ={})


# -- secrets -----------------------------------------------------------------------------------


def test_a_password_never_reaches_results_or_messages() -> None:
    environ = {"RP_TEST_REDIS_PASSWORD": "pw-" + secrets.token_hex(12)}
    password = environ["RP_TEST_REDIS_PASSWORD"]
    with private_redis(password=password) as server:
        setup = client(server)
        setup.config_set("slowlog-log-slower-than", 0)
        setup.set("session:1", password)  # the secret as data: SLOWLOG shows the command's argv
        backend = RedisBackend(_target(server, password_env="RP_TEST_REDIS_PASSWORD"), environ=environ)
        try:
            seen = []
            for kind in ("info", "clients", "slowlog", "config", "log"):
                out = _call(backend, kind, limit=200)
                seen.append(json.dumps(out.json()) + json.dumps(out.details, default=str))
            config = _call(backend, "config").json()["settings"]
            assert "requirepass" not in config and "masterauth" not in config and "maxclients" in config
            assert "no_evidence" in _call(backend, "config", query="requirepass masterauth").json()
            slow = _call(backend, "slowlog", query="session:1").json()["lines"]
            assert slow and "(redacted)" in slow[0]
            assert all(password not in text for text in seen)
            assert backend.check().usable

            wrong = RedisBackend(_target(server, password_env="RP_WRONG"), environ={"RP_WRONG": "not-" + password})
            with pytest.raises(BackendUnavailable, match="authentication failed") as err:
                _call(wrong, "info")
            assert password not in str(err.value)
            missing = RedisBackend(_target(server), environ={})
            check = missing.check()
            assert not check.usable and check.problem and "authentication failed" in check.problem
            wrong.close()
            missing.close()
        finally:
            backend.close()
            setup.close()


def test_acl_denials_are_query_errors_and_check_warnings(server: PrivateRedis) -> None:
    admin = client(server, "admin")
    password = secrets.token_hex(8)
    admin.execute_command("ACL", "SETUSER", "observer", "on", f">{password}", "~*", "+@all", "-config", "-slowlog", "-client|setname")
    backend = RedisBackend(_target(server, username="observer", password_env="PW"), environ={"PW": password})
    try:
        assert backend.last_error is None  # unnamed: CLIENT SETNAME is denied, observing is not
        assert _info(backend)["clients"]["connected_clients"] >= 2
        rows = _call(backend, "clients").json()["rows"]
        assert "admin" in {r["name"] for r in rows} and "observer" not in {r["user"] for r in rows}  # itself left out
        with pytest.raises(BackendQueryError, match="not permitted"):
            _call(backend, "config")
        with pytest.raises(BackendQueryError, match="not permitted"):
            _call(backend, "slowlog")
        assert _info(backend)  # the connection survives a denied command
        warnings = backend.check().warnings
        assert any(w.startswith("CONFIG GET is not usable") for w in warnings)
        assert any(w.startswith("SLOWLOG LEN is not usable") for w in warnings)
    finally:
        backend.close()
        admin.acl_deluser("observer")
        admin.close()


# -- the server log ----------------------------------------------------------------------------


def test_the_server_log_is_read_with_its_timestamps_and_windowed(server: PrivateRedis) -> None:
    backend = RedisBackend(_target(server), environ={})
    try:
        now = datetime.now(UTC)
        out = _call(backend, "log", now=now, since="10m", limit=200).json()
        lines = out["lines"]
        assert any("Ready to accept connections" in line for line in lines)
        stamps = [log_time(line) for line in lines]
        assert all(s is not None and now - timedelta(minutes=10) <= s <= now for s in stamps)
        assert stamps == sorted(stamps, reverse=True)  # type: ignore[type-var]  # newest first
        before = _call(backend, "log", now=now - timedelta(hours=2), since="30m").json()
        assert before["lines"] == [] and "in window" in before["no_evidence"]
        assert ref_text("inspect_redis", out, "$.lines[0]") == lines[0]
    finally:
        backend.close()


def test_a_log_larger_than_max_bytes_is_read_from_its_end(tmp_path: Path) -> None:
    log = tmp_path / "redis.log"
    start = datetime.now().replace(microsecond=0) - timedelta(seconds=2005)  # Redis writes local time
    rows = [f"7:M {(start + timedelta(seconds=i)).strftime('%d %b %Y %H:%M:%S')}.000 * line {i:05d}" for i in range(2000)]
    log.write_text("\n".join(rows) + "\n", encoding="utf-8")
    backend = RedisBackend(_target(url=f"redis://127.0.0.1:{free_port()}/0", log=log, max_bytes=4096), environ={})
    out = _call(backend, "log", since="1h", limit=200)
    assert out.details["bytes_read"] <= 4096
    got = out.json()["lines"]
    assert got[0] == rows[-1] and all(line in rows for line in got)  # whole lines, newest first
    assert out.json()["total_matches"] < 2000
    windowed = _call(backend, "log", since="1m", limit=200).json()
    assert 0 < windowed["total_matches"] < out.json()["total_matches"]
    backend.close()


def test_no_log_configured_or_unreadable(tmp_path: Path) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    unset = RedisBackend(_target(url=dead), environ={})
    out = _call(unset, "log").json()
    assert out["lines"] == [] and out["no_evidence"].endswith(
        f"(kind=log, since=30m; the target cache has no log configured) in window {out['window']['from']}..{out['window']['to']}"
    )
    missing = RedisBackend(_target(url=dead, log=tmp_path / "absent.log"), environ={})
    with pytest.raises(BackendQueryError, match="cannot read its log"):
        _call(missing, "log")
    unset.close()
    missing.close()


# -- text formats ------------------------------------------------------------------------------


def test_info_values_are_typed_as_info_prints_them() -> None:
    info = parse_info(
        "# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:00000000\r\narch_bits:64\r\n\r\n# Memory\r\n"
        "mem_fragmentation_ratio:1.07\r\nused_memory_peak_perc:99.98%\r\n# Replication\r\nmaster_repl_offset:-1\r\n"
        "# Keyspace\r\ndb0:keys=3,expires=0,avg_ttl=0\r\n"
    )
    assert info == {
        "server": {"redis_version": "7.0.15", "redis_git_sha1": "00000000", "arch_bits": 64},
        "memory": {"mem_fragmentation_ratio": 1.07, "used_memory_peak_perc": "99.98%"},
        "replication": {"master_repl_offset": -1},
        "keyspace": {"db0": "keys=3,expires=0,avg_ttl=0"},
    }


def test_slowlog_lines_keep_one_line_per_entry() -> None:
    line, ts = slowlog_line([7, 1796022489, 39082, [b"SET", b"k", b'a "b"\nc'], b"127.0.0.1:52508", b""])
    assert line == 'id=7 timestamp=1796022489 duration_us=39082 command=SET k "a \\"b\\"\\nc" client_addr=127.0.0.1:52508 client_name='
    assert ts == datetime.fromtimestamp(1796022489, UTC)


def test_the_backend_names_its_system_and_tool() -> None:
    assert (RedisBackend.system, RedisBackend.tools) == ("redis", ("inspect_redis",))
    assert os.environ.get("RP_TEST_REDIS_PASSWORD") is None  # the test's secret stayed in its own mapping


def test_open_live_backends_mounts_a_redis_target(server: PrivateRedis) -> None:
    from rootproof.backends.live import open_live_backends
    from rootproof.targets import TargetsFile

    mounted = open_live_backends(TargetsFile(targets=[_target(server)]), {})
    try:
        assert [(key, type(b).__name__) for key, b in mounted] == [("redis:cache", "RedisBackend")]
        out = mounted[0][1].call("inspect_redis", InspectRedisArgs(kind="info", query="maxclients"), now=datetime.now(UTC), run_id="t")
        assert out.data_source == "live:cache" and out.json()["info"]["clients"]["maxclients"] == MAXCLIENTS
    finally:
        for _, b in mounted:
            b.close()
