"""The targets file: what a live run may look at (docs/targets.md).

`rootproof.targets.yaml` (TOML accepted) lists targets, one per real system. Secrets are never
in the file: `password_env: NAME` names an environment variable, `password_file: PATH` a file
whose first line is the secret. Models here are the trust border of that file.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from rootproof.boundary.redaction import is_secret_key
from rootproof.configfile import read_config_file, read_regular
from rootproof.errors import ConfigError
from rootproof.tools.base import LogScope

__all__ = [
    "KINDS",
    "LOG_FIELDS",
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
MAX_BYTES_LIMIT = 32 * 1024 * 1024
"""The largest `max_bytes` a target may set (what one call reads is held and parsed in memory)."""
MAX_SECRET_FILE_BYTES = 4096
"""A `password_file` larger than this is refused unread."""

_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,62}$"

KINDS = ("postgres", "redis", "nginx", "logs", "loki", "prometheus")
"""The target kinds, in the order docs/targets.md lists them."""
LOG_FIELDS = ("ts", "level", "service", "message")
"""The keys of a logs target's `fields` mapping."""
USE_SECRET_REFERENCES = (
    "which a targets file may not hold; name it with password_env (an environment variable) "
    "or password_file (a file whose first line is the password)"
)
"""The end of every refusal of a password in the file (which never quotes it)."""
_KEY_VALUE = re.compile(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)\s*=")


def _url_problem(value: str, schemes: tuple[str, ...], *, host: bool, expected: str = "") -> str | None:
    """What is wrong with a URL field (scheme, password, host), never quoting the URL's secrets."""
    try:
        parts = urlsplit(value.strip())
        password, hostname = parts.password, parts.hostname
        if parts.scheme.lower() in ("http", "https"):
            parts.port  # noqa: B018 - raises ValueError for a port out of range or not a number
    except ValueError:
        return "not a valid URL (its port, if any, must be a number from 0 to 65535)"
    scheme = parts.scheme.lower()
    if scheme not in schemes:
        got = f"{scheme}://" if scheme and "://" in value else "no scheme"
        return f"expected {expected or 'a URL starting with ' + ' or '.join(s + '://' for s in schemes)} (got {got})"
    if password or any(is_secret_key(k) for k, _ in parse_qsl(parts.query, keep_blank_values=True)):
        return f"the URL holds a password, {USE_SECRET_REFERENCES}"
    if host and not hostname:
        return "the URL names no host"
    return None


def _fail(problem: str | None, value: str) -> str:
    if problem is not None:
        raise ValueError(problem)
    return value


class _Target(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=_NAME)
    """Unique name; data from it is `live:<name>`."""
    max_bytes: int = Field(default=8 * 1024 * 1024, ge=4096, le=MAX_BYTES_LIMIT)
    """Most bytes one call reads from this target (log files, HTTP bodies)."""
    timeout_s: float = Field(default=5.0, gt=0, le=120)
    """Connect and statement timeout of one call, seconds."""


