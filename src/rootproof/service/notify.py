"""TEMPORARY placeholder (replaced by the helper's module)."""
from __future__ import annotations
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx

@dataclass(frozen=True)
class Receiver:
    name: str
    kind: Literal["webhook", "slack"]
    url: str = field(repr=False)
    timeout_s: float = 10.0

@dataclass(frozen=True)
class Notification:
    run_id: str
    idempotency_key: str
    body: dict[str, Any]

@dataclass(frozen=True)
class Delivery:
    ok: bool
    status: int | None
    retryable: bool
    detail: str

def load_receivers(path: Path, environ: Mapping[str, str]) -> list[Receiver]:
    import yaml
    data = yaml.safe_load(path.read_text())
    return [Receiver(name=r["name"], kind=r["kind"], url=environ[r["url_env"]]) for r in data["receivers"]]

def build_notification(run: Any, *, receiver: Receiver, public_url: str | None) -> Notification:
    return Notification(run.run_id, f"{run.run_id}:{receiver.name}", {"run_id": run.run_id, "status": run.status, "content": run.content})

def deliver(receiver: Receiver, note: Notification, *, client: httpx.Client | None = None) -> Delivery:
    try:
        r = httpx.post(receiver.url, json=note.body, headers={"Idempotency-Key": note.idempotency_key}, timeout=receiver.timeout_s)
    except httpx.HTTPError as exc:
        return Delivery(False, None, True, type(exc).__name__)
    return Delivery(200 <= r.status_code < 300, r.status_code, r.status_code >= 500, str(r.status_code))
