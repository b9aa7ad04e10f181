"""The guards' rule set: a packaged file documents and versions the checks; it cannot switch one off."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rootproof.errors import ConfigError
from rootproof.guard import rules
from rootproof.guard.evidence import EvidenceGuard, ViolationCode
from rootproof.guard.rules import load_rule_set, rule_set, rules_for
from rootproof.guard.semantic import GuardCode, LlmCode, OfflineCode
from rootproof.harness import Harness
from rootproof.run.records import MemoryTraceSink
from rootproof.runtime import Runtime
from rootproof.scenarios.loader import load_scenario
from rootproof.settings import load_settings


def test_the_packaged_file_names_every_check_exactly() -> None:
    rs = rule_set()
    assert rs.version.startswith("guard-rules-v3+") and len(rs.version.split("+")[1]) == 12
    for section, codes in (
        ("evidence_guard", ViolationCode),
        ("semantic_guard.common", GuardCode),
        ("semantic_guard.offline", OfflineCode),
        ("semantic_guard.llm", LlmCode),
    ):
        version, listed = rules_for(section, codes)
        assert version == rs.version
        assert sorted(r["code"] for r in listed) == sorted(str(c) for c in codes)
        assert all(set(r) == {"id", "code", "description"} for r in listed)


def _edited(tmp_path: Path, edit: object) -> Path:
    doc = yaml.safe_load(rules.RULES_FILE.read_text(encoding="utf-8"))
    edit(doc)  # type: ignore[operator]
    out = tmp_path / "rules.yaml"
    out.write_text(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return out


def test_a_file_that_drops_a_check_is_refused(tmp_path: Path) -> None:
    path = _edited(tmp_path, lambda d: d["evidence_guard"].pop())
    with pytest.raises(ConfigError, match=r"evidence_guard: the rules must name every check exactly \(missing CITATION_ENTITY_MISMATCH\)"):
        load_rule_set(path).section("evidence_guard", ViolationCode)


def test_a_file_cannot_switch_a_check_off(tmp_path: Path) -> None:
    def disable(d: dict) -> None:  # type: ignore[type-arg]
        d["evidence_guard"][0]["enabled"] = False

    with pytest.raises(ConfigError, match=r"evidence_guard\[0\]\.enabled: Extra inputs are not permitted"):
        load_rule_set(_edited(tmp_path, disable))


def test_unknown_codes_and_duplicate_ids_are_refused(tmp_path: Path) -> None:
    def unknown(d: dict) -> None:  # type: ignore[type-arg]
        d["semantic_guard"]["offline"].append({"id": "SG-OFF-99", "code": "VIBES", "description": "a check the code does not have"})

    with pytest.raises(ConfigError, match="unknown VIBES"):
        load_rule_set(_edited(tmp_path, unknown)).section("semantic_guard.offline", OfflineCode)

    def dup(d: dict) -> None:  # type: ignore[type-arg]
        d["semantic_guard"]["llm"][0]["id"] = "EG-01"

    with pytest.raises(ConfigError, match="rule id EG-01 is also used in evidence_guard"):
        load_rule_set(_edited(tmp_path, dup))


def test_changing_a_rule_changes_the_version_in_every_new_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness(Runtime.from_settings(load_settings(data_dir=tmp_path / "home"), sink=MemoryTraceSink()))
    sc = load_scenario("pg-row-lock")

    def versions() -> tuple[str, str]:
        out = h.diagnose(sc.question, scenario=sc)
        assert out.evidence is not None and out.semantic is not None
        return out.evidence.rule_set_version, out.semantic.rule_set_version

    before = versions()
    assert before == (rule_set().version, rule_set().version)

    def reword(d: dict) -> None:  # type: ignore[type-arg]
        d["evidence_guard"][8]["description"] = "The excerpt is contained in the ref text (NFKC and whitespace forgiven, nothing else)."

    monkeypatch.setattr(rules, "RULES_FILE", _edited(tmp_path, reword))
    after = versions()
    assert after[0] == after[1] != before[0]
    ev = EvidenceGuard(h.canonical).check("{}", run_id="r")
    assert ev.rule_set_version == after[0]
    assert [r["description"] for r in ev.rules if r["code"] == "EXCERPT_MISMATCH"] == ["The excerpt is contained in the ref text (NFKC and whitespace forgiven, nothing else)."]


def test_a_broken_rules_file_fails_the_run_closed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rules, "RULES_FILE", _edited(tmp_path, lambda d: d["semantic_guard"]["offline"].pop(0)))
    h = Harness(Runtime.from_settings(load_settings(data_dir=tmp_path / "home"), sink=MemoryTraceSink()))
    sc = load_scenario("pg-row-lock")
    out = h.diagnose(sc.question, scenario=sc)
    assert out.release_outcome == "FALLBACK" and out.content is not None and out.content["content_type"] == "SAFE_FALLBACK"


def test_every_trace_names_the_rule_set_even_when_the_guards_never_ran(tmp_path: Path) -> None:
    from rootproof.agent.models.scripted import ScriptedModel, ScriptedStep

    h = Harness(Runtime.from_settings(load_settings(data_dir=tmp_path / "home"), sink=MemoryTraceSink()))
    sc = load_scenario("pg-row-lock")
    model = ScriptedModel([ScriptedStep(calls=[("query_logs", {"query": "ShareLock"})]), ScriptedStep(draft="nope"), ScriptedStep(draft="nope")])
    out = h.diagnose(sc.question, scenario=sc, model=model)
    assert out.fallback_type == "NO_DRAFT"
    run = h.sink.runs[out.run_id]  # type: ignore[attr-defined]
    se = run.self_evaluation
    assert se["rule_set_version"] == rule_set().version and se["evidence_guard"] is None
    assert [t["tool"] for t in se["tool_trace_summary"]] == ["query_logs"]
