"""DiagnosisDraft: contributing causes, in the full schema, the compact schema and the prompt."""

from __future__ import annotations

import json
from typing import Any

from rootproof.agent.draft import MAX_CONTRIBUTING_CAUSES, draft_json_schema, parse_draft
from rootproof.agent.models.compact import compact_draft_schema
from rootproof.agent.prompts import load_prompt


def _cause(component: str, mechanism: str, *claim_ids: str) -> dict[str, Any]:
    return {"component": component, "mechanism": mechanism, "culprit": "", "claim_ids": list(claim_ids)}


def _draft(**over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "summary": "Row locks and a full Redis.",
        "root_cause": _cause("postgresql", "row_lock_contention", "c1"),
        "contributing_causes": [_cause("redis", "max_clients_reached", "c2")],
        "claims": [],
    }
    d.update(over)
    return d


def test_a_draft_names_contributing_causes_after_its_root_cause() -> None:
    draft, problem = parse_draft(_draft())
    assert problem is None and draft is not None
    assert [(c.component, c.mechanism) for c in draft.causes()] == [
        ("postgresql", "row_lock_contention"),
        ("redis", "max_clients_reached"),
    ]
    assert draft.contributing_causes[0].claim_ids == ["c2"]
    # Old drafts: none, and the published report always carries the (empty) list.
    old, _ = parse_draft({"summary": "s", "root_cause": None})
    assert old is not None and old.contributing_causes == [] and old.causes() == []
    assert old.model_dump(mode="json")["contributing_causes"] == []


def test_contributing_causes_need_a_root_cause_and_repeat_no_cause() -> None:
    draft, problem = parse_draft(_draft(root_cause=None))
    assert draft is None and problem == (
        "draft does not match diagnosis_draft_v1: Value error, contributing_causes need a root_cause "
        "(leave them empty without one)"
    )
    again = _draft(contributing_causes=[_cause("postgresql", "row_lock_contention")])
    assert "contributing_causes[0] repeats the root cause (postgresql/row_lock_contention)" in str(parse_draft(again)[1])
    twice = _draft(contributing_causes=[_cause("redis", "max_clients_reached"), _cause("redis", "max_clients_reached")])
    assert "contributing_causes[1] repeats contributing_causes[0]" in str(parse_draft(twice)[1])


def test_at_most_three_contributing_causes_with_taxonomy_labels() -> None:
    many = [_cause("redis", "max_clients_reached"), _cause("dns", "dns_resolution_failure"), _cause("disk", "disk_full")]
    assert parse_draft(_draft(contributing_causes=many))[0] is not None
    four = [*many, _cause("jvm", "gc_pause")]
    assert MAX_CONTRIBUTING_CAUSES == 3 and "contributing_causes" in str(parse_draft(_draft(contributing_causes=four))[1])
    bad = _draft(contributing_causes=[_cause("redis", "gremlins")])
    assert "contributing_causes.0.mechanism" in str(parse_draft(bad)[1])


def test_the_full_schema_offers_contributing_causes_with_the_root_cause_enums() -> None:
    schema = draft_json_schema()
    prop = schema["properties"]["contributing_causes"]
    assert prop["maxItems"] == 3 and prop["items"] == {"$ref": "#/$defs/RootCause"}
    assert "row_lock_contention" in schema["$defs"]["RootCause"]["properties"]["mechanism"]["enum"]


def test_the_compact_schema_shares_one_cause_object_and_stays_small() -> None:
    schema = compact_draft_schema()
    props = schema["properties"]
    cause = {"$ref": "#/$defs/cause"}
    assert props["contributing_causes"] == {"type": "array", "items": cause, "maxItems": 3}
    assert props["root_cause"]["anyOf"] == [cause, {"type": "null"}]
    assert set(schema["$defs"]["cause"]["required"]) == {"component", "mechanism", "culprit", "claim_ids"}
    # Optional (leaving it out means none), written after the root cause.
    assert "contributing_causes" not in schema["required"]
    assert list(props).index("contributing_causes") == list(props).index("root_cause") + 1
    # One cause object for both uses: each enum and the culprit text still appear once.
    text = json.dumps(schema)
    assert text.count("row_lock_contention") == 1 and text.count("config line") == 1


def test_the_agent_prompt_says_when_to_write_a_contributing_cause() -> None:
    prompt = load_prompt("diagnosis_agent")
    assert prompt.version == "diagnosis-agent-v4"
    assert "second independent cause, proven too, goes in contributing_causes" in " ".join(prompt.text.split())
