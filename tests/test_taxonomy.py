"""Users' cards may add namespaced labels; the draft schema, the draft checks and ground truth
follow the taxonomy of the cards loaded (docs/taxonomy.md, docs/knowledge-cards.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml

from rootproof.agent.draft import draft_json_schema, parse_draft
from rootproof.boundary.store import InMemoryCanonicalStore
from rootproof.errors import CardError
from rootproof.guard.evidence import EvidenceGuard
from rootproof.kb.cards import card_taxonomy, load_cards, taxonomy_for
from rootproof.scenarios.loader import load_ground_truth, load_scenario, validate_scenario
from rootproof.taxonomy import (
    BUILTIN_TAXONOMY,
    RECOVERY_ACTIONS,
    Component,
    Mechanism,
    is_namespaced,
    recovery_policy,
)
from tests.cli_support import run_cli

ROOT = Path(__file__).resolve().parents[1]
MINI = ROOT / "tests" / "data" / "scenarios" / "mini-row-lock"

LEDGER_CARD = """---
id: acme-ledger-lock
title: ACME ledger lock waits
domain: application
tags: [acme, ledger]
identifiers: ["LedgerLockWait"]
hypotheses:
  - component: acme.ledger
    mechanism: acme.ledger_lock_wait
    signals:
      - {tool: query_logs, match: ["LedgerLockWait"], weight: 3}
      - {tool: query_logs, match: ["held by batch"], weight: 2}
    distinguishes_from: [postgresql/row_lock_contention]
    recovery: [acme.release_ledger_lock]
---
# ACME ledger lock waits