class _Secret(_Target):
    password_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """Environment variable holding the password (never the password itself)."""
    password_file: Path | None = None
    """File whose first line is the password."""

    @field_validator("password_file")
    @classmethod
    def _one_reference(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        if value is not None and info.data.get("password_env"):
            raise ValueError("give password_env or password_file, not both")
        return value


class PostgresTarget(_Secret):
    """A PostgreSQL server, read through a read-only session."""

    kind: Literal["postgres"]
    dsn: str = Field(min_length=1, max_length=2000)
    """libpq URL or key=value string, without a password."""
    log: Path | None = None
    """The server log; default: `pg_current_logfile()` when readable."""

    @field_validator("dsn")
    @classmethod
    def _dsn(cls, value: str) -> str:
        if "://" in value or not _KEY_VALUE.search(value):
            expected = "a postgresql:// or postgres:// URL or a key=value string"
            return _fail(_url_problem(value, ("postgresql", "postgres"), host=False, expected=expected), value)
        if any(is_secret_key(k) for k in _KEY_VALUE.findall(value)):
            raise ValueError(f"the DSN holds a password, {USE_SECRET_REFERENCES}")
        return value


class RedisTarget(_Secret):
    """A Redis server, read through one observer connection."""

    kind: Literal["redis"]
    url: str = Field(min_length=1, max_length=2000)
    """`redis://host:port/db` (or `rediss://`, `unix://`), without a password."""
    username: str | None = None
    """ACL user name (`AUTH username password`); default: the URL's user, else `default`."""
    log: Path | None = None
    """The server log file, if readable."""

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return _fail(_url_problem(value, ("redis", "rediss", "unix"), host=False), value)


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

    @field_validator("status_url")
    @classmethod
    def _status_url(cls, value: str | None) -> str | None:
        return None if value is None else _fail(_url_problem(value, ("http", "https"), host=True), value)


class LogsTarget(_Target):
    """Application log files."""

    kind: Literal["logs"]
    paths: list[str] = Field(min_length=1, max_length=64)
    """Globs of files to read, newest first."""
    format: Literal["jsonl", "logfmt", "regex"] = "jsonl"
    fields: dict[str, Annotated[str, Field(min_length=1, max_length=200)]] = Field(default_factory=dict)
    """Field mapping for ts, level, service, message (`{ts: time, message: msg}`)."""
    pattern: str | None = Field(default=None, max_length=2000, validate_default=True)
    """For `format: regex`: a Python regex with named groups (`ts`, `level`, `message`, …)."""
    service: str = Field(min_length=1, max_length=100)
    """The service these logs belong to (unless a record names its own)."""
    scope: LogScope = "APPLICATION"
    """The scope `query_logs` files these entries under (`CLOUD` for a cloud provider's events
    exported to a file: RDS events, CloudWatch alarm state changes, Cloud SQL operations, Azure
    activity log)."""

    @field_validator("pattern")
    @classmethod
    def _pattern(cls, value: str | None, info: ValidationInfo) -> str | None:
        fmt = info.data.get("format")
        if fmt is None:  # `format` itself is wrong; that error is reported
            return value
        if value is None:
            if fmt == "regex":
                raise ValueError("required with format: regex (a Python regex with a named group (?P<message>...))")
            return None
        if fmt != "regex":
            raise ValueError(f"only used with format: regex (this target has format: {fmt})")
        try:
            compiled = re.compile(value)
        except re.error as exc:
            raise ValueError(f"does not compile: {exc.msg} at position {exc.pos}") from None
        fields = info.data.get("fields") or {}
        for field, what in (("message", "message"), ("ts", "time")):
            name = fields.get(field, field)  # `fields` is declared first, so it is validated by now
            if name not in compiled.groupindex:
                raise ValueError(f"has no named group for the {what}: add (?P<{name}>...)")
        return value

    @field_validator("fields")
    @classmethod
    def _fields(cls, value: dict[str, str]) -> dict[str, str]:
        unknown = [k for k in value if k not in LOG_FIELDS]
        if unknown:
            raise ValueError(f"unknown key {unknown[0][:60]!r} (allowed: {', '.join(LOG_FIELDS)})")
        return value


class LokiTarget(_Secret):
    """A Loki server (`query_range`)."""

    kind: Literal["loki"]
    url: str = Field(min_length=1, max_length=2000)
    """The Loki base URL (`http://127.0.0.1:3100`), without a password."""
    selector: str = Field(default='{job=~".+"}', max_length=2000)
    """Base stream selector the query's filters are added to."""
    service_label: str = "service"
    """The stream label that names a service."""
    tenant: str | None = None
    """`X-Scope-OrgID`, for multi-tenant Loki."""

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return _fail(_url_problem(value, ("http", "https"), host=True), value)


class PrometheusTarget(_Secret):
    """A Prometheus server (HTTP API)."""

    kind: Literal["prometheus"]
    url: str = Field(min_length=1, max_length=2000)
    """The Prometheus base URL (`http://127.0.0.1:9090`), without a password."""

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return _fail(_url_problem(value, ("http", "https"), host=True), value)


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
        return _read_secret_file(target.name, target.password_file)
    return None


def _read_secret_file(name: str, path: Path) -> str:
    """A `password_file`'s first line (a regular UTF-8 file, read bounded); ConfigError never quoting it."""
    try:
        raw = read_regular(path, MAX_SECRET_FILE_BYTES, what="a password file")
    except ConfigError as exc:
        raise ConfigError(f"targets: {name}: password_file: {exc}") from None
    try:
        text: str | None = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None:  # raised outside the except: the decode error (it holds the secret's bytes) is not its context
        raise ConfigError(f"targets: {name}: password_file: {path}: not UTF-8 text")
    return text.splitlines()[0] if text else ""


@dataclass(frozen=True, kw_only=True)
class LoadedTargets:
    """A parsed targets file and where it came from."""

    file: TargetsFile
    path: Path
    checksum: str
    """`sha256:<hex>` of the file's bytes (recorded in a live run; never its secrets, which it holds none of)."""


_MODELS: dict[str, type[BaseModel]] = {
    "postgres": PostgresTarget,
    "redis": RedisTarget,
    "nginx": NginxTarget,
    "logs": LogsTarget,
    "loki": LokiTarget,
    "prometheus": PrometheusTarget,
}


def _field(loc: tuple[int | str, ...], data: object) -> str:
    """`targets[1].dsn`, with the target's name when it has one (`targets[1] (orders-db).dsn`)."""
    out = ""
    node = data
    for part in loc:
        if isinstance(part, int) and not isinstance(node, dict):  # a list index (a dict's int key is a key)
            out += f"[{part}]"
            name = node[part].get("name") if isinstance(node, list) and part < len(node) and isinstance(node[part], dict) else None
            if isinstance(name, str):
                out += f" ({name[:60]})"
            node = node[part] if isinstance(node, list) and part < len(node) else None
        else:
            if part in KINDS and isinstance(node, dict) and "kind" in node:
                continue  # the discriminator's tag adds nothing for a reader
            out += ("." if out else "") + str(part)
            node = node.get(part) if isinstance(node, dict) else None
    return out or "(root)"


def _problem(err: Any) -> tuple[tuple[int | str, ...], str]:
    """The location and the reader's wording of one pydantic error (never quoting a value)."""
    loc: tuple[int | str, ...] = tuple(err["loc"])
    kind, msg = err["type"], str(err["msg"])
    allowed_kinds = ", ".join(KINDS)
    if kind == "extra_forbidden":
        key = str(loc[-1])
        if is_secret_key(key):
            return loc, f"a secret value, {USE_SECRET_REFERENCES}"
        model = _MODELS.get(str(loc[-2])) if len(loc) >= 2 else TargetsFile
        fields = ", ".join(model.model_fields) if model is not None else ""
        return loc, f"unknown field{f' (allowed: {fields})' if fields else ''}"
    if kind == "union_tag_invalid":
        tag = str(err.get("ctx", {}).get("tag", ""))[:40]
        return (*loc, "kind"), f"unknown kind {tag!r} (allowed kinds: {allowed_kinds})"
    if kind == "union_tag_not_found":
        return (*loc, "kind"), f"missing (allowed kinds: {allowed_kinds})"
    if kind == "missing":
        if loc == ("targets",):
            return loc, "missing: a targets file is a mapping with a `targets` list"
        return loc, "required field missing"
    if kind in ("model_attributes_type", "model_type", "dict_type"):
        return loc, "expected a mapping"
    return loc, msg.removeprefix("Value error, ")


def _is_secret_problem(err: Any) -> bool:
    return USE_SECRET_REFERENCES in _problem(err)[1]


def load_targets(path: Path) -> LoadedTargets:
    """Read and validate a targets file (YAML, or TOML by its `.toml` suffix).

    Raises ConfigError as one line `FILE: FIELD: problem` (`FILE: problem` for the file as a
    whole, `FILE: line N: problem` for its syntax) when it is unreadable, too large, not UTF-8,
    not YAML/TOML, or does not validate. A password in the file is refused without being quoted.
    """
    raw, data = read_config_file(path, MAX_TARGETS_FILE_BYTES, what="a targets file")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: (root): expected a mapping with a `targets` list")
    try:
        parsed = TargetsFile.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        err = next((e for e in errors if _is_secret_problem(e)), errors[0])  # a secret in the file first
        loc, problem = _problem(err)
        raise ConfigError(f"{path}: {_field(loc, data)}: {problem}") from None
    first: dict[str, int] = {}
    for i, t in enumerate(parsed.targets):
        if t.name in first:
            raise ConfigError(f"{path}: targets[{i}] ({t.name}).name: also the name of targets[{first[t.name]}]; names are unique")
        first[t.name] = i
    return LoadedTargets(file=parsed, path=path, checksum="sha256:" + hashlib.sha256(raw).hexdigest())
