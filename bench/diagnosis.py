"""Diagnosis time of the embedded default on the built-in suite: every built-in scenario
diagnosed in one process (the knowledge base loaded once, as `eval snapshot` and the service
run it), `--rounds` times. Prints the suite's wall time per round, the median and slowest
scenario, and the median planner step (its tool calls included) against what a user would
otherwise wait on: a local 1.5B model's step.

Run: .venv/bin/python bench/diagnosis.py [--rounds 3] [--scenarios DIR]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from rootproof.harness import memory_harness
from rootproof.scenarios.loader import list_scenarios, load_scenario
from rootproof.settings import load_settings

LOCAL_MODEL_STEP_S = 67.0
"""A local 1.5B model's step as measured on a 2-core machine of this kind (a 3-turn run ~200 s at ~13 tokens/s): the wait a user of a local model has per step."""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scenarios", type=Path, default=None, help="a folder of scenario folders (default: the built-in suite)")
    args = ap.parse_args()
    folders = list_scenarios(args.scenarios) if args.scenarios else list_scenarios()
    scenarios = [load_scenario(f) for f in folders]
    h = memory_harness(load_settings(model="offline"))
    try:
        h.diagnose(scenarios[0].question, scenario=scenarios[0])  # warm: the knowledge base's index and encoder
        per: dict[str, list[float]] = {s.id: [] for s in scenarios}
        steps: list[float] = []
        rounds: list[float] = []
        for _ in range(args.rounds):
            start = time.perf_counter()
            for s in scenarios:
                t0 = time.perf_counter()
                out = h.diagnose(s.question, scenario=s)
                per[s.id].append(time.perf_counter() - t0)
                steps.append((time.perf_counter() - t0) / max(1, len({o.invocation.step_index for o in out.outcomes}) + 1))
            rounds.append(time.perf_counter() - start)
    finally:
        h.runtime.close()
    medians = sorted((statistics.median(v), k) for k, v in per.items())
    print(f"scenarios: {len(scenarios)}  rounds: {args.rounds}")
    print(f"suite per round: median {statistics.median(rounds):.2f} s (min {min(rounds):.2f}, max {max(rounds):.2f})")
    print(f"per scenario: median {statistics.median(m for m, _ in medians) * 1000:.0f} ms, slowest {medians[-1][0] * 1000:.0f} ms ({medians[-1][1]})")
    step = statistics.median(steps)
    print(f"per planner step (wall, tools included): median {step * 1000:.0f} ms; a local 1.5B model's step ~{LOCAL_MODEL_STEP_S:.1f} s: {LOCAL_MODEL_STEP_S / step:.0f}x")


if __name__ == "__main__":
    main()
