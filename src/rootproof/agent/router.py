"""Router: SYSTEM_CHAT | KNOWLEDGE_QUERY | DIAGNOSIS. Decides the path only; when unsure, DIAGNOSIS."""

from __future__ import annotations

import json
import re
from enum import StrEnum

from rootproof.agent.models.base import Model, ModelRequest, SystemMessage, UserMessage
from rootproof.agent.prompts import load_prompt
from rootproof.errors import ModelError
from rootproof.run.context import RunContext

__all__ = ["Route", "route"]

MAX_INPUT_CHARS = 2000


class Route(StrEnum):
    """The three paths."""

    SYSTEM_CHAT = "SYSTEM_CHAT"
    KNOWLEDGE_QUERY = "KNOWLEDGE_QUERY"
    DIAGNOSIS = "DIAGNOSIS"


_CHAT = re.compile(
    r"^\s*(hi|hello|hey|thanks|thank you|who are you|what can you do|help|你好|您好|谢谢|你是谁|你能做什么|帮助)\W*$", re.I
)
_KNOWLEDGE = re.compile(
    r"(what (is|are|does)|what's|meaning of|explain|how (do|does|to|can) i|difference between|什么是|是什么|含义|什么意思|如何|怎么|区别)",
    re.I,
)
_INCIDENT = re.compile(
    r"(now|currently|right now|today|since|recent|lately|our |my |is down|are down|failing|timing out|timeouts? (are|is)|"
    r"spik|alert|incident|outage|最近|现在|目前|刚才|今天|出现|告警|故障|报错|超时了|挂了)",
    re.I,
)


def offline_route(message: str, *, incident_scope: bool) -> Route:
    """Rules: greetings → SYSTEM_CHAT; a general 'what/how' question without incident words → KNOWLEDGE_QUERY."""
    text = message[:MAX_INPUT_CHARS]
    if _CHAT.match(text):
        return Route.SYSTEM_CHAT
    if incident_scope:
        return Route.DIAGNOSIS
    if _KNOWLEDGE.search(text) and not _INCIDENT.search(text):
        return Route.KNOWLEDGE_QUERY
    return Route.DIAGNOSIS


def route(ctx: RunContext, message: str, *, incident_scope: bool, model: Model | None = None, alert: bool = False) -> Route:
    """Route with the model when given (1 call + 1 retry, its own timeout), else by rules.

    An alert payload is an incident by definition: it goes to DIAGNOSIS without asking anyone.
    """
    if alert:
        return Route.DIAGNOSIS
    if model is None:
        return offline_route(message, incident_scope=incident_scope)
    prompt = load_prompt("router").text
    deadline = min(ctx.budget.router_timeout_s, ctx.time_left())
    for _ in range(ctx.budget.router_calls):
        if ctx.usage.router_calls >= ctx.budget.router_calls:
            break
        ctx.usage.router_calls += 1
        try:
            turn = model.step(
                ModelRequest(
                    messages=[SystemMessage(content=prompt), UserMessage(content=message[:MAX_INPUT_CHARS])],
                    tools=[],
                    draft_schema={},
                    mode="gather",
                    time_left=lambda: deadline,
                )
            )
        except ModelError:
            continue
        ctx.usage.add_tokens(turn.usage.total)
        m = re.search(r"\{.*\}", turn.text or "", re.S)
        try:
            value = json.loads(m.group(0))["route"] if m else ""
            chosen = Route(str(value).upper())
        except (ValueError, KeyError, TypeError):
            continue
        if incident_scope and chosen is Route.KNOWLEDGE_QUERY:
            return Route.DIAGNOSIS
        return chosen
    return Route.DIAGNOSIS
