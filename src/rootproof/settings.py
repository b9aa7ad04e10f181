"""Settings: one object from `ROOTPROOF_*` environment variables and an optional TOML file.

Read at entry points only (the CLI, the service factory, the evaluation runners); core code
receives values, never reads the environment itself.
"""

from __future__ import annotations

import ipaddress
import os
import tomllib
from pathlib import Path
from typing import Any, Literal

import platformdirs
from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, SettingsConfigDict

from rootproof import limits
from rootproof.errors import ConfigError

__all__ = ["Settings", "data_dir_variable", "default_data_dir", "load_settings"]

ENV_PREFIX = "ROOTPROOF_"


def default_data_dir() -> Path:
    """The user data folder (`~/.local/share/rootproof` on Linux) unless `ROOTPROOF_HOME` is set."""
    home = os.environ.get("ROOTPROOF_HOME")
    return Path(home) if home else Path(platformdirs.user_data_dir("rootproof", appauthor=False))


def data_dir_variable() -> str:
    """The variable that names the data folder, for messages: `ROOTPROOF_DATA_DIR` if set, else `ROOTPROOF_HOME`."""
    return ENV_PREFIX + ("DATA_DIR" if os.environ.get(ENV_PREFIX + "DATA_DIR") else "HOME")


IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def proxy_networks(value: str) -> tuple[IPNetwork, ...]:
    """`10.0.0.5,10.0.0.0/8,::1` as networks; a PydanticCustomError naming the bad entry."""
    found: list[IPNetwork] = []
    for i, item in enumerate(value.split(","), start=1):
        entry = item.strip()
        if not entry:
            continue
        try:
            found.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise PydanticCustomError(
                "ip_network",
                "entry {n} ({entry}) is not an IP address or network (expected e.g. 10.0.0.5 or 10.0.0.0/8, comma-separated)",
                {"n": i, "entry": entry[:64]},
            ) from None
    return tuple(found)


