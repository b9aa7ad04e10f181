"""End to end on live targets: a real row lock in the local PostgreSQL, diagnosed by
`rootproof diagnose --targets`, published as postgresql / row_lock_contention with `live:` refs;
a dead target fails only its own backend; `targets check` names a dead target.

The CLI runs as a user runs it (in the test process: tests/cli_support.py); the lock is held by two
real sessions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cli_support import run_cli
from tests.services import inherited_env

from .pg_support import private_database, row_lock

pytestmark = pytest.mark.services


def _cli(args: list[str], home: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = inherited_env()
    env |= {"ROOTPROOF_HOME": str(home), "PYTHONPATH": os.pathsep.join(sys.path)}
    return run_cli(args, env=env)


def _targets(path: Path, dsn: str, extra: str = "") -> Path:
    # A libpq key=value string works as well as a URL; the private database has no password.
    path.write_text(f"targets:\n  - {{name: orders-db, kind: postgres, dsn: {json.dumps(dsn)}, timeout_s: 5}}\n{extra}", encoding="utf-8")
    return path


def _trace(run_id: str, home: Path) -> dict[str, Any]:
    out = _cli(["trace", run_id, "--json"], home)
    assert out.returncode == 0, out.stderr
    trace: dict[str, Any] = json.loads(out.stdout)
    return trace


QUESTION = "Some order confirmations hang and fail after about 30 seconds; the confirm endpoint's p95 went from 60 ms to 30 s. What is going on?"


def test_a_real_row_lock_is_diagnosed_from_live_evidence(tmp_path: Path) -> None:
    with private_database() as dsn, row_lock(dsn, waiters=2) as lock:
        targets = _targets(tmp_path / "rootproof.targets.yaml", dsn)
        out = _cli(["diagnose", "--targets", str(targets), QUESTION, "--json"], tmp_path / "home")
        assert out.returncode == 0, out.stderr
        assert not lock.errors
        result = json.loads(out.stdout)
        trace = _trace(result["run_id"], tmp_path / "home")
    assert result["release_outcome"] == "PUBLISHED", (result, out.stderr)
    report = result["content"]["report"]
    assert (report["root_cause"]["component"], report["root_cause"]["mechanism"]) == ("postgresql", "row_lock_contention")
    invocations = {i["invocation_id"]: i for i in trace["invocations"]}
    cited = [c for claim in report["claims"] for c in claim["citations"] if claim["id"] in report["root_cause"]["claim_ids"]]
    live = [c for c in cited if invocations[c["invocation_id"]]["data_source"] == "live:orders-db"]
    assert live, cited
    excerpts = " ".join(c["excerpt"] for c in live)
    assert str(lock.holder_pid) in excerpts or str(lock.holder_pid) in report["root_cause"].get("culprit", "")
    assert any(f'"blocking_pids":[{lock.holder_pid}]' in c["excerpt"] for c in live), excerpts[:2000]
    assert all(i["data_source"].startswith(("live:", "knowledge")) for i in trace["invocations"] if i["status"] == "READY")
    assert trace["run"].get("targets_checksum", "").startswith("sha256:")


def test_a_dead_target_fails_only_its_own_backend(tmp_path: Path) -> None:
    """Real backends: a live PostgreSQL and a Redis target on a closed port, in one run."""
    from rootproof.agent.models.scripted import ScriptedModel, ScriptedStep
    from rootproof.harness import memory_harness
    from rootproof.settings import load_settings
    from rootproof.targets import load_targets

    dead = "  - {name: cache, kind: redis, url: 'redis://127.0.0.1:1/0', timeout_s: 1}\n"
    with private_database() as dsn:
        loaded = load_targets(_targets(tmp_path / "t.yaml", dsn, dead))
        h = memory_harness(load_settings(data_dir=tmp_path / "home", deadline_s=60))
        pairs = zip(("info", "clients", "slowlog", "config"), ("activity", "locks", "settings", "database_stats"), strict=True)
        steps = [ScriptedStep(calls=[("inspect_redis", {"kind": r}), ("inspect_postgres", {"kind": p})]) for r, p in pairs]
        model = ScriptedModel([*steps, ScriptedStep(draft={"summary": "x", "root_cause": None, "claims": []})])
        try:
            out = h.diagnose("Why do order confirmations hang?", targets=loaded, model=model)
        finally:
            h.runtime.close()
    redis = [o.invocation for o in out.outcomes if o.invocation.tool_name == "inspect_redis"]
    postgres = [o.invocation for o in out.outcomes if o.invocation.tool_name == "inspect_postgres"]
    assert [i.refusal_code for i in redis] == ["BACKEND_ERROR"] * 3 + ["CIRCUIT_OPEN"]
    assert "The redis:cache backend failed repeatedly" in str(redis[3].message)
    assert [(i.status, i.data_source) for i in postgres] == [("READY", "live:orders-db")] * 4


def test_targets_check_names_a_dead_target(tmp_path: Path) -> None:
    with private_database() as dsn:
        targets = _targets(tmp_path / "t.yaml", dsn, "  - {name: dead-db, kind: postgres, dsn: 'postgresql://postgres@127.0.0.1:1/x', timeout_s: 1}\n")
        out = _cli(["targets", "check", str(targets)], tmp_path / "home")
    assert out.returncode == 1
    assert "orders-db (postgres): usable" in out.stdout
    assert "dead-db (postgres): NOT USABLE" in out.stdout
    assert "dead-db" in out.stderr


def test_the_root_cause_cites_the_blockers_own_row_not_a_bystanders(tmp_path: Path) -> None:
    """A blocker, two waiters and an unrelated session idle in transaction (it holds a
    transaction id and blocks nothing): the published root cause cites the blocker's own row;
    the same draft with that citation moved to the bystander's row is withheld (EG-18)."""
    import psycopg

    from rootproof.agent.draft import Citation
    from rootproof.guard.entities import ref_entities
    from rootproof.guard.evidence import EvidenceGuard
    from rootproof.harness import memory_harness
    from rootproof.settings import load_settings
    from rootproof.targets import load_targets

    with private_database() as dsn, row_lock(dsn, waiters=2) as lock:
        bystander = psycopg.connect(dsn, application_name="report-console")
        try:
            bystander.execute("SELECT txid_current()")  # idle in transaction from here on
            loaded = load_targets(_targets(tmp_path / "t.yaml", dsn))
            h = memory_harness(load_settings(data_dir=tmp_path / "home", deadline_s=90))
            try:
                out = h.diagnose(QUESTION, targets=loaded)
                by_pid = bystander.info.backend_pid
                assert out.release_outcome == "PUBLISHED" and out.draft is not None and out.draft.root_cause is not None, out.content
                assert (out.draft.root_cause.component, out.draft.root_cause.mechanism) == ("postgresql", "row_lock_contention")
                draft = out.draft
                rc_ids = set(draft.root_cause.claim_ids) | {c.id for c in draft.claims if c.kind == "root_cause"}

                def subject(cit: Citation) -> str | None:
                    inv = h.canonical.get(cit.invocation_id)
                    ref = inv.ref(cit.raw_path) if inv else None
                    s = ref_entities(inv.tool_name, ref.raw_path, ref.text).subject if inv and ref else None
                    return s[1] if s and s[0] == "pid" else None

                rc_cits = [c for cl in draft.claims if cl.id in rc_ids for c in cl.citations]
                assert str(lock.holder_pid) in {subject(c) for c in rc_cits}, [(c.raw_path, c.excerpt[:120]) for c in rc_cits]
                assert str(by_pid) not in {subject(c) for cl in draft.claims for c in cl.citations}, [(cl.text[:150], [(c.raw_path, c.excerpt[:100]) for c in cl.citations if subject(c) == str(by_pid)]) for cl in draft.claims]
                # The scripted draft: the blocker's rows swapped for the bystander's, same claims.
                swapped = 0
                claims = []
                for cl in draft.claims:
                    cits = []
                    for c in cl.citations:
                        inv = h.canonical.get(c.invocation_id)
                        if cl.id in rc_ids and inv is not None and subject(c) == str(lock.holder_pid):
                            other = next((r for r in inv.evidence_refs if ref_entities(inv.tool_name, r.raw_path, r.text).subject == ("pid", str(by_pid))), None)
                            if other is not None:
                                c = c.model_copy(update={"raw_path": other.raw_path, "excerpt": other.text[:200]})
                                swapped += 1
                        cits.append(c)
                    claims.append(cl.model_copy(update={"citations": cits}))
                assert swapped, "the bystander's session was not in the evidence the root cause cites"
                wrong = draft.model_copy(update={"claims": claims})
                result = EvidenceGuard(h.canonical, cards=h.cards()).check(wrong, run_id=out.run_id)
                assert not result.passed and "CITATION_ENTITY_MISMATCH" in result.codes, result.as_dict()["violations"]
                details = " ".join(v.detail for v in result.violations if v.code == "CITATION_ENTITY_MISMATCH")
                assert f"pid {by_pid}" in details and str(lock.holder_pid) in details, details
            finally:
                h.runtime.close()
        finally:
            bystander.close()
