"""The adversarial evidence benchmark: wrong mechanisms' signals and instructions planted in evidence.

`run_adversarial` returns the JSON summary that `rootproof eval adversarial` prints
(docs/evaluation.md); `mutate` and `WRONG_SIGNALS` are the mutations and the signal table.
"""

from __future__ import annotations

from rootproof.eval.adversarial.mutations import KINDS, LogStream, Mutation, Target, mutate
from rootproof.eval.adversarial.runner import (
    DEFAULT_VARIANTS,
    MIN_RUNS,
    MutantCase,
    build_cases,
    dump_responses,
    run_adversarial,
    scenario_target,
)
from rootproof.eval.adversarial.signals import WRONG_SIGNALS, WrongSignal

__all__ = [
    "DEFAULT_VARIANTS",
    "KINDS",
    "MIN_RUNS",
    "WRONG_SIGNALS",
    "LogStream",
    "MutantCase",
    "Mutation",
    "Target",
    "WrongSignal",
    "build_cases",
    "dump_responses",
    "mutate",
    "run_adversarial",
    "scenario_target",
]
