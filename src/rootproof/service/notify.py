"""Notifications: tell the people on call how an alert's diagnosis run ended.

The service calls three things; it owns the retry loop, the queue and the bookkeeping:

* `load_receivers(path, environ)` reads the notifications file (`ROOTPROOF_NOTIFICATIONS` names
  it) into `Receiver`s, or raises `ConfigError` with one line that starts
  `ROOTPROOF_NOTIFICATIONS: <path>: ` and names the field at fault.
* `build_notification(run, receiver=..., public_url=...)` turns a finished `RunRecord` into a
  bounded `Notification`; `render(receiver, note)` turns that into the request body and headers
  for the receiver's kind. Both are pure and deterministic (same run and receiver, same bytes).
* `deliver(receiver, note)` makes one POST and reports a `Delivery` (ok, status, retryable,
  detail); it never raises for network errors.

The notifications file (YAML, at most 64 KiB, 1 to 50 receivers)::

    receivers:
      - name: oncall-hook        # ^[a-z0-9][a-z0-9_-]{0,63}$, unique in the file
        kind: webhook            # webhook | slack
        url_env: ONCALL_HOOK_URL # an environment variable holding the URL ...
        timeout_s: 10            # optional, 0.5 to 60 seconds, default 10
      - name: team-slack
        kind: slack              # a Slack incoming-webhook URL
        url_file: slack.url      # ... or a file holding it (one line; relative to this file's folder)

Each receiver gives exactly one of `url_env` and `url_file`; the URL must be http or https with a
host; whitespace around it is stripped. The URL is a credential (a Slack webhook URL holds its
token): it is never in an error message, a `repr`, a log line (the `httpx` logger's request line
included) or a `Delivery`.

What a notification carries: only what a user of the run was shown. The run's status, release
outcome and fallback type, its released `content` (the DIAGNOSIS_REPORT or SAFE_FALLBACK document,
bounded), the alert's name, status, severity, service, summary and labels, and a link to the run's
page. Never the reasoning, a withheld draft, the guards' verdicts (`self_evaluation`),
`prompt_audit`, `conclusion` or the run's `error`. Every text taken from the run is bounded
(`FIELD_CHARS` per field, `BODY_BYTES` per body): evidence is untrusted and can be huge.

Generic webhook (`kind: webhook`): `POST` with `Content-Type: application/json`,
`Idempotency-Key: <key>`, `User-Agent: rootproof-notify/1` and a JSON object (keys sorted,
UTF-8, at most 40 KiB: the content is clipped further, then left out, before the texts are)::

    {
      "version": "1",
      "idempotency_key": "<sha256 hex of run_id, NUL, receiver name>",
      "run_id": "...", "session_id": "...", "receiver": "oncall-hook",
      "status": "SUCCESS",                  # SUCCESS | CANCELLED | TIMED_OUT | FAILED
      "release_outcome": "PUBLISHED",       # PUBLISHED | FALLBACK | NONE
      "fallback_type": null,                # e.g. "EVIDENCE_VALIDATION_FAILED" when FALLBACK
      "content_type": "DIAGNOSIS_REPORT",   # or SAFE_FALLBACK, KNOWLEDGE_ANSWER, SYSTEM_MESSAGE, null
      "language": "en",                     # en | zh: the language of every text below
      "title": "Diagnosis published: OrdersApiLatencyHigh",
      "alert": {"source": "alertmanager", "name": "...", "status": "firing", "severity": "critical",
                "service": "...", "summary": "...", "starts_at": "...",
                "labels": {...},            # at most 20, without alertname and severity
                "related_count": 3} | null, # the primary alert; how many related ones came with it
      "summary": "..." | null,              # the report's summary
      "root_cause": "..." | null,           # "<component> <mechanism>: <culprit>"
      "contributing_causes": ["..."],
      "message": "..." | null,              # a fallback's (or a system message's) message
      "limitations": ["..."], "next_steps": ["..."],  # at most 5 each, 500 characters each
      "link": "https://rootproof.example.com/runs/<run_id>" | null,
      "content": {...} | null,              # the released content as is, strings and lists bounded
      "content_truncated": false            # true when `content` was bounded or left out
    }

Slack (`kind: slack`): `{"text": <one-line headline>, "blocks": [mrkdwn sections and a context
block], "unfurl_links": false, "unfurl_media": false}` and the same `Idempotency-Key` header.
Every text from the run, the alert or the evidence is escaped for mrkdwn (`&` `<` `>` become
`&amp;` `&lt;` `&gt;`), so a planted `<!channel>` or `<https://evil|click>` arrives as inert text;
the only `<url|label>` is the module's own link to the run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import threading
import urllib.parse
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import httpx
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rootproof.errors import ConfigError
from rootproof.run.records import RunRecord

__all__ = [
    "BODY_BYTES",
    "FIELD_CHARS",
    "MAX_FILE_BYTES",
    "MAX_RECEIVERS",
    "VARIABLE",
    "Delivery",
    "Notification",
    "Receiver",
    "build_notification",
    "deliver",
    "idempotency_key",
    "load_receivers",
    "render",
]

log = logging.getLogger(__name__)

VARIABLE: Final = "ROOTPROOF_NOTIFICATIONS"
"""The setting that names the notifications file."""
MAX_FILE_BYTES: Final = 64 * 1024
"""The notifications file's size cap."""
MAX_RECEIVERS: Final = 50
"""The most receivers a notifications file may declare."""
URL_FILE_BYTES: Final = 4096
"""The size cap of a `url_file`."""
FIELD_CHARS: Final = 3000
"""Characters kept of one text field taken from the run (summary, root cause, message, ...)."""
ITEM_CHARS: Final = 500
"""Characters kept of one limitation, next step, contributing cause or label value."""
MAX_ITEMS: Final = 5
"""Limitations, next steps and contributing causes kept (each)."""
MAX_LABELS: Final = 20
"""Alert labels kept."""
BODY_BYTES: Final = 40 * 1024
"""The most bytes a rendered body may have."""
ANSWER_BYTES: Final = 4096
"""The most bytes of a receiver's answer read (and then dropped)."""
SLACK_SECTION_CHARS: Final = 3000
"""Slack's cap on a section's text."""

