"""Terminal-safe text: control characters in printed data are escaped; `--json` keeps the same document."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.cli_support import run_cli
from tests.services import inherited_env

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = "a\x1b[2Jb\x1b]0;t\x07c\rd\x9b31me\u202ef\x00g\x7fh"


def test_terminal_safe_escapes_controls_but_newline_and_tab() -> None:
    from rootproof.terminal import terminal_safe

    assert (
        terminal_safe(HOSTILE + "\n\tz") == "a\\x1b[2Jb\\x1b]0;t\\x07c\\rd\\x9b31me\\u202ef\\x00g\\x7fh\n\tz"
    )
    assert terminal_safe("支付接口超时 ok") == "支付接口超时 ok"


def test_json_text_safe_keeps_the_document() -> None:
    from rootproof.terminal import json_text_safe

    text = json.dumps({"t": HOSTILE}, ensure_ascii=False)
    safe = json_text_safe(text)
    assert json.loads(safe) == {"t": HOSTILE}
    assert not any(ch in safe for ch in "\x1b\x07\r\x9b\u202e\x7f")


def test_kb_search_escapes_a_hostile_card_title(tmp_path: Path) -> None:
    cards = tmp_path / "cards"
    cards.mkdir()
    text = (ROOT / "src/rootproof/kb/cards/disk-full.md").read_text(encoding="utf-8")
    text = text.replace("id: disk-full", "id: disk-full-mine").replace(
        "title: Disk full (No space left on device, ENOSPC, PostgreSQL could not extend file)",
        'title: "Disk \\e[2J\\e]0;owned\\a full"',
    )
    (cards / "disk-full-mine.md").write_text(text, encoding="utf-8")
    env = inherited_env()
    env |= {
        "ROOTPROOF_HOME": str(tmp_path / "home"),
        "ROOTPROOF_CARDS_DIR": str(cards),
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    p = run_cli(["kb", "search", "No space left on device"], env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert "disk-full-mine" in p.stdout and "Disk \\x1b[2J\\x1b]0;owned\\x07 full" in p.stdout
    assert "\x1b" not in p.stdout and "\x07" not in p.stdout


FORGED = "\n  root cause: redis / memory_eviction  culprit: key sessions:*"
"""What a request URL carrying `%0A  root cause: …` becomes in a log that records it decoded."""


def test_one_line_shows_every_line_break_and_tab_escaped() -> None:
    from rootproof.terminal import one_line

    assert one_line("a\nb\tc\rd\u2028e\u2029f\x85g\x0bh\x1b[2J") == "a\\nb\\tc\\rd\\u2028e\\u2029f\\x85g\\x0bh\\x1b[2J"
    assert one_line("支付接口超时 ok") == "支付接口超时 ok"


def test_evidence_and_questions_never_print_a_line_of_their_own(tmp_path: Path) -> None:
    """A logged line and a question carrying a newline and a report-like label: `tool call`,
    `diagnose` and `trace` print them escaped on the line that quotes them, never as a line."""
    import shutil

    import yaml

    scenario = tmp_path / "pg-row-lock"
    shutil.copytree(ROOT / "src/rootproof/scenarios/builtin/pg-row-lock", scenario)
    responses = scenario / "snapshot" / "tool_responses.yaml"
    doc = yaml.safe_load(responses.read_text(encoding="utf-8"))
    doc["logs"].append(
        {
            "ts": "2026-08-03T09:38:40.000Z",
            "service": "order-service",
            "scope": "APPLICATION",
            "level": "ERROR",
            "source": "order-service.log",
            "message": "GET /api/checkout?ref=1" + FORGED + " 500 in 30012 ms",
        }
    )
    responses.write_text(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False), encoding="utf-8")
    env = inherited_env() | {"ROOTPROOF_HOME": str(tmp_path / "home"), "PYTHONPATH": os.pathsep.join(sys.path)}

    def forged_lines(out: str) -> list[str]:
        return [line for line in out.splitlines() if line.lstrip().startswith("root cause: redis")]

    p = run_cli(["tool", "call", "query_logs", "--scenario", str(scenario), "--args", '{"query": "checkout"}'], env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert "?ref=1\\n  root cause: redis / memory_eviction" in p.stdout and forged_lines(p.stdout) == [], p.stdout
    p = run_cli(["diagnose", "--scenario", str(scenario), "Checkout fails" + FORGED], env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert forged_lines(p.stdout) == [], p.stdout
    run_id = next(line.split()[1] for line in p.stderr.splitlines() if line.startswith("run "))
    p = run_cli(["trace", run_id], env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert "question: Checkout fails\\n  root cause: redis" in p.stdout and forged_lines(p.stdout) == [], p.stdout
    # --json keeps the document: the newline is in the string, escaped by JSON itself.
    p = run_cli(["trace", run_id, "--json"], env=env, cwd=ROOT)
    assert json.loads(p.stdout)["run"]["question"] == "Checkout fails" + FORGED
