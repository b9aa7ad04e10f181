"""A client of the order service's admin app: the fault switch and the pool's state.

For the live benchmark's fault injector and verification (never for the diagnosis: the admin
port is not in the targets file). Errors become `LiveEnvironmentError("order_service", …)`.
"""

from __future__ import annotations

from typing import Any

import httpx

from rootproof.errors import LiveEnvironmentError

__all__ = ["OrderServiceAdmin"]


class OrderServiceAdmin:
    """`GET/PUT /faults`, `POST /faults/reset`, `GET /pool` on the admin app at `url`."""

    def __init__(self, url: str, *, timeout_s: float = 5.0) -> None:
        self.url = url
        self.timeout_s = timeout_s

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            resp = httpx.request(method, self.url + path, json=body, timeout=self.timeout_s, trust_env=False)
            resp.raise_for_status()
            data = resp.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise LiveEnvironmentError("order_service", f"admin {method} {path} failed: {type(exc).__name__}: {exc}") from exc
        if not isinstance(data, dict):
            raise LiveEnvironmentError("order_service", f"admin {method} {path}: expected a JSON object")
        return data

    def faults(self) -> dict[str, Any]:
        """The switches: `{"leak": bool, "delay_s": float, "leaked_connections": int}`."""
        return self._call("GET", "/faults")

    def set_faults(self, *, leak: bool | None = None, delay_s: float | None = None) -> dict[str, Any]:
        """Turn the leak on or off and/or set the delay of public `/orders` requests (seconds)."""
        body = {k: v for k, v in (("leak", leak), ("delay_s", delay_s)) if v is not None}
        return self._call("PUT", "/faults", body)

    def reset(self) -> dict[str, Any]:
        """Every switch off and every leaked connection returned."""
        return self._call("POST", "/faults/reset")

    def pool(self) -> dict[str, Any]:
        """The pool: `size`, `checked_out`, `checked_in`, `overflow`, `max_overflow`, `timeout_s`."""
        return self._call("GET", "/pool")
