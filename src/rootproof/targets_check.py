"""`rootproof targets check FILE`: is every target of a targets file usable by a live run?

`check_targets` builds each target's live backend on its own (one target cannot hide another's
result), calls its `check()` and closes it, several targets at a time, each under a watchdog. A
target whose backend cannot be built (a driver module missing, an unset `password_env`) or whose
check fails or hangs is a `TargetCheck` with `usable` false and the reason; nothing a target
does makes it raise. Every text a check returns is redacted (and the target's own password, if
it resolves, masked) before it is shown.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rootproof.backends.live import SYSTEM_OF_KIND, open_live_backends
from rootproof.boundary.redaction import MASK, redact
from rootproof.errors import ConfigError
from rootproof.targets import (
    LoadedTargets,
    LokiTarget,
    PostgresTarget,
    PrometheusTarget,
    RedisTarget,
    Target,
    TargetCheck,
    TargetsFile,
    load_targets,
    secret_of,
)
from rootproof.terminal import json_text_safe, terminal_safe

__all__ = ["BackendsFactory", "CHECK_SLACK_S", "CONCURRENT_CHECKS", "check_command", "check_targets", "check_timeout"]

BackendsFactory = Callable[[TargetsFile, Mapping[str, str]], Sequence[tuple[str, Any]]]
"""What builds backends from a targets file (`open_live_backends`, or a test's own)."""

CHECK_SLACK_S = 5.0
"""Seconds a check may take beyond three of its target's `timeout_s` before it counts as hung."""
CONCURRENT_CHECKS = 8
"""Targets checked at the same time (each on its own connection)."""


def check_timeout(target: Target) -> float:
    """How long `targets check` waits for one target (building its backend and its check):
    3 × timeout_s + CHECK_SLACK_S."""
    return 3 * target.timeout_s + CHECK_SLACK_S


def _scrub(text: str, secret: str | None) -> str:
    """Text fit to show: the target's password (when known) and anything secret-like masked."""
    if secret and len(secret) >= 3:  # masking one or two characters everywhere would garble the text
        text = text.replace(secret, MASK)
    return redact(text)


def _secret(target: Target, environ: Mapping[str, str]) -> str | None:
    if not isinstance(target, PostgresTarget | RedisTarget | LokiTarget | PrometheusTarget):
        return None
    try:
        return secret_of(target, environ)
    except ConfigError:
        return None


def _not_usable(target: Target, problem: str, warnings: Sequence[str] = ()) -> TargetCheck:
    return TargetCheck(name=target.name, kind=target.kind, usable=False, problem=problem, warnings=list(warnings))


def _build_problem(target: Target, exc: Exception) -> str:
    system = SYSTEM_OF_KIND.get(target.kind, target.kind)
    if isinstance(exc, ImportError):
        return f"the {system} backend cannot be loaded ({exc})"
    if isinstance(exc, ConfigError):
        return str(exc).removeprefix(f"targets: {target.name}: ")
    return f"the {system} backend cannot be set up ({type(exc).__name__}: {exc})"


def _merge(target: Target, checks: Sequence[TargetCheck], notes: Sequence[str]) -> TargetCheck:
    """One target's result from its backends' checks (one, unless a factory built several)."""
    problems = [c.problem or "not usable" for c in checks if not c.usable]
    warnings = [w for c in checks for w in c.warnings] + list(notes)
    return TargetCheck(
        name=target.name,
        kind=target.kind,
        usable=not problems,
        problem="; ".join(problems) or None,
        warnings=warnings,
    )


def _check_one(target: Target, environ: Mapping[str, str], factory: BackendsFactory) -> TargetCheck:
    """Build the target's backend(s), check and close them; any failure is the result's problem."""
    try:
        backends = list(factory(TargetsFile(targets=[target]), environ))
    except Exception as exc:  # noqa: BLE001 - one target's problem is its TargetCheck
        return _not_usable(target, _build_problem(target, exc))
    if not backends:
        return _not_usable(target, f"no live backend serves kind {target.kind}")
    checks: list[TargetCheck] = []
    notes: list[str] = []
    for _, backend in backends:
        try:
            got = backend.check() if hasattr(backend, "check") else None
        except Exception as exc:  # noqa: BLE001 - a check must never take the command down
            got = _not_usable(target, f"the check failed ({type(exc).__name__}: {exc})")
        if not isinstance(got, TargetCheck):
            got = _not_usable(target, "its backend has no check" if got is None else f"the check returned {type(got).__name__}")
        checks.append(got)
        try:
            backend.close()
        except Exception as exc:  # noqa: BLE001 - noted; the check's result stands
            notes.append(f"closing the backend failed ({type(exc).__name__}: {exc})")
    return _merge(target, checks, notes)


def _watched(
    targets: Sequence[Target],
    environ: Mapping[str, str],
    factory: BackendsFactory,
    progress: Callable[[Target], None] | None,
) -> list[TargetCheck]:
    """`_check_one` of each target in a daemon thread, CONCURRENT_CHECKS at a time; a target whose
    thread outlasts check_timeout is NOT USABLE (its thread keeps its backend and closes it if the
    check ever returns: nothing is closed under a running check)."""
    results: dict[int, TargetCheck] = {}

    def work(i: int, target: Target) -> None:
        results[i] = _check_one(target, environ, factory)

    out: list[TargetCheck] = []
    for first in range(0, len(targets), CONCURRENT_CHECKS):
        wave = list(enumerate(targets))[first : first + CONCURRENT_CHECKS]
        if progress is not None:
            for _, target in wave:
                progress(target)
        started = time.monotonic()
        threads = [threading.Thread(target=work, args=(i, t), name=f"targets-check-{t.name}", daemon=True) for i, t in wave]
        for thread in threads:
            thread.start()
        for (i, target), thread in zip(wave, threads, strict=True):
            limit = check_timeout(target)
            thread.join(max(0.0, started + limit - time.monotonic()))
            done = results.get(i)
            out.append(done if done is not None else _not_usable(target, f"the check did not finish within {limit:g} s"))
    return out


def check_targets(
    loaded: LoadedTargets,
    environ: Mapping[str, str],
    *,
    backends_factory: BackendsFactory = open_live_backends,
    progress: Callable[[Target], None] | None = None,
) -> list[TargetCheck]:
    """One TargetCheck per target, in file order; never raises for a target's problem.

    Each target's backend is built alone (`backends_factory` over a one-target file), checked and
    closed, CONCURRENT_CHECKS targets at a time, each within check_timeout. `progress` is told of
    each target before its check starts (all of a batch at once).
    """
    targets = list(loaded.file.targets)
    out: list[TargetCheck] = []
    for target, check in zip(targets, _watched(targets, environ, backends_factory, progress), strict=True):
        secret = _secret(target, environ)
        out.append(
            check.model_copy(
                update={
                    "problem": None if check.problem is None else _scrub(check.problem, secret),
                    "warnings": [_scrub(w, secret) for w in check.warnings],
                }
            )
        )
    return out


def check_command(
    path: Path,
    *,
    as_json: bool,
    environ: Mapping[str, str],
    backends_factory: BackendsFactory | None = None,
) -> int:
    """The body of `rootproof targets check FILE [--json]`; returns the exit code (0 all usable, 1 not).

    A malformed file raises ConfigError (the CLI prints `Error: …` and exits 2). Progress goes to
    stderr; stdout gets one line per target (or, with `as_json`, exactly one JSON document).
    """
    loaded = load_targets(path)

    def progress(t: Target) -> None:
        print(terminal_safe(f"checking {t.name} ({t.kind}) …"), file=sys.stderr, flush=True)

    checks = check_targets(loaded, environ, backends_factory=backends_factory or open_live_backends, progress=progress)
    bad = [c.name for c in checks if not c.usable]
    if as_json:
        doc = {
            "file": str(path),
            "checksum": loaded.checksum,
            "targets": [c.model_dump(mode="json") for c in checks],
            "usable": not bad,
        }
        sys.stdout.write(json_text_safe(json.dumps(doc, ensure_ascii=False, indent=2)) + "\n")
    else:
        for c in checks:
            state = "usable" if c.usable else f"NOT USABLE: {c.problem or 'not usable'}"
            print(terminal_safe(f"{c.name} ({c.kind}): {state}"))
            for w in c.warnings:
                print(terminal_safe(f"  warning: {w}"))
    sys.stdout.flush()
    if bad:
        print(terminal_safe(f"Error: {path}: {len(bad)} of {len(checks)} targets not usable: {', '.join(bad)}"), file=sys.stderr)
        return 1
    print(terminal_safe(f"{path}: all {len(checks)} targets usable"), file=sys.stderr)
    return 0
