"""The EvidenceGuard reads the card catalogue on every run, not only when the agent looked knowledge up.

A model (an LLM, here scripted) that never calls `lookup_knowledge` must still meet
ROOT_CAUSE_NOT_DISCRIMINATED: a root cause resting only on a symptom its cards share with a
named alternative (the pool's "Connection is not available" timeouts) is withheld.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rootproof.agent.models.base import ModelRequest
from rootproof.agent.models.scripted import ScriptedModel, ScriptedStep
from rootproof.harness import Harness
from rootproof.run.records import MemoryTraceSink
from rootproof.runtime import Runtime
from rootproof.scenarios.loader import load_scenario
from rootproof.settings import load_settings

DNS = Path(__file__).parents[1] / "data" / "planner-scenarios" / "planner-dns-behind-pool-timeouts"


def _pool_timeout_draft(requests: list[ModelRequest]) -> dict[str, Any]:
    cits: list[dict[str, Any]] = []
    for m in requests[-1].messages:
        if m.role != "tool":
            continue
        o = json.loads(m.content)
        for r in o.get("refs") or []:
            if "Connection is not available, request timed out after" in r["text"]:
                excerpt = r["text"][r["text"].index("HikariPool-1") :]
                cits.append({"invocation_id": o["invocation_id"], "tool_name": o["tool"], "raw_path": r["raw_path"], "excerpt": excerpt})
    assert len(cits) >= 2, cits
    return {
        "summary": "connection pool exhausted",
        "root_cause": {"component": "connection_pool", "mechanism": "connection_exhaustion", "culprit": "HikariPool-1", "claim_ids": ["c1"]},
        "claims": [{"id": "c1", "text": "HikariPool-1 - Connection is not available, request timed out", "kind": "root_cause", "citations": cits[:3]}],
    }


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness(Runtime.from_settings(load_settings(data_dir=tmp_path, deadline_s=60), sink=MemoryTraceSink()))


def test_a_shared_symptom_is_withheld_when_the_agent_never_looked_knowledge_up(harness: Harness) -> None:
    model = ScriptedModel(
        [ScriptedStep(calls=[("query_logs", {"query": '"Connection is not available"'})]), ScriptedStep(draft=_pool_timeout_draft)]
    )
    out = harness.diagnose("Why do order requests time out?", scenario=load_scenario(DNS), model=model)
    assert out.evidence is not None
    assert "ROOT_CAUSE_NOT_DISCRIMINATED" in out.evidence.codes
    assert out.release_outcome == "FALLBACK"
