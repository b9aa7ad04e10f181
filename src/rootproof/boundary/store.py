"""Canonical invocations and the store that holds them (the whole truth of a run's tool calls).

In-process by default; a Redis store with a TTL implements the same protocol for replicas
(`rootproof.boundary.redis_store`, storing each invocation as the JSON document of
`invocation_to_json`). Keyed by invocation id across runs, so a citation of another run's
invocation is recognised as foreign.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from rootproof.tools.refs import EvidenceRef

__all__ = [
    "CanonicalInvocation",
    "CanonicalStore",
    "InMemoryCanonicalStore",
    "InvocationStatus",
    "invocation_from_json",
    "invocation_to_json",
]


class InvocationStatus(StrEnum):
    """Status of one tool invocation."""

    READY = "READY"
    REJECTED = "REJECTED"
    FAILED = "FAILED"
    TIMED_OUT = "TIMED_OUT"


@dataclass(kw_only=True)
class CanonicalInvocation:
    """Everything about one invocation: ids, arguments, scope, status, the full result, refs."""

    invocation_id: str
    run_id: str
    session_id: str
    step_index: int
    tool_name: str
    arguments: dict[str, Any] | str
    scope_key: str | None
    status: InvocationStatus
    refusal_code: str | None = None
    message: str | None = None
    evidence_status: str | None = None
    data_source: str | None = None
    result: dict[str, Any] | None = None
    evidence_refs: list[EvidenceRef] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    duration_ms: int = 0
    result_bytes: int = 0

    def ref(self, raw_path: str) -> EvidenceRef | None:
        """The recorded ref at `raw_path`, if any."""
        for r in self.evidence_refs:
            if r.raw_path == raw_path:
                return r
        return None


class CanonicalStore(Protocol):
    """Where canonical invocations live for the guards to read."""

    def put(self, inv: CanonicalInvocation) -> None:
        """Store (or replace) one invocation."""

    def get(self, invocation_id: str) -> CanonicalInvocation | None:
        """One invocation by id, whatever run it belongs to."""

    def for_run(self, run_id: str) -> list[CanonicalInvocation]:
        """Every invocation of a run, in order."""


class InMemoryCanonicalStore:
    """A bounded in-process store (oldest runs evicted past `max_invocations`)."""

    def __init__(self, max_invocations: int = 100_000) -> None:
        self._lock = threading.Lock()
        self._items: OrderedDict[str, CanonicalInvocation] = OrderedDict()
        self._max = max_invocations

    def put(self, inv: CanonicalInvocation) -> None:
        with self._lock:
            self._items[inv.invocation_id] = inv
            while len(self._items) > self._max:
                self._items.popitem(last=False)

    def get(self, invocation_id: str) -> CanonicalInvocation | None:
        with self._lock:
            return self._items.get(invocation_id)

    def for_run(self, run_id: str) -> list[CanonicalInvocation]:
        with self._lock:
            return [i for i in self._items.values() if i.run_id == run_id]


# -- the JSON document of one invocation (stores outside the process) ----------------------------

DOCUMENT_FORMAT = 1
"""Version of the document `invocation_to_json` writes (its `format` field)."""
_TAG = "$rp"
"""Marks a tagged value in a document: a tuple, or a mapping JSON cannot hold as an object (a
key that is not text, or a key named `$rp` itself)."""


def _encode(value: Any) -> Any:
    """`value` as JSON data that `_decode_tagged` turns back into an equal value."""
    if value is None or isinstance(value, str | int | float):  # bool is an int
        return value
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, tuple):
        return {_TAG: "tuple", "items": [_encode(v) for v in value]}
    if isinstance(value, dict):
        if _TAG not in value and all(isinstance(k, str) for k in value):
            return {k: _encode(v) for k, v in value.items()}
        return {_TAG: "map", "items": [[_encode(k), _encode(v)] for k, v in value.items()]}
    raise TypeError(f"a {type(value).__name__} cannot be stored (expected JSON data, tuples or mappings)")


def _decode_tagged(obj: dict[str, Any]) -> Any:
    """`json.loads` object hook: a tagged value back as what `_encode` was given."""
    tag = obj.get(_TAG)
    if tag is None:
        return obj
    if tag == "tuple":
        return tuple(obj["items"])
    if tag == "map":
        return {k: v for k, v in obj["items"]}
    raise ValueError(f"unknown tagged value {tag!r}")


def invocation_to_json(inv: CanonicalInvocation) -> bytes:
    """The whole invocation as one UTF-8 JSON document; `invocation_from_json` gives back an equal
    invocation (its refs, tuples and mappings with keys that are not text included).

    Raises `TypeError` naming the field when a value is not JSON data (tuples and mappings aside).
    """
    doc: dict[str, Any] = {"format": DOCUMENT_FORMAT}
    for f in dataclasses.fields(inv):
        value = getattr(inv, f.name)
        if f.name == "status":
            doc[f.name] = str(value)
        elif f.name == "evidence_refs":
            doc[f.name] = [
                {
                    "raw_path": r.raw_path,
                    "text": r.text,
                    "data_source": r.data_source,
                    "instruction_like": r.instruction_like,
                    "untrusted_spans": [[s, e] for s, e in r.untrusted_spans],
                }
                for r in value
            ]
        else:
            try:
                doc[f.name] = _encode(value)
            except TypeError as exc:
                raise TypeError(f"invocation {inv.invocation_id} field {f.name}: {exc}") from None
    # Lone surrogates (text cut from binary output) survive as themselves: "surrogatepass".
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


_FIELDS = frozenset(f.name for f in dataclasses.fields(CanonicalInvocation))


def invocation_from_json(data: bytes | str) -> CanonicalInvocation:
    """The invocation of a document written by `invocation_to_json`; `ValueError` saying what is
    wrong when it is not one."""
    try:
        text = data.decode("utf-8", "surrogatepass") if isinstance(data, bytes) else data
        doc = json.loads(text, object_hook=_decode_tagged)
    except (ValueError, RecursionError, KeyError, TypeError) as exc:  # JSON and UTF-8 errors are ValueErrors
        raise ValueError(f"not a JSON invocation document ({exc})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"not an invocation document: a JSON {type(doc).__name__}")
    if doc.get("format") != DOCUMENT_FORMAT:
        raise ValueError(f"invocation document format {doc.get('format')!r}; this version reads format {DOCUMENT_FORMAT}")
    unknown = sorted(set(doc) - _FIELDS - {"format"})
    if unknown:
        raise ValueError(f"invocation document has an unknown field {unknown[0]!r}")
    fields = {k: v for k, v in doc.items() if k != "format"}
    try:
        fields["status"] = InvocationStatus(fields["status"])
        fields["evidence_refs"] = [
            EvidenceRef(
                raw_path=r["raw_path"],
                text=r["text"],
                data_source=r["data_source"],
                instruction_like=r["instruction_like"],
                untrusted_spans=tuple((s, e) for s, e in r["untrusted_spans"]),
            )
            for r in fields.get("evidence_refs", [])
        ]
        return CanonicalInvocation(**fields)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not a valid invocation document ({type(exc).__name__}: {exc})") from None
