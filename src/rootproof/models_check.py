"""`rootproof models check`: which quirks does the configured model server have, and can a run work?

Probes the server the `ROOTPROOF_OPENAI_*` settings name (whatever `ROOTPROOF_MODEL` says) with
`rootproof.agent.models.probe.probe_server` and prints one line per check as it ends, the quirks
that apply and the verdict; with `--json`, exactly one JSON document at the end. Exit 0 when a
full run can work; 1 with one `Error:` line on stderr when the server is unreachable or cannot
run rootproof; an unset or invalid `ROOTPROOF_OPENAI_BASE_URL` raises ConfigError (exit 2).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import fields
from typing import TextIO

from rootproof.agent.models.openai_compat import QUIRKS, Quirks, _redact_url
from rootproof.agent.models.probe import ProbeCheck, ProbeReport, probe_server
from rootproof.errors import ConfigError
from rootproof.settings import Settings
from rootproof.terminal import json_text_safe, terminal_safe

__all__ = ["BASE_URL_VARIABLE", "check_command", "probe_settings"]

BASE_URL_VARIABLE = "ROOTPROOF_OPENAI_BASE_URL"
"""The variable that names the server."""


def probe_settings(settings: Settings, *, progress: Callable[[ProbeCheck], None] | None = None) -> ProbeReport:
    """Probe the server of `settings` (its base URL, key, model and `model_timeout_s`).

    Raises:
        ConfigError: The base URL is unset or not an http(s) URL; the message names the variable.
    """
    if not settings.openai_base_url:
        raise ConfigError(
            f"{BASE_URL_VARIABLE}: not set; `models check` probes the server it names "
            "(e.g. http://127.0.0.1:8080/v1 or https://api.deepseek.com/v1)"
        )
    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
    try:
        return probe_server(
            settings.openai_base_url,
            key,
            settings.openai_model,
            timeout_s=settings.model_timeout_s,
            progress=progress,
        )
    except ConfigError as exc:
        raise ConfigError(f"{BASE_URL_VARIABLE}: {exc}") from None


def _line(check: ProbeCheck) -> str:
    return terminal_safe(f"{check.name:<17} {check.status:<12} {check.detail} ({check.elapsed_s:.1f} s)")


def _configured_note(settings: Settings, report: ProbeReport) -> str | None:
    """How the configured provider's quirks table differs from what was measured."""
    provider = settings.openai_provider
    if provider == "auto" or provider not in QUIRKS:
        return None
    table = QUIRKS[provider]
    differ = [name for name in report.measured if getattr(table, name) != getattr(report.quirks, name)]
    if not differ:
        return f"ROOTPROOF_OPENAI_PROVIDER={provider}: its quirks agree with every measured one"
    return (
        f"ROOTPROOF_OPENAI_PROVIDER={provider}: its quirks differ from the measured ones in {', '.join(differ)} "
        "(ROOTPROOF_OPENAI_PROVIDER=auto applies what was measured)"
    )


def check_command(settings: Settings, *, as_json: bool, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """The body of `rootproof models check [--json]`; returns the exit code (0 can run, 1 not)."""
    stdout = out or sys.stdout
    stderr = err or sys.stderr

    started: list[bool] = []

    def progress(check: ProbeCheck) -> None:
        if as_json:
            return
        if not started:  # the URL is valid once a check ran
            started.append(True)
            shown = _redact_url(settings.openai_base_url or "")
            print(terminal_safe(f"probing model {settings.openai_model!r} at {shown}"), file=stdout)
        print(_line(check), file=stdout, flush=True)

    report = probe_settings(settings, progress=progress)
    note = _configured_note(settings, report) if report.reachable else None
    if as_json:
        doc = report.as_dict() | {"configured_provider": settings.openai_provider, "note": note}
        stdout.write(json_text_safe(json.dumps(doc, ensure_ascii=False, indent=2)) + "\n")
    else:
        active = report.quirks.active()
        print(f"provider guess: {report.provider_guess}; quirks measured: {len(report.measured)} of {len(fields(Quirks))}", file=stdout)
        print(terminal_safe("quirks: " + (", ".join(_quirk(report, q) for q in active) if active else "none (plain OpenAI)")), file=stdout)
        if note:
            print(terminal_safe(note), file=stdout)
        verdict = "a full run can work" if report.can_run else "a run cannot work"
        print(terminal_safe(f"verdict: {verdict}: {report.reason} ({report.elapsed_s:.1f} s)"), file=stdout)
    stdout.flush()
    if report.can_run:
        return 0
    what = "unreachable" if not report.reachable else "cannot run rootproof"
    print(terminal_safe(f"Error: {report.base_url}: {what}: {report.reason}"), file=stderr)
    return 1


def _quirk(report: ProbeReport, name: str) -> str:
    value = getattr(report.quirks, name)
    shown = name if value is True else f"{name}={value}"
    return shown if name in report.measured else f"{shown} (not measured: the {report.provider_guess} default)"

