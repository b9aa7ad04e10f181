"""The targets file: what a live run may look at (docs/targets.md).

`rootproof.targets.yaml` (TOML accepted) lists targets, one per real system. Secrets are never
in the file: `password_env: NAME` names an environment variable, `password_file: PATH` a file
whose first line is the secret. Models here are the trust border of that file.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from rootproof.errors import ConfigError

__all__ = [
    "LogsTarget",
    "LokiTarget",
    "NginxTarget",
    "PostgresTarget",
    "PrometheusTarget",
    "RedisTarget",
    "Target",
    "TargetCheck",
    "TargetsFile",
    "secret_of",
]

_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,62}$"


class _Target(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=_NAME)
    """Unique name; data from it is `live:<name>`."""
    max_bytes: int = Field(default=8 * 1024 * 1024, ge=4096, le=256 * 1024 * 1024)
    """Most bytes one call reads from this target (log files, HTTP bodies)."""
    timeout_s: float = Field(default=5.0, gt=0, le=120)
    """Connect and statement timeout of one call, seconds."""


class _Secret(_Target):
    password_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """Environment variable holding the password (never the password itself)."""
    password_file: Path | None = None
    """File whose first line is the password."""


class PostgresTarget(_Secret):
    """A PostgreSQL server, read through a read-only session."""

    kind: Literal["postgres"]
    dsn: str = Field(min_length=1, max_length=2000)
    """libpq URL or key=value string, without a password."""
    log: Path | None = None
    """The server log; default: `pg_current_logfile()` when readable."""


class RedisTarget(_Secret):
    """A Redis server, read through one observer connection."""

    kind: Literal["redis"]
    url: str = Field(min_length=1, max_length=2000)
    """`redis://host:port/db` (or `rediss://`, `unix://`), without a password."""
    username: str | None = None
    log: Path | None = None
    """The server log file, if readable."""


class NginxTarget(_Target):
    """An nginx server: its logs, config and stub_status."""

    kind: Literal["nginx"]
    error_log: Path | None = None
    access_log: Path | None = None
    access_format: Literal["combined", "upstream"] = "combined"
    """`combined`, or `upstream`: combined followed by `$upstream_response_time $upstream_status`
    (docs/targets.md gives the `log_format` line)."""
    config: Path | None = None
    status_url: str | None = None
    """The `stub_status` URL."""


class LogsTarget(_Target):
    """Application log files."""

    kind: Literal["logs"]
    paths: list[str] = Field(min_length=1, max_length=64)
    """Globs of files to read, newest first."""
    format: Literal["jsonl", "logfmt", "regex"] = "jsonl"
    pattern: str | None = Field(default=None, max_length=2000)
    """For `format: regex`: a Python regex with named groups (`ts`, `level`, `message`, …)."""
    fields: dict[str, str] = Field(default_factory=dict)
    """Field mapping for ts, level, service, message (`{ts: time, message: msg}`)."""
    service: str = Field(min_length=1, max_length=100)
    """The service these logs belong to (unless a record names its own)."""
    scope: Literal["APPLICATION", "DATABASE", "CACHE", "PROXY", "SYSTEM"] = "APPLICATION"


class LokiTarget(_Secret):
    """A Loki server (`query_range`)."""

    kind: Literal["loki"]
    url: str = Field(min_length=1, max_length=2000)
    selector: str = Field(default='{job=~".+"}', max_length=2000)
    """Base stream selector the query's filters are added to."""
    service_label: str = "service"
    """The stream label that names a service."""
    tenant: str | None = None
    """`X-Scope-OrgID`, for multi-tenant Loki."""


class PrometheusTarget(_Secret):
    """A Prometheus server (HTTP API)."""

    kind: Literal["prometheus"]
    url: str = Field(min_length=1, max_length=2000)


Target = Annotated[
    PostgresTarget | RedisTarget | NginxTarget | LogsTarget | LokiTarget | PrometheusTarget,
    Field(discriminator="kind"),
]


class TargetsFile(BaseModel):
    """A whole targets file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    targets: list[Target] = Field(min_length=1, max_length=200)


class TargetCheck(BaseModel):
    """What `rootproof targets check` says of one target."""

    model_config = ConfigDict(frozen=True)

    name: str
    kind: str
    usable: bool
    problem: str | None = None
    """Why not usable: unreachable, authentication failed, session not read-only, …"""
    warnings: list[str] = Field(default_factory=list)
    """Missing extras: `pg_stat_statements` not installed, a log file unreadable, …"""


def secret_of(target: PostgresTarget | RedisTarget | LokiTarget | PrometheusTarget, environ: Mapping[str, str]) -> str | None:
    """The target's password from `password_env` (in `environ`) or `password_file`; None if it names none.

    Raises ConfigError naming the target and field when the variable is unset or the file unreadable.
    """
    if target.password_env:
        value = environ.get(target.password_env)
        if value is None:
            raise ConfigError(f"targets: {target.name}: password_env: the variable {target.password_env} is not set")
        return value
    if target.password_file is not None:
        try:
            text = target.password_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"targets: {target.name}: password_file: cannot read {target.password_file}: {exc}") from exc
        return text.splitlines()[0] if text else ""
    return None
