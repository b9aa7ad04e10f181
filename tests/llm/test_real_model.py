"""The real model path, end to end (marker `llm`; `./dev test-llm`; skipped without
`ROOTPROOF_TEST_LLM_URL`, the URL of a running OpenAI-compatible server).

Each scenario is diagnosed by `rootproof diagnose --scenario ID --json` in a subprocess, as a
user runs it, with `ROOTPROOF_MODEL=openai` against that server, then with the offline planner
for comparison; every run goes to a private trace store. A run is read back with `rootproof
trace RUN --json`, scored by the snapshot evaluator (`observe_trace` + `score_case` against the
scenario's ground truth), and every published run is re-verified with `rootproof audit RUN
--json`. Held: every run terminal, no false publish (audit passes and the published root cause
is the ground truth's), and a draft reached the guards in at least 5 of 6 runs.

`--llm-scenarios ID,ID` picks other built-in scenarios (default `SCENARIOS`), `--llm-deadline-s S`
another deadline (default `DEADLINE_S`, at most 3600). Each diagnosis on
the local llama.cpp server takes minutes. Not here: `eval snapshot --model openai` against the
real server (two more diagnoses of minutes each for what the fake-server tests in
tests/test_eval_snapshot_model.py already cover).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import pytest

from rootproof.errors import UsageError
from rootproof.eval.scoring import score_case, wrong_root_cause
from rootproof.eval.snapshot import observe_trace
from rootproof.harness import Harness
from rootproof.kb.cards import taxonomy_for
from rootproof.run.lifecycle import TERMINAL_STATES
from rootproof.runtime import Runtime
from rootproof.scenarios.loader import load_ground_truth, load_scenario, scenario_folder
from rootproof.settings import Settings
from tests.services import inherited_env

pytestmark = pytest.mark.llm

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = (
    "pg-row-lock",  # PostgreSQL: the row lock of the README
    "payment-timeout",  # the seed story: mock logs only, the expected outcome is a fallback
    "control-latency-blip",  # a no-fault control: the right answer is "no root cause"
    "nginx-upstream-timeout",  # nginx
    "mysql-too-many-connections",  # MariaDB / MySQL
    "redis-maxclients",  # Redis (a Chinese question)
)
PROVIDER = "llamacpp"  # the local server's quirks (`auto` once the probe picks them)
MODEL = "local"
DEADLINE_S = 1500
"""A run's deadline: a 1.5B model on 2 cores takes minutes per step."""
MODEL_TIMEOUT_S = 600
SMALL_MODEL = {
    "ROOTPROOF_PROMPT_TOKEN_BUDGET": "4000",  # prompt processing runs at ~20 tokens/s here
    "ROOTPROOF_OBSERVATION_BYTES": "2048",
    "ROOTPROOF_MAX_MODEL_CALLS": "6",
    "ROOTPROOF_MODEL_MAX_OUTPUT_TOKENS": "3000",  # a draft looping in its grammar ends here
    "ROOTPROOF_MODEL_TOKEN_TIMEOUT_S": "120",
}
"""Settings for a 1.5B model on 2 cores (docs/models.md "Small local models")."""
DRAFT_SHARE = 5 / 6
"""Runs whose draft must reach the guards (5 of 6)."""


@dataclass(kw_only=True)
class Figures:
    """One run as the closing note reports it."""

    scenario: str
    model: str
    run_id: str
    status: str
    release_outcome: str
    fallback_type: str | None
    terminal: bool
    reached_guards: bool
    """A draft reached the EvidenceGuard (`self_evaluation.evidence_guard` of the trace is set)."""
    score: float
    tokens: int
    wall_s: float
    """The run's own duration (`duration_ms` of `diagnose --json`)."""
    published_root_cause: str | None
    wrong_root_cause: str | None
    audit_ok: bool | None
    """`rootproof audit RUN` passed (None: nothing published)."""


def _scenarios(config: pytest.Config) -> list[str]:
    raw = config.getoption("--llm-scenarios", default=None)
    ids = [s.strip() for s in str(raw).split(",") if s.strip()] if raw else list(SCENARIOS)
    for sid in ids:
        try:
            scenario_folder(sid)
        except UsageError as exc:
            raise pytest.UsageError(f"--llm-scenarios: {exc}") from None
    return ids


@pytest.fixture(scope="module")
def llm_url() -> str:
    url = os.environ.get("ROOTPROOF_TEST_LLM_URL", "").rstrip("/")
    if not url:
        pytest.skip("ROOTPROOF_TEST_LLM_URL is not set (a running OpenAI-compatible server; ./dev test-llm starts one)")
    try:
        httpx.get(url + "/models", timeout=10).raise_for_status()
    except httpx.HTTPError as exc:
        pytest.fail(f"ROOTPROOF_TEST_LLM_URL={url}: GET /models failed: {exc}", pytrace=False)
    return url


