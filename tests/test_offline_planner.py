"""The offline planner's evidence gathering."""

from __future__ import annotations

from pathlib import Path

import pytest

from rootproof.harness import Harness
from rootproof.run.records import MemoryTraceSink
from rootproof.scenarios.loader import load_scenario
from rootproof.settings import load_settings


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Harness:
    return Harness(load_settings(data_dir=tmp_path_factory.mktemp("h"), deadline_s=60), sink=MemoryTraceSink())


def test_a_view_cut_short_is_asked_again_for_what_the_signals_test(harness: Harness, tmp_path: Path) -> None:
    """Redis INFO is long: the 4 KiB observation omits `evicted_keys`; the planner asks for it by name."""
    import yaml

    folder = tmp_path / "redis-info-long"
    (folder / "snapshot").mkdir(parents=True)
    (folder / "scenario.yaml").write_text(
        yaml.safe_dump(
            {
                "id": "redis-info-long",
                "title": "cart writes fail",
                "language": "en",
                "question": "Cart writes fail since 14:00. Why?",
                "now": "2026-09-21T14:30:00Z",
                "allowed_tools": ["lookup_knowledge", "query_logs", "inspect_redis"],
            }
        ),
        encoding="utf-8",
    )
    server = {f"field_{i:03d}": f"value-{i}-" + "x" * 40 for i in range(80)}
    responses = {
        "data_source": "snapshot",
        "logs": [
            {
                "ts": "2026-09-21T14:25:31.770Z",
                "service": "cart-service",
                "level": "ERROR",
                "source": "cart-service.log",
                "message": "redis.exceptions.OutOfMemoryError: command not allowed when used memory > 'maxmemory'.",
            }
        ],
        "redis": {"info": {"server": server, "memory": {"maxmemory_policy": "volatile-lru"}, "stats": {"evicted_keys": 1843022}}},
    }
    (folder / "snapshot" / "tool_responses.yaml").write_text(yaml.safe_dump(responses), encoding="utf-8")
    (folder / "ground_truth.yaml").write_text(
        yaml.safe_dump({"fault": True, "root_cause": {"component": "redis", "mechanism": "memory_eviction", "culprit": "x"}, "required_evidence": [], "alternatives": [], "red_herrings": [], "recovery": {"contract": "proposal_only", "acceptable": ["scale_out"], "forbidden": [], "verification_required": False}}),
        encoding="utf-8",
    )
    (folder / "provenance.yaml").write_text(yaml.safe_dump({"source": "handwritten", "formats": "redis-py", "references": [], "validated": True, "notes": "test"}), encoding="utf-8")
    out = harness.diagnose("", scenario=load_scenario(folder))
    info = [o.invocation for o in out.outcomes if o.invocation.tool_name == "inspect_redis"]
    assert isinstance(info[0].arguments, dict) and not info[0].arguments.get("query")
    assert any(isinstance(i.arguments, dict) and '"evicted_keys"' in str(i.arguments.get("query", "")) for i in info[1:]), [i.arguments for i in info]
    assert out.draft is not None
    cited = {c.raw_path for claim in out.draft.claims for c in claim.citations}
    assert "$.info.stats.evicted_keys" in cited
