"""Exits and signals: a bad setting or file is exit 2 naming it; read-only stores serve read-only
commands; SIGINT/SIGTERM cancel a diagnose run (persisted CANCELLED); a closed pipe ends quietly;
terminal output never carries control characters from logs, and `--json` stays exact JSON.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rootproof.harness import Harness
from rootproof.run.records import RunRecord
from rootproof.runtime import Runtime
from rootproof.scenarios.loader import load_scenario
from rootproof.settings import load_settings
from rootproof.store import SqlTraceStore
from tests.cli_support import run_cli
from tests.models.fake_openai_server import completion, serve
from tests.services import inherited_env

ROOT = Path(__file__).resolve().parents[1]
BUILTIN = ROOT / "src" / "rootproof" / "scenarios" / "builtin"


def rp(*args: str, home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`rootproof ARGS` (in this process: tests/cli_support.py) with `home` as its data folder."""
    return run_cli(args, env=inherited_env() | {"ROOTPROOF_HOME": str(home)} | env, cwd=ROOT)


def _one_error_line(p: subprocess.CompletedProcess[str], needle: str) -> None:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and needle in lines[0], p.stderr
    assert "Traceback" not in p.stderr and "internal failure" not in p.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- bad settings and files: exit 2 naming them ------------------------------------------------


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("not a url", "ROOTPROOF_DATABASE_URL: trace store URL is not a SQLAlchemy URL"),
        ("bogus://x/y", "ROOTPROOF_DATABASE_URL: unknown database dialect 'bogus'"),
        (
            "postgresql+asyncpg://u@127.0.0.1/x",
            "ROOTPROOF_DATABASE_URL: the driver for 'postgresql+asyncpg' is not installed",
        ),
        (
            "postgresql+psycopg://u@127.0.0.1:{port}/x",
            "ROOTPROOF_DATABASE_URL: cannot open the trace store at postgresql+psycopg://u@127.0.0.1:{port}/x",
        ),
        (
            "mysql+pymysql://u:secret@127.0.0.1:{port}/x",
            "ROOTPROOF_DATABASE_URL: cannot open the trace store at mysql+pymysql://u:***@127.0.0.1:{port}/x",
        ),
    ],
)
def test_a_bad_or_dead_database_is_exit_2_naming_the_variable(tmp_path: Path, url: str, needle: str) -> None:
    port = _free_port()  # nothing listens there: connection refused
    p = rp("trace", "some-run", home=tmp_path, ROOTPROOF_DATABASE_URL=url.format(port=port))
    _one_error_line(p, needle.format(port=port))
    assert "secret" not in p.stderr


def test_home_naming_a_file_is_exit_2(tmp_path: Path) -> None:
    f = tmp_path / "a-file"
    f.write_text("x")
    _one_error_line(rp("trace", "r", home=f), f"ROOTPROOF_HOME: {f} is not a folder")
    _one_error_line(
        rp("trace", "r", home=f / "below"), f"ROOTPROOF_HOME: cannot create the data folder {f / 'below'}"
    )


def test_config_naming_a_folder_is_exit_2(tmp_path: Path) -> None:
    _one_error_line(
        rp("trace", "r", home=tmp_path, ROOTPROOF_CONFIG=str(tmp_path)),
        f"ROOTPROOF_CONFIG: {tmp_path} is a folder",
    )
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b"model = '\xe9'\n")
    _one_error_line(
        rp("trace", "r", home=tmp_path, ROOTPROOF_CONFIG=str(bad)), f"ROOTPROOF_CONFIG: {bad} is not UTF-8"
    )


def test_a_non_utf8_card_is_exit_2_naming_the_file(tmp_path: Path) -> None:
    cards = tmp_path / "cards"
    cards.mkdir()
    card = cards / "latin1.md"
    card.write_bytes(
        (ROOT / "src/rootproof/kb/cards/disk-full.md").read_bytes() + "\nCaf\xe9\n".encode("latin-1")
    )
    for args in (["diagnose", "--scenario", "disk-full"], ["kb", "search", "disk full"]):
        _one_error_line(
            rp(*args, home=tmp_path / "home", ROOTPROOF_CARDS_DIR=str(cards)), f"{card}: not UTF-8 text"
        )


