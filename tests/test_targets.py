"""The targets file and `rootproof targets check`: every malformed file is one `Error:` line
naming the file and the field (exit 2, never a traceback, never the secret); the examples load
(YAML and TOML alike); checks are per target, never raise, and exit 0 / 1 by usability."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, get_args, get_origin

import pytest
from pydantic.fields import FieldInfo

from rootproof import targets_check
from rootproof.backends import live
from rootproof.errors import ConfigError
from rootproof.targets import _MODELS, KINDS, LOG_FIELDS, MAX_TARGETS_FILE_BYTES, PostgresTarget, load_targets
from rootproof.targets_check import check_targets
from tests import targets_support as ts
from tests.cli_support import run_cli
from tests.services import inherited_env

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "rootproof.targets.yaml"
SECRET = "hunter2-Sup3rSecret"


def rp(*args: str, driver: bool = False, **env: str) -> subprocess.CompletedProcess[str]:
    """The CLI (in a subprocess with `tcp_factory` as its backend factory when `driver`, else in
    this process: tests/cli_support.py)."""
    base = {k: v for k, v in inherited_env().items() if not k.endswith("_PASSWORD")}
    if not driver:
        return run_cli(args, env=base | env, cwd=ROOT)
    base |= {"PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run([sys.executable, "-c", ts.DRIVER, *args], capture_output=True, text=True, env=base | env, cwd=ROOT, timeout=120)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def listening() -> Iterator[int]:
    """A port a real loopback server listens on."""
    server = ts.SilentServer()
    yield server.port
    server.close()


def _file(tmp_path: Path, text: str, name: str = "rootproof.targets.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _t(body: str) -> str:
    return "targets:\n  - " + body + "\n"


# -- malformed files: exit 2, one line, file and field named, no secret -------------------------

MALFORMED: list[tuple[str, str, str]] = [
    # (id, file text, the field (or line) the message names)
    ("yaml-syntax", "targets:\n  - {name: a, kind: redis\n  url: x\n", "line 3: invalid YAML"),
    ("yaml-anchor", "base: &b {kind: redis}\ntargets: [*b]\n", "line 1: base: YAML anchors"),
    ("root-not-mapping", "- name: a\n", "(root): expected a mapping"),
    ("empty-file", "", "(root): expected a mapping"),
    ("missing-targets", "target: []\n", "targets: missing"),
    ("targets-empty", "targets: []\n", "targets: List should have at least 1 item"),
    ("target-not-mapping", "targets: [orders-db]\n", "targets[0]: expected a mapping"),
    ("unknown-kind", _t("{name: db, kind: mysql, dsn: 'mysql://h/db'}"), "targets[0] (db).kind: unknown kind 'mysql' (allowed kinds: postgres, redis, nginx, logs, loki, prometheus)"),
    ("missing-kind", _t("{name: db, dsn: 'postgresql://h/db'}"), "targets[0] (db).kind: missing (allowed kinds: postgres"),
    ("unknown-field", _t("{name: db, kind: postgres, dsn: 'postgresql://h/db', colour: red}"), "targets[0] (db).colour: unknown field (allowed: name, max_bytes, timeout_s, password_env, password_file, kind, dsn, log)"),
    ("unknown-root-field", "version: 2\n" + _t("{name: c, kind: redis, url: 'redis://h'}"), "version: unknown field (allowed: targets)"),
    ("missing-field", _t("{name: db, kind: postgres}"), "targets[0] (db).dsn: required field missing"),
    ("bad-name", _t("{name: 'a b', kind: redis, url: 'redis://h'}"), "targets[0] (a b).name: String should match pattern"),
    ("duplicate-name", _t("{name: c, kind: redis, url: 'redis://h'}") + "  - {name: c, kind: redis, url: 'redis://g'}\n", "targets[1] (c).name: also the name of targets[0]"),
    ("timeout-range", _t("{name: c, kind: redis, url: 'redis://h', timeout_s: 0}"), "targets[0] (c).timeout_s: Input should be greater than 0"),
    ("both-secret-refs", _t("{name: c, kind: redis, url: 'redis://h', password_env: P, password_file: /p}"), "targets[0] (c).password_file: give password_env or password_file, not both"),
    ("dsn-scheme", _t("{name: db, kind: postgres, dsn: 'mysql://h/db'}"), "targets[0] (db).dsn: expected a postgresql:// or postgres:// URL or a key=value string (got mysql://)"),
    ("dsn-words", _t("{name: db, kind: postgres, dsn: 'orders database'}"), "targets[0] (db).dsn: expected a postgresql:// or postgres:// URL or a key=value string (got no scheme)"),
    ("redis-scheme", _t("{name: c, kind: redis, url: 'http://127.0.0.1:6379'}"), "targets[0] (c).url: expected a URL starting with redis:// or rediss:// or unix:// (got http://)"),
    ("prometheus-scheme", _t("{name: p, kind: prometheus, url: '127.0.0.1:9090'}"), "targets[0] (p).url: expected a URL starting with http:// or https://"),
    ("prometheus-no-host", _t("{name: p, kind: prometheus, url: 'http:///api'}"), "targets[0] (p).url: the URL names no host"),
    ("loki-scheme", _t("{name: l, kind: loki, url: 'ftp://127.0.0.1:3100'}"), "targets[0] (l).url: expected a URL starting with http:// or https:// (got ftp://)"),
    ("status-url-scheme", _t("{name: e, kind: nginx, status_url: 'tcp://127.0.0.1:8080/s'}"), "targets[0] (e).status_url: expected a URL starting with http:// or https://"),
    ("access-format", _t("{name: e, kind: nginx, access_format: main}"), "targets[0] (e).access_format: Input should be 'combined' or 'upstream'"),
    ("regex-no-pattern", _t("{name: app, kind: logs, paths: [/x], service: s, format: regex}"), "targets[0] (app).pattern: required with format: regex"),
    ("regex-not-compiling", _t("{name: app, kind: logs, paths: [/x], service: s, format: regex, pattern: '(?P<message>.*'}"), "targets[0] (app).pattern: does not compile: missing ), unterminated subpattern at position 0"),
    ("regex-no-message", _t("{name: app, kind: logs, paths: [/x], service: s, format: regex, pattern: '(?P<ts>\\S+) (?P<msg>.*)'}"), "targets[0] (app).pattern: has no named group for the message: add (?P<message>...)"),
    ("regex-no-time", _t("{name: app, kind: logs, paths: [/x], service: s, format: regex, pattern: '(?P<when>\\S+) (?P<message>.*)'}"), "targets[0] (app).pattern: has no named group for the time: add (?P<ts>...)"),
    ("pattern-without-regex", _t("{name: app, kind: logs, paths: [/x], service: s, pattern: '(?P<message>.*)'}"), "targets[0] (app).pattern: only used with format: regex (this target has format: jsonl)"),
    ("fields-key", _t("{name: app, kind: logs, paths: [/x], service: s, fields: {ts: time, msg: message}}"), "targets[0] (app).fields: unknown key 'msg' (allowed: ts, level, service, message)"),
    ("logs-no-paths", _t("{name: app, kind: logs, paths: [], service: s}"), "targets[0] (app).paths: List should have at least 1 item"),
]

SECRETS: list[tuple[str, str, str]] = [
    ("password-field", _t(f"{{name: db, kind: postgres, dsn: 'postgresql://app@h/db', password: {SECRET}}}"), "targets[0] (db).password: a secret value"),
    ("token-field", _t(f"{{name: p, kind: prometheus, url: 'http://h:9090', token: {SECRET}}}"), "targets[0] (p).token: a secret value"),
    ("root-secret-field", f"secret: {SECRET}\n" + _t("{name: c, kind: redis, url: 'redis://h'}"), "secret: a secret value"),
    ("dsn-url-password", _t(f"{{name: db, kind: postgres, dsn: 'postgresql://app:{SECRET}@127.0.0.1/db'}}"), "targets[0] (db).dsn: the URL holds a password"),
    ("dsn-query-password", _t(f"{{name: db, kind: postgres, dsn: 'postgres://app@127.0.0.1/db?password={SECRET}'}}"), "targets[0] (db).dsn: the URL holds a password"),
    ("dsn-key-value-password", _t(f"{{name: db, kind: postgres, dsn: 'host=127.0.0.1 user=app password={SECRET} dbname=db'}}"), "targets[0] (db).dsn: the DSN holds a password"),
    ("redis-password", _t(f"{{name: c, kind: redis, url: 'redis://:{SECRET}@127.0.0.1:6379/0'}}"), "targets[0] (c).url: the URL holds a password"),
    ("redis-user-password", _t(f"{{name: c, kind: redis, url: 'rediss://app:{SECRET}@127.0.0.1:6380'}}"), "targets[0] (c).url: the URL holds a password"),
    ("prometheus-password", _t(f"{{name: p, kind: prometheus, url: 'https://u:{SECRET}@prom.example:9090'}}"), "targets[0] (p).url: the URL holds a password"),
    ("loki-password", _t(f"{{name: l, kind: loki, url: 'http://u:{SECRET}@127.0.0.1:3100'}}"), "targets[0] (l).url: the URL holds a password"),
    ("status-url-password", _t(f"{{name: e, kind: nginx, status_url: 'http://u:{SECRET}@127.0.0.1/s'}}"), "targets[0] (e).status_url: the URL holds a password"),
    # the secret is on a line with a syntax error: the message names the line, never quotes it
    ("syntax-error-on-secret-line", f"targets:\n  - {{name: db, kind: postgres, dsn: 'postgresql://app:{SECRET}@h/db'\n", "line 3: invalid YAML"),
]


def _assert_one_error(p: subprocess.CompletedProcess[str], path: Path, needle: str) -> None:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith(f"Error: {path}: "), lines[0]
    assert needle in lines[0], (needle, lines[0])
    assert "Traceback" not in p.stderr and "internal failure" not in p.stderr
    assert p.stdout == ""
    assert SECRET not in p.stdout + p.stderr


@pytest.mark.parametrize(("text", "needle"), [(t, n) for _, t, n in MALFORMED], ids=[i for i, _, _ in MALFORMED])
def test_a_malformed_file_is_one_error_line_naming_file_and_field(tmp_path: Path, text: str, needle: str) -> None:
    path = _file(tmp_path, text)
    _assert_one_error(rp("targets", "check", str(path)), path, needle)


@pytest.mark.parametrize(("text", "needle"), [(t, n) for _, t, n in SECRETS], ids=[i for i, _, _ in SECRETS])
def test_a_secret_in_the_file_is_refused_without_being_echoed(tmp_path: Path, text: str, needle: str) -> None:
    path = _file(tmp_path, text)
    p = rp("targets", "check", str(path), "--json")
    _assert_one_error(p, path, needle)
    if "invalid YAML" not in needle:
        assert "password_env" in p.stderr and "password_file" in p.stderr


def test_a_password_anywhere_is_reported_before_other_problems(tmp_path: Path) -> None:
    text = _t("{name: db, kind: postgres, dsn: 'postgresql://h/db', colour: red}") + f"  - {{name: c, kind: redis, url: 'redis://:{SECRET}@h'}}\n"
    path = _file(tmp_path, text)
    _assert_one_error(rp("targets", "check", str(path)), path, "targets[1] (c).url: the URL holds a password")


def test_a_file_that_cannot_be_read_is_one_error_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    _assert_one_error(rp("targets", "check", str(missing)), missing, "cannot be read (No such file or directory)")
    _assert_one_error(rp("targets", "check", str(tmp_path)), tmp_path, "is a directory, not a targets file")
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    _assert_one_error(rp("targets", "check", str(fifo)), fifo, "not a regular file")  # never blocks on open


def test_a_file_over_the_cap_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(b"#" * (MAX_TARGETS_FILE_BYTES + 1))
    _assert_one_error(rp("targets", "check", str(path)), path, f"{MAX_TARGETS_FILE_BYTES + 1} bytes, more than the {MAX_TARGETS_FILE_BYTES} bytes")


def test_a_file_not_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(_t("{name: caf\xe9, kind: redis, url: 'redis://h'}").encode("latin-1"))
    _assert_one_error(rp("targets", "check", str(path)), path, "not UTF-8 text (byte 23)")


def test_bad_toml_names_the_line(tmp_path: Path) -> None:
    path = _file(tmp_path, f'[[targets]]\nname = "db"\ndsn = postgresql://app:{SECRET}@h/db\n', "t.toml")
    _assert_one_error(rp("targets", "check", str(path)), path, "line 3: invalid TOML: Invalid value")
    path = _file(tmp_path, '[[targets]]\nname = "db"\nkind = "postgres"\ndsn = "postgresql://h/db"\nlog = 3\n', "t2.toml")
    _assert_one_error(rp("targets", "check", str(path)), path, "targets[0] (db).log: Input is not a valid path")


def test_usernames_passfile_and_empty_passwords_are_not_secrets(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        "targets:\n"
        "  - {name: a, kind: postgres, dsn: 'postgresql://app@127.0.0.1:5432/orders?sslmode=disable'}\n"
        "  - {name: b, kind: postgres, dsn: 'host=/var/run/postgresql dbname=orders user=app passfile=/etc/pgpass'}\n"
        "  - {name: c, kind: redis, url: 'unix:///run/redis/redis.sock?db=1'}\n"
        "  - {name: d, kind: redis, url: 'redis://default@127.0.0.1:6379/0', username: rootproof}\n"
        "  - {name: e, kind: prometheus, url: 'https://prom.example'}\n",
    )
    assert [t.name for t in load_targets(path).file.targets] == ["a", "b", "c", "d", "e"]


# -- the examples -----------------------------------------------------------------------------


def test_the_example_file_loads_with_every_kind() -> None:
    loaded = load_targets(EXAMPLE)
    assert {t.kind for t in loaded.file.targets} == {"postgres", "redis", "nginx", "logs", "loki", "prometheus"}
    assert loaded.checksum.startswith("sha256:") and len(loaded.checksum) == 7 + 64
    for t in loaded.file.targets:  # loopback only
        for value in t.model_dump().values():
            if isinstance(value, str) and "://" in value:
                assert "127.0.0.1" in value or value.startswith("unix://"), value


def test_the_toml_example_loads_to_the_same_model() -> None:
    yaml_file = load_targets(EXAMPLE)
    toml_file = load_targets(EXAMPLE.with_suffix(".toml"))
    assert toml_file.file == yaml_file.file
    assert toml_file.checksum != yaml_file.checksum  # the checksum is of the file's bytes


def test_a_toml_file_with_the_same_targets_loads_to_the_same_model(tmp_path: Path) -> None:
    y = _file(tmp_path, _t("{name: app, kind: logs, paths: ['/var/log/a/*.log'], format: regex, pattern: '(?P<ts>\\S+) (?P<message>.*)', service: app, fields: {level: lvl}}"))
    t = _file(
        tmp_path,
        '[[targets]]\nname = "app"\nkind = "logs"\npaths = ["/var/log/a/*.log"]\nformat = "regex"\n'
        "pattern = '(?P<ts>\\S+) (?P<message>.*)'\nservice = \"app\"\nfields = { level = \"lvl\" }\n",
        "t.toml",
    )
    assert load_targets(y).file == load_targets(t).file


# -- check_targets ----------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _clear_closed() -> None:
    ts.CLOSED.clear()


def _targets(tmp_path: Path, port_up: int, port_down: int) -> Path:
    log = tmp_path / "app.jsonl"
    log.write_text('{"ts": "2026-12-01T12:00:00Z", "message": "ok"}\n', encoding="utf-8")
    return _file(
        tmp_path,
        "targets:\n"
        f"  - {{name: up-db, kind: postgres, dsn: 'postgresql://app@127.0.0.1:{port_up}/db', log: {tmp_path}/missing.log}}\n"
        f"  - {{name: down-cache, kind: redis, url: 'redis://127.0.0.1:{port_down}/0', timeout_s: 2}}\n"
        f"  - {{name: app, kind: logs, paths: ['{tmp_path}/*.jsonl'], service: app}}\n",
    )


def test_check_targets_reports_each_target_and_closes_every_backend(tmp_path: Path, listening: int) -> None:
    loaded = load_targets(_targets(tmp_path, listening, _free_port()))
    seen: list[str] = []
    checks = check_targets(loaded, {}, backends_factory=ts.tcp_factory, progress=lambda t: seen.append(t.name))
    assert [(c.name, c.kind, c.usable) for c in checks] == [("up-db", "postgres", True), ("down-cache", "redis", False), ("app", "logs", True)]
    assert checks[0].warnings == [f"the log {tmp_path}/missing.log is not readable"]
    assert checks[1].problem is not None and "cannot connect to 127.0.0.1" in checks[1].problem and "refused" in checks[1].problem
    assert seen == ["up-db", "down-cache", "app"]
    assert sorted(ts.CLOSED) == sorted(seen)  # checked concurrently, each closed once


def test_an_unset_password_env_is_a_not_usable_target_not_an_error(tmp_path: Path, listening: int) -> None:
    path = _file(tmp_path, _t(f"{{name: db, kind: postgres, dsn: 'postgresql://app@127.0.0.1:{listening}/db', password_env: ROOTPROOF_TEST_DB_PW}}") + f"  - {{name: c, kind: redis, url: 'redis://127.0.0.1:{listening}'}}\n")
    checks = check_targets(load_targets(path), {}, backends_factory=ts.tcp_factory)
    assert [c.usable for c in checks] == [False, True]
    assert checks[0].problem == "password_env: the variable ROOTPROOF_TEST_DB_PW is not set"
    assert ts.CLOSED == ["c"]  # the one that could not be built holds nothing
    ok = check_targets(load_targets(path), {"ROOTPROOF_TEST_DB_PW": "x"}, backends_factory=ts.tcp_factory)
    assert [c.usable for c in ok] == [True, True]


def test_a_missing_driver_module_is_a_not_usable_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(live.BACKEND_CLASSES, "postgres", ("rootproof_no_such_driver_module", "PostgresBackend"))
    path = _file(tmp_path, _t("{name: db, kind: postgres, dsn: 'postgresql://127.0.0.1:1/db'}"))
    (check,) = check_targets(load_targets(path), {})  # the real open_live_backends
    assert not check.usable
    assert check.problem == "the postgres backend cannot be loaded (No module named 'rootproof_no_such_driver_module')"


def test_a_check_that_raises_or_hangs_is_not_usable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, listening: int) -> None:
    path = _file(tmp_path, _t(f"{{name: db, kind: postgres, dsn: 'postgresql://127.0.0.1:{listening}/db', timeout_s: 0.1}}"))
    (failed,) = check_targets(load_targets(path), {}, backends_factory=ts.factory_of(ts.FailingBackend))
    assert not failed.usable and failed.problem == "the check failed (RuntimeError: driver state broken)"
    assert ts.CLOSED == ["db"]
    monkeypatch.setattr(targets_check, "CHECK_SLACK_S", 0.5)
    (hung,) = check_targets(load_targets(path), {}, backends_factory=ts.factory_of(ts.HangingBackend))
    assert not hung.usable and hung.problem == "the check did not finish within 0.8 s"
    assert ts.CLOSED_AFTER_HANGING == []  # a hung backend is not closed under its check


def test_targets_are_checked_concurrently_each_under_its_own_watchdog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, listening: int
) -> None:
    monkeypatch.setattr(targets_check, "CHECK_SLACK_S", 0.5)
    rows = "".join(f"  - {{name: db{i}, kind: postgres, dsn: 'postgresql://127.0.0.1:{listening}/db', timeout_s: 0.1}}\n" for i in range(6))
    path = _file(tmp_path, "targets:\n" + rows)
    started = time.monotonic()
    checks = check_targets(load_targets(path), {}, backends_factory=ts.factory_of(ts.HangingBackend))
    elapsed = time.monotonic() - started
    assert [c.name for c in checks] == [f"db{i}" for i in range(6)]  # file order
    assert all(c.problem == "the check did not finish within 0.8 s" for c in checks)
    assert elapsed < 3.0, elapsed  # one after another would take 6 × 0.8 s


def test_the_targets_password_never_reaches_a_check_result(tmp_path: Path) -> None:
    path = _file(tmp_path, _t("{name: db, kind: postgres, dsn: 'postgresql://app@127.0.0.1/db', password_env: DB_PW}"))
    (check,) = check_targets(load_targets(path), {"DB_PW": SECRET}, backends_factory=ts.factory_of(ts.LeakyBackend))
    shown = check.model_dump_json()
    assert SECRET not in shown
    assert check.problem == "auth failed with *** at postgresql://app:***@127.0.0.1/db"
    assert check.warnings == ["retry with ***"]


def test_check_targets_never_raises_for_a_target_whatever_its_factory_does(tmp_path: Path) -> None:
    def broken(targets: object, environ: object) -> list[tuple[str, object]]:
        raise ValueError(f"cannot parse postgresql://app:{SECRET}@h/db")

    path = _file(tmp_path, _t("{name: db, kind: postgres, dsn: 'postgresql://h/db'}"))
    (check,) = check_targets(load_targets(path), {}, backends_factory=broken)
    assert not check.usable and check.problem == "the postgres backend cannot be set up (ValueError: cannot parse postgresql://app:***@h/db)"


def test_check_targets_builds_each_target_alone() -> None:
    loaded = load_targets(EXAMPLE)
    calls: list[list[str]] = []

    def recording(targets: object, environ: object) -> list[tuple[str, object]]:
        from rootproof.targets import TargetsFile

        assert isinstance(targets, TargetsFile)
        calls.append([t.name for t in targets.targets])
        raise ConfigError(f"targets: {targets.targets[0].name}: password_file: cannot read /nope")

    checks = check_targets(loaded, {}, backends_factory=recording)
    # checked concurrently: each target built alone, once, in whatever order the checks ran
    assert sorted(calls) == sorted([t.name] for t in loaded.file.targets)
    assert all(c.problem == "password_file: cannot read /nope" for c in checks)
    assert isinstance(loaded.file.targets[0], PostgresTarget)


# -- the CLI ----------------------------------------------------------------------------------


def test_targets_check_exits_0_when_every_target_is_usable(tmp_path: Path, listening: int) -> None:
    path = _file(tmp_path, _t(f"{{name: db, kind: postgres, dsn: 'postgresql://app@127.0.0.1:{listening}/db'}}") + f"  - {{name: cache, kind: redis, url: 'redis://127.0.0.1:{listening}'}}\n")
    p = rp("targets", "check", str(path), driver=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["db (postgres): usable", "cache (redis): usable"]
    assert "checking db (postgres)" in p.stderr and "Traceback" not in p.stderr


def test_targets_check_exits_1_naming_the_unusable_targets(tmp_path: Path, listening: int) -> None:
    p = rp("targets", "check", str(_targets(tmp_path, listening, _free_port())), driver=True)
    assert p.returncode == 1, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "up-db (postgres): usable"
    assert lines[1] == f"  warning: the log {tmp_path}/missing.log is not readable"
    assert lines[2].startswith("down-cache (redis): NOT USABLE: cannot connect to 127.0.0.1:")
    assert lines[3] == "app (logs): usable"
    assert p.stderr.strip().splitlines()[-1] == f"Error: {tmp_path}/rootproof.targets.yaml: 1 of 3 targets not usable: down-cache"


def test_targets_check_json_is_one_document(tmp_path: Path, listening: int) -> None:
    path = _targets(tmp_path, listening, _free_port())
    p = rp("targets", "check", str(path), "--json", driver=True)
    assert p.returncode == 1, p.stderr
    doc = json.loads(p.stdout)  # the whole of stdout
    assert set(doc) == {"file", "checksum", "targets", "usable"}
    assert doc["file"] == str(path) and doc["checksum"] == load_targets(path).checksum and doc["usable"] is False
    assert [(t["name"], t["usable"]) for t in doc["targets"]] == [("up-db", True), ("down-cache", False), ("app", True)]
    assert set(doc["targets"][0]) == {"name", "kind", "usable", "problem", "warnings"}
    assert "checking" in p.stderr


def test_targets_check_without_the_live_modules_or_with_them_is_exit_1_not_a_crash(tmp_path: Path) -> None:
    """The real factory on a closed port: NOT USABLE (driver missing, or connection refused)."""
    port = _free_port()
    path = _file(tmp_path, _t(f"{{name: db, kind: postgres, dsn: 'postgresql://rootproof@127.0.0.1:{port}/db', timeout_s: 2}}"))
    p = rp("targets", "check", str(path))
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert p.stdout.startswith("db (postgres): NOT USABLE: ")
    assert "1 of 1 targets not usable: db" in p.stderr and "Traceback" not in p.stderr


# -- docs/targets.md --------------------------------------------------------------------------

DOC = (ROOT / "docs" / "targets.md").read_text(encoding="utf-8")
COMMON_FIELDS = ("name", "kind", "max_bytes", "timeout_s")
SECRET_FIELDS = ("password_env", "password_file")


def _rows(heading: str) -> dict[str, list[str]]:
    """The table under `heading`: field → its cells."""
    start = DOC.index(heading + "\n")
    rest = DOC[start + len(heading) + 1 :]
    end = rest.find("\n#")
    rows: dict[str, list[str]] = {}
    for line in (rest[:end] if end >= 0 else rest).splitlines():
        m = re.match(r"^\| `([a-z_]+)` \|", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in line.strip("|").split(" | ")]
    return rows


def _documented_default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)
    if value is None:
        return "none"
    return f"`{json.dumps(value) if isinstance(value, dict) else value}`"


@pytest.mark.parametrize("kind", KINDS)
def test_every_field_of_every_kind_is_documented_with_its_default(kind: str) -> None:
    model = _MODELS[kind]
    tables = _rows("### Every target") | (_rows("### Secrets") if "password_env" in model.model_fields else {}) | _rows(f"### `{kind}`")
    assert set(tables) == set(model.model_fields), f"{kind}: documented {sorted(tables)} != model {sorted(model.model_fields)}"
    for field, info in model.model_fields.items():
        cell = tables[field][1]
        want = _documented_default(info)
        assert cell == want or cell.startswith(want + " "), f"{kind}.{field}: default documented as {cell!r}, is {want!r}"
        assert len(tables[field][2]) > 15, f"{kind}.{field}: no meaning given"


def test_every_allowed_value_and_kind_is_documented() -> None:
    values: set[str] = set(KINDS) | set(LOG_FIELDS)
    for model in _MODELS.values():
        for info in model.model_fields.values():
            for arg in get_args(info.annotation):
                if isinstance(arg, str):
                    values.add(arg)
            if get_origin(info.annotation) is Literal:
                values.update(str(v) for v in get_args(info.annotation))
    assert {"combined", "upstream", "jsonl", "logfmt", "regex", "APPLICATION"} <= values
    assert sorted(v for v in values if f"`{v}`" not in DOC) == []


def test_the_doc_gives_the_upstream_log_format_the_nginx_backend_parses() -> None:
    line = (
        "log_format upstream '$remote_addr - $remote_user [$time_local] \"$request\" $status $body_bytes_sent "
        "\"$http_referer\" \"$http_user_agent\" $upstream_response_time $upstream_status';"
    )
    assert line in DOC


def test_the_doc_covers_secrets_bounds_check_and_the_setting() -> None:
    for needle in (
        "`ROOTPROOF_TARGETS`", "`rootproof targets check FILE [--json]`", "Exit codes: 0", "`pg_stat_activity`",
        "`pg_blocking_pids()`", "`pg_stat_statements`", "`pg_stat_wal_receiver`", "`CLIENT LIST`", "`SLOWLOG GET`",
        "`GET /api/v1/query_range`", "`GET /loki/api/v1/query_range", "`INFO all`", "`CONFIG GET`", "`pg_settings`", "`pg_stat_database`", "`pg_locks`", "`pg_stat_replication`", "`stub_status`", "read-only", "`max_bytes`",
        "`timeout_s`", "postgresql://app:secret@host/db", "redis://:pw@host",
    ):
        assert needle in DOC, needle
    assert "docs/targets.md" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert "examples/rootproof.targets.yaml" in DOC


def test_the_docs_examples_of_refusals_are_what_load_targets_says(tmp_path: Path) -> None:
    shown = re.findall(r"^Error: rootproof\.targets\.yaml: (targets\[\d\] \((\S+)\)\.(\w+): .*)$", DOC, re.M)
    assert len(shown) == 2
    texts = {
        "cache": _t("{name: orders-db, kind: postgres, dsn: 'postgresql://h/db'}") + "  - {name: cache, kind: redis, url: 'http://127.0.0.1:6379'}\n",
        "orders-db": _t("{name: orders-db, kind: postgres, dsn: 'postgresql://app:secret@127.0.0.1/orders'}"),
    }
    for message, name, _field in shown:
        path = _file(tmp_path, texts[name])
        with pytest.raises(ConfigError) as err:
            load_targets(path)
        assert str(err.value) == f"{path}: {message}"
