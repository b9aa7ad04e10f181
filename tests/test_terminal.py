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
