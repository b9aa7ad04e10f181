"""Redaction cost per line: the built-in scenarios' evidence, the secret corpus, and any log folder.

Prints the median over `--repeat` passes of the cost of `redact()` per line, for lines the cheap
gate skips and for all lines, and how many lines each set holds and how many redaction changed.

    .venv/bin/python bench/redaction.py [--logs DIR ...] [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from rootproof.boundary import redaction

ROOT = Path(__file__).resolve().parents[1]


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    return []


def scenario_lines() -> list[str]:
    out: list[str] = []
    for path in sorted((ROOT / "src" / "rootproof" / "scenarios" / "builtin").glob("*/snapshot/*.yaml")):
        for s in _strings(yaml.safe_load(path.read_text(encoding="utf-8"))):
            out.extend(s.split("\n"))
    return out


def corpus_lines() -> list[str]:
    corpus = yaml.safe_load((ROOT / "tests" / "data" / "secrets" / "corpus.yaml").read_text(encoding="utf-8"))
    return [e["line"] for e in corpus]


def folder_lines(folder: Path) -> list[str]:
    return [
        line
        for p in sorted(folder.iterdir())
        if p.is_file()
        for line in p.read_text(encoding="utf-8", errors="replace").split("\n")
    ]


def per_line(fn: Callable[[str], Any], lines: list[str], repeat: int) -> float:
    if not lines:
        return 0.0
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for line in lines:
            fn(line)
        times.append((time.perf_counter() - t0) / len(lines))
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--logs", type=Path, action="append", default=[], help="a folder of log files (repeatable)"
    )
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args()
    redaction.redact("warm up: password=x1y2z3")  # imports detect-secrets once
    sets = [("built-in scenarios", scenario_lines()), ("secret corpus", corpus_lines())]
    sets += [(str(f), folder_lines(f)) for f in a.logs]
    for name, lines in sets:
        changed = sum(redaction.redact(x) != x for x in lines)
        gated = [x for x in lines if not redaction._may_hold_secret(x)]
        print(
            f"{name:<40} lines={len(lines):>6} changed={changed:>4} gated-out={len(gated):>6}  "
            f"redact {per_line(redaction.redact, lines, a.repeat) * 1e9:8.0f} ns/line  "
            f"(skipped lines {per_line(redaction.redact, gated, a.repeat) * 1e9:6.0f} ns/line)"
        )


if __name__ == "__main__":
    main()
