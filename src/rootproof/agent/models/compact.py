"""Compact schemas and prompt-size estimates: what a small local model (and its server) can take.

Servers that turn a tool's JSON schema into a decoding grammar (llama.cpp, vLLM guided decoding,
Ollama) expand every `maxLength`/`maxItems` bound into repeated grammar rules: the full
`DiagnosisDraft` schema (6.3 KB of bounds) fails llama.cpp's grammar conversion and can take the
server down. A compact schema keeps the structure and the enums and drops the bounds, titles,
defaults and long descriptions (the draft schema puts back a few small array bounds, which the
converter takes and which end a small model's loops); the full caps still hold because the parsed answer is validated
against the full pydantic model afterwards (a violation is the repair turn, then NO_DRAFT).

`estimate_tokens` is a deliberately conservative byte-based estimate (measured against the
Qwen2.5 tokenizer of the local server: JSON and log lines run 3.2-3.9 bytes per token, English
prose about 4.3); it decides what fits the prompt budget, the server's `usage` reports the truth.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from rootproof.taxonomy import BUILTIN_TAXONOMY, Taxonomy

__all__ = ["BYTES_PER_TOKEN", "DRAFT_ARRAY_BOUNDS", "compact_draft_schema", "compact_schema", "estimate_tokens"]

BYTES_PER_TOKEN = 3.2
"""Bytes per token assumed by `estimate_tokens` (the low end measured, so estimates run high)."""

_DROP = frozenset(
    {
        "title",
        "default",
        "maxLength",
        "minLength",
        "maxItems",
        "minItems",
        "maximum",
        "minimum",
        "exclusiveMaximum",
        "exclusiveMinimum",
        "pattern",
        "examples",
        "additionalProperties",
        "format",
        "maxProperties",
        "minProperties",
    }
)
_DESCRIPTION_CAP = 60
"""Characters of a property description kept (its first sentence, cut at a word, at most this)."""


def estimate_tokens(text: str) -> int:
    """Tokens `text` will take at most, about (UTF-8 bytes / `BYTES_PER_TOKEN`, rounded up)."""
    return math.ceil(len(text.encode("utf-8")) / BYTES_PER_TOKEN)


def _short(description: str) -> str:
    first = description.strip().split(". ")[0].split("; ")[0].rstrip(".")
    if len(first) <= _DESCRIPTION_CAP:
        return first
    cut = first[:_DESCRIPTION_CAP].rsplit(" ", 1)[0]
    return cut.rstrip(",:;(")


def compact_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with `$ref`s inlined and bounds, titles, defaults and `additionalProperties`
    dropped; an optional property typed `X or null` becomes `X`; descriptions cut to their first
    sentence; the top-level description is dropped (the tool's own description says it). Enums,
    types, `required` and nesting are kept."""
    defs: dict[str, Any] = schema.get("$defs", {})

    def walk(node: Any, depth: int) -> Any:
        if depth > 20:  # a recursive $ref: stop expanding (no schema of ours is recursive)
            return {}
        if isinstance(node, list):
            return [walk(v, depth) for v in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            name = str(node["$ref"]).rsplit("/", 1)[-1]
            merged = {**defs.get(name, {}), **{k: v for k, v in node.items() if k != "$ref"}}
            return walk(merged, depth + 1)
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _DROP or key == "$defs":
                continue
            if key == "description" and isinstance(value, str):
                out[key] = _short(value)
            elif key == "properties" and isinstance(value, dict):
                required = set(node.get("required", []))
                out[key] = {name: walk(_not_null(prop) if name not in required else prop, depth) for name, prop in value.items()}
            else:
                out[key] = walk(value, depth)
        return out

    result = walk(copy.deepcopy(schema), 0)
    if not isinstance(result, dict):
        return {}
    result.pop("description", None)
    return result


def _not_null(prop: Any) -> Any:
    """An optional `anyOf: [X, {"type": "null"}]` property as `X` (leaving it out means null)."""
    if not isinstance(prop, dict) or "anyOf" not in prop:
        return prop
    options = [o for o in prop["anyOf"] if not (isinstance(o, dict) and o.get("type") == "null")]
    if len(options) != 1 or not isinstance(options[0], dict):
        return prop
    rest = {k: v for k, v in prop.items() if k != "anyOf"}
    return {**options[0], **rest}


def _str(description: str = "") -> dict[str, Any]:
    return {"type": "string", "description": description} if description else {"type": "string"}


def _strings(most: int) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string"}, "maxItems": most}


def _array(items: dict[str, Any], most: int) -> dict[str, Any]:
    return {"type": "array", "items": items, "maxItems": most}


DRAFT_ARRAY_BOUNDS: dict[str, int] = {
    "claims": 8,
    "citations": 4,
    "claim_ids": 6,
    "hypotheses": 6,
    "contributing_causes": 3,
    "recovery": 4,
    "limitations": 5,
    "next_steps": 5,
}
"""`maxItems` of each array the compact draft schema offers: a short draft, within the full
`DiagnosisDraft` caps. Measured with the 1.5B local model: with unbounded arrays it wrote claims
in a loop until the answer cap (2 of 6 runs ended NO_DRAFT); a grammar that closes each array
after a few items ends the loop. llama.cpp's converter takes these few array bounds (what it
refuses is the full schema's many `maxLength` bounds)."""


def compact_draft_schema(taxonomy: Taxonomy | None = None) -> dict[str, Any]:
    """The `submit_draft` schema a model is offered: `DiagnosisDraft`'s fields in the order a
    model should write them (evidence before conclusions), its label enums from `taxonomy`
    (default: built-in, each enum written once under `$defs`), no string bounds and at most three
    levels of nesting; its arrays are bounded (`DRAFT_ARRAY_BOUNDS`), its strings are not. What
    the model returns
    is validated against the full `DiagnosisDraft` (`parse_draft`), caps included; `plan` is
    left out (it defaults to empty)."""
    tax = taxonomy or BUILTIN_TAXONOMY

    defs: dict[str, Any] = {
        "component": {"type": "string", "enum": list(tax.values("component"))},
        "mechanism": {"type": "string", "enum": list(tax.values("mechanism"))},
        "action": {"type": "string", "enum": list(tax.values("recovery action"))},
    }

    def enum(name: str) -> dict[str, Any]:
        # Each enum is written once under $defs: grammar converters resolve local refs.
        return {"$ref": f"#/$defs/{name}"}

    citation = {
        "type": "object",
        "properties": {
            "invocation_id": _str(),
            "tool_name": _str(),
            "raw_path": _str("e.g. $.entries[0]"),
            "excerpt": _str("verbatim from that ref"),
        },
        "required": ["invocation_id", "tool_name", "raw_path", "excerpt"],
    }
    claim = {
        "type": "object",
        "properties": {
            "id": _str(),
            "text": _str(),
            "kind": {"type": "string", "enum": ["finding", "root_cause", "negative_observation"]},
            "citations": _array(citation, DRAFT_ARRAY_BOUNDS["citations"]),
        },
        "required": ["id", "text", "kind", "citations"],
    }
    hypothesis = {
        "type": "object",
        "properties": {
            "statement": _str(),
            "component": enum("component"),
            "mechanism": enum("mechanism"),
            "status": {"type": "string", "enum": ["confirmed", "ruled_out", "explained", "open"]},
            "claim_ids": _strings(DRAFT_ARRAY_BOUNDS["claim_ids"]),
        },
        "required": ["statement", "component", "mechanism", "status", "claim_ids"],
    }
    # The root-cause object is written once under $defs: the root cause and each contributing
    # cause refer to it, so the second use adds a few bytes to the grammar, not a second copy.
    defs["cause"] = {
        "type": "object",
        "properties": {
            "component": enum("component"),
            "mechanism": enum("mechanism"),
            "culprit": _str("session, pid, host, query or config line"),
            "claim_ids": _strings(DRAFT_ARRAY_BOUNDS["claim_ids"]),
        },
        "required": ["component", "mechanism", "culprit", "claim_ids"],
    }
    # When root_cause is null is the prompt's rule 5 (not repeated here: the first prompt's budget).
    root_cause = {"anyOf": [{"$ref": "#/$defs/cause"}, {"type": "null"}]}
    contributing = _array({"$ref": "#/$defs/cause"}, DRAFT_ARRAY_BOUNDS["contributing_causes"])
    recovery = {
        "type": "object",
        "properties": {
            "action": enum("action"),
            "target": _str(),
            "risk": {"type": "string", "enum": ["low", "medium", "high"]},
            "requires_approval": {"type": "boolean"},
            "verification": _str(),
        },
        "required": ["action", "target", "risk", "requires_approval", "verification"],
    }
    return {
        "type": "object",
        "$defs": defs,
        "properties": {
            "summary": _str(),
            "claims": _array(claim, DRAFT_ARRAY_BOUNDS["claims"]),
            "hypotheses": _array(hypothesis, DRAFT_ARRAY_BOUNDS["hypotheses"]),
            "root_cause": root_cause,
            "contributing_causes": contributing,
            "recovery": _array(recovery, DRAFT_ARRAY_BOUNDS["recovery"]),
            "limitations": _strings(DRAFT_ARRAY_BOUNDS["limitations"]),
            "next_steps": _strings(DRAFT_ARRAY_BOUNDS["next_steps"]),
        },
        "required": ["summary", "claims", "hypotheses", "root_cause", "recovery", "limitations", "next_steps"],
    }