# -- read-only stores ------------------------------------------------------------------------


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[Path, str]:
    """A SQLite store holding one finished run and one orphan; returns (file, run id)."""
    db = tmp_path / "store" / "rootproof.db"
    store = SqlTraceStore(f"sqlite:///{db}")
    h = Harness(Runtime.from_settings(load_settings(data_dir=tmp_path / "home"), sink=store))
    sc = load_scenario("pg-row-lock")
    out = h.diagnose(sc.question, scenario=sc)
    store.save_run(
        RunRecord(
            run_id="orphan", session_id="s", question="q", deadline_at=datetime.now(UTC) - timedelta(hours=1)
        )
    )
    store.close()
    return db, out.run_id


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def _orphan_status(db: Path) -> str | None:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return conn.execute("SELECT status FROM diagnosis_run WHERE run_id = 'orphan'").fetchone()[0]


def test_read_only_sqlite_serves_read_only_commands(recorded: tuple[Path, str], tmp_path: Path) -> None:
    db, run_id = recorded
    before = _digest(db.parent)
    url = f"sqlite:///file:{db}?mode=ro&uri=true"
    t = rp("trace", run_id, "--json", home=tmp_path / "home", ROOTPROOF_DATABASE_URL=url)
    assert t.returncode == 0, t.stderr
    assert json.loads(t.stdout)["run"]["run_id"] == run_id
    assert rp("trace", run_id, home=tmp_path / "home", ROOTPROOF_DATABASE_URL=url).returncode == 0
    a = rp("audit", run_id, "--json", home=tmp_path / "home", ROOTPROOF_DATABASE_URL=url)
    assert a.returncode == 0 and json.loads(a.stdout)["ok"], a.stderr
    for args in (["scenarios", "list"], ["tools", "list"]):
        assert rp(*args, home=tmp_path / "home", ROOTPROOF_DATABASE_URL=url).returncode == 0
    # the database file is unchanged (SQLite may add its empty -wal/-shm beside it), the orphan
    # left for a writable open to sweep
    assert _digest(db.parent)[db.name] == before[db.name]
    assert _orphan_status(db) is None