def _rp(home: Path, *args: str, extra: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`rootproof ARGS` in a subprocess on the private store `home`, no other ROOTPROOF_* variable."""
    env = inherited_env()
    env.update({"ROOTPROOF_HOME": str(home), **(extra or {})})
    return subprocess.run(
        [sys.executable, "-m", "rootproof.cli", *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout
    )


def _model_env(url: str | None, deadline_s: float) -> dict[str, str]:
    if url is None:
        return {"ROOTPROOF_MODEL": "offline"}
    return {
        "ROOTPROOF_MODEL": "openai",
        "ROOTPROOF_OPENAI_BASE_URL": url,
        "ROOTPROOF_OPENAI_PROVIDER": PROVIDER,
        "ROOTPROOF_OPENAI_MODEL": MODEL,
        "ROOTPROOF_DEADLINE_S": f"{deadline_s:g}",
        "ROOTPROOF_MODEL_TIMEOUT_S": str(MODEL_TIMEOUT_S),
        **SMALL_MODEL,
    }


def _diagnose(sid: str, home: Path, url: str | None, deadline_s: float = DEADLINE_S) -> Figures:
    """Diagnose `sid` with the real model (`url`) or the offline planner (None), read it back, score it, audit it."""
    p = _rp(home, "diagnose", "--scenario", sid, "--json", extra=_model_env(url, deadline_s), timeout=deadline_s + 300)
    assert p.returncode == 0, f"{sid}: diagnose exited {p.returncode}: {p.stderr[-3000:]}"
    doc = json.loads(p.stdout)
    t = _rp(home, "trace", doc["run_id"], "--json")
    assert t.returncode == 0, t.stderr
    trace = json.loads(t.stdout)
    run = trace["run"]
    scenario = load_scenario(sid)
    with Runtime.from_settings(Settings(data_dir=home)) as rt:
        budget = Harness(rt).budget(scenario).tool_calls
    obs = observe_trace(trace, tool_call_budget=budget)
    truth = load_ground_truth(scenario_folder(sid), taxonomy_for(None))
    score = score_case(truth, obs)
    audit_ok = None
    if doc["release_outcome"] == "PUBLISHED":
        a = _rp(home, "audit", doc["run_id"], "--json")
        audit_ok = a.returncode == 0 and bool(json.loads(a.stdout)["ok"])
    rc = score.root_cause
    return Figures(
        scenario=sid,
        model=str(run.get("model")),
        run_id=doc["run_id"],
        status=doc["status"],
        release_outcome=doc["release_outcome"],
        fallback_type=run.get("fallback_type"),
        terminal=run.get("lifecycle_state") in {str(s) for s in TERMINAL_STATES} and run.get("ended_at") is not None,
        reached_guards=(run.get("self_evaluation") or {}).get("evidence_guard") is not None,
        score=score.score,
        tokens=int(doc.get("tokens") or 0),
        wall_s=round(int(doc.get("duration_ms") or 0) / 1000, 1),
        published_root_cause=f"{rc['component']}/{rc['mechanism']}" if rc else None,
        wrong_root_cause=wrong_root_cause(truth, obs),
        audit_ok=audit_ok,
    )


def _line(f: Figures) -> str:
    release = f.release_outcome + (f"/{f.fallback_type}" if f.fallback_type else "")
    return (
        f"{f.scenario:<27} {f.status:<9} {release:<38} {'yes' if f.reached_guards else 'no':<6} "
        f"{f.score:>6.1f} {f.tokens:>7} {f.wall_s:>7.1f}"
    )


def _totals(rows: list[Figures]) -> str:
    n = len(rows) or 1
    published = sum(1 for f in rows if f.release_outcome == "PUBLISHED")
    return (
        f"publish rate {published / n:.2f}, drafts at the guards {sum(f.reached_guards for f in rows)}/{len(rows)}, "
        f"mean score {sum(f.score for f in rows) / n:.2f}, tokens/run {sum(f.tokens for f in rows) / n:.0f}, "
        f"wall s/run {sum(f.wall_s for f in rows) / n:.1f}, false publishes "
        f"{sum(1 for f in rows if f.release_outcome == 'PUBLISHED' and (f.wrong_root_cause or not f.audit_ok))}"
    )


def _table(real: list[Figures], offline: list[Figures]) -> str:
    head = f"{'scenario':<27} {'status':<9} {'release outcome':<38} {'guards':<6} {'score':>6} {'tokens':>7} {'wall s':>7}"
    out = [f"real model ({real[0].model if real else MODEL})", head, *map(_line, real), _totals(real), ""]
    out += [f"offline planner ({offline[0].model if offline else '-'})", head, *map(_line, offline), _totals(offline)]
    return "\n".join(out)


def test_real_model_runs_end_publish_nothing_false_and_reach_the_guards(
    llm_url: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> None:
    ids = _scenarios(request.config)
    deadline_s = float(request.config.getoption("--llm-deadline-s", default=None) or DEADLINE_S)
    home = tmp_path_factory.mktemp("llm-home")
    offline = [_diagnose(sid, home, None) for sid in ids]
    real: list[Figures] = []
    for sid in ids:
        t0 = time.monotonic()
        real.append(f := _diagnose(sid, home, llm_url, deadline_s))
        print(f"\n[{len(real)}/{len(ids)}] {_line(f)}  (subprocess {time.monotonic() - t0:.0f} s)", flush=True)
    print("\n" + _table(real, offline), flush=True)
    print("LLM_FIGURES " + json.dumps({"real": [asdict(f) for f in real], "offline": [asdict(f) for f in offline]}), flush=True)

    assert not [f.scenario for f in real if not f.terminal], "every run reaches a terminal state"
    false = [
        (f.scenario, f.published_root_cause, f.wrong_root_cause or "audit failed")
        for f in real
        if f.release_outcome == "PUBLISHED" and (f.wrong_root_cause is not None or not f.audit_ok)
    ]
    assert not false, f"false publishes: {false}"
    need = math.ceil(DRAFT_SHARE * len(real))
    reached = sum(f.reached_guards for f in real)
    assert reached >= need, f"a draft reached the guards in {reached} of {len(real)} runs (need {need})"