class Settings(BaseSettings):
    """Every knob of rootproof. Each field is also the variable `ROOTPROOF_<FIELD>`."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

    database_url: str | None = None
    """SQLAlchemy URL of the trace store. Default: a SQLite file `rootproof.db` in the data folder."""
    model: Literal["offline", "openai", "scripted"] = "offline"
    """Which model drives the agent: the offline planner (default) or an OpenAI-compatible server."""
    openai_base_url: str | None = None
    """Base URL of the OpenAI-compatible server (OpenAI, DeepSeek, vLLM, Ollama, llama.cpp). No
    default: `model = openai` without it is a configuration error, never a silent public API."""
    openai_api_key: SecretStr | None = None
    """API key for the OpenAI-compatible server; never stored or logged. Required for the
    `openai` and `deepseek` providers, optional for local servers."""
    openai_model: str = "gpt-4o-mini"
    """Model name sent to the OpenAI-compatible server."""
    openai_provider: Literal["openai", "deepseek", "vllm", "ollama", "llamacpp", "auto"] = "openai"
    """Which server quirks to apply (forced tool choice, null content, reasoning replay); `auto`
    measures them on the server once per process (the probe of `rootproof models check`)."""
    model_timeout_s: float = Field(default=60.0, gt=0)
    """Model request timeout, seconds: with streaming, the wait for the first token (a local
    server processes the whole prompt first); without, the whole answer."""
    model_token_timeout_s: float = Field(default=30.0, gt=0)
    """Streaming: the longest gap between two chunks of an answer once it has begun, seconds."""
    model_max_output_tokens: int | None = Field(default=None, ge=64, le=1_000_000)
    """Cap on each agent model answer, tokens (sent as the provider's `max_tokens`); default none.
    A small local model can loop inside a constrained draft until its context is full: ~3000."""
    prompt_token_budget: int = Field(default=6000, ge=1000, le=1_000_000)
    """Tokens (estimated) a model step's prompt may take: older observations are shortened to fit,
    newest kept whole. Small local models want 3000-6000; hosted models can take far more."""
    eval_case_timeout_s: float | None = Field(default=None, gt=0, le=7200)
    """`eval snapshot`: each scenario's run deadline, seconds (default: `DEADLINE_S`)."""
    model_max_retries: int = Field(default=3, ge=0, le=10)
    """Retries on 429/5xx/timeouts, with backoff, bounded by the run's deadline."""
    judge: Literal["offline", "llm"] = "offline"
    """Semantic judge: deterministic offline judge (default) or the configured model."""
    max_model_calls: int = Field(default=8, ge=1, le=100)
    """Agent model calls per run."""
    max_tool_calls: int = Field(default=16, ge=1, le=200)
    """Executed tool calls per run."""
    max_calls_per_tool: int = Field(default=4, ge=1, le=100)
    """Executed calls of one tool per run."""
    max_tokens: int = Field(default=60_000, ge=1000)
    """Tokens per run, all model calls counted (router, agent, judge)."""
    observation_bytes: int = Field(default=4096, ge=512, le=1_048_576)
    """Bytes of model observation per tool call."""
    deadline_s: float = Field(default=120.0, gt=0, le=3600)
    """Run deadline, seconds."""
    tool_timeout_s: float = Field(default=20.0, gt=0)
    """Per-call timeout of an evidence tool, seconds."""
    cards_dir: Path | None = None
    """A folder of extra knowledge cards (Markdown with front matter) used beside the built-in ones."""
    data_dir: Path = Field(default_factory=default_data_dir)
    """Where the default SQLite store and built indexes live."""
    kb_index_dir: Path | None = None
    """The knowledge-base index cache (a folder per card: its chunks' tokens and embeddings).
    Default: `kb-index/` in the data folder. Several data folders may share one (CI jobs,
    test sessions, replicas): entries are named by content and written atomically."""
    vocabulary: Path | None = None
    """A YAML file of analyzer findings and symptom mechanisms (the shape of the shipped
    `diagnosis/vocabulary.yaml`) whose entries replace the shipped ones, key by key: thresholds,
    what a finding supports, its weight. Default: none (the shipped vocabulary)."""
    targets: Path | None = None
    """A targets file (YAML or TOML): the live systems `diagnose` and `tool call` read when
    neither `--targets` nor `--scenario` is given. Default: none (no live backend)."""
    live_root: Path | None = None
    """Where `rootproof live` keeps its run folders (one `<run_id>/` each). Default: `live/` in the
    data folder. When rootproof runs as root, PostgreSQL runs as the `postgres` OS user, which
    must be able to reach this folder (a data folder under `/root` is not reachable: set a
    folder such as `/var/tmp/rootproof-live`)."""

    # The team service (`rootproof serve`, docs/service.md).
    api_keys: SecretStr | None = None
    """API keys and their roles, `key1:operator,key2:auditor` (roles: operator, auditor, admin);
    sent as `Authorization: Bearer KEY`. Never stored or logged."""
    api_keys_file: Path | None = None
    """A file of hashed API keys, one `sha256:<hex>:<role>` per line (`rootproof serve hash-key`
    prints one); read at start. Used with or instead of `api_keys`."""
    redis_url: str | None = None
    """Redis for replicas: the canonical store (with `canonical_ttl_s`) and cross-replica
    cancellation (pub/sub plus a persisted flag). Default: none (in-process)."""
    canonical_ttl_s: int = Field(default=86_400, ge=60, le=30 * 86_400)
    """How long the Redis canonical store keeps a run's invocations, seconds."""
    worker_concurrency: int = Field(default=4, ge=0, le=256)
    """Jobs (webhook runs) one replica runs at once; 0: this replica takes no jobs."""
    chat_concurrency: int = Field(default=32, ge=1, le=1024)
    """Chat runs one replica runs at once; more wait for a slot (their stream stays open)."""
    alert_dedup_window_s: int = Field(default=300, ge=0, le=86_400)
    """An Alertmanager `groupKey` posted again within this many seconds answers with the
    existing run (`duplicate: true`); 0 turns de-duplication off."""
    stalled_job_timeout_s: float = Field(default=30.0, ge=2, le=3600)
    """A job whose worker sent no heartbeat for this long is retried by another replica."""
    replica_timeout_s: float = Field(default=30.0, ge=1, le=3600)
    """A replica whose heartbeat is older than this is gone: every other replica's sweep closes
    the runs it was executing (FAILED, "worker lost"). Heartbeats and sweeps run every third of it."""
    webhook_max_attempts: int = Field(default=2, ge=1, le=10)
    """Runs one alert group gets when workers are lost mid-run (the first and its retries)."""
    notifications: Path | None = None
    """A YAML file of receivers notified when an alert run ends (docs/service.md "Notifications")."""
    public_url: str | None = Field(default=None, max_length=2000)
    """The service's address as people reach it (`https://rootproof.example.com`): the link in
    notifications. Default: none (no link)."""
    sse_heartbeat_s: float = Field(default=15.0, gt=0, le=300)
    """A comment line on an idle event stream every this many seconds."""
    service_header_timeout_s: float = Field(default=10.0, gt=0, le=300)
    """A request's headers must arrive whole within this many seconds of their first byte; else
    `408` and the connection is closed."""
    service_body_timeout_s: float = Field(default=30.0, gt=0, le=3600)
    """A request's body must arrive whole within this many seconds of its headers; else `408`
    and the connection is closed."""
    service_keepalive_s: int = Field(default=5, ge=1, le=300)
    """An idle connection (no byte of a next request, or of a first one) is closed after this
    many seconds."""
    service_max_connections: int = Field(default=1000, ge=1, le=100_000)
    """Open connections one server process serves at once; a request on any connection beyond
    them is answered `503` and its connection closed."""
    session_ttl_s: int = Field(default=28_800, ge=300, le=30 * 86_400)
    """How long a browser sign-in lasts, seconds (the session cookie's Max-Age and the stored
    session's expiry; not extended by use). Default 28800 (8 hours)."""
    trusted_proxies: str | None = None
    """Reverse proxies whose `X-Forwarded-Proto` and `X-Forwarded-For` the service believes,
    `10.0.0.5,10.0.0.0/8` (IP addresses or networks). Default: none (only a direct TLS
    connection makes the session cookie `Secure`; the peer is the client)."""
    login_failures_per_minute: int = Field(default=10, ge=0, le=10_000)
    """Failed browser sign-ins one client address may make per minute on one replica before
    `POST /login` answers 429; 0 turns the limit off."""

    # Input caps (rootproof.limits): a file or field above its cap is refused naming it and the
    # setting; the question and the alert a run keeps are shortened, saying so.
    max_scenario_file_bytes: int = Field(default=limits.SCENARIO_FILE_BYTES, ge=1024)
    """Largest scenario file (scenario.yaml, snapshot/tool_responses.yaml, ...), bytes. Default 134217728 (128 MiB)."""
    max_card_bytes: int = Field(default=limits.CARD_BYTES, ge=1024)
    """Largest knowledge card file, bytes. Default 1048576 (1 MiB)."""
    max_alert_bytes: int = Field(default=limits.ALERT_BYTES, ge=1024)
    """Largest alert payload (the file, or the data handed to a run), bytes. Default 33554432 (32 MiB)."""
    max_alerts: int = Field(default=limits.ALERTS, ge=1)
    """Most alerts in one payload. Default 20000."""
    max_alert_field_chars: int = Field(default=limits.ALERT_FIELD_CHARS, ge=64)
    """Longest text field of an alert (label or annotation key or value, title...), characters. Default 8192."""
    max_question_chars: int = Field(default=limits.QUESTION_CHARS, ge=200)
    """Longest question a run asks and keeps (longer ones are cut, saying so), characters. Default 8000."""
    max_stored_related_alerts: int = Field(default=limits.STORED_RELATED_ALERTS, ge=0)
    """Related alerts a run's record keeps (the rest are counted, not kept). Default 100."""

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        from urllib.parse import urlsplit

        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment or any(c in value for c in "<>|\" \t\n"):
            raise ValueError("expected the service's address as an http(s) URL without query or fragment, e.g. https://rootproof.example.com")
        return value.strip().rstrip("/")

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies(cls, value: str | None) -> str | None:
        if value is not None:
            proxy_networks(value)
        return value

    def trusted_proxy_networks(self) -> tuple[IPNetwork, ...]:
        """`trusted_proxies` parsed (empty when unset)."""
        return proxy_networks(self.trusted_proxies or "")

    def input_limits(self) -> limits.InputLimits:
        """The input caps in force."""
        return limits.InputLimits(
            scenario_file_bytes=self.max_scenario_file_bytes,
            card_bytes=self.max_card_bytes,
            alert_bytes=self.max_alert_bytes,
            alerts=self.max_alerts,
            alert_field_chars=self.max_alert_field_chars,
            question_chars=self.max_question_chars,
            stored_related_alerts=self.max_stored_related_alerts,
        )

    def resolved_database_url(self) -> str:
        """The trace store URL, defaulting to a SQLite file in the data folder."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'rootproof.db'}"

    def resolved_kb_index_dir(self) -> Path:
        """The knowledge-base index cache folder: `kb_index_dir`, else `<data_dir>/kb-index`."""
        return self.kb_index_dir if self.kb_index_dir is not None else self.data_dir / "kb-index"

    def resolved_live_root(self) -> Path:
        """The folder of the live environment's run folders: `live_root`, else `<data_dir>/live`."""
        return self.live_root if self.live_root is not None else self.data_dir / "live"

    def public_dict(self) -> dict[str, Any]:
        """Settings as a dict without secrets (for evaluation records)."""
        data = self.model_dump(mode="json")
        data.pop("openai_api_key", None)
        data.pop("api_keys", None)
        for key in ("redis_url",):
            value = data.get(key)
            if value and "@" in value:
                scheme, _, rest = value.partition("://")
                data[key] = f"{scheme}://***@{rest.split('@', 1)[1]}"
        url = data.get("database_url")
        if url and "@" in url:
            scheme, _, rest = url.partition("://")
            data["database_url"] = f"{scheme}://***@{rest.split('@', 1)[1]}"
        return data


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Build the settings from the environment, an optional TOML file and explicit overrides.

    Precedence: overrides > environment > file > defaults. A bad value raises `ConfigError`
    naming the variable (or the file key) and what is expected.
    """
    file_values: dict[str, Any] = {}
    path = config_file or (Path(os.environ[ENV_PREFIX + "CONFIG"]) if os.environ.get(ENV_PREFIX + "CONFIG") else None)
    if path is not None:
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise ConfigError(f"{path}: settings file not found (ROOTPROOF_CONFIG)") from exc
        except IsADirectoryError as exc:
            raise ConfigError(f"ROOTPROOF_CONFIG: {path} is a folder; expected a TOML settings file") from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(f"ROOTPROOF_CONFIG: {path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
        except OSError as exc:
            raise ConfigError(f"ROOTPROOF_CONFIG: cannot read {path}: {exc.strerror or exc}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
        table = raw.get("rootproof", raw)
        if not isinstance(table, dict):
            raise ConfigError(f"{path} key rootproof: expected a table of settings ([rootproof]), got {type(table).__name__}")
        file_values = dict(table)
    env_keys = {k[len(ENV_PREFIX):].lower() for k in os.environ if k.startswith(ENV_PREFIX)}
    init = {k: v for k, v in file_values.items() if k not in env_keys}
    init.update(overrides)
    known_env = set(Settings.model_fields) | {"config", "home", "require_services", "test_pg_url", "test_mysql_url", "test_shared_data", "test_llm_url", "serve_no_auth"}
    unknown = sorted(k for k in env_keys if k not in known_env)
    if unknown:
        raise ConfigError(f"{ENV_PREFIX}{unknown[0].upper()}: unknown setting")
    try:
        settings = Settings(**init)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = str(err["loc"][0]) if err["loc"] else "?"
        source = _source(field, path, init, overrides)
        raise ConfigError(f"{source}: {err['msg']} (got {err.get('input')!r})") from exc
    _check_folders(settings, path, init, overrides)
    if settings.vocabulary is not None:
        from rootproof.diagnosis.findings import VocabularyError, use_vocabulary

        try:
            use_vocabulary(settings.vocabulary)
        except VocabularyError as exc:
            raise ConfigError(f"{_source('vocabulary', path, init, overrides)}: {exc}") from None
    return settings


def _source(field: str, path: Path | None, init: dict[str, Any], overrides: dict[str, Any]) -> str:
    """Where a field's value came from, as the user would name it."""
    if field in init and field not in overrides:
        return f"{path} key {field}"
    if field == "data_dir":
        return data_dir_variable()
    return f"{ENV_PREFIX}{field.upper()}"


def _check_folders(settings: Settings, path: Path | None, init: dict[str, Any], overrides: dict[str, Any]) -> None:
    """A folder setting that names something else (a file) is a configuration error, named."""
    for field in ("data_dir", "cards_dir", "live_root", "kb_index_dir"):
        folder = getattr(settings, field)
        if folder is not None and folder.exists() and not folder.is_dir():
            raise ConfigError(f"{_source(field, path, init, overrides)}: {folder} is not a folder")
