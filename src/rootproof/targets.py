"""The targets file: what a live run may look at (docs/targets.md).

`rootproof.targets.yaml` (TOML accepted) lists targets, one per real system. Secrets are never
in the file: `password_env: NAME` names an environment variable, `password_file: PATH` a file
whose first line is the secret. Models here are the trust border of that file.
"""

from __future__ import annotations

import hashlib
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

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
    "LoadedTargets",
    "TargetsFile",
    "load_targets",
    "secret_of",
]

MAX_TARGETS_FILE_BYTES = 1024 * 1024
"""A targets file larger than this is refused unread."""

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


@dataclass(frozen=True, kw_only=True)
class LoadedTargets:
    """A parsed targets file and where it came from."""

    file: TargetsFile
    path: Path
    checksum: str
    """`sha256:<hex>` of the file's bytes (recorded in a live run; never its secrets, which it holds none of)."""


def _field(loc: tuple[int | str, ...], data: object) -> str:
    """`targets[1].dsn`, with the target's name when it has one (`targets[1] (orders-db).dsn`)."""
    out = ""
    node = data
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            name = node[part].get("name") if isinstance(node, list) and part < len(node) and isinstance(node[part], dict) else None
            if isinstance(name, str):
                out += f" ({name[:60]})"
            node = node[part] if isinstance(node, list) and part < len(node) else None
        else:
            if part in ("postgres", "redis", "nginx", "logs", "loki", "prometheus") and isinstance(node, dict) and "kind" in node:
                continue  # the discriminator's tag adds nothing for a reader
            out += ("." if out else "") + str(part)
            node = node.get(part) if isinstance(node, dict) else None
    return out or "(root)"


def load_targets(path: Path) -> LoadedTargets:
    """Read and validate a targets file (YAML, or TOML by its `.toml` suffix).

    Raises ConfigError as `FILE: FIELD: problem` (one line) when it is unreadable, too large,
    not YAML/TOML, or does not validate.
    """
    try:
        size = path.stat().st_size
        if size > MAX_TARGETS_FILE_BYTES:
            raise ConfigError(f"{path}: {size} bytes, more than the {MAX_TARGETS_FILE_BYTES} bytes a targets file may have")
        raw = path.read_bytes()[: MAX_TARGETS_FILE_BYTES + 1]
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from exc
    data: object
    if path.suffix.lower() == ".toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: invalid TOML: {exc}") from exc
    else:
        import yaml

        from rootproof.scenarios.yamlio import parse_yaml_values

        try:
            data = parse_yaml_values(text, str(path))
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: invalid YAML: {str(exc).splitlines()[0] if str(exc) else exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: (root): expected a mapping with a `targets` list")
    try:
        parsed = TargetsFile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ConfigError(f"{path}: {_field(tuple(err['loc']), data)}: {err['msg']}") from None
    seen: set[str] = set()
    for i, t in enumerate(parsed.targets):
        if t.name in seen:
            raise ConfigError(f"{path}: targets[{i}].name: {t.name!r} is used twice; names are unique")
        seen.add(t.name)
    return LoadedTargets(file=parsed, path=path, checksum="sha256:" + hashlib.sha256(raw).hexdigest())
