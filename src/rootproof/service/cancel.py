"""Cancellation across replicas: a persisted flag plus Redis pub/sub.

`request(run_id)` persists `diagnosis_run.cancel_requested_at`, cancels the run at once when
it executes in this replica, and publishes the run id on a Redis channel every replica listens
to. Pub/sub delivers at most once (a replica that is reconnecting misses the message), so each
replica also reads the flags of the runs it executes every `poll_s` seconds: a missed message
costs at most that delay. Without Redis (one replica, or replicas on PostgreSQL alone) the flag
is the whole mechanism.

redis-py stays inside this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from rootproof.service.hub import RunHub
from rootproof.store.sql import SqlTraceStore

__all__ = ["CancelBus", "CHANNEL"]

log = logging.getLogger(__name__)

CHANNEL = "rootproof:cancel"


class CancelBus:
    """Cancels a run wherever it executes."""

    def __init__(self, hub: RunHub, store: SqlTraceStore, redis_url: str | None, *, poll_s: float = 1.0) -> None:
        self._hub = hub
        self._store = store
        self._redis_url = redis_url
        self._poll_s = poll_s
        self._redis: Any = None
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Connect to Redis (when configured) and start listening and polling."""
        if self._redis_url:
            import redis.asyncio as aioredis

            self._redis = aioredis.Redis.from_url(self._redis_url)
            self._tasks.append(asyncio.create_task(self._listen(), name="rootproof-cancel-listen"))
        self._tasks.append(asyncio.create_task(self._poll(), name="rootproof-cancel-poll"))

    async def ping(self) -> bool | None:
        """Redis reachable (None when none is configured)."""
        if self._redis is None:
            return None
        try:
            return bool(await asyncio.wait_for(self._redis.ping(), timeout=2))
        except Exception:  # noqa: BLE001 - a probe reports
            return False

    async def request(self, run_id: str) -> bool:
        """Ask for `run_id` to stop; True when the run was not terminal (or runs here)."""
        persisted = await asyncio.to_thread(self._store.request_cancel, run_id)
        local = self._hub.cancel(run_id, "cancelled through the API")
        if self._redis is not None and persisted and not local:
            try:
                await self._redis.publish(CHANNEL, run_id)
            except Exception as exc:  # noqa: BLE001 - the persisted flag still reaches it
                log.warning("cancel publish failed (%s); the flag reaches the run within %.0f s", type(exc).__name__, self._poll_s)
        return persisted or local

    async def _listen(self) -> None:
        while True:
            try:
                pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
                await pubsub.subscribe(CHANNEL)
                async for message in pubsub.listen():
                    data = message.get("data")
                    run_id = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)
                    self._hub.cancel(run_id, "cancelled through the API (another replica)")
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - reconnect; the flag covers the gap
                log.warning("cancel channel lost (%s); reconnecting", type(exc).__name__)
                await asyncio.sleep(1.0)

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self._poll_s)
            ids = self._hub.ids()
            if not ids:
                continue
            try:
                flagged = await asyncio.to_thread(self._store.cancel_requested, ids)
            except Exception as exc:  # noqa: BLE001 - next round
                log.warning("reading cancellation flags failed: %s", type(exc).__name__)
                continue
            for run_id in flagged:
                self._hub.cancel(run_id, "cancelled through the API (flag)")

    async def stop(self) -> None:
        """Stop listening and close Redis."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        if self._redis is not None:
            with contextlib.suppress(Exception):
                await self._redis.aclose()
