"""What the real live-benchmark tests share (`test_bench_real*.py`): running `rootproof eval
live` into a root of their own, and the checks that a case passed and left nothing behind."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from rootproof.live.bench.runner import PHASES
from rootproof.live.layout import run_folders
from rootproof.live.procs import processes_under

from .support import cli

__all__ = ["assert_nothing_left", "eval_live", "mentioning", "one_case_ok"]


def eval_live(root: Path, *args: str, timeout: float) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = root / "report.json"
    p = cli("eval", "live", *args, "--json", str(out), root=root, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return p, json.loads(out.read_text(encoding="utf-8"))


def mentioning(folder: Path) -> list[tuple[int, str]]:
    """Processes whose command line names `folder` or whose working folder is inside it."""
    text = str(folder.resolve())
    out = list(processes_under(folder)) if folder.exists() else []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if text in cmd and state not in ("Z", "X"):
            out.append((int(entry.name), cmd.strip()[:200]))
    return sorted(set(out))


def assert_nothing_left(root: Path, doc: dict[str, Any]) -> None:
    """No run folder left under the root and no process naming a case's run folder (command line
    or working folder); the recorded processes and ports are the audit's (`_one_case_ok`)."""
    assert list(run_folders(root)) == [], [f.name for f in run_folders(root)]
    for case in doc["scenarios"]:
        folder = root / str(case["live_run_id"])
        assert not folder.exists()
        assert mentioning(folder) == [], mentioning(folder)


def one_case_ok(case: dict[str, Any]) -> None:
    """Every phase ok, cleanup and audit clean, no residue, no hard gate."""
    assert {n: p["ok"] for n, p in case["phases"].items()} == dict.fromkeys(PHASES, True), {
        n: p["detail"] for n, p in case["phases"].items() if p["ok"] is not True
    }
    assert case["infra_invalid"] is None and not case["cancelled"]
    assert case["residue"] == [] and case["hard_gates"] == [], case["gate_reasons"]
    audit = case["audit"]
    assert audit["folder_removed"] is True
    assert audit["left_processes"] == [] and audit["left_listeners"] == [] and audit["stop_residue"] == []
    assert audit["fault_residue"] == []
    assert all(c["ok"] for c in case["checks"].get("cleanup", [])), case["checks"].get("cleanup")