_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_KEYS = ("name", "kind", "url_env", "url_file", "timeout_s")
_RETRYABLE_STATUS = frozenset({408, 425, 429})
_USER_AGENT = "rootproof-notify/1"


# -- configuration ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Receiver:
    """Where notifications go. `url` is a credential: never in `repr`, errors or logs."""

    name: str
    kind: Literal["webhook", "slack"]
    url: str = field(repr=False)
    timeout_s: float = 10.0


class _ReceiverModel(BaseModel):
    """The shape of one entry of `receivers` (types and bounds; the URL is resolved after)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(pattern="^" + _NAME.pattern + "$")
    kind: Literal["webhook", "slack"]
    url_env: str | None = None
    url_file: str | None = None
    timeout_s: float = Field(default=10.0, ge=0.5, le=60, allow_inf_nan=False)


def _fail(path: Path, where: str, problem: str) -> ConfigError:
    text = f"{where}: {problem}" if where else problem
    return ConfigError(" ".join(f"{VARIABLE}: {path}: {text}".split()))


def _pydantic_problem(err: Mapping[str, Any]) -> str:
    """One error of pydantic as the words of this file's format (never quoting the input)."""
    kind, loc = str(err["type"]), tuple(err["loc"])
    key = str(loc[0]) if loc else ""
    if kind == "missing":
        return "missing (required)"
    if kind == "literal_error":
        return "expected webhook or slack"
    if kind == "string_pattern_mismatch" and key == "name":
        return "expected 1 to 64 lowercase letters, digits, _ or -, starting with a letter or digit"
    if key == "timeout_s":
        return "expected a number of seconds from 0.5 to 60"
    if kind == "string_type":
        return "expected a string"
    return str(err["msg"])


