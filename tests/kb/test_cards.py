"""Card validation: every error names the file and the field."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest

from rootproof.errors import CardError
from rootproof.kb.cards import load_cards, parse_card
from rootproof.taxonomy import COMPONENTS, MECHANISMS, RECOVERY_ACTIONS, RecoveryAction

FIXTURES = Path(__file__).parents[1] / "data" / "cards"

GOOD = """---
id: demo-card
title: Demo card
domain: postgresql
tags: [lock]
identifiers: ["55P03"]
hypotheses:
  - component: postgresql
    mechanism: row_lock_contention
    signals:
      - {tool: inspect_postgres, kind: locks, where: {granted: false}, weight: 3}
      - {tool: inspect_redis, kind: info, field: rejected_connections, op: gt, value: 0}
      - {tool: query_metrics, metric: "pg_locks_waiting*", trend: rises}
      - {tool: query_logs, any: ["deadlock detected"], scope: DATABASE, level: ERROR}
    distinguishes_from: [connection_pool/pool_leak]
    recovery: [terminate_blocking_session]
---
# Demo

## Symptoms
Text.
"""


def _card(tmp_path: Path, text: str, name: str = "demo-card") -> Path:
    p = tmp_path / f"{name}.md"
    p.write_text(text, encoding="utf-8")
    return p


def _err(tmp_path: Path, text: str) -> str:
    p = _card(tmp_path, text)
    with pytest.raises(CardError) as exc:
        parse_card(p.read_text(encoding="utf-8"), p)
    msg = str(exc.value)
    assert msg.startswith(f"{p}: field "), msg
    return msg


def test_good_card_parses(tmp_path: Path) -> None:
    p = _card(tmp_path, GOOD)
    card = parse_card(GOOD, p)
    assert card.id == "demo-card" and card.language == "en" and card.path == p
    sig = card.hypotheses[0].signals
    assert [s.test for s in sig] == ["where", "field", "metric", "any"]
    assert sig[1].weight == 1.0 and sig[0].where == {"granted": False}
    assert card.body.startswith("# Demo")


def test_missing_field(tmp_path: Path) -> None:
    msg = _err(tmp_path, GOOD.replace("title: Demo card\n", ""))
    assert "field title: expected a value" in msg


def test_unknown_field(tmp_path: Path) -> None:
    msg = _err(tmp_path, GOOD.replace("tags: [lock]", "tags: [lock]\ncolour: red"))
    assert "field colour: expected no such field" in msg


def test_unknown_signal_field(tmp_path: Path) -> None:
    msg = _err(tmp_path, GOOD.replace("weight: 3}", "weight: 3, severity: 2}"))
    assert "field hypotheses[0].signals[0].severity" in msg


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("mechanism: row_lock_contention", "mechanism: lock_storm", "hypotheses[0].mechanism"),
        ("component: postgresql", "component: postgres", "hypotheses[0].component"),
        (
            "recovery: [terminate_blocking_session]",
            "recovery: [reboot_everything]",
            "hypotheses[0].recovery[0]",
        ),
        ("[connection_pool/pool_leak]", "[connection_pool/leaky]", "hypotheses[0].distinguishes_from[0]"),
        ("domain: postgresql", "domain: oracle", "domain"),
    ],
)
def test_bad_taxonomy_value(tmp_path: Path, old: str, new: str, field: str) -> None:
    msg = _err(tmp_path, GOOD.replace(old, new))
    assert f"field {field}: expected" in msg


def test_bad_signal_operator(tmp_path: Path) -> None:
    msg = _err(tmp_path, GOOD.replace("op: gt", "op: gte"))
    assert "field hypotheses[0].signals[1].op: expected one of" in msg and "'gte'" in msg


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("trend: rises}", "}", "hypotheses[0].signals[2].trend"),
        ("kind: locks, ", "", "hypotheses[0].signals[0].kind"),
        ("{granted: false}", '{granted: false}, match: ["x"]', "hypotheses[0].signals[0].test"),
        (
            "tool: inspect_redis, kind: info,",
            "tool: inspect_redis, kind: slowlog,",
            "hypotheses[0].signals[1].field",
        ),
        ("scope: DATABASE, level: ERROR", "labels: {a: b}", "hypotheses[0].signals[3].labels"),
        ("weight: 3}", "weight: 0}", "hypotheses[0].signals[0].weight"),
        ("weight: 3}", "weight: 3, since: forever}", "hypotheses[0].signals[0].since"),
        ("weight: 3}", "weight: 3, since: 30d}", "hypotheses[0].signals[0].since"),
    ],
)
def test_bad_signal_shape(tmp_path: Path, old: str, new: str, field: str) -> None:
    msg = _err(tmp_path, GOOD.replace(old, new, 1))
    assert f"field {field}: expected" in msg


def test_id_must_match_file_name(tmp_path: Path) -> None:
    p = _card(tmp_path, GOOD, name="other-name")
    with pytest.raises(CardError, match=re.escape(f"{p}: field id: expected the file name")):
        parse_card(GOOD, p)


def test_no_front_matter(tmp_path: Path) -> None:
    assert "field (front matter)" in _err(tmp_path, "# just markdown\n")


def test_yes_no_stay_strings(tmp_path: Path) -> None:
    p = _card(tmp_path, GOOD.replace("{granted: false}", "{state: on}"))
    card = parse_card(p.read_text(encoding="utf-8"), p)
    assert card.hypotheses[0].signals[0].where == {"state": "on"}


def test_duplicate_ids_across_folders(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "demo-card.md").write_text(GOOD, encoding="utf-8")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "demo-card.md").write_text(GOOD, encoding="utf-8")
    with pytest.raises(CardError, match="field id: expected a unique id"):
        load_cards([tmp_path / "a", tmp_path / "b"], builtin=False)


def test_fixture_cards_load() -> None:
    cards = load_cards([FIXTURES], builtin=False)
    assert {"pg-lock-contention", "redis-maxclients", "tls-cert-expired"} <= set(cards)
    assert cards["tls-cert-expired"].language == "zh"


def test_taxonomy_tables_agree() -> None:
    assert set(RECOVERY_ACTIONS) == set(get_args(RecoveryAction))
    assert "postgresql" in COMPONENTS and "row_lock_contention" in MECHANISMS
    assert RECOVERY_ACTIONS["restart_database"] == ("high", True)
