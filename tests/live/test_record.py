"""A live run frozen into a snapshot scenario that answers the run's calls as live did.

One live environment (no background load, so nothing writes while the run and the recording
read); a real fault (the order service answers after 7 s, past nginx's 5 s `proxy_read_timeout`,
so real orders through nginx end in 504 and nginx logs upstream timeouts); `rootproof diagnose
--targets` as a user runs it; then `record_scenario` with the run's calls from `trace --json`.
The folder loads and validates, the snapshot backend answers every call with the evidence refs
of the live trace (tables and counters, read later, only as to whether they found evidence),
`eval snapshot` runs it, and no password of the run's secrets is in any file written.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from rootproof.live import LiveConfig, LiveEnvironment
from rootproof.live.bench.record import RECORDED_TOOLS, record_scenario, replay_matches, snapshot_refs
from rootproof.live.layout import COMPONENTS
from rootproof.scenarios.loader import load_scenario, validate_scenario
from rootproof.scenarios.yamlio import load_yaml

from .support import cli, fresh_root, need_binaries, remove_root

pytestmark = [pytest.mark.services, pytest.mark.slow]

QUESTION = "Orders through the edge return 504 Gateway Timeout since a few minutes. What is going on?"
QUIET = tuple(c for c in COMPONENTS if c != "load")
TOOLS = [
    "lookup_knowledge",
    "query_logs",
    "query_metrics",
    "inspect_postgres",
    "inspect_redis",
    "inspect_nginx",
]
GROUND_TRUTH: dict[str, Any] = {
    "fault": True,
    "root_cause": {
        "component": "nginx",
        "mechanism": "upstream_timeout",
        "culprit": "the order service answers after 7 s, past proxy_read_timeout 5s",
    },
    "required_evidence": [
        {"id": "upstream-timeout", "tool": "inspect_nginx", "match": ["upstream timed out"]}
    ],
    "recovery": {"contract": "proposal_only"},
}


@pytest.fixture(scope="module")
def env() -> Iterator[LiveEnvironment]:
    need_binaries(QUIET)
    root = fresh_root()
    try:
        with LiveEnvironment(LiveConfig(root=root, components=QUIET)) as live:
            yield live
    finally:
        remove_root(root)


def _slow_orders(env: LiveEnvironment, n: int = 3) -> None:
    """`n` real orders through nginx while the service is slow; waits until the service has answered them all."""
    env.order_admin().set_faults(delay_s=7)
    results: list[Any] = []
    threads = [threading.Thread(target=lambda: results.append(env.probe(timeout_s=15))) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == n and all(r.status == 504 for r in results), [r.as_dict() for r in results]
    threading.Event().wait(3)  # the service finishes (and logs) each request 7 s after it began


def _diagnose(env: LiveEnvironment) -> tuple[dict[str, Any], dict[str, Any]]:
    root = env.folder.parent
    out = cli("diagnose", "--targets", str(env.targets_file), QUESTION, "--json", root=root, timeout=240)
    assert out.returncode == 0, out.stderr
    result: dict[str, Any] = json.loads(out.stdout)
    trace = cli("trace", result["run_id"], "--json", root=root)
    assert trace.returncode == 0, trace.stderr
    return result, json.loads(trace.stdout)


def test_a_recorded_live_run_replays_as_a_snapshot(env: LiveEnvironment, tmp_path: Path) -> None:
    _slow_orders(env)
    result, trace = _diagnose(env)
    invocations = trace["invocations"]
    calls = [(i["tool_name"], i["input_params"]) for i in invocations]
    now = datetime.fromisoformat(trace["run"]["ended_at"])  # after every call: no item a call saw is left out
    out_dir = tmp_path / "recorded"
    folder = record_scenario(
        targets_file=env.targets_file,
        now=now,
        calls=calls,
        out_dir=out_dir,
        scenario_id="live-upstream-timeout",
        question=QUESTION,
        title="Recorded: 504s through nginx, the order service too slow",
        language="en",
        allowed_tools=TOOLS,
        ground_truth=GROUND_TRUTH,
        live={"run_id": env.run_id, "diagnosis_run_id": result["run_id"]},
    )
    try:
        env.order_admin().set_faults(delay_s=0)
    except Exception:  # noqa: BLE001 - the environment is stopped after the module anyway
        pass

    # the folder loads, validates and says where it came from
    assert folder == out_dir / "live-upstream-timeout" and sorted(p.name for p in out_dir.iterdir()) == [
        folder.name
    ]
    scenario = load_scenario(folder)
    assert scenario.allowed_tools == tuple(TOOLS)
    assert scenario.now == now.replace(microsecond=now.microsecond // 1000 * 1000)
    assert validate_scenario(folder) == []
    provenance = load_yaml(folder / "provenance.yaml", "provenance.yaml").data
    recording = provenance["recording"]
    assert provenance["source"] == "recorded_live_run"
    assert recording["live_run"] == env.run_id and recording["diagnosis_run"] == result["run_id"]
    assert [t["name"] for t in recording["targets"]] == [
        "orders-db",
        "cache",
        "edge",
        "order-service",
        "prom",
    ]
    assert [c["tool"] for c in recording["calls"]] == [t for t, _ in calls if t in RECORDED_TOOLS]
    responses = scenario.responses
    assert responses.logs and any(
        "upstream timed out" in ln.text for ln in responses.lines["nginx.error_log"]
    )
    assert {"postgres.activity", "postgres.log", "redis.clients"} <= set(responses.rows) | set(
        responses.lines
    )
    assert responses.info and responses.nginx_config and responses.nginx_status

    # the snapshot answers each call with the refs of the live trace
    live: list[list[tuple[str, str]] | None] = [
        [(r["raw_path"], r["text"]) for r in i["evidence_refs"]] if i["status"] == "READY" else None
        for i in invocations
        if i["tool_name"] in RECORDED_TOOLS
    ]
    assert sum(x is not None for x in live) >= 5, [(i["tool_name"], i["status"]) for i in invocations]
    assert replay_matches(folder, calls, live) == []
    tools = [t for t, _ in calls if t in RECORDED_TOOLS]
    for tool, refs, answer in zip(tools, live, snapshot_refs(folder, calls), strict=True):
        if refs is None or tool not in ("query_logs", "inspect_nginx"):
            continue
        if [p for p, _ in refs] == ["$.no_evidence"]:
            assert not isinstance(answer, str) and [p for p, _ in answer] == ["$.no_evidence"], (tool, answer)
        else:  # files: the same texts, one for one
            assert answer == refs, tool
    cited = [c for claim in result["content"]["report"]["claims"] for c in claim["citations"]]
    assert any(c["tool_name"] == "inspect_nginx" for c in cited), cited

    # eval snapshot runs it (pass or fail, never infra_invalid)
    report = tmp_path / "eval.json"
    p = cli(
        "eval",
        "snapshot",
        "--scenarios",
        str(out_dir),
        "--json",
        str(report),
        root=env.folder.parent,
        timeout=300,
    )
    assert p.returncode in (0, 1), p.stdout + p.stderr
    doc = json.loads(report.read_text())
    assert doc["state"] != "infra_invalid" and [s["id"] for s in doc["scenarios"]] == [
        "live-upstream-timeout"
    ]
    assert (
        doc["scenarios"][0]["outcome"] in ("PUBLISHED", "FALLBACK") and doc["scenarios"][0]["tool_calls"] > 0
    )

    # no password of the run reaches the folder
    passwords = [f.read_text().strip() for f in (env.folder / "secrets").iterdir()]
    assert passwords and all(len(pw) >= 8 for pw in passwords)
    for path in folder.rglob("*"):
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            assert not [pw for pw in passwords if pw in text], path
            assert "/secrets/" not in text, path
