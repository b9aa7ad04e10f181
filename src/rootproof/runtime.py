"""Runtime: every long-lived part of one process (CLI command, service, test), closed together.

A `Runtime` owns the trace store (opened on first use; read-only for commands that only read
when its file is not writable), the knowledge base (loaded once, under a lock), the canonical
store (in-process, or in Redis when `redis_url` is set: built on first use), the circuit
breakers (keyed per backend and target), the tool thread pool, the model clients (one per model
name, reused by every run), the live backends (built once per targets file checksum) and the
OpenTelemetry tracing (off unless the `OTEL_*` variables of its `environ` turn it on;
docs/observability.md). `close()` closes them all, once; the runtime is a context manager:

    with Runtime.from_settings(load_settings(), environ=os.environ) as runtime:
        Harness(runtime).diagnose(...)

Tests build one from fakes: `Runtime.from_settings(settings, sink=MemoryTraceSink(), ...)`.
Nothing here is a module-level singleton.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from rootproof.backends.registry import ALL_SYSTEMS, BackendRegistry
from rootproof.boundary.boundary import CircuitBreaker
from rootproof.boundary.store import CanonicalStore, InMemoryCanonicalStore
from rootproof.errors import ConfigError, UsageError
from rootproof.observability.otel import Telemetry
from rootproof.run.records import TraceReader, TraceSink
from rootproof.settings import Settings, data_dir_variable
from rootproof.taxonomy import Taxonomy
from rootproof.tools.base import BackendResult, ToolBackend

if TYPE_CHECKING:
    from pydantic import BaseModel

    from rootproof.agent.models.base import Model
    from rootproof.agent.models.openai_compat import Quirks
    from rootproof.kb import KnowledgeBase
    from rootproof.kb.cards import Card
    from rootproof.scenarios.types import Scenario
    from rootproof.targets import LoadedTargets, TargetsFile

__all__ = ["LiveFactory", "Runtime"]

LiveFactory = Callable[["TargetsFile", Mapping[str, str]], Sequence[tuple[str, ToolBackend]]]
"""Builds the live backends of a targets file: `[(mount key, backend)]` (`open_live_backends`)."""

_KEYED_PROVIDERS = frozenset({"openai", "deepseek"})
"""Providers whose servers always need an API key (local servers need none)."""
TOOL_POOL_WORKERS = 32
"""Threads of the tool pool: backend calls of every run of the runtime."""


def _open_live_backends(targets: TargetsFile, environ: Mapping[str, str]) -> Sequence[tuple[str, ToolBackend]]:
    from rootproof.backends.live import open_live_backends

    return open_live_backends(targets, environ)


class Runtime:
    """The long-lived parts of a process; `close()` releases them all (idempotent)."""

    def __init__(
        self,
        settings: Settings,
        *,
        sink: TraceSink | None = None,
        canonical: CanonicalStore | None = None,
        knowledge: KnowledgeBase | None = None,
        breakers: CircuitBreaker | None = None,
        environ: Mapping[str, str] | None = None,
        live_factory: LiveFactory | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        """Parts given here are used as they are (and closed with the runtime); the others are
        built on first use. `environ` is where live backends resolve secret references and where
        the `OTEL_*` variables are read (the entry point passes `os.environ`; default: none);
        `live_factory` builds live backends (default `rootproof.backends.live.open_live_backends`);
        `telemetry` traces the runs (default: `Telemetry.from_environ(environ)`, off unless
        `OTEL_TRACES_EXPORTER` turns it on; a bad `OTEL_*` value raises ConfigError here)."""
        self.settings = settings
        if canonical is None and settings.redis_url:
            _check_redis_url(settings.redis_url)  # a bad URL is a configuration error now, not at a run's first call
        self._canonical = canonical
        self.breakers = breakers or CircuitBreaker()
        self._sink = sink
        self._kb = knowledge
        self._environ: Mapping[str, str] = dict(environ or {})
        self._live_factory = live_factory or _open_live_backends
        self.telemetry = telemetry if telemetry is not None else Telemetry.from_environ(self._environ)
        self._lock = threading.RLock()
        self._kb_lock = threading.Lock()
        self._taxonomy: Taxonomy | None = None
        self._cards: Mapping[str, Card] | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._models: dict[str, Model] = {}
        self._live: dict[str, BackendRegistry] = {}
        self._closed = False

    @classmethod
    def from_settings(cls, settings: Settings, **parts: Any) -> Runtime:
        """A runtime for `settings`; `parts` as the constructor takes them (sink, canonical,
        knowledge, breakers, environ, live_factory, telemetry)."""
        return cls(settings, **parts)

    # -- lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """True once `close()` ran."""
        return self._closed

    def close(self) -> None:
        """Shut the tool pool down, close the live backends, the model clients, the trace store
        and the canonical store (a Redis client), flush the tracing; idempotent. Every part is
        closed even when one fails; the first error is raised."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pool, self._pool = self._pool, None
            live, self._live = list(self._live.values()), {}
            models, self._models = list(self._models.values()), {}
            sink = self._sink
            canonical = self._canonical
        closers: list[Callable[[], object]] = []
        if pool is not None:
            closers.append(lambda: pool.shutdown(wait=False, cancel_futures=True))
        closers += [r.close for r in live]
        closers += [m.close for m in models if callable(getattr(m, "close", None))]  # type: ignore[attr-defined]
        if callable(getattr(sink, "close", None)):
            closers.append(sink.close)  # type: ignore[union-attr]
        if callable(getattr(canonical, "close", None)):
            closers.append(canonical.close)  # type: ignore[union-attr]
        closers.append(self.telemetry.close)  # last: flushes the spans of every run
        errors: list[BaseException] = []
        for close in closers:
            try:
                close()
            except Exception as exc:  # noqa: BLE001 - every part gets closed
                errors.append(exc)
        if errors:
            raise errors[0]

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the runtime is closed")

    # -- stores ---------------------------------------------------------------------------
    @property
    def canonical(self) -> CanonicalStore:
        """The canonical store: the one given, else the Redis store of `redis_url` (with
        `canonical_ttl_s`; built on first use, it connects on its first call), else in-process."""
        with self._lock:
            if self._canonical is None:
                url = self.settings.redis_url
                if url:
                    self._check_open()
                    self._canonical = _redis_store(url, self.settings.canonical_ttl_s)
                else:
                    self._canonical = InMemoryCanonicalStore()
            return self._canonical

    @property
    def sink(self) -> TraceSink:
        """The trace store (SQL by default; opened on first use)."""
        with self._lock:
            self._check_open()
            if self._sink is None:
                from rootproof.store import SqlTraceStore

                self._make_data_dir()
                self._sink = SqlTraceStore(self.settings.resolved_database_url())
            return self._sink

    def reader(self) -> TraceReader:
        """The trace store for commands that only read: opened read-only when its SQLite file or
        that file's folder is not writable (a read-only data folder or mount); else `sink`."""
        with self._lock:
            if self._sink is None:
                from rootproof.store.sql import needs_read_only

                url = self.settings.resolved_database_url()
                if needs_read_only(url):
                    from rootproof.store import SqlTraceStore

                    self._sink = SqlTraceStore(url, read_only=True)
        sink = self.sink
        if not isinstance(sink, TraceReader):
            raise UsageError(f"the trace store {type(sink).__name__} cannot be read back")
        return sink

    def _make_data_dir(self) -> None:
        folder = self.settings.data_dir
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"{data_dir_variable()}: cannot create the data folder {folder}: {exc.strerror or exc}") from exc

    # -- knowledge ------------------------------------------------------------------------
    @property
    def knowledge(self) -> KnowledgeBase:
        """The knowledge base (built-in cards plus `cards_dir`), loaded once."""
        with self._kb_lock:
            if self._kb is None:
                from rootproof.kb import KnowledgeBase

                extra = [self.settings.cards_dir] if self.settings.cards_dir else []
                self._kb = KnowledgeBase.load(
                    extra, cache_dir=self.settings.resolved_kb_index_dir(), max_card_bytes=self.settings.max_card_bytes
                )
            return self._kb

    def loaded_knowledge(self) -> KnowledgeBase | None:
        """The knowledge base if it is loaded, else None (never loads it)."""
        with self._kb_lock:
            return self._kb

    def taxonomy(self) -> Taxonomy:
        """The built-in taxonomy plus the namespaced labels of the loaded cards (docs/taxonomy.md).

        Read from the knowledge base when it is loaded, else from the cards alone (no index).
        """
        if self._taxonomy is None:
            from rootproof.kb.cards import card_taxonomy, taxonomy_for

            kb = self.loaded_knowledge()
            self._taxonomy = card_taxonomy(kb.cards.values()) if kb is not None else taxonomy_for(self.settings.cards_dir)
        return self._taxonomy

    def cards(self) -> Mapping[str, Card]:
        """The card catalogue the EvidenceGuard reads (ROOT_CAUSE_NOT_DISCRIMINATED), for every run.

        The knowledge base's cards when it is loaded; else the cards alone, parsed once (no
        index), so a model that never looks knowledge up still meets the discrimination rule.
        """
        with self._kb_lock:
            if self._kb is not None:
                return self._kb.cards
            if self._cards is None:
                from rootproof.kb.cards import load_cards

                extra = [self.settings.cards_dir] if self.settings.cards_dir else []
                self._cards = load_cards(extra, max_bytes=self.settings.max_card_bytes)
            return self._cards

    # -- tools ----------------------------------------------------------------------------
    @property
    def pool(self) -> ThreadPoolExecutor:
        """The tool thread pool every backend call of every run executes on."""
        with self._lock:
            self._check_open()
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=TOOL_POOL_WORKERS, thread_name_prefix="backend")
            return self._pool

    def live_backends(self, targets: LoadedTargets) -> BackendRegistry:
        """The live backends of a targets file, built on first use per checksum and reused by
        every run of the runtime (closed with it)."""
        with self._lock:
            self._check_open()
            registry = self._live.get(targets.checksum)
            if registry is None:
                registry = self._live[targets.checksum] = BackendRegistry(self._live_factory(targets.file, self._environ))
            return registry

    def backends(self, scenario: Scenario | None = None, targets: LoadedTargets | None = None) -> BackendRegistry:
        """A run's backends: the knowledge base at `knowledge` (per run: it de-duplicates cards
        per run), a scenario's snapshot at `*`, a targets file's live backends at their keys."""
        registry = BackendRegistry({"knowledge": _LazyKnowledge(self)})
        if scenario is not None:
            from rootproof.backends.snapshot import SnapshotBackend

            registry.mount(ALL_SYSTEMS, SnapshotBackend(scenario))
        if targets is not None:
            for key, backend in self.live_backends(targets).mounts().items():
                registry.mount(key, backend)
        return registry

    # -- models ---------------------------------------------------------------------------
    def model(self, name: str | None = None) -> Model:
        """The agent model by name (`offline`, `openai`; default: the settings'), built once per
        runtime and reused by every run."""
        choice = name or self.settings.model
        with self._lock:
            self._check_open()
            model = self._models.get(choice)
        if model is not None:
            return model
        # Built outside the lock: with `auto` the probe of the server can take minutes on a slow
        # local server, and the store, the pool and the other runs must not wait for it.
        built = self._build_model(choice)
        with self._lock:
            model = self._models.setdefault(choice, built) if not self._closed else built
            closed = self._closed
        if model is not built or closed:
            close = getattr(built, "close", None)
            if callable(close):
                close()
            if closed:
                self._check_open()
        return model

    def _build_model(self, choice: str) -> Model:
        if choice == "offline":
            from rootproof.agent.models.offline import OfflinePlanner

            return OfflinePlanner(self.knowledge)
        if choice == "openai":
            from rootproof.agent.models.openai_compat import OpenAICompatModel

            s = self.settings
            if not s.openai_base_url:
                # Never a silent default: a public API must be chosen, not fallen into.
                raise ConfigError(
                    "ROOTPROOF_OPENAI_BASE_URL: not set; the openai model needs its server's URL "
                    "(e.g. https://api.openai.com/v1, https://api.deepseek.com/v1 or http://127.0.0.1:8080/v1)"
                )
            key = s.openai_api_key.get_secret_value() if s.openai_api_key else None
            if not key and s.openai_provider in _KEYED_PROVIDERS:
                raise ConfigError(f"ROOTPROOF_OPENAI_API_KEY: not set; the {s.openai_provider} provider needs an API key")
            if s.openai_provider == "auto":
                return OpenAICompatModel(
                    base_url=s.openai_base_url,
                    api_key=key,
                    model=s.openai_model,
                    provider="auto",
                    quirks=self._probed_quirks(s.openai_base_url, key),
                    timeout_s=s.model_timeout_s,
                    token_timeout_s=s.model_token_timeout_s,
                    max_retries=s.model_max_retries,
                )
            return OpenAICompatModel(
                base_url=s.openai_base_url,
                api_key=key,
                model=s.openai_model,
                provider=s.openai_provider,
                timeout_s=s.model_timeout_s,
                token_timeout_s=s.model_token_timeout_s,
                max_retries=s.model_max_retries,
            )
        raise ConfigError(f"ROOTPROOF_MODEL: unknown model {choice!r} (expected offline or openai)")

    def _probed_quirks(self, base_url: str, key: str | None) -> Quirks:
        """`ROOTPROOF_OPENAI_PROVIDER=auto`: the quirks the probe of `rootproof models check`
        measures on the server (once per runtime: the model built with them is reused)."""
        from rootproof.agent.models.probe import probe_server

        s = self.settings
        try:
            report = probe_server(base_url, key, s.openai_model, timeout_s=s.model_timeout_s)
        except ConfigError as exc:
            raise ConfigError(f"ROOTPROOF_OPENAI_BASE_URL: {exc}") from None
        if not report.reachable:
            raise ConfigError(
                f"ROOTPROOF_OPENAI_BASE_URL: the server at {report.base_url} is unreachable ({report.reason}); "
                "ROOTPROOF_OPENAI_PROVIDER=auto probes it before the first run (`rootproof models check` shows each check)"
            )
        if not report.can_run:
            raise ConfigError(
                f"ROOTPROOF_OPENAI_BASE_URL: the server at {report.base_url} cannot run rootproof: {report.reason} "
                "(`rootproof models check` shows each check)"
            )
        return report.quirks


