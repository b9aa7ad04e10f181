"""Versioned prompt contracts, one file per role."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

__all__ = ["PROMPT_SET_VERSION", "Prompt", "load_prompt", "prompt_audit"]

PROMPT_SET_VERSION = "rootproof-prompts-v1"


@dataclass(frozen=True, kw_only=True)
class Prompt:
    """One prompt contract."""

    name: str
    version: str
    resource: str
    text: str


@cache
def load_prompt(name: str) -> Prompt:
    """Load `prompts/<name>.md`; its first line is `version: <v>`."""
    raw = resources.files(__name__).joinpath(f"{name}.md").read_text(encoding="utf-8")
    first, _, body = raw.partition("\n")
    version = first.split(":", 1)[1].strip() if first.startswith("version:") else "unversioned"
    return Prompt(name=name, version=version, resource=f"rootproof/agent/prompts/{name}.md", text=body.strip())


def prompt_audit(names: list[str]) -> dict[str, Any]:
    """`{version, prompts: [{name, version, resource}]}`: versions and paths, never prompt text."""
    prompts = [load_prompt(n) for n in names]
    return {"version": PROMPT_SET_VERSION, "prompts": [{"name": p.name, "version": p.version, "resource": p.resource} for p in prompts]}
