"""Secret redaction: every corpus shape masked, the text around it kept, ordinary text untouched."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from rootproof.boundary.safety import redact, redact_value

CORPUS_FILE = Path(__file__).parents[1] / "data" / "secrets" / "corpus.yaml"
CORPUS: list[dict[str, Any]] = yaml.safe_load(CORPUS_FILE.read_text(encoding="utf-8"))
BUILTIN = Path(__file__).resolve().parents[2] / "src" / "rootproof" / "scenarios" / "builtin"


def leaked_pieces(secret: str, line: str, out: str, *, min_len: int = 4) -> list[str]:
    """Pieces of `secret` (at least `min_len` long) found in `out` that the rest of `line` lacks."""
    rest = line.replace(secret, "\0")
    pieces = []
    for n in range(min(min_len, len(secret)), len(secret) + 1):
        for i in range(len(secret) - n + 1):
            piece = secret[i : i + n]
            if piece in out and piece not in rest:
                pieces.append(piece)
        if pieces:
            return pieces
    return pieces


def test_corpus_holds_at_least_100_shapes() -> None:
    assert len(CORPUS) >= 100
    assert len({e["shape"] for e in CORPUS}) == len(CORPUS)
    for e in CORPUS:
        assert e["secrets"] and all(s in e["line"] for s in e["secrets"]), e["shape"]


@pytest.mark.parametrize("entry", CORPUS, ids=[e["shape"] for e in CORPUS])
def test_every_corpus_secret_is_masked(entry: dict[str, Any]) -> None:
    out = redact(entry["line"])
    assert "***" in out
    for secret in entry["secrets"]:
        assert leaked_pieces(secret, entry["line"], out) == [], out


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # the shapes the old patterns missed, and what stays readable around the mask
        ("aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY", "aws_secret_access_key=***"),
        ("DB_PASSWORD=Tr0ub4dor&3-orders psql", "DB_PASSWORD=*** psql"),
        ("PGPASSWORD=s3cr3t-Pg-2026 psql -h db", "PGPASSWORD=*** psql -h db"),
        ("connect redis://:cache-pw-42@redis-1:6379/0", "connect redis://:***@redis-1:6379/0"),
        ('{"user": "app", "password": "JsonPw-7731"}', '{"user": "app", "password": "***"}'),
        ("  password: yamlPa55word", "  password: ***"),
        ("Authorization: Basic YWRtaW46aHVudGVyMg==", "Authorization: Basic ***"),
        ("token xoxb-2244668800-1357913579-AbCdEfGhIjKlMnOp", "token ***"),
        ("push with ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8 failed", "push with *** failed"),
        ("ALTER USER app WITH PASSWORD 'Alt3r-Us3r-Pw'", "ALTER USER app WITH PASSWORD '***'"),
        ("connecting to postgres://app:p@ss@db/x failed", "connecting to postgres://app:***@db/x failed"),
    ],
)
def test_missed_shapes_are_masked_with_their_context_kept(line: str, expected: str) -> None:
    assert redact(line) == expected


def test_a_pg_stat_activity_row_query_is_masked() -> None:
    row = {
        "pid": 5400,
        "usename": "postgres",
        "state": "idle",
        "query": "ALTER USER app WITH PASSWORD 'Alt3r-Us3r-Pw'",
    }
    assert redact_value({"rows": [row]}) == {"rows": [{**row, "query": "ALTER USER app WITH PASSWORD '***'"}]}


def test_secret_like_dict_keys_mask_their_values() -> None:
    data = {
        "password": "hunter2hunter",
        "DB_PASSWORD": "x9y8z7",
        "Authorization": "Basic YWRtaW46aHVudGVyMg==",
        "api_key": "k-123456",
        "client_secret": "cs-1",
        "nested": {"token": "t-998877", "requirepass": "rp-1"},
        "pin_password": 123456,
        "token_enabled": True,
        "max_tokens": 4096,
        "password_encryption": "scram-sha-256",
        "token_type": "bearer",
        "tokens": "12",
        "keyspace": "db0",
        "empty_password": "",
    }
    out = redact_value(data)
    assert out == {
        **data,
        "password": "***",
        "DB_PASSWORD": "***",
        "Authorization": "***",
        "api_key": "***",
        "client_secret": "***",
        "nested": {"token": "***", "requirepass": "***"},
        "pin_password": "***",
        "empty_password": "",
    }


@pytest.mark.parametrize(
    "line",
    [
        'FATAL:  password authentication failed for user "app"',
        "2026-08-03 09:40:00 UTC [5120] app@orders LOG:  connection authorized: user=app database=orders",
        "max_tokens=4096 temperature=0.2",
        "bypass=1 passed=12 failed=0",
        "password_encryption = scram-sha-256",
        "trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=00f067aa0ba902b7",
        '{"request_id": "7c9e6679-7425-40de-944b-e07fc1f90ae7", "status": 504}',
        "Basic configuration loaded from /etc/app/config.yaml",
        "return pymysql.connect(host=DB_HOST, user=DB_USER, password=DB_PASSWORD, connect_timeout=5)",
        "initdb --auth=trust -E UTF8",
        "PWD=/srv/app HOME=/root",
        "GET /api/orders?customerId=884120 200 in 631 ms",
        "redis-cli -h 127.0.0.1 -p 6379 info clients",
        "HikariPool-1 - Connection is not available, request timed out after 30000ms.",
        "token bucket refilled: 50 tokens",
        'Redis SLOWLOG: "GET" "session:token:user-884120"',
        "Received signal SIGTERM, scheduling shutdown...",
        "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "数据库连接失败：连接数已满（max_connections=100）",
    ],
)
def test_ordinary_text_is_left_alone(line: str) -> None:
    assert redact(line) == line


def test_a_secret_deep_in_a_long_line_is_masked() -> None:
    # detect-secrets' plugins scan long lines in overlapping windows: the last one counts too
    line = "x " * 5000 + "twilio sid AC0123456789abcdef0123456789abcdef done"
    assert redact(line) == "x " * 5000 + "twilio sid *** done"


def test_redaction_is_idempotent_and_keeps_line_breaks() -> None:
    text = "\n".join(e["line"] for e in CORPUS)
    once = redact(text)
    assert redact(once) == once
    assert once.count("\n") == text.count("\n")


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    return []


def test_builtin_scenario_evidence_is_unchanged() -> None:
    """The built-in scenarios hold no secret: redaction must not alter their evidence."""
    changed = []
    for path in sorted(BUILTIN.glob("*/snapshot/*.yaml")):
        for s in _strings(yaml.safe_load(path.read_text(encoding="utf-8"))):
            if redact(s) != s:
                changed.append((path.parent.parent.name, s[:120]))
    assert changed == []


def _real_log_lines(shared_data: Path) -> list[tuple[str, str]]:
    folder = shared_data / "real-logs"
    if not folder.is_dir():
        pytest.skip(f"{folder} is not there")
    return [
        (p.name, line)
        for p in sorted(folder.iterdir())
        if p.is_file()
        for line in p.read_text(encoding="utf-8", errors="replace").split("\n")
    ]


# The real logs hold two credentials, both the capture's own test password `app`: a PyMySQL
# call quoted in a traceback and a CREATE USER statement in the capture notes.
REAL_CREDENTIALS = {
    ("mariadb-too-many-connections.client.txt", 'password="app"'): 'password="***"',
    ("README.md", "IDENTIFIED BY 'app'"): "IDENTIFIED BY '***'",
}


def test_real_logs_lose_nothing_but_secrets(shared_data: Path) -> None:
    lines = _real_log_lines(shared_data)
    assert len(lines) > 1000
    seen = set()
    for name, line in lines:
        out = redact(line)
        if out == line:
            continue
        spans = [(k, v) for k, v in REAL_CREDENTIALS.items() if k[0] == name and k[1] in line]
        assert spans, f"{name}: redaction changed a line with no credential:\n{line}\n{out}"
        expected = line
        for (_, original), masked in spans:
            expected = expected.replace(original, masked)
            seen.add((name, original))
        assert out == expected, f"{name}: more than the credential changed:\n{line}\n{out}"
    assert seen == set(REAL_CREDENTIALS)


def test_the_gate_changes_no_result(shared_data: Path) -> None:
    """The cheap pre-check only skips lines that no pattern or plugin would change."""
    from rootproof.boundary import redaction

    lines = [e["line"] for e in CORPUS] + [line for _, line in _real_log_lines(shared_data)]
    for path in sorted(BUILTIN.glob("*/snapshot/*.yaml")):
        lines += [
            x for s in _strings(yaml.safe_load(path.read_text(encoding="utf-8"))) for x in s.split("\n")
        ]
    for line in lines:
        for piece in line.split("\n"):
            assert redaction._redact_line(piece) == redaction._redact_line(piece, gate=False), piece