def _check_redis_url(url: str) -> None:
    """`ConfigError` naming `ROOTPROOF_REDIS_URL` for a URL redis-py cannot read (never quoting it:
    it may hold the password)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a port that is not a number in range raises here
    except ValueError as exc:
        raise ConfigError(f"ROOTPROOF_REDIS_URL: not a Redis URL ({exc})") from None
    if parts.scheme not in ("redis", "rediss", "unix"):
        got = f"{parts.scheme}://" if parts.scheme else "none"
        raise ConfigError(f"ROOTPROOF_REDIS_URL: not a Redis URL: expected the scheme redis://, rediss:// or unix:// (got {got})")


def _redis_store(url: str, ttl_s: int) -> CanonicalStore:
    try:
        from rootproof.boundary.redis_store import RedisCanonicalStore
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "redis":
            raise
        raise ConfigError(
            "ROOTPROOF_REDIS_URL: the Redis canonical store needs redis-py, which is not installed "
            "(pip install 'rootproof[redis]')"
        ) from None
    return RedisCanonicalStore(url, ttl_s=ttl_s)


class _LazyKnowledge:
    """Loads the knowledge base on the first `lookup_knowledge` call only."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._backend: ToolBackend | None = None

    def close(self) -> None:
        """Nothing to release: the knowledge base belongs to the runtime."""

    def call(self, tool: str, args: BaseModel, *, now: datetime, run_id: str) -> BackendResult:
        if self._backend is None:
            from rootproof.kb.backend import KnowledgeBackend

            self._backend = KnowledgeBackend(self._runtime.knowledge)
        return self._backend.call(tool, args, now=now, run_id=run_id)
