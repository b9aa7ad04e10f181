"""Secrets planted in a scenario's logs and rows, the question and the alert never reach the store.

A copy of a built-in scenario gets every corpus line in its service's logs and an
`ALTER USER … PASSWORD` row in pg_stat_activity; `diagnose --json` runs with a question and an
alert that hold secrets too, then `trace --json`. No secret may appear in either command's
output, nor in any stored text: the SQLite database file's bytes, or every text column of every
table on PostgreSQL and MariaDB.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml

from tests.boundary.test_redaction import CORPUS, leaked_pieces
from tests.cli_support import run_cli
from tests.services import inherited_env

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src" / "rootproof" / "scenarios" / "builtin" / "pg-row-lock"

QUESTION_SECRETS = ["Qu3st!on@pw", "Qu3stion-Env-Pw"]
QUESTION = (
    "Order confirmations hang for 30 s. The service connects with postgres://app:Qu3st!on@pw@pg-1/orders "
    "and DB_PASSWORD=Qu3stion-Env-Pw. What is going on?"
)
ALERT_SECRETS = ["Al3rt-Label-Tok", "Al3rtW3bh00kS3cr3tV4lue"]
ALERT = {
    "name": "OrdersApiLatencyHigh",
    "severity": "critical",
    "service": "order-service",
    "starts_at": "2026-08-03T09:40:00Z",
    "labels": {"team": "orders", "token": "Al3rt-Label-Tok"},
    "summary": "p95 latency 30s > 2s for 5m; notify https://hooks.slack.com/services/T0A1/B0B2/Al3rtW3bh00kS3cr3tV4lue",
}
ROW_SECRET = "Alt3r-Us3r-Pw"
PER_ENTRY = 8  # corpus lines per planted log entry: the first query_logs call returns at most 50 entries


def _secrets() -> list[tuple[str, str]]:
    """(secret, the line it was planted in) for every planted secret."""
    out = [(s, e["line"]) for e in CORPUS for s in e["secrets"]]
    out += [(s, QUESTION) for s in QUESTION_SECRETS] + [
        (s, ALERT["summary"] + " token") for s in ALERT_SECRETS
    ]
    return out + [(ROW_SECRET, f"ALTER USER app WITH PASSWORD '{ROW_SECRET}'")]


def build_scenario(folder: Path) -> Path:
    shutil.copytree(SOURCE, folder)
    doc = yaml.safe_load((folder / "snapshot" / "tool_responses.yaml").read_text(encoding="utf-8"))
    lines = [e["line"] for e in CORPUS]
    for n, start in enumerate(range(0, len(lines), PER_ENTRY)):
        doc["logs"].append(
            {
                "ts": f"2026-08-03T09:3{n % 10}:0{n // 10}.000Z",
                "service": "order-service",
                "scope": "APPLICATION",
                "level": "INFO",
                "source": "order-service.log",
                "message": "\n".join(lines[start : start + PER_ENTRY]),
            }
        )
    doc["postgres"]["activity"].append(
        {
            "pid": 5400,
            "usename": "postgres",
            "application_name": "psql",
            "client_addr": "10.20.4.7",
            "state": "idle",
            "wait_event_type": "Client",
            "wait_event": "ClientRead",
            "xact_start": None,
            "state_change": "2026-08-03T09:35:00.000Z",
            "query": f"ALTER USER app WITH PASSWORD '{ROW_SECRET}'",
        }
    )
    (folder / "snapshot" / "tool_responses.yaml").write_text(
        yaml.safe_dump(doc, allow_unicode=True, sort_keys=False), encoding="utf-8"
    )
    return folder


def rp(*args: str, home: Path, database_url: str | None) -> subprocess.CompletedProcess[str]:
    env = inherited_env()
    env["ROOTPROOF_HOME"] = str(home)
    env["PYTHONPATH"] = str(ROOT / "src")
    if database_url:
        env["ROOTPROOF_DATABASE_URL"] = database_url
    p = run_cli(args, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    return p


def assert_no_secret(where: str, text: str) -> None:
    for secret, line in _secrets():
        # pieces of 8+ characters: shorter ones (`2026`, `orders`) occur in any trace
        assert leaked_pieces(secret, line, text, min_len=8) == [], f"{where}: {secret!r} leaked"


def run_and_check(tmp_path: Path, database_url: str | None) -> tuple[dict[str, Any], str]:
    scenario = build_scenario(tmp_path / "scenarios" / SOURCE.name)
    alert = tmp_path / "alert.yaml"
    alert.write_text(yaml.safe_dump(ALERT), encoding="utf-8")
    home = tmp_path / "home"
    d = rp(
        "diagnose",
        QUESTION,
        "--scenario",
        str(scenario),
        "--alert",
        str(alert),
        "--json",
        home=home,
        database_url=database_url,
    )
    assert_no_secret("diagnose --json", d.stdout + d.stderr)
    run_id = json.loads(d.stdout)["run_id"]
    t = rp("trace", run_id, "--json", home=home, database_url=database_url)
    assert_no_secret("trace --json", t.stdout + t.stderr)
    trace = json.loads(t.stdout)
    assert_no_secret("events", json.dumps(trace["events"], ensure_ascii=False))
    stored = json.dumps(trace, ensure_ascii=False)
    # The planted text did reach the store, masked (else this test would prove nothing).
    for masked in (
        "postgres://app:***@db/x",
        "DB_PASSWORD=***",
        "PGPASSWORD=***",
        "WITH PASSWORD '***'",
        "Authorization: Basic ***",
    ):
        assert masked in stored, masked
    assert "postgres://app:***@pg-1/orders" in trace["run"]["question"]
    assert trace["run"]["alert"]["primary"]["labels"]["token"] == "***"
    return trace, stored


def _dump_tables(url: str) -> str:
    """Every value of every column of every table, as text."""
    engine = sa.create_engine(url)
    try:
        meta = sa.MetaData()
        meta.reflect(engine)
        parts: list[str] = []
        with engine.connect() as conn:
            for table in meta.sorted_tables:
                for row in conn.execute(sa.select(table)):
                    parts.extend(
                        v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                        for v in row
                        if v is not None
                    )
        assert parts, "the database holds nothing"
        return "\n".join(parts)
    finally:
        engine.dispose()


@pytest.mark.slow
def test_sqlite_store_holds_no_secret(tmp_path: Path) -> None:
    run_and_check(tmp_path, None)
    files = [p for p in (tmp_path / "home").rglob("*") if p.is_file()]
    assert any(p.suffix == ".db" for p in files), files
    for p in files:
        raw = p.read_bytes().decode("utf-8", "replace")
        assert_no_secret(f"file {p.name}", raw)
    db = next(p for p in files if p.suffix == ".db")
    dump = _dump_tables(f"sqlite:///{db}")
    assert "DB_PASSWORD=***" in dump
    assert_no_secret("SQLite tables", dump)


@pytest.mark.slow
@pytest.mark.services
@pytest.mark.parametrize("server", ["pg_url", "mysql_url"])
def test_server_store_holds_no_secret(tmp_path: Path, server: str, request: pytest.FixtureRequest) -> None:
    url: str = request.getfixturevalue(server)
    run_and_check(tmp_path, url)
    dump = _dump_tables(url)
    assert "DB_PASSWORD=***" in dump
    assert_no_secret(f"{server} tables", dump)
