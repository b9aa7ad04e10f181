"""The server binaries the live environment runs, where Debian installs them, and which package.

One table, `BINARIES`: binary name → where Debian's package puts it and the package's name.
`resolve()` finds a binary (an explicit override, else the Debian path, else `PATH`) or raises
`MissingBinary` naming it and the package to install. The tests' private Prometheus
(tests/backends/prom_env.py) looks its binaries up here too.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rootproof.errors import MissingBinary

__all__ = ["BINARIES", "PG_BIN", "Binary", "missing", "resolve"]

PG_BIN = Path("/usr/lib/postgresql/15/bin")
"""Where Debian's postgresql-15 puts the server programs (not on PATH)."""


@dataclass(frozen=True, kw_only=True)
class Binary:
    """One program the environment runs."""

    name: str
    """The program's name (`redis-server`): the key of `BINARIES` and of `LiveConfig.binaries`."""
    debian_path: Path
    """Where the Debian package installs it."""
    package: str
    """The Debian package that provides it."""
    on_path: bool = True
    """Whether it may also be found on `PATH` (the PostgreSQL server programs are not on it)."""


BINARIES: dict[str, Binary] = {
    b.name: b
    for b in (
        Binary(name="initdb", debian_path=PG_BIN / "initdb", package="postgresql-15", on_path=False),
        Binary(name="pg_ctl", debian_path=PG_BIN / "pg_ctl", package="postgresql-15", on_path=False),
        Binary(name="pg_isready", debian_path=PG_BIN / "pg_isready", package="postgresql-client-15", on_path=False),
        Binary(name="psql", debian_path=PG_BIN / "psql", package="postgresql-client-15", on_path=False),
        Binary(name="runuser", debian_path=Path("/usr/sbin/runuser"), package="util-linux"),
        Binary(name="redis-server", debian_path=Path("/usr/bin/redis-server"), package="redis-server"),
        Binary(name="nginx", debian_path=Path("/usr/sbin/nginx"), package="nginx"),
        Binary(name="prometheus", debian_path=Path("/usr/bin/prometheus"), package="prometheus"),
        Binary(
            name="prometheus-postgres-exporter",
            debian_path=Path("/usr/bin/prometheus-postgres-exporter"),
            package="prometheus-postgres-exporter",
        ),
        Binary(
            name="prometheus-redis-exporter",
            debian_path=Path("/usr/bin/prometheus-redis-exporter"),
            package="prometheus-redis-exporter",
        ),
    )
}
"""Every binary the environment may run, by name."""


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def resolve(name: str, overrides: Mapping[str, str] | None = None, *, component: str = "environment") -> str:
    """The path of binary `name`: `overrides[name]` when given (it must exist), else the Debian
    path, else `PATH`. Raises `MissingBinary` naming the binary, where it looked and the package."""
    binary = BINARIES[name]
    override = (overrides or {}).get(name)
    if override is not None:
        if _executable(Path(override)):
            return override
        raise MissingBinary(component, name, binary.package, override)
    if _executable(binary.debian_path):
        return str(binary.debian_path)
    found = shutil.which(name) if binary.on_path else None
    if found:
        return found
    looked = f"{binary.debian_path} and PATH" if binary.on_path else str(binary.debian_path)
    raise MissingBinary(component, name, binary.package, looked)


def missing(names: list[str] | tuple[str, ...], overrides: Mapping[str, str] | None = None) -> list[MissingBinary]:
    """The binaries of `names` that `resolve` cannot find (empty when all are installed)."""
    out: list[MissingBinary] = []
    for name in names:
        try:
            resolve(name, overrides)
        except MissingBinary as exc:
            out.append(exc)
    return out
