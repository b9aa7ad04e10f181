"""Where a JSON document nests too deep: the path of the first value below `limit` levels.

Python's JSON decoder gives up on a document nested some thousands of levels deep with a
`RecursionError` that says nothing of where. This scanner walks the text once, iteratively
(strings and escapes skipped, no value decoded), and names the field the way the service's
problems do (`alerts[0].labels[0]`), so a 100 000-deep `alert` is a problem naming
`alert[0][0][0]` rather than the whole body.
"""

from __future__ import annotations

__all__ = ["DEPTH_LIMIT", "too_deep"]

DEPTH_LIMIT = 256
"""Levels a field's path is followed to: a document the decoder refused nests deeper than this."""

_SHOWN = 4
"""Path components named: the field and a few levels into it (`alert[0][0][0]`), not thousands."""


def _path(stack: list[list[object]]) -> str:
    if stack and stack[0][0] == "[":
        return "(body)"  # a top-level array has no field to name
    out = ""
    for kind, key in stack[:_SHOWN]:
        if kind == "[":
            out += f"[{key}]"
        elif key is not None:
            out += ("." if out else "") + str(key)
    return out or "(body)"


def too_deep(text: str, limit: int = DEPTH_LIMIT) -> str | None:
    """The path of the container opened at depth `limit` + 1 (or `(body)` at the top), or None
    when the document never nests that deep. Malformed text is scanned as far as it goes."""
    stack: list[list[object]] = []  # [kind, current key or index]
    i, n = 0, len(text)
    expect_key = False
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            if expect_key and stack and stack[-1][0] == "{":
                stack[-1][1] = text[i + 1 : j][:64]
                expect_key = False
            i = j + 1
            continue
        if c in "{[":
            if len(stack) >= limit:
                return _path(stack)
            stack.append([c, 0 if c == "[" else None])
            expect_key = c == "{"
        elif c in "}]":
            if stack:
                stack.pop()
            expect_key = False
        elif c == ",":
            if stack and stack[-1][0] == "[":
                stack[-1][1] = int(stack[-1][1]) + 1  # type: ignore[call-overload]
            elif stack:
                expect_key = True
        i += 1
    return None