def _read_config(path: Path) -> Any:
    try:
        if not path.is_file():
            raise _fail(path, "", "not found" if not path.exists() else "not a file")
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise _fail(path, "", f"{size} bytes, more than the cap of {MAX_FILE_BYTES} bytes")
        with path.open("rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise _fail(path, "", f"cannot read it ({type(exc).__name__})") from None
    if len(raw) > MAX_FILE_BYTES:
        raise _fail(path, "", f"more than the cap of {MAX_FILE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _fail(path, "", f"not UTF-8 text (byte {exc.start})") from None
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = f": {exc.problem}" if exc.problem else ""
        raise _fail(path, "", f"not valid YAML{where}{problem}") from None
    except yaml.YAMLError:
        raise _fail(path, "", "not valid YAML") from None
    except RecursionError:
        raise _fail(path, "", "not valid YAML: nested too deeply") from None


def _check_url(url: str) -> bool:
    """An http or https URL with a host, without whitespace or control characters inside."""
    if not url or any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        return False
    try:
        parts = urllib.parse.urlsplit(url)
        _ = parts.port  # a malformed port raises
    except ValueError:
        return False
    return parts.scheme.lower() in ("http", "https") and bool(parts.hostname)


def _url_from_file(path: Path, where: str, value: str) -> str:
    target = Path(value).expanduser()
    if not target.is_absolute():
        target = path.parent / target
    try:
        if not target.is_file():
            raise _fail(
                path,
                where,
                f"the file {target} does not exist" if not target.exists() else f"{target} is not a file",
            )
        with target.open("rb") as fh:
            raw = fh.read(URL_FILE_BYTES + 1)
    except OSError as exc:
        raise _fail(path, where, f"cannot read the file {target} ({type(exc).__name__})") from None
    if len(raw) > URL_FILE_BYTES:
        raise _fail(
            path,
            where,
            f"the file {target} holds more than {URL_FILE_BYTES} bytes; expected one line with the URL",
        )
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise _fail(path, where, f"the file {target} is not UTF-8 text") from None
    if not text:
        raise _fail(path, where, f"the file {target} is empty; expected one line with the URL")
    if "\n" in text or "\r" in text:
        raise _fail(
            path, where, f"the file {target} holds more than one line; expected one line with the URL"
        )
    if not _check_url(text):
        raise _fail(path, where, f"the file {target} does not hold an http or https URL with a host")
    return text


def _url_from_env(path: Path, where: str, name: str, environ: Mapping[str, str]) -> str:
    if not _ENV_NAME.fullmatch(name):
        raise _fail(path, where, "expected the name of an environment variable (letters, digits and _)")
    if name not in environ:
        raise _fail(path, where, f"the environment variable {name} is not set")
    url = environ[name].strip()
    if not url:
        raise _fail(path, where, f"the environment variable {name} is empty")
    if not _check_url(url):
        raise _fail(
            path, where, f"the environment variable {name} does not hold an http or https URL with a host"
        )
    return url


def load_receivers(path: Path, environ: Mapping[str, str]) -> list[Receiver]:
    """Read the notifications file at `path`; URLs come from `environ` or from files.

    Raises `ConfigError` with one line `ROOTPROOF_NOTIFICATIONS: <path>: <field>: <problem>`
    (the first problem found); the message never holds a URL.
    """
    data = _read_config(path)
    if data is None:
        raise _fail(path, "", "empty: expected a mapping with a receivers list")
    if not isinstance(data, dict):
        raise _fail(
            path, "", f"expected a mapping with a receivers list at the top level, got {type(data).__name__}"
        )
    for key in data:
        if key != "receivers":
            raise _fail(path, str(key)[:80], "unknown key (expected receivers)")
    if "receivers" not in data:
        raise _fail(path, "receivers", "missing (required)")
    items = data["receivers"]
    if not isinstance(items, list) or not items:
        raise _fail(path, "receivers", "expected a non-empty list of receivers")
    if len(items) > MAX_RECEIVERS:
        raise _fail(path, "receivers", f"{len(items)} receivers, more than the cap of {MAX_RECEIVERS}")
    out: list[Receiver] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        at = f"receivers[{i}]"
        if not isinstance(item, dict):
            raise _fail(path, at, f"expected a mapping ({', '.join(_KEYS)}), got {type(item).__name__}")
        for key in item:
            if key not in _KEYS:
                raise _fail(path, f"{at}.{str(key)[:80]}", f"unknown key (expected {', '.join(_KEYS)})")
        try:
            spec = _ReceiverModel.model_validate(item)
        except ValidationError as exc:
            errs = exc.errors(include_url=False, include_input=False)
            first = errs[0]
            loc = ".".join(str(p) for p in first["loc"])
            more = (
                f" (and {len(errs) - 1} more problem{'s' if len(errs) > 2 else ''})" if len(errs) > 1 else ""
            )
            raise _fail(path, f"{at}.{loc}" if loc else at, _pydantic_problem(first) + more) from None
        if (spec.url_env is None) == (spec.url_file is None):
            raise _fail(path, at, "give exactly one of url_env and url_file")
        if spec.name in seen:
            raise _fail(
                path, f"{at}.name", f'duplicate name "{spec.name}" (first at receivers[{seen[spec.name]}])'
            )
        seen[spec.name] = i
        if spec.url_env is not None:
            url = _url_from_env(path, f"{at}.url_env", spec.url_env, environ)
        else:
            assert spec.url_file is not None
            if not spec.url_file.strip() or "\x00" in spec.url_file or len(spec.url_file) > 4096:
                raise _fail(path, f"{at}.url_file", "expected the path of a file holding the URL")
            url = _url_from_file(path, f"{at}.url_file", spec.url_file)
        out.append(Receiver(name=spec.name, kind=spec.kind, url=url, timeout_s=float(spec.timeout_s)))
    return out


# -- the message ---------------------------------------------------------------------------------
_TEXT: dict[str, dict[str, str]] = {
    "en": {
        "PUBLISHED": "Diagnosis published",
        "FALLBACK": "No diagnosis was published",
        "NONE": "No diagnosis was published",
        "alert": "Alert",
        "on": "on",
        "summary": "Summary",
        "root_cause": "Root cause",
        "no_root_cause": "No root cause was identified",
        "contributing": "Contributing causes",
        "reason": "Why",
        "message": "Message",
        "limitations": "Limitations",
        "next_steps": "Next steps",
        "status": "Run status",
        "run": "run",
        "open": "Open the run in rootproof",
        "sep": ": ",
        "comma": ", ",
        "paren": " ({})",
        "SUCCESS": "completed",
        "CANCELLED": "cancelled",
        "TIMED_OUT": "timed out",
        "FAILED": "failed",
        "firing": "firing",
        "resolved": "resolved",
    },
    "zh": {
        "PUBLISHED": "已发布诊断结论",
        "FALLBACK": "未发布诊断结论",
        "NONE": "未发布诊断结论",
        "alert": "告警",
        "on": "服务",
        "summary": "摘要",
        "root_cause": "根因",
        "no_root_cause": "未确定根因",
        "contributing": "次要原因",
        "reason": "原因",
        "message": "消息",
        "limitations": "局限",
        "next_steps": "后续步骤",
        "status": "运行状态",
        "run": "运行",
        "open": "在 rootproof 中查看本次诊断",
        "sep": "：",
        "comma": "，",
        "paren": "（{}）",
        "SUCCESS": "已完成",
        "CANCELLED": "已取消",
        "TIMED_OUT": "已超时",
        "FAILED": "失败",
        "firing": "触发中",
        "resolved": "已恢复",
    },
}


@dataclass(frozen=True)
class Notification:
    """What one receiver is told about one finished run: bounded texts in the run's language.

    Every text comes from what a user of the run was shown; see the module's docstring.
    """

    run_id: str
    idempotency_key: str
    """sha256 hex of `run_id`, NUL, the receiver's name: stable per (run, receiver)."""
    session_id: str
    receiver: str
    """The receiver's name (the key is tied to it)."""
    language: Literal["en", "zh"]
    status: str
    """SUCCESS | CANCELLED | TIMED_OUT | FAILED."""
    release_outcome: str
    """PUBLISHED | FALLBACK | NONE."""
    fallback_type: str | None
    content_type: str | None
    title: str
    """A one-line headline: the outcome and the alert's name (and the root cause, if any)."""
    alert: dict[str, Any] | None = field(default=None, hash=False)
    """source, name, status, severity, service, summary, starts_at, labels, related_count."""
    summary: str | None = None
    root_cause: str | None = None
    contributing_causes: tuple[str, ...] = ()
    message: str | None = None
    limitations: tuple[str, ...] = ()
    next_steps: tuple[str, ...] = ()
    link: str | None = None
    content: dict[str, Any] | None = field(default=None, hash=False)
    """The released content, strings clipped to FIELD_CHARS and lists to 50 items."""
    content_truncated: bool = False


def _clip(text: str, cap: int) -> str:
    """At most `cap` characters (the last one `…` when clipped), lone surrogates replaced."""
    out = text if len(text) <= cap else text[: max(cap - 1, 0)] + "…"
    return _SURROGATE.sub("\ufffd", out)


def _str(value: Any, cap: int = FIELD_CHARS) -> str | None:
    """A non-empty string of the run's data, clipped; None for anything else."""
    if isinstance(value, str) and value.strip():
        return _clip(value.strip(), cap)
    return None


def _strs(value: Any, cap: int = ITEM_CHARS, items: int = MAX_ITEMS) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    out = [s for s in (_str(v, cap) for v in value) if s is not None]
    return tuple(out[:items])


def _bound(value: Any, str_cap: int, list_cap: int, depth: int = 0) -> Any:
    """A JSON value with its strings and lists clipped, nesting cut at 16 and non-finite numbers nulled."""
    if depth > 16:
        return None
    if isinstance(value, str):
        return _clip(value, str_cap)
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {
            _clip(str(k), 200): _bound(v, str_cap, list_cap, depth + 1)
            for k, v in list(value.items())[:list_cap]
        }
    if isinstance(value, list | tuple):
        return [_bound(v, str_cap, list_cap, depth + 1) for v in value[:list_cap]]
    return _clip(str(value), str_cap)


def _json(value: Any) -> bytes:
    return json.dumps(
        value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False
    ).encode("utf-8")


def _cause(value: Any, sep: str) -> str | None:
    if not isinstance(value, Mapping):
        return None
    component, mechanism = _str(value.get("component"), 100), _str(value.get("mechanism"), 100)
    if component is None or mechanism is None:
        return None
    label = f"{component} {mechanism}".replace("_", " ")
    culprit = _str(value.get("culprit"), FIELD_CHARS)
    return _clip(label + (sep + culprit if culprit else ""), FIELD_CHARS)


def _alert_brief(alert: Any) -> dict[str, Any] | None:
    """What the notification shows of the stored alert (`AlertPayload.trace()`): its primary alert."""
    if not isinstance(alert, Mapping):
        return None
    primary = alert.get("primary")
    if not isinstance(primary, Mapping):
        return None
    labels_in = primary.get("labels")
    labels: dict[str, str] = {}
    if isinstance(labels_in, Mapping):
        for k, v in sorted(
            (str(k), v)
            for k, v in labels_in.items()
            if isinstance(v, str) and k not in ("alertname", "severity")
        ):
            if len(labels) >= MAX_LABELS:
                break
            labels[_clip(k, 100)] = _clip(v, ITEM_CHARS)
    related = alert.get("related")
    omitted = alert.get("related_omitted")
    count = (len(related) if isinstance(related, list) else 0) + (
        omitted if isinstance(omitted, int) and not isinstance(omitted, bool) else 0
    )
    status = primary.get("status") if primary.get("status") in ("firing", "resolved") else alert.get("status")
    return {
        "source": _str(alert.get("source"), 40),
        "name": _str(primary.get("name"), 200) or _str(alert.get("title"), 200),
        "status": status if status in ("firing", "resolved") else None,
        "severity": _str(primary.get("severity"), 40),
        "service": _str(primary.get("service"), 200),
        "summary": _str(primary.get("summary")),
        "starts_at": _str(primary.get("starts_at"), 64),
        "labels": labels,
        "related_count": count,
    }


def _link(public_url: str | None, run_id: str) -> str | None:
    if public_url is None:
        return None
    base = public_url.strip()
    if not _check_url(base) or any(ch in base for ch in "<>|\"'`\\"):
        raise ConfigError("public_url: expected an http or https URL with a host")
    parts = urllib.parse.urlsplit(base)
    if parts.query or parts.fragment:
        raise ConfigError("public_url: expected an http or https URL with a host and no query or fragment")
    return f"{base.rstrip('/')}/runs/{urllib.parse.quote(run_id, safe='')}"


def idempotency_key(run_id: str, receiver: str) -> str:
    """The key of one (run, receiver): sha256 hex of `run_id`, NUL, `receiver`."""
    return hashlib.sha256(f"{run_id}\x00{receiver}".encode("utf-8", "surrogatepass")).hexdigest()


def build_notification(run: RunRecord, *, receiver: Receiver, public_url: str | None) -> Notification:
    """The notification of a finished run for one receiver.

    Reads only the run's status, release outcome, fallback type, released `content`, language,
    alert and ids. `public_url` (the service's public base URL) adds a link to the run's page.
    Raises ValueError for a run that has not ended (no status), ConfigError for a `public_url`
    that is not an http(s) URL with a host.
    """
    if not run.status:
        raise ValueError(f"run {run.run_id} has not ended (no status)")
    lang: Literal["en", "zh"] = "zh" if run.language == "zh" else "en"
    t = _TEXT[lang]
    outcome = run.release_outcome if run.release_outcome in ("PUBLISHED", "FALLBACK") else "NONE"
    content = run.content if isinstance(run.content, dict) else None
    content_type = _str(content.get("content_type"), 64) if content else None
    summary = root_cause = message = None
    contributing: tuple[str, ...] = ()
    limitations: tuple[str, ...] = ()
    next_steps: tuple[str, ...] = ()
    if content is not None and content_type in ("DIAGNOSIS_REPORT", "KNOWLEDGE_ANSWER"):
        report = content.get("report" if content_type == "DIAGNOSIS_REPORT" else "answer")
        if isinstance(report, Mapping):
            summary = _str(report.get("summary"))
            root_cause = _cause(report.get("root_cause"), t["sep"])
            causes = report.get("contributing_causes")
            if isinstance(causes, list):
                contributing = tuple(c for c in (_cause(x, t["sep"]) for x in causes[:MAX_ITEMS]) if c)
            limitations = _strs(report.get("limitations"))
            next_steps = _strs(report.get("next_steps"))
    elif content is not None and content_type == "SAFE_FALLBACK":
        fallback = content.get("fallback")
        if isinstance(fallback, Mapping):
            message = _str(fallback.get("message"))
            limitations = _strs(fallback.get("limitations"))
            next_steps = _strs(fallback.get("next_steps"))
    elif content is not None:
        message = _str(content.get("message"))
    alert = _alert_brief(run.alert)
    head = t[outcome] if content_type != "SYSTEM_MESSAGE" else t["message"]
    title = head + (t["sep"] + alert["name"] if alert and alert["name"] else "")
    if root_cause:
        title += " — " + root_cause.split(t["sep"], 1)[0]
    bounded = _bound(content, FIELD_CHARS, 50) if content is not None else None
    return Notification(
        run_id=run.run_id,
        idempotency_key=idempotency_key(run.run_id, receiver.name),
        session_id=run.session_id,
        receiver=receiver.name,
        language=lang,
        status=run.status,
        release_outcome=outcome,
        fallback_type=_str(run.fallback_type, 64),
        content_type=content_type,
        title=_clip(title, 300),
        alert=alert,
        summary=summary,
        root_cause=root_cause,
        contributing_causes=contributing,
        message=message,
        limitations=limitations,
        next_steps=next_steps,
        link=_link(public_url, run.run_id),
        content=bounded,
        content_truncated=bounded != content,
    )


# -- rendering -------------------------------------------------------------------------------------
_TIERS: Final = (1.0, 0.4, 0.15, 0.05)
"""Scales of the text caps tried, in order, until a body fits BODY_BYTES."""


def _webhook_body(note: Notification, scale: float, content_scale: float | None) -> dict[str, Any]:
    cap, item = max(int(FIELD_CHARS * scale), 40), max(int(ITEM_CHARS * scale), 40)

    def clip(s: str | None, c: int = cap) -> str | None:
        return None if s is None else _clip(s, c)

    alert = None
    if note.alert is not None:
        alert = dict(note.alert)
        alert["summary"] = clip(alert.get("summary"))
        alert["labels"] = {k: _clip(v, item) for k, v in (alert.get("labels") or {}).items()}
    content = None
    if content_scale is not None and note.content is not None:
        c_cap, c_items = max(int(FIELD_CHARS * content_scale), 40), max(int(50 * content_scale), 5)
        content = note.content if content_scale == 1.0 else _bound(note.content, c_cap, c_items)
    return {
        "version": "1",
        "idempotency_key": note.idempotency_key,
        "run_id": note.run_id,
        "session_id": note.session_id,
        "receiver": note.receiver,
        "status": note.status,
        "release_outcome": note.release_outcome,
        "fallback_type": note.fallback_type,
        "content_type": note.content_type,
        "language": note.language,
        "title": note.title,
        "alert": alert,
        "summary": clip(note.summary),
        "root_cause": clip(note.root_cause),
        "contributing_causes": [_clip(s, item) for s in note.contributing_causes],
        "message": clip(note.message),
        "limitations": [_clip(s, item) for s in note.limitations],
        "next_steps": [_clip(s, item) for s in note.next_steps],
        "link": note.link,
        "content": content,
        "content_truncated": note.content_truncated or (note.content is not None and content != note.content),
    }


def _mrkdwn(text: str, cap: int) -> str:
    """`text` escaped for Slack mrkdwn (`&`, `<`, `>`), at most `cap` characters once escaped."""
    text = _SURROGATE.sub("\ufffd", text[: cap + 1])  # escaping never shortens: the rest is cut anyway
    escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    if len(escaped) <= cap:
        return escaped
    out: list[str] = []
    n = 0
    for ch in text:
        piece = "&amp;" if ch == "&" else "&lt;" if ch == "<" else "&gt;" if ch == ">" else ch
        if n + len(piece) > cap - 1:
            break
        out.append(piece)
        n += len(piece)
    return "".join(out) + "…"


def _slack_url(url: str) -> str:
    """Our own link's URL, safe inside `<url|label>`: `|`, `<`, `>`, spaces percent-encoded, `&` escaped."""
    for ch, code in (("|", "%7C"), ("<", "%3C"), (">", "%3E"), (" ", "%20")):
        url = url.replace(ch, code)
    return url.replace("&", "&amp;")


def _slack_body(note: Notification, scale: float) -> dict[str, Any]:
    t = _TEXT[note.language]
    cap = max(int((SLACK_SECTION_CHARS - 200) * scale), 60)
    item = max(int(ITEM_CHARS * scale), 40)

    def section(text: str) -> dict[str, Any]:
        return {"type": "section", "text": {"type": "mrkdwn", "text": text[:SLACK_SECTION_CHARS]}}

    head = f"*{_mrkdwn(t[note.release_outcome] if note.content_type != 'SYSTEM_MESSAGE' else t['message'], 200)}*"
    lines = [head]
    alert = note.alert
    if alert is not None:
        name = _mrkdwn(alert.get("name") or "?", 200)
        bits = [
            t[alert["status"]] if alert.get("status") in ("firing", "resolved") else None,
            alert.get("severity"),
        ]
        what = t["comma"].join(_mrkdwn(b, 60) for b in bits if b)
        line = f"*{t['alert']}*{t['sep']}{name}" + (t["paren"].format(what) if what else "")
        if alert.get("service"):
            line += f" · {t['on']} {_mrkdwn(alert['service'], 200)}"
        lines.append(line)
        if alert.get("summary"):
            lines.append(_mrkdwn(alert["summary"], cap // 2))
    blocks = [section("\n".join(lines))]
    if note.summary:
        blocks.append(section(f"*{t['summary']}*\n{_mrkdwn(note.summary, cap)}"))
    if note.root_cause:
        text = f"*{t['root_cause']}*\n{_mrkdwn(note.root_cause, cap // 2)}"
        if note.contributing_causes:
            text += f"\n*{t['contributing']}*\n" + "\n".join(
                "• " + _mrkdwn(c, item) for c in note.contributing_causes[:3]
            )
        blocks.append(section(text))
    elif note.content_type == "DIAGNOSIS_REPORT":
        blocks.append(section(f"*{t['root_cause']}*\n{t['no_root_cause']}"))
    if note.message:
        label = t["reason"] if note.content_type == "SAFE_FALLBACK" else t["message"]
        blocks.append(section(f"*{label}*\n{_mrkdwn(note.message, cap)}"))
    for key, values in (("limitations", note.limitations), ("next_steps", note.next_steps)):
        if values:
            blocks.append(section(f"*{t[key]}*\n" + "\n".join("• " + _mrkdwn(v, item) for v in values[:3])))
    if note.link:
        blocks.append(section(f"<{_slack_url(note.link)}|{_mrkdwn(t['open'], 200)}>"))
    context = f"{t['status']}{t['sep']}{_mrkdwn(t.get(note.status, note.status), 40)}"
    if note.fallback_type:
        context += f" · {_mrkdwn(note.fallback_type, 64)}"
    context += f" · {t['run']} {_mrkdwn(note.run_id, 100)}"
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": context}]})
    return {
        "text": _mrkdwn("rootproof: " + note.title, 300),
        "blocks": blocks,
        "unfurl_links": False,
        "unfurl_media": False,
    }


def render(receiver: Receiver, note: Notification) -> tuple[bytes, dict[str, str]]:
    """The request body (UTF-8 JSON, at most BODY_BYTES) and headers for `receiver`'s kind.

    Deterministic: the same notification and receiver give the same bytes. A body that would
    be larger has its content clipped further, then left out (`content_truncated`), then its
    texts clipped further, until it fits. Raises ValueError when the
    notification was built for another receiver (its idempotency key is tied to the name).
    """
    if note.receiver != receiver.name:
        raise ValueError(f"the notification was built for receiver {note.receiver!r}, not {receiver.name!r}")
    headers = {
        "Content-Type": "application/json",
        "Idempotency-Key": note.idempotency_key,
        "User-Agent": _USER_AGENT,
    }
    body = b""
    if receiver.kind == "slack":
        for scale in _TIERS:
            body = _json(_slack_body(note, scale))
            if len(body) <= BODY_BYTES:
                break
        return body, headers
    # The content is clipped first, then left out; only then are the texts clipped further.
    attempts: list[tuple[float, float | None]] = [(1.0, c) for c in _TIERS] + [(s, None) for s in _TIERS]
    for scale, content_scale in attempts:
        body = _json(_webhook_body(note, scale, content_scale))
        if len(body) <= BODY_BYTES:
            break
    return body, headers


# -- delivery --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Delivery:
    """The result of one delivery attempt."""

    ok: bool
    """A 2xx answer."""
    status: int | None
    """The HTTP status; None when there was no answer."""
    retryable: bool
    """Worth another attempt later: 5xx, 408, 425, 429, a timeout, a connection or protocol error."""
    detail: str
    """Short, never holding the URL: `HTTP 503 Service Unavailable` or an exception's class name."""


_lock = threading.Lock()
_active: Counter[str] = Counter()
_HIDDEN = "<receiver URL hidden>"


class _HideReceiverUrls(logging.Filter):
    """Hides the URLs of deliveries in progress from log records (httpx logs each request's URL)."""

    def filter(self, record: logging.LogRecord) -> bool:
        with _lock:
            secrets = sorted(_active, key=len, reverse=True)
        if not secrets:
            return True
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is the logging module's business
            return True
        if any(s in message for s in secrets):
            for s in secrets:
                message = message.replace(s, _HIDDEN)
            record.msg, record.args = message, None
        return True


_FILTER = _HideReceiverUrls()


@contextmanager
def _hidden(url: str) -> Iterator[None]:
    forms = {url}
    try:
        forms.add(str(httpx.URL(url)))
    except Exception:  # an URL httpx cannot parse is never logged by it
        pass
    with _lock:
        _active.update(forms)
    for name in ("httpx", __name__):
        logging.getLogger(name).addFilter(_FILTER)  # idempotent: the same filter once
    try:
        yield
    finally:
        with _lock:
            _active.subtract(forms)
            for f in forms:
                if _active[f] <= 0:
                    del _active[f]


def _attempt(client: httpx.Client, receiver: Receiver, body: bytes, headers: dict[str, str]) -> Delivery:
    try:
        with client.stream(
            "POST",
            receiver.url,
            content=body,
            headers=headers,
            timeout=httpx.Timeout(receiver.timeout_s),
            follow_redirects=False,
        ) as response:
            status = response.status_code
            read = 0
            for chunk in response.iter_raw():  # a little of the answer, then drop the rest
                read += len(chunk)
                if read >= ANSWER_BYTES:
                    break
    except (httpx.UnsupportedProtocol, httpx.LocalProtocolError, httpx.InvalidURL) as exc:
        return Delivery(ok=False, status=None, retryable=False, detail=type(exc).__name__)
    except (httpx.TransportError, httpx.StreamError, OSError) as exc:
        return Delivery(ok=False, status=None, retryable=True, detail=type(exc).__name__)
    phrase = httpx.codes.get_reason_phrase(status)
    detail = f"HTTP {status}" + (f" {phrase}" if phrase else "")
    if 200 <= status < 300:
        return Delivery(ok=True, status=status, retryable=False, detail=detail)
    if 300 <= status < 400:
        detail += " (redirects are not followed)"
    retryable = status >= 500 or status in _RETRYABLE_STATUS
    return Delivery(ok=False, status=status, retryable=retryable, detail=detail)


def deliver(receiver: Receiver, note: Notification, *, client: httpx.Client | None = None) -> Delivery:
    """One POST of `note` to `receiver` (timeout `receiver.timeout_s`, no redirects followed).

    Never raises for network errors: they become a Delivery with `status` None. `client` lets
    the caller share connections; without one a client is made and closed for this attempt.
    """
    body, headers = render(receiver, note)
    with _hidden(receiver.url):
        if client is not None:
            result = _attempt(client, receiver, body, headers)
        else:
            with httpx.Client(follow_redirects=False) as own:
                result = _attempt(own, receiver, body, headers)
        level = logging.INFO if result.ok else logging.WARNING
        log.log(
            level,
            "notification of run %s to receiver %s (%s): %s",
            note.run_id,
            receiver.name,
            receiver.kind,
            result.detail,
        )
    return result
