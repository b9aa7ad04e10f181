"""SafeFallbackFactory: every path but SUPPORTED gets a fallback built by code from a fixed template.

Never written by a model; in the question's language; `conclusion` is always null and
`verified_sources` lists only what the EvidenceGuard verified (empty when it failed). The
harness may add limitation lines built by code from the run's own record after the template's
(`call_limitation`: a tool call that was refused, timed out or failed; `model_limitation`: what
the model server answered), never text a model wrote.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

from rootproof.boundary.safety import redact
from rootproof.boundary.store import CanonicalInvocation

__all__ = ["FallbackType", "SafeFallbackFactory", "call_limitation", "model_limitation"]

ARGS_CAP = 120
"""Characters of a call's arguments quoted in a limitation line."""
MESSAGE_CAP = 240
"""Characters of a refusal or error message quoted in a limitation line."""


class FallbackType(StrEnum):
    """Why no diagnosis was published."""

    EVIDENCE_VALIDATION_FAILED = "EVIDENCE_VALIDATION_FAILED"
    SEMANTIC_UNSUPPORTED = "SEMANTIC_UNSUPPORTED"
    GUARD_UNAVAILABLE = "GUARD_UNAVAILABLE"
    NO_DRAFT = "NO_DRAFT"
    BUDGET_EXHAUSTED = "BUDGET_EXHAUSTED"
    INSUFFICIENT_EVIDENCE = "INSUFFICIENT_EVIDENCE"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    MODEL_UNAVAILABLE = "MODEL_UNAVAILABLE"
    INTERNAL_ERROR = "INTERNAL_ERROR"


_T = FallbackType
# type: (message, limitations, next_steps) per language
_TEMPLATES: dict[FallbackType, dict[str, tuple[str, list[str], list[str]]]] = {
    _T.EVIDENCE_VALIDATION_FAILED: {
        "zh": ("当前证据无法完成真实性校验，无法确认根因", ["证据引用校验未通过"], ["重新收集当前诊断范围内的证据后再发起诊断"]),
        "en": ("The evidence could not be verified, so no root cause can be confirmed", ["The evidence citations did not pass verification"], ["Collect evidence in the current diagnosis scope again, then diagnose again"]),
    },
    _T.SEMANTIC_UNSUPPORTED: {
        "zh": ("已验真的证据不足以支持诊断结论，无法确认根因", ["已验真的证据不支持部分结论"], ["补充与结论直接相关的运行时证据后再发起诊断"]),
        "en": ("The verified evidence does not support the diagnosis, so no root cause can be confirmed", ["Part of the conclusion is not supported by the verified evidence"], ["Gather runtime evidence that bears directly on the conclusion, then diagnose again"]),
    },
    _T.GUARD_UNAVAILABLE: {
        "zh": ("结论校验暂时不可用，未发布诊断结论", ["结论校验服务不可用"], ["稍后重新发起诊断"]),
        "en": ("Validation was unavailable, so no diagnosis was published", ["The conclusion could not be validated"], ["Run the diagnosis again later"]),
    },
    _T.NO_DRAFT: {
        "zh": ("诊断未形成可校验的结论", ["模型未给出可解析的诊断草稿"], ["缩小问题范围或补充告警信息后重新发起诊断"]),
        "en": ("The diagnosis produced no conclusion that could be checked", ["The model gave no draft that could be parsed"], ["Narrow the question or add alert details, then diagnose again"]),
    },
    _T.BUDGET_EXHAUSTED: {
        "zh": ("诊断预算已用尽，未形成可发布的结论", ["模型调用、工具调用或 Token 预算已用尽"], ["缩小诊断范围或提高预算后重新发起诊断"]),
        "en": ("The diagnosis budget ran out before a publishable conclusion", ["Model calls, tool calls or tokens ran out"], ["Narrow the scope or raise the budget, then diagnose again"]),
    },
    _T.INSUFFICIENT_EVIDENCE: {
        "zh": ("多数工具调用被拒绝、超时或失败，证据不足，未发布诊断结论", ["多数运行时工具调用未返回证据"], ["排除下列工具调用被拒绝或失败的原因（后端、超时、预算）后重新发起诊断"]),
        "en": ("Most tool calls were refused, timed out or failed, so the evidence is too thin to publish a diagnosis", ["Most runtime tool calls returned no evidence"], ["Fix what refused or failed the tool calls listed (backends, timeouts, budget), then diagnose again"]),
    },
    _T.DEADLINE_EXCEEDED: {
        "zh": ("诊断超时，未形成可发布的结论", ["诊断在截止时间前未完成"], ["缩小诊断范围或延长截止时间后重新发起诊断"]),
        "en": ("The diagnosis ran out of time before a publishable conclusion", ["The diagnosis did not finish before its deadline"], ["Narrow the scope or extend the deadline, then diagnose again"]),
    },
    _T.MODEL_UNAVAILABLE: {
        "zh": ("模型服务不可用，未能完成诊断", ["模型服务多次重试后仍不可用"], ["检查模型服务状态后重新发起诊断"]),
        "en": ("The model service was unavailable, so the diagnosis could not finish", ["The model service stayed unavailable after retries"], ["Check the model service, then diagnose again"]),
    },
    _T.INTERNAL_ERROR: {
        "zh": ("系统内部错误，未能完成诊断", ["诊断过程中发生内部错误"], ["稍后重新发起诊断；如持续出现请联系平台管理员"]),
        "en": ("An internal error stopped the diagnosis", ["An internal error occurred during the diagnosis"], ["Run the diagnosis again later; contact the platform team if it persists"]),
    },
}


