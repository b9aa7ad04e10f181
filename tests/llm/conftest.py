"""Options of the real-model tests (`./dev test-llm`)."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--llm-scenarios",
        default=None,
        metavar="ID,ID",
        help="Built-in scenarios the real-model tests diagnose (default: tests/llm/test_real_model.py SCENARIOS).",
    )
    parser.addoption(
        "--llm-deadline-s",
        type=float,
        default=None,
        metavar="S",
        help="Each real-model run's deadline, seconds (default: tests/llm/test_real_model.py DEADLINE_S).",
    )
