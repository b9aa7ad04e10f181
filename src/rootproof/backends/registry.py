"""BackendRegistry: the backends of a run, mounted per system and target (like httpx mounts).

A mount key is `"*"` (every system: a scenario's snapshot backend), `"<system>"` (`knowledge`,
`logs`) or `"<system>:<target>"` (`postgres:orders-db`). `resolve(system, target)` picks the
most specific mount and names the circuit-breaker key of the call: the mount key, except that
the catch-all `"*"` is keyed per system, so a failing redis never pauses postgres tools.

When a system has several targets mounted, its tool takes a required `target` argument whose
enum is the mounted names (`tools()` builds those argument models for the run); with one
target, or none, the tool and its schema are unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from pydantic import Field, create_model

from rootproof.tools.base import TOOLS, System, ToolBackend, ToolDefinition

__all__ = ["ALL_SYSTEMS", "SYSTEMS", "BackendRegistry", "Resolved"]

SYSTEMS: tuple[str, ...] = get_args(System)
"""Every system a tool can be served by."""
ALL_SYSTEMS = "*"
"""The mount key that serves every system not mounted more specifically."""


@dataclass(frozen=True, kw_only=True)
class Resolved:
    """Which backend serves a call, and the circuit breaker it counts toward."""

    key: str
    """The breaker key: `postgres`, `postgres:orders-db`, `knowledge`."""
    backend: ToolBackend
    target: str | None = None
    """The target's name when the mount is per target."""


def _check_key(key: str) -> None:
    if key == ALL_SYSTEMS:
        return
    system, _, target = key.partition(":")
    if system not in SYSTEMS or (":" in key and not target):
        raise ValueError(f"mount key must be '*', '<system>' or '<system>:<target>' with system in {', '.join(SYSTEMS)} (got {key!r})")


class BackendRegistry:
    """Backends mounted by key; the most specific mount serves a call."""

    def __init__(self, mounts: Mapping[str, ToolBackend] | Iterable[tuple[str, ToolBackend]] = ()) -> None:
        self._mounts: dict[str, ToolBackend] = {}
        for key, backend in mounts.items() if isinstance(mounts, Mapping) else mounts:
            self.mount(key, backend)

    def mount(self, key: str, backend: ToolBackend) -> None:
        """Mount `backend` at `key` (replacing what was there)."""
        _check_key(key)
        self._mounts[key] = backend

    def mounts(self) -> dict[str, ToolBackend]:
        """Mount key → backend, in mount order."""
        return dict(self._mounts)

    def targets(self, system: str) -> tuple[str, ...]:
        """Names of the per-target mounts of `system`, in mount order."""
        prefix = f"{system}:"
        return tuple(k[len(prefix) :] for k in self._mounts if k.startswith(prefix))

    def serves(self, system: str) -> bool:
        """True when some mount serves `system`."""
        return ALL_SYSTEMS in self._mounts or system in self._mounts or bool(self.targets(system))

    def resolve(self, system: str, target: str | None = None) -> Resolved | None:
        """The most specific mount for `system` (and `target`): `<system>:<target>`, then
        `<system>`, then `*`. Without a target, a system's only per-target mount serves it."""
        if target is not None and (backend := self._mounts.get(f"{system}:{target}")) is not None:
            return Resolved(key=f"{system}:{target}", backend=backend, target=target)
        if (backend := self._mounts.get(system)) is not None:
            return Resolved(key=system if target is None else f"{system}:{target}", backend=backend, target=target)
        names = self.targets(system)
        if target is None and len(names) == 1:
            return Resolved(key=f"{system}:{names[0]}", backend=self._mounts[f"{system}:{names[0]}"], target=names[0])
        if (backend := self._mounts.get(ALL_SYSTEMS)) is not None:
            return Resolved(key=system, backend=backend, target=target)
        return None

    def tools(self, base: Mapping[str, ToolDefinition] = TOOLS) -> dict[str, ToolDefinition]:
        """The run's tool definitions: a system with several targets gets a required `target`."""
        out: dict[str, ToolDefinition] = {}
        for name, tool in base.items():
            names = self.targets(tool.backend)
            out[name] = with_targets(tool, names) if len(names) > 1 else tool
        return out

    def close(self) -> None:
        """Close every mounted backend (each `close()` is idempotent); the first error is raised
        after all were tried."""
        errors: list[BaseException] = []
        for backend in self._mounts.values():
            try:
                backend.close()
            except Exception as exc:  # noqa: BLE001 - every backend gets its close()
                errors.append(exc)
        if errors:
            raise errors[0]


def with_targets(tool: ToolDefinition, names: tuple[str, ...]) -> ToolDefinition:
    """`tool` with a required `target` argument (enum: `names`) and a description naming them."""
    choice: Any = Literal[names]  # a Literal over the mounted names, built at run time
    listed = ", ".join(names)
    model = create_model(
        tool.args_model.__name__,
        __base__=tool.args_model,
        __doc__=tool.args_model.__doc__,
        target=(choice, Field(description=f"Which {tool.backend} target to inspect: {listed}.")),
    )
    return dataclasses.replace(tool, args_model=model, description=f"{tool.description} Targets: {listed} (required `target`).")