The ACME ledger serialises postings per account; a batch that holds the ledger lock makes every
other posting wait (`LedgerLockWait`). Release the lock of the stuck batch.
"""


def _schema_enum(schema: dict[str, Any], model: str, prop: str) -> list[str]:
    enum: list[str] = schema["$defs"][model]["properties"][prop]["enum"]
    return enum


@pytest.fixture
def cards_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "cards"
    folder.mkdir()
    (folder / "acme-ledger-lock.md").write_text(LEDGER_CARD, encoding="utf-8")
    return folder


def _draft(component: str, mechanism: str, action: str = "no_action") -> dict[str, Any]:
    return {
        "summary": "ledger lock wait",
        "root_cause": {"component": component, "mechanism": mechanism, "culprit": "batch 987"},
        "hypotheses": [
            {"statement": "ledger lock", "component": component, "mechanism": mechanism, "status": "open"}
        ],
        "recovery": [{"action": action, "risk": "high", "requires_approval": True}],
    }


# -- the namespace rule ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("label", "ok"),
    [
        ("acme.ledger", True),
        ("acme.ledger_lock_wait", True),
        ("acme2.l2_cache", True),
        ("ledger_lock_wait", False),
        ("Acme.ledger", False),
        ("acme.", False),
        (".ledger", False),
        ("acme.ledger.wait", False),
        ("acme-corp.ledger", False),
        ("1acme.ledger", False),
    ],
)
def test_a_namespaced_label_is_two_lower_case_parts_joined_by_one_dot(label: str, ok: bool) -> None:
    assert is_namespaced(label) is ok


def test_a_namespaced_recovery_action_is_high_risk_and_needs_approval() -> None:
    assert recovery_policy("acme.release_ledger_lock") == ("high", True)
    assert all(recovery_policy(a) == policy for a, policy in RECOVERY_ACTIONS.items())


# -- without user cards nothing changes --------------------------------------------------------


def test_the_built_in_cards_add_no_label_and_the_schema_keeps_the_built_in_enums() -> None:
    assert card_taxonomy(load_cards().values()) == BUILTIN_TAXONOMY
    assert taxonomy_for(None) == BUILTIN_TAXONOMY
    schema = draft_json_schema(taxonomy_for(None))
    assert schema == draft_json_schema()
    assert _schema_enum(schema, "RootCause", "component") == list(get_args(Component))
    assert _schema_enum(schema, "Hypothesis", "mechanism") == list(get_args(Mechanism))
    assert _schema_enum(schema, "RecoveryProposal", "action") == list(RECOVERY_ACTIONS)


# -- a user card with namespaced labels --------------------------------------------------------


def test_a_card_with_namespaced_labels_loads_and_widens_the_draft_schema(cards_dir: Path) -> None:
    cards = load_cards([cards_dir])
    hyp = cards["acme-ledger-lock"].hypotheses[0]
    assert (hyp.component, hyp.mechanism, hyp.recovery) == (
        "acme.ledger",
        "acme.ledger_lock_wait",
        ["acme.release_ledger_lock"],
    )
    taxonomy = taxonomy_for(cards_dir)
    schema = draft_json_schema(taxonomy)
    for model in ("RootCause", "Hypothesis"):
        assert _schema_enum(schema, model, "component")[-1] == "acme.ledger"
        assert _schema_enum(schema, model, "mechanism")[-1] == "acme.ledger_lock_wait"
        assert _schema_enum(schema, model, "mechanism")[: len(get_args(Mechanism))] == list(
            get_args(Mechanism)
        )
    assert _schema_enum(schema, "RecoveryProposal", "action")[-1] == "acme.release_ledger_lock"
    # the built-in schema stays as it was
    assert "acme.ledger" not in _schema_enum(draft_json_schema(), "RootCause", "component")


def test_a_draft_using_the_cards_labels_parses_with_their_taxonomy_only(cards_dir: Path) -> None:
    raw = _draft("acme.ledger", "acme.ledger_lock_wait", "acme.release_ledger_lock")
    draft, problem = parse_draft(raw, taxonomy_for(cards_dir))
    assert problem is None and draft is not None and draft.root_cause is not None
    assert draft.root_cause.mechanism == "acme.ledger_lock_wait"
    assert draft.recovery[0].action == "acme.release_ledger_lock"
    draft, problem = parse_draft(raw, BUILTIN_TAXONOMY)
    assert draft is None and problem is not None
    assert (
        "unknown mechanism 'acme.ledger_lock_wait'" in problem and "declared by a knowledge card" in problem
    )
    # a namespaced label no loaded card declares is refused too
    draft, problem = parse_draft(_draft("acme.ledger", "acme.ledger_lock_timeout"), taxonomy_for(cards_dir))
    assert draft is None and problem is not None and "acme.ledger_lock_timeout" in problem


def test_an_unknown_plain_label_stays_invalid_even_without_a_taxonomy() -> None:
    draft, problem = parse_draft(_draft("ledger", "row_lock_contention"))
    assert draft is None and problem is not None and "unknown component 'ledger'" in problem


def test_the_evidence_guard_judges_labels_by_the_runs_taxonomy(cards_dir: Path) -> None:
    raw = _draft("acme.ledger", "acme.ledger_lock_wait")
    store = InMemoryCanonicalStore()
    with_cards = EvidenceGuard(store, taxonomy_for(cards_dir)).check(raw, run_id="r1")
    assert "DRAFT_INVALID" not in with_cards.codes
    built_in = EvidenceGuard(store, BUILTIN_TAXONOMY).check(raw, run_id="r1")
    assert built_in.codes == ["DRAFT_INVALID"]
    assert "acme.ledger_lock_wait" in built_in.violations[0].detail


# -- un-namespaced unknown labels are load errors ----------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("mechanism: acme.ledger_lock_wait", "mechanism: ledger_lock_wait", "hypotheses[0].mechanism"),
        ("component: acme.ledger", "component: ledger", "hypotheses[0].component"),
        ("[acme.release_ledger_lock]", "[release_ledger_lock]", "hypotheses[0].recovery[0]"),
        (
            "[postgresql/row_lock_contention]",
            "[acme.ledger/acme.other]",
            "hypotheses[0].distinguishes_from[0]",
        ),
    ],
)
def test_an_unknown_label_in_a_card_is_a_load_error_naming_file_and_field(
    cards_dir: Path, old: str, new: str, field: str
) -> None:
    card = cards_dir / "acme-ledger-lock.md"
    card.write_text(LEDGER_CARD.replace(old, new), encoding="utf-8")
    with pytest.raises(CardError) as exc:
        load_cards([cards_dir])
    msg = str(exc.value)
    assert msg.startswith(f"{card}: field {field}: expected "), msg


def _rp(*args: str, home: Path, cards: Path | None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ROOTPROOF_HOME": str(home)}
    env.pop("ROOTPROOF_DATABASE_URL", None)
    env.pop("ROOTPROOF_CARDS_DIR", None)
    if cards is not None:
        env["ROOTPROOF_CARDS_DIR"] = str(cards)
    return run_cli(args, env=env, cwd=ROOT)


def test_the_cli_exits_2_naming_the_card_and_field(cards_dir: Path, tmp_path: Path) -> None:
    card = cards_dir / "acme-ledger-lock.md"
    card.write_text(LEDGER_CARD.replace("acme.ledger_lock_wait", "ledger_lock_wait"), encoding="utf-8")
    p = _rp("scenarios", "validate", str(MINI), home=tmp_path / "home", cards=cards_dir)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {card}: field hypotheses[0].mechanism: expected ")
    assert "Traceback" not in p.stderr


# -- ground truth may use the cards' labels ----------------------------------------------------


def _ledger_scenario(tmp_path: Path) -> Path:
    folder = tmp_path / "ledger-lock"
    shutil.copytree(MINI, folder)
    scenario = folder / "scenario.yaml"
    scenario.write_text(
        scenario.read_text(encoding="utf-8").replace("id: mini-row-lock", "id: ledger-lock"), encoding="utf-8"
    )
    truth = yaml.safe_load((folder / "ground_truth.yaml").read_text(encoding="utf-8"))
    truth["root_cause"] = {
        "component": "acme.ledger",
        "mechanism": "acme.ledger_lock_wait",
        "culprit": "batch 987",
    }
    truth["recovery"]["acceptable"] = ["acme.release_ledger_lock"]
    (folder / "ground_truth.yaml").write_text(yaml.safe_dump(truth), encoding="utf-8")
    return folder


def test_ground_truth_may_use_labels_a_loaded_card_declares(cards_dir: Path, tmp_path: Path) -> None:
    folder = _ledger_scenario(tmp_path)
    taxonomy = taxonomy_for(cards_dir)
    assert validate_scenario(folder, taxonomy) == []
    truth = load_ground_truth(folder, taxonomy)
    assert truth.root_cause is not None and truth.root_cause.mechanism == "acme.ledger_lock_wait"
    # the default of requires_approval: a card's namespaced action needs approval
    assert truth.recovery.requires_approval == ("acme.release_ledger_lock",)
    problems = validate_scenario(folder)
    assert any(
        "ground_truth.yaml: root_cause.mechanism: unknown mechanism 'acme.ledger_lock_wait'" in p
        for p in problems
    ), problems
    ok = _rp("scenarios", "validate", str(folder), home=tmp_path / "home", cards=cards_dir)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = _rp("scenarios", "validate", str(folder), home=tmp_path / "home", cards=None)
    assert bad.returncode == 2 and "acme.ledger_lock_wait" in bad.stdout


# -- a whole run -------------------------------------------------------------------------------


def test_the_offline_planner_diagnoses_with_a_users_namespaced_mechanism(
    cards_dir: Path, tmp_path: Path
) -> None:
    """The run's taxonomy reaches the loop and the guard: the planner's draft is valid."""
    from rootproof.harness import Harness
    from rootproof.run.records import MemoryTraceSink
    from rootproof.runtime import Runtime
    from rootproof.settings import load_settings

    folder = tmp_path / "ledger-run"
    (folder / "snapshot").mkdir(parents=True)
    (folder / "scenario.yaml").write_text(
        yaml.safe_dump(
            {
                "id": "ledger-run",
                "language": "en",
                "question": "Postings to the ledger hang since 09:10. Why?",
                "now": "2026-09-21T09:30:00Z",
                "allowed_tools": ["lookup_knowledge", "query_logs"],
            }
        ),
        encoding="utf-8",
    )
    logs = [
        {
            "ts": f"2026-09-21T09:{m:02d}:0{i}.000Z",
            "service": "ledger-service",
            "level": "ERROR",
            "source": "ledger-service.log",
            "message": f"LedgerLockWait: posting {4000 + m * 10 + i} waited 30000 ms, ledger lock held by batch 987",
        }
        for m in (12, 18, 24)
        for i in range(2)
    ]
    (folder / "snapshot" / "tool_responses.yaml").write_text(yaml.safe_dump({"logs": logs}), encoding="utf-8")
    settings = load_settings(data_dir=tmp_path / "home", cards_dir=cards_dir, deadline_s=120)
    harness = Harness(Runtime.from_settings(settings, sink=MemoryTraceSink()))
    out = harness.diagnose("", scenario=load_scenario(folder), model="offline")
    assert out.evidence is not None and "DRAFT_INVALID" not in out.evidence.codes, out.evidence.violations
    assert out.draft is not None and out.draft.root_cause is not None
    assert (out.draft.root_cause.component, out.draft.root_cause.mechanism) == (
        "acme.ledger",
        "acme.ledger_lock_wait",
    )
    assert [r.action for r in out.draft.recovery] == ["acme.release_ledger_lock"]
    assert out.draft.recovery[0].requires_approval
