"""One contract suite for every backend: the snapshot backend and each live backend.

Each case module yields the backend(s) and the calls they must answer; live cases start or
reach their real service (PostgreSQL, Redis, nginx, Prometheus on loopback) and skip without
it, or fail under `ROOTPROOF_REQUIRE_SERVICES=1`.
"""

from __future__ import annotations

import importlib

import pytest

from .contract import run_case

CASE_MODULES = ["cases_snapshot", "cases_postgres", "cases_redis", "cases_prometheus", "cases_nginx", "cases_logs"]
"""One module per backend (`cases_<backend>.py`, a `case()` context manager yielding ContractCases)."""


@pytest.mark.parametrize("module", CASE_MODULES)
def test_backend_meets_the_contract(module: str) -> None:
    mod = importlib.import_module(f"{__package__}.{module}")
    with mod.case() as cases:
        assert cases
        for case in cases:
            answered = list(run_case(case))
            assert len(answered) == len(case.calls)