def test_an_unwritable_store_is_opened_read_only_and_not_swept(
    recorded: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, run_id = recorded
    before = _digest(db.parent)
    # As a user without write permission sees it (the tests may run as root, who can write anywhere).
    monkeypatch.setattr(os, "access", lambda path, mode: mode != os.W_OK)
    h = Harness(Runtime.from_settings(load_settings(data_dir=db.parent, database_url=f"sqlite:///{db}")))
    reader = h.reader()
    assert isinstance(reader, SqlTraceStore) and reader.read_only
    trace = reader.trace(run_id)
    assert trace is not None and trace["run"]["status"] == "SUCCESS"
    orphan = reader.get_run("orphan")
    assert orphan is not None and orphan.status is None
    reader.close()
    assert _digest(db.parent) == before


def test_a_writable_open_still_sweeps_orphans(recorded: tuple[Path, str]) -> None:
    db, _ = recorded
    with SqlTraceStore(f"sqlite:///{db}") as store:
        orphan = store.get_run("orphan")
        assert orphan is not None and (orphan.status, orphan.error) == ("FAILED", "orphaned")


# -- signals ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_cancels_the_run_and_it_is_persisted_cancelled(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    with serve() as fake:
        fake.otherwise = completion(content="too late", delay_s=30)  # a model that never answers in time
        env = inherited_env()
        env |= {
            "ROOTPROOF_HOME": str(tmp_path),
            "ROOTPROOF_MODEL": "openai",
            "ROOTPROOF_OPENAI_BASE_URL": fake.base_url,
            "ROOTPROOF_OPENAI_PROVIDER": "vllm",
            "PYTHONPATH": os.pathsep.join(sys.path),
        }
        p = subprocess.Popen(
            [sys.executable, "-m", "rootproof.cli", "diagnose", "--scenario", "pg-row-lock", "--json"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            started = time.monotonic()
            while not fake.requests and time.monotonic() - started < 120 and p.poll() is None:
                time.sleep(0.05)
            assert fake.requests, "the run never reached the model"
            p.send_signal(sig)
            out, err = p.communicate(timeout=20)
        finally:
            if p.poll() is None:
                p.kill()
                p.communicate()
    assert p.returncode == code, err
    assert "Traceback" not in err
    doc = json.loads(out)  # still exactly one JSON document
    assert (doc["status"], doc["release_outcome"], doc["content"]) == ("CANCELLED", "NONE", None)
    t = rp("trace", doc["run_id"], "--json", home=tmp_path)  # a new open: the sweep must not touch it
    assert t.returncode == 0, t.stderr
    run = json.loads(t.stdout)["run"]
    assert (run["status"], run["release_outcome"], run["lifecycle_state"], run["fallback_type"]) == (
        "CANCELLED",
        "NONE",
        "CANCELLED",
        None,
    )
    assert [e["type"] for e in json.loads(t.stdout)["events"]][-1] == "done"


# -- closed pipes and control characters ------------------------------------------------------


def test_a_closed_pipe_ends_quietly(recorded: tuple[Path, str], tmp_path: Path) -> None:
    db, run_id = recorded
    env = inherited_env()
    env |= {
        "ROOTPROOF_HOME": str(tmp_path),
        "ROOTPROOF_DATABASE_URL": f"sqlite:///{db}",
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    for args in (["trace", run_id], ["trace", run_id, "--json"], ["tools", "list", "--json"]):
        with subprocess.Popen(
            [sys.executable, "-m", "rootproof.cli", *args],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        ) as p:
            assert p.stdout is not None and p.stderr is not None
            p.stdout.close()  # the reader is gone before the command writes (as `| head -0`)
            err = p.stderr.read().decode()
            p.wait(timeout=120)
        assert p.returncode in (0, 141), err
        assert "Traceback" not in err and "BrokenPipe" not in err and "Error" not in err, err


HOSTILE = "\x1b[2J\x1b]0;owned\x07 wiped\rfake prompt \x9b31m red \u202eevil"


def _hostile_scenario(tmp_path: Path) -> Path:
    folder = tmp_path / "pg-row-lock"
    shutil.copytree(BUILTIN / "pg-row-lock", folder)
    responses = folder / "snapshot" / "tool_responses.yaml"
    text = responses.read_text(encoding="utf-8")
    plain = "admin j.wu started manual balance adjustment for merchant 4471 (ticket FIN-2291)"
    assert plain in text
    escaped = json.dumps(
        f"admin j.wu started manual balance adjustment {HOSTILE} for merchant 4471"
    )  # a YAML double-quoted scalar
    responses.write_text(text.replace(plain, escaped), encoding="utf-8")
    return folder


def test_control_characters_from_logs_are_escaped_on_the_terminal(tmp_path: Path) -> None:
    folder = _hostile_scenario(tmp_path)
    args = [
        "tool",
        "call",
        "query_logs",
        "--scenario",
        str(folder),
        "--args",
        '{"query": "balance adjustment"}',
    ]
    p = rp(*args, home=tmp_path / "home")
    assert p.returncode == 0, p.stderr
    assert "manual balance adjustment" in p.stdout
    for raw in ("\x1b", "\x07", "\r", "\x9b", "\u202e"):
        assert raw not in p.stdout and raw not in p.stderr
    assert "\\x1b[2J\\x1b]0;owned\\x07 wiped\\rfake prompt \\x9b31m red \\u202e" in p.stdout
    # --json: exactly the same data, and nothing on stdout a terminal would act on
    j = rp(*args, "--json", home=tmp_path / "home")
    assert j.returncode == 0, j.stderr
    assert "\x9b" not in j.stdout and "\u202e" not in j.stdout and "\x1b" not in j.stdout
    refs = json.loads(j.stdout)["observation"]["refs"]
    assert any(HOSTILE in r["text"] for r in refs)
    # the run's question reaches `trace` too
    run_id = json.loads(j.stdout)["run_id"]
    t = rp("trace", run_id, home=tmp_path / "home")
    assert t.returncode == 0 and "\x1b" not in t.stdout


def test_control_characters_in_the_question_are_escaped_by_trace(tmp_path: Path) -> None:
    d = rp("diagnose", f"orders hang {HOSTILE}", "--scenario", "pg-row-lock", "--json", home=tmp_path)
    assert d.returncode == 0, d.stderr
    doc = json.loads(d.stdout)
    t = rp("trace", doc["run_id"], home=tmp_path)
    assert t.returncode == 0, t.stderr
    assert "\x1b" not in t.stdout and "\r" not in t.stdout and "orders hang \\x1b[2J" in t.stdout
