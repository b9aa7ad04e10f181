"""Issue finding 1: one planted line must never publish a root cause (end to end, embedded default).

A no-fault scenario (a copy of the built-in `control-db-healthy`) gets one log line an outsider
wrote: an INFO access-log line whose request URL and user agent carry a Redis error, or a plain
`redis.exceptions.ConnectionError` line. The scenario has no Redis tool at all. Whatever the
planner drafts, what the user gets must not be a Redis root cause.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from rootproof.harness import memory_harness
from rootproof.scenarios.loader import load_scenario
from rootproof.settings import load_settings

BUILTIN = Path(__file__).resolve().parents[2] / "src" / "rootproof" / "scenarios" / "builtin"

PLANTED_ACCESS = (
    '10.20.9.7 - - [12/Mar/2026:09:58:41 +0000] "GET /api/orders?note=max number of clients reached HTTP/1.1" '
    '200 512 "-" "max number of clients reached"'
)
PLAIN_REDIS = "redis.exceptions.ConnectionError: max number of clients reached"


def _planted(tmp_path: Path, message: str, level: str, source: str) -> Path:
    folder = tmp_path / "control-db-healthy"
    shutil.copytree(BUILTIN / "control-db-healthy", folder)
    path = folder / "snapshot" / "tool_responses.yaml"
    data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["logs"].append(
        {
            "ts": "2026-03-12T09:58:41.120Z",
            "service": "order-service",
            "scope": "APPLICATION",
            "level": level,
            "source": source,
            "message": message,
        }
    )
    path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return folder


@pytest.mark.parametrize(
    ("message", "level", "source"),
    [(PLANTED_ACCESS, "INFO", "access.log"), (PLAIN_REDIS, "ERROR", "order-service.log")],
    ids=["access-line-url-and-agent", "plain-client-error-line"],
)
def test_one_planted_line_never_publishes_a_redis_root_cause(
    tmp_path: Path, message: str, level: str, source: str
) -> None:
    sc = load_scenario(_planted(tmp_path, message, level, source))
    assert "inspect_redis" not in sc.allowed_tools
    h = memory_harness(load_settings(data_dir=tmp_path / "home"))
    # The first question made the planner at 52c7bac publish redis / max_clients_reached with
    # kill_idle_clients as recovery, for either planted line.
    for question in ("Users report errors when placing orders; is Redis hitting max clients?", sc.question):
        out = h.diagnose(question, scenario=sc)
        assert out.status == "SUCCESS"
        if out.release_outcome == "PUBLISHED":
            report = out.content["report"] if out.content else {}
            rc = report.get("root_cause")
            assert rc is None or rc["component"] != "redis", rc
            assert "kill_idle_clients" not in str(report.get("recovery"))


def test_planted_access_line_refs_carry_spans_in_the_observation_and_record(tmp_path: Path) -> None:
    sc = load_scenario(_planted(tmp_path, PLANTED_ACCESS, "INFO", "access.log"))
    h = memory_harness(load_settings(data_dir=tmp_path / "home"))
    out = h.diagnose(sc.question, scenario=sc)
    logs = [o for o in out.outcomes if o.invocation.tool_name == "query_logs"]
    assert logs
    refs = [r for o in logs for r in o.observation.get("refs", []) if "max number of clients" in r["text"]]
    assert refs and all(r.get("untrusted_spans") for r in refs)
    for r in refs:
        text = r["text"]
        assert all(text[s:e] for s, e in r["untrusted_spans"])
        assert "200 512" in "".join(
            ch if not any(s <= i < e for s, e in r["untrusted_spans"]) else " " for i, ch in enumerate(text)
        )
    sink = h.sink
    rows = [i for i in sink.invocations if i.run_id == out.run_id and i.tool_name == "query_logs"]  # type: ignore[attr-defined]
    assert any(ref.get("untrusted_spans") for row in rows for ref in row.evidence_refs)
