"""SIGTERM to `rootproof serve` while runs execute: every run reaches a terminal state with its
`done` before the process exits (an open stream's run is cancelled after the grace period; a
webhook job executing is cancelled; a job still waiting in the in-process queue is closed)."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from rootproof.cli import GRACEFUL_SHUTDOWN_S
from rootproof.store import SqlTraceStore

from .support import OPERATOR_KEY, SlowModelServer, auth, read_sse, serve_process, service_env

pytestmark = [pytest.mark.slow]


def _alert(group: str) -> dict[str, object]:
    return {
        "version": "4",
        "status": "firing",
        "groupKey": group,
        "alerts": [{"status": "firing", "labels": {"alertname": "OrderLatency", "severity": "critical"}, "startsAt": "2026-07-22T09:35:00Z"}],
    }


def test_sigterm_ends_every_run_terminal(tmp_path: Path) -> None:
    with SlowModelServer(hold_s=60) as model:
        db = tmp_path / "rootproof.db"
        env = service_env(tmp_path / "home", ROOTPROOF_DATABASE_URL=f"sqlite:///{db}", ROOTPROOF_WORKER_CONCURRENCY="1", ROOTPROOF_SSE_HEARTBEAT_S="1", **model.env())
        server = serve_process(env, tmp_path / "serve.log")
        chat_run: list[str] = []

        def chat() -> None:
            try:
                with httpx.Client(timeout=120) as c, c.stream(
                    "POST", f"{server.url}/api/chat", json={"message": "why is checkout slow", "scenario": "pg-row-lock"}, headers=auth(OPERATOR_KEY)
                ) as resp:
                    for ev in read_sse(resp.iter_lines()):
                        if ev.data is not None and not chat_run:
                            chat_run.append(ev.data["data"]["run_id"])
            except httpx.HTTPError:
                pass  # the server closes the stream when it shuts down

        reader = threading.Thread(target=chat, daemon=True)
        try:
            reader.start()
            with httpx.Client(timeout=60) as c:
                hooks = [
                    c.post(f"{server.url}/api/alerts/alertmanager", params={"scenario": "pg-row-lock"}, json=_alert(f"sd-{i}"), headers=auth(OPERATOR_KEY)).json()["run_ids"][0]
                    for i in range(3)
                ]
            deadline = time.monotonic() + 30
            while not chat_run and time.monotonic() < deadline:
                time.sleep(0.1)
            assert chat_run, "the chat stream gave no event"
            time.sleep(1.0)
            t0 = time.monotonic()
            server.proc.send_signal(signal.SIGTERM)
            server.proc.wait(timeout=GRACEFUL_SHUTDOWN_S + 40)
            exit_s = time.monotonic() - t0
        finally:
            server.stop()
        reader.join(timeout=10)
    with SqlTraceStore(f"sqlite:///{db}", read_only=True) as store:
        for run_id in [*chat_run, *hooks]:
            run = store.get_run(run_id)
            assert run is not None and run.status == "CANCELLED", (run_id, run and run.status, run and run.error)
            events = store.events(run_id)
            assert events and events[-1].type == "done" and [e.seq for e in events] == list(range(events[0].seq, events[0].seq + len(events)))
    print(f"SIGTERM: the process exited {exit_s:.1f} s later; {1 + len(hooks)} runs CANCELLED with their done")
    assert exit_s < GRACEFUL_SHUTDOWN_S + 25