class SafeFallbackFactory:
    """Builds the public fallback content."""

    @staticmethod
    def build(
        kind: FallbackType | str,
        language: str,
        verified_sources: list[dict[str, str]] | None = None,
        extra_limitations: list[str] | None = None,
    ) -> dict[str, Any]:
        """The `SAFE_FALLBACK` content for `kind` in `language` (zh or en).

        `extra_limitations` (lines built by `call_limitation` / `model_limitation`) follow the
        template's own limitations.
        """
        tmpl = _TEMPLATES[FallbackType(kind)]["zh" if language == "zh" else "en"]
        message, limitations, next_steps = tmpl
        return {
            "content_type": "SAFE_FALLBACK",
            "fallback": {
                "type": str(FallbackType(kind)),
                "conclusion": None,
                "message": message,
                "verified_sources": list(verified_sources or []),
                "limitations": list(limitations) + list(extra_limitations or []),
                "next_steps": list(next_steps),
            },
        }


def _clip(text: str, cap: int) -> str:
    return text if len(text) <= cap else text[: cap - 1] + "…"


def call_limitation(inv: CanonicalInvocation, language: str) -> str:
    """One line naming a call that was refused, timed out or failed: tool, arguments in short, code, message."""
    args = inv.arguments if isinstance(inv.arguments, str) else json.dumps(inv.arguments, ensure_ascii=False, sort_keys=True)
    status = str(inv.status)
    code = f"{status} {inv.refusal_code}" if inv.refusal_code and inv.refusal_code != status else status
    message = _clip(redact(" ".join((inv.message or "").split())), MESSAGE_CAP)
    what = f"{inv.tool_name} {_clip(redact(args), ARGS_CAP)}: {code}"
    if language == "zh":
        return f"工具调用 {what}" + (f"（{message}）" if message else "")
    return f"tool call {what}" + (f" ({message})" if message else "")


def model_limitation(detail: str, language: str, *, status: int | None = None) -> str:
    """One line saying what the model server answered (`detail` has its secrets removed here)."""
    text = _clip(redact(" ".join(detail.split())), MESSAGE_CAP)
    if status in (401, 403):
        return f"模型服务拒绝了 API 密钥（{text}）" if language == "zh" else f"The model server rejected the API key ({text})"
    return f"模型服务：{text}" if language == "zh" else f"Model server: {text}"
