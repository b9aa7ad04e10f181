"""The whole live environment, end to end, on real processes: `rootproof live up` (detached) →
`live status` healthy → a real order through nginx → the targets file loads and `rootproof tool
call` reads live evidence through it → a killed owner's run is cleaned by the next preflight,
a live run beside it untouched → `live down` leaves no process, listener or folder.

One environment for the module (started once by the CLI, as a user would); the tests run in
file order and the last one takes it down.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rootproof.live import LiveConfig, LiveEnvironment, list_runs
from rootproof.live.layout import COMPONENTS, RunPaths, read_pidfiles
from rootproof.live.procs import ProcessRecord, is_running, listening
from rootproof.targets import load_targets

from .support import (
    assert_gone,
    cli,
    fresh_root,
    need_binaries,
    owner,
    read_until,
    reap,
    remove_root,
    wait_for,
)

# One environment for the whole module (its last test takes it down): on one xdist worker.
pytestmark = [pytest.mark.services, pytest.mark.slow, pytest.mark.xdist_group("live-environment")]


@pytest.fixture(scope="module")
def root() -> Iterator[Path]:
    need_binaries(COMPONENTS)
    path = fresh_root()
    yield path
    for run in list_runs(path):  # whatever a failed test left
        cli("live", "down", run.run_id, root=path)
    remove_root(path)


@pytest.fixture(scope="module")
def up(root: Path) -> dict[str, Any]:
    p = cli("live", "up", "--json", root=root, timeout=180)
    assert p.returncode == 0, p.stderr
    doc: dict[str, Any] = json.loads(p.stdout)
    assert "ready" in p.stderr  # progress on stderr, one document on stdout
    return doc


@pytest.fixture(scope="module")
def env(root: Path, up: dict[str, Any]) -> Iterator[LiveEnvironment]:
    attached = LiveEnvironment.attach(root, up["run_id"])
    yield attached
    if attached.reap():  # normally `live down` (the last test) stopped what this object restarted
        attached.stop()


def test_up_prints_the_run_and_leaves_every_component_running_detached(root: Path, up: dict[str, Any]) -> None:
    assert Path(up["folder"]) == root / up["run_id"] and Path(up["targets_file"]) == root / up["run_id"] / "targets.yaml"
    assert up["healthy"] and [c["name"] for c in up["components"]] == list(COMPONENTS)
    records = read_pidfiles(RunPaths(Path(up["folder"])))
    assert sorted(records) == sorted(COMPONENTS)
    assert all(is_running(r) for r in records.values())  # the command exited; its processes did not


def test_status_reports_each_component_alive_listening_and_healthy(root: Path, up: dict[str, Any]) -> None:
    p = cli("live", "status", up["run_id"], "--json", root=root)
    assert p.returncode == 0, p.stdout + p.stderr
    (run,) = json.loads(p.stdout)["runs"]
    assert run["state"] == "up" and run["detached"] and run["healthy"] and run["stale"] is None
    for c in run["components"]:
        assert c["alive"] and c["listening"] and c["healthy"], c
    text = cli("live", "status", root=root)
    assert text.returncode == 0 and f"run {up['run_id']} (up, detached): healthy" in text.stdout


def test_an_order_round_trips_through_nginx_and_leaves_its_evidence(env: LiveEnvironment) -> None:
    result = env.probe()
    assert result.ok, result
    assert result.order_id is not None and result.latency_ms > 0
    # the order service logged both requests as jsonl, nginx logged them with the upstream's timing
    # (each writes its line once the answer is out: wait, bounded, for them to be there)
    wanted = f'"GET /orders/{result.order_id} HTTP/1.1" 200 '
    wait_for("nginx's access line", lambda: wanted in env.paths.nginx_access_log.read_text(encoding="utf-8"), timeout_s=5)
    wait_for("the service's log line", lambda: f'"GET /orders/{result.order_id} 200' in env.paths.orders_log.read_text(encoding="utf-8"), timeout_s=5)
    lines = [json.loads(x) for x in env.paths.orders_log.read_text(encoding="utf-8").splitlines()]
    assert {"ts", "level", "service", "message"} <= set(lines[-1])
    assert any(x.get("route") == "/orders" and x.get("status") == 201 for x in lines)
    access = env.paths.nginx_access_log.read_text(encoding="utf-8")
    line = next(x for x in access.splitlines() if f"/orders/{result.order_id} " in x)
    assert line.rsplit(" ", 2)[-1] == "200" and float(line.rsplit(" ", 2)[-2]) >= 0  # $upstream_response_time $upstream_status
    # the ambient load runs too (its first request may still be on its way on a loaded machine)
    wait_for("the ambient load's first answer", lambda: (s := env.load_stats()) is not None and s.sent > 0 and s.ok > 0, timeout_s=15)
    assert env.order_admin().pool()["size"] == 5


def test_the_targets_file_names_every_instance_and_holds_no_secret(env: LiveEnvironment) -> None:
    loaded = load_targets(env.targets_file)
    assert {t.name: t.kind for t in loaded.file.targets} == {
        "orders-db": "postgres",
        "cache": "redis",
        "edge": "nginx",
        "order-service": "logs",
        "prom": "prometheus",
    }
    text = env.targets_file.read_text(encoding="utf-8")
    for secret in env.paths.secrets.iterdir():
        assert secret.read_text(encoding="utf-8").strip() not in text
        assert secret.stat().st_mode & 0o077 == 0
    assert str(env.spec.port("order_admin")) not in text  # the fault switch is not the diagnosis' to see
    assert "postgres@" not in text and "user=postgres" not in text


def _tool(name: str, targets: Path, args: str, home: Path) -> dict[str, Any]:
    """`rootproof tool call NAME --targets FILE --args ARGS --json`, run by the CLI app in this process."""
    from typer.testing import CliRunner

    from rootproof.cli import app

    result = CliRunner().invoke(app, ["tool", "call", name, "--targets", str(targets), "--args", args, "--json"], env={"ROOTPROOF_HOME": str(home)})
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def test_tool_calls_through_the_cli_read_live_evidence_from_the_targets_file(root: Path, env: LiveEnvironment) -> None:
    home = root / "home"
    docs = {
        "inspect_postgres": _tool("inspect_postgres", env.targets_file, '{"kind": "activity"}', home),
        "query_logs": _tool("query_logs", env.targets_file, '{"query": "orders", "service": "order-service"}', home),
        "query_metrics": _tool("query_metrics", env.targets_file, '{"metric": "pg_stat_activity_count"}', home),
        "inspect_redis": _tool("inspect_redis", env.targets_file, '{"kind": "clients"}', home),  # as the read-only ACL user
        "inspect_nginx": _tool("inspect_nginx", env.targets_file, '{"kind": "access_log"}', home),
    }
    sources = {
        "inspect_postgres": "live:orders-db",
        "query_logs": "live:order-service",
        "query_metrics": "live:prom",
        "inspect_redis": "live:cache",
        "inspect_nginx": "live:edge",
    }
    for name, doc in docs.items():
        inv = doc["invocation"]
        assert (inv["status"], inv["evidence_status"], inv["data_source"]) == ("READY", "EVIDENCE_FOUND", sources[name]), inv
    activity = json.dumps(docs["inspect_postgres"]["observation"])
    assert '"application_name":"order-service"' in activity.replace(" ", "").replace('\\"', '"')
    refs = docs["query_logs"]["invocation"]["evidence_refs"]
    assert any("/orders" in r["text"] for r in refs)
    series = json.dumps(docs["query_metrics"]["observation"])
    assert "pg_stat_activity_count" in series and 'job=\\"postgres\\"' in series
    assert any("name=order-service" in r["text"] for r in docs["inspect_redis"]["invocation"]["evidence_refs"])
    assert any('"POST /orders HTTP/1.1" 201 ' in r["text"] for r in docs["inspect_nginx"]["invocation"]["evidence_refs"])


def test_the_seams_later_phases_use_reach_the_real_processes(env: LiveEnvironment) -> None:
    # the superuser over the run's socket (the fault injector's), never in the targets file
    psql = [env.spec.binaries["psql"], env.superuser_dsn(), "-XAtc", "SELECT current_user, count(*) FROM inventory"]
    assert subprocess.run(psql, capture_output=True, text=True, check=True).stdout.strip() == "postgres|20"
    # the order service's fault switch: a delay on the public routes only
    admin = env.order_admin()
    assert admin.set_faults(delay_s=0.3) == {"leak": False, "delay_s": 0.3, "leaked_connections": 0}
    assert env.probe().latency_ms >= 600  # two requests, each delayed
    assert admin.reset()["delay_s"] == 0.0
    log = env.paths.orders_log.read_text(encoding="utf-8")
    assert "fault" not in log and "delay_s" not in log  # what the diagnosis reads never names the switch
    # restart: stopped by its pid, started again on the same ports, healthy
    before = env.process("order_service")
    assert before is not None
    after = env.restart("order_service")
    assert after.pid != before.pid and not is_running(before) and env.pids()["order_service"] == after.pid
    assert env.probe().ok
    wait_for("every component healthy again (Prometheus scrapes the restarted service)", lambda: env.status().healthy, timeout_s=15)


def _run_of(root: Path, before: set[str]) -> str:
    (run_id,) = {r.run_id for r in list_runs(root)} - before
    return run_id


def test_the_next_preflight_cleans_a_killed_owners_run_and_touches_no_live_run(root: Path, up: dict[str, Any]) -> None:
    # A second, live run: its owner keeps running through the preflight below.
    before = {r.run_id for r in list_runs(root)}
    alive = owner(root, "redis")
    try:
        _, alive_id = read_until(alive, "READY").split()
        alive_records = read_pidfiles(RunPaths(root / alive_id))
        # The killed one: SIGKILLed in the middle of its start (PostgreSQL and Redis up, the order service starting).
        before = {r.run_id for r in list_runs(root)}
        victim = owner(root, "order_service")
        read_until(victim, "redis ready")
        victim_id = _run_of(root, before)
        victim.kill()
        victim.wait(timeout=10)
        folder = root / victim_id
        records = list(read_pidfiles(RunPaths(folder)).values())
        assert {r.component for r in records} >= {"postgres", "redis"} and all(is_running(r) for r in records)
        assert next(r.stale for r in list_runs(root) if r.run_id == victim_id) is not None

        fresh = LiveEnvironment(LiveConfig(root=root, components=("redis",)))
        report = fresh.preflight()
        assert [c.run_id for c in report.cleaned] == [victim_id]
        (cleaned,) = report.cleaned
        assert "owner" in cleaned.reason and cleaned.residue == []
        assert_gone(records, [], folder)
        assert fresh.stop().folder_removed  # the run preflight claimed (nothing started)

        # Neither the detached run nor the live owner's run was touched.
        assert all(is_running(r) for r in alive_records.values()) and (root / alive_id).is_dir()
        assert LiveEnvironment.attach(root, up["run_id"]).status().healthy

        # SIGTERM to the live owner: its handler stops its environment, then the process exits by the signal.
        alive.send_signal(signal.SIGTERM)
        assert alive.wait(timeout=30) == -signal.SIGTERM
        assert_gone(list(alive_records.values()), [], root / alive_id)
    finally:
        reap(alive)
        if "victim" in locals():
            reap(victim)


def test_down_stops_every_process_and_leaves_no_listener_or_folder(root: Path, up: dict[str, Any]) -> None:
    folder = Path(up["folder"])
    records: list[ProcessRecord] = list(read_pidfiles(RunPaths(folder)).values())
    spec = LiveEnvironment.attach(root, up["run_id"]).spec
    ports = list(spec.ports.values())
    assert len(records) == len(COMPONENTS) and listening(ports) == sorted(ports)
    p = cli("live", "down", "--json", root=root)  # the only run under the root
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["residue"] == [] and [r["run_id"] for r in doc["runs"]] == [up["run_id"]]
    assert doc["runs"][0]["folder_removed"] and set(doc["runs"][0]["stopped"]) == set(COMPONENTS)
    assert_gone(records, ports, folder)
    assert list_runs(root) == []
