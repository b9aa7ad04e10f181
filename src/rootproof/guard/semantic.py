"""SemanticGuard: does the verified evidence, and only it, support each claim?

Verdict per claim SUPPORTED | UNSUPPORTED; the draft publishes only if every claim is
SUPPORTED. The offline judge (default) is deterministic; the LLM judge asks the configured
model one claim per call. Errors, timeouts and unparseable output fail closed.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

from rootproof.agent.draft import Claim, DiagnosisDraft
from rootproof.guard.evidence import VerifiedEvidenceSnapshot

__all__ = [
    "JUDGE_VERSION",
    "ClaimVerdict",
    "LlmJudge",
    "OfflineJudge",
    "SemanticGuard",
    "SemanticResult",
]

JUDGE_VERSION = "offline-judge-v1"
# Calibrated on the guard benchmark's calibration split (valid drafts vs. unsupported
# mutations, drafts apart from the reported ones): the lowest coverage of a valid claim was
# 0.67 and the highest of an invented-cause mutation 0.45; the threshold sits between.
COVERAGE_THRESHOLD = 0.55
DENSE_THRESHOLD = 0.35

Verdict = Literal["SUPPORTED", "UNSUPPORTED"]


@dataclass(frozen=True, kw_only=True)
class ClaimVerdict:
    """The judge's verdict on one claim, with the reason."""

    claim_id: str
    verdict: Verdict
    reason: str
    coverage: float | None = None


@dataclass(kw_only=True)
class SemanticResult:
    """Every claim's verdict; `available` False when the judge failed (fail closed)."""

    verdicts: list[ClaimVerdict] = field(default_factory=list)
    available: bool = True
    error: str | None = None
    judge: str = JUDGE_VERSION

    @property
    def supported(self) -> bool:
        """True only if the judge ran and every claim is SUPPORTED."""
        return self.available and all(v.verdict == "SUPPORTED" for v in self.verdicts)

    def as_dict(self) -> dict[str, Any]:
        """For the trace (`self_evaluation.semantic_guard`)."""
        return {"judge": self.judge, "available": self.available, "error": self.error, "supported": self.supported, "verdicts": [asdict(v) for v in self.verdicts]}


class Judge(Protocol):
    """Judges one claim against its premise (the verified excerpts)."""

    name: str

    def judge(self, claim: Claim, premise: list[str], context: dict[str, Any]) -> ClaimVerdict:
        """Return the verdict; raise on failure (the guard fails closed)."""
        ...


_NUM = re.compile(r"(?<![A-Za-z0-9_.])\d+(?:\.\d+)?")
_IDENT = re.compile(
    r"\b(?:[A-Za-z0-9]+(?:[-_.:/][A-Za-z0-9]+)+|[A-Za-z]*\d+[A-Za-z][A-Za-z0-9]*|[A-Z]{2,}[0-9]*)\b"
)
_QUOTED = re.compile(r"[\"“「『]([^\"”」』]{4,})[\"”」』]")
_LATIN_WORD = re.compile(r"[a-z][a-z0-9_]+")
_CJK = re.compile(r"[\u4e00-\u9fff]")
_NEG_EN = re.compile(r"\b(?:not|no|never|without|none|cannot|can't|didn't|doesn't|isn't|wasn't|won't)\b", re.I)
_NEG_ZH = re.compile(r"未|没有|没|不|无|非")
_NEG_FOLLOW = re.compile(r"\b(not|no|never|cannot)\s+([a-z]{3,})", re.I)
_STOP = frozenset(
    "the a an of in on at to for from by with and or is are was were be been being this that these those it its as "
    "shows show showed logs log entry entries line lines row rows evidence ref refs query cited cites says reports "
    "reported which while over after before during into than then there their they has have had also".split()
)
# Words that name a failure mechanism: a claim may only use those the evidence contains or the
# draft itself investigates (its root cause and hypotheses).
MECHANISM_WORDS: dict[str, tuple[str, ...]] = {
    "row_lock_contention": ("lock contention", "row lock", "行锁", "锁等待"),
    "deadlock": ("deadlock", "死锁"),
    "connection_exhaustion": ("connection exhaustion", "too many connections", "连接耗尽"),
    "pool_leak": ("pool leak", "connection leak", "连接泄漏", "连接池泄漏"),
    "slow_query": ("slow query", "慢查询"),
    "replication_lag": ("replication lag", "复制延迟"),
    "max_clients_reached": ("max clients", "maxclients", "最大客户端"),
    "memory_eviction": ("eviction", "evicted", "驱逐", "淘汰"),
    "upstream_timeout": ("upstream timeout", "upstream timed out", "上游超时"),
    "gc_pause": ("gc pause", "garbage collection", "垃圾回收", "GC 停顿"),
    "oom_kill": ("oom", "out of memory", "内存溢出", "oom kill"),
    "disk_full": ("disk full", "no space left", "磁盘满", "磁盘空间"),
    "dns_resolution_failure": ("dns", "name resolution", "域名解析"),
    "certificate_expired": ("certificate expired", "certificate has expired", "证书过期"),
    "bad_config_rollout": ("config rollout", "bad config", "配置变更", "配置发布"),
    "cpu_saturation": ("cpu saturation", "cpu 饱和", "cpu saturated"),
    "thread_pool_exhaustion": ("thread pool", "线程池"),
    "queue_backlog": ("backlog", "consumer lag", "积压"),
    "network_partition": ("network partition", "网络分区", "packet loss", "丢包"),
}


def _norm(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def _numbers(text: str) -> set[str]:
    out = set()
    for m in _NUM.findall(text):
        out.add(m.rstrip("0").rstrip(".") if "." in m else m)
    return out


def _idents(text: str) -> set[str]:
    return {m.casefold() for m in _IDENT.findall(unicodedata.normalize("NFKC", text))}


def _content_words(text: str) -> list[str]:
    return [w for w in _LATIN_WORD.findall(_norm(text)) if w not in _STOP and len(w) > 2]


def _stem(word: str) -> str:
    for suf in ("ing", "ed", "es", "s"):
        if word.endswith(suf) and len(word) - len(suf) >= 4:
            return word[: -len(suf)]
    return word


class OfflineJudge:
    """Deterministic judge: numbers, identifiers, negations and coverage must hold in the premise."""

    name = JUDGE_VERSION

    def __init__(self, embed: Callable[[list[str]], Any] | None = None, threshold: float = COVERAGE_THRESHOLD) -> None:
        self._embed = embed
        self.threshold = threshold

    def judge(self, claim: Claim, premise: list[str], context: dict[str, Any]) -> ClaimVerdict:
        text = unicodedata.normalize("NFKC", claim.text)
        prem = "\n".join(premise)
        prem_n = _norm(prem)
        cid = claim.id

        def no(reason: str, cov: float | None = None) -> ClaimVerdict:
            return ClaimVerdict(claim_id=cid, verdict="UNSUPPORTED", reason=reason, coverage=cov)

        if not premise:
            return no("no verified evidence")
        for q in _QUOTED.findall(text):
            if " ".join(_norm(q).split()) not in " ".join(prem_n.split()):
                return no(f"quoted text not in the evidence: {q[:80]!r}")
        missing_num = _numbers(text) - _numbers(prem)
        if missing_num:
            return no(f"numbers not in the evidence: {sorted(missing_num)[:5]}")
        prem_ids = _idents(prem)
        exempt = {w.casefold() for m in context.get("mechanisms", ()) for w in MECHANISM_WORDS.get(m, ())} | {
            w.casefold() for w in context.get("vocabulary", ())
        }
        missing_id = {i for i in _idents(text) if i not in prem_ids and i not in prem_n and i not in exempt}
        if missing_id:
            return no(f"identifiers not in the evidence: {sorted(missing_id)[:5]}")
        if claim.kind != "negative_observation":
            if _NEG_EN.search(text) and not _NEG_EN.search(prem):
                return no("the claim negates what the evidence states")
            if _CJK.search(text) and _NEG_ZH.search(text) and not (_NEG_EN.search(prem) or _NEG_ZH.search(prem)):
                return no("the claim negates what the evidence states")
            claim_n = _norm(text)
            for neg, word in _NEG_FOLLOW.findall(prem):
                w = word.casefold()
                if re.search(rf"\b{re.escape(w)}\b", claim_n) and not re.search(rf"\b(?:not|no|never|cannot)\s+{re.escape(w)}", claim_n):
                    return no(f"the evidence says '{neg} {word}' but the claim drops the negation")
        allowed = set(context.get("mechanisms", ()))
        claim_n = _norm(text)
        for mech, mech_words in MECHANISM_WORDS.items():
            if mech in allowed:
                continue
            for w in mech_words:
                if _norm(w) in claim_n and _norm(w) not in prem_n:
                    return no(f"names a cause the evidence does not show: {w!r}")
        quotes = _QUOTED.findall(text)
        words = _content_words(_QUOTED.sub(" ", text) if quotes else text)
        if quotes and len(words) < 3:
            return ClaimVerdict(claim_id=cid, verdict="SUPPORTED", reason="quoted evidence verbatim; numbers and identifiers found in the evidence", coverage=None)
        prem_words = {_stem(w) for w in _content_words(prem)}
        allowed_words = {_stem(w) for m in allowed for w in m.split("_")} | {_stem(w) for w in context.get("vocabulary", ())}
        if len(words) >= 3:
            hits = sum(1 for w in words if _stem(w) in prem_words or _stem(w) in allowed_words)
            cov = hits / len(words)
            if cov >= self.threshold:
                return ClaimVerdict(claim_id=cid, verdict="SUPPORTED", reason="numbers, identifiers and terms found in the evidence", coverage=round(cov, 3))
            if not _CJK.search(text) or self._embed is None:
                return no(f"term coverage {cov:.2f} below {self.threshold}", round(cov, 3))
        if self._embed is None:
            return ClaimVerdict(claim_id=cid, verdict="SUPPORTED", reason="numbers and identifiers found in the evidence; too few terms to measure coverage", coverage=None)
        vecs = self._embed([text, prem[:2000]])
        sim = float((vecs[0] * vecs[1]).sum())
        if sim >= DENSE_THRESHOLD:
            return ClaimVerdict(claim_id=cid, verdict="SUPPORTED", reason=f"cross-lingual similarity {sim:.2f}", coverage=round(sim, 3))
        return no(f"similarity {sim:.2f} below {DENSE_THRESHOLD}", round(sim, 3))


class LlmJudge:
    """Asks a model one claim per call; 'not enough info' counts as UNSUPPORTED."""

    name = "llm-judge-v1"

    def __init__(self, ask: Callable[[str, str], str]) -> None:
        """`ask(system, user) -> text` calls the configured model at temperature 0."""
        self._ask = ask

    def judge(self, claim: Claim, premise: list[str], context: dict[str, Any]) -> ClaimVerdict:
        from rootproof.agent.prompts import load_prompt

        system = load_prompt("semantic_judge").text
        user = json.dumps({"question": context.get("question", ""), "claim": claim.text, "evidence": premise, "tool_trace": context.get("tool_trace", [])}, ensure_ascii=False)
        out = self._ask(system, user)
        m = re.search(r"\{.*\}", out, re.S)
        if not m:
            raise ValueError("judge output has no JSON object")
        data = json.loads(m.group(0))
        verdict = str(data.get("verdict", "")).upper()
        if verdict not in ("SUPPORTED", "UNSUPPORTED", "NOT_ENOUGH_INFO"):
            raise ValueError(f"judge verdict {verdict!r} is not one of SUPPORTED, UNSUPPORTED, NOT_ENOUGH_INFO")
        final: Verdict = "SUPPORTED" if verdict == "SUPPORTED" else "UNSUPPORTED"
        return ClaimVerdict(claim_id=claim.id, verdict=final, reason=str(data.get("reason", ""))[:500])


class SemanticGuard:
    """Runs the judge on every claim; any failure fails closed."""

    def __init__(self, judge: Judge) -> None:
        self.judge = judge

    def check(self, draft: DiagnosisDraft, snapshot: VerifiedEvidenceSnapshot, *, question: str = "", tool_trace: list[dict[str, Any]] | None = None) -> SemanticResult:
        """Verdict per claim; the guard never rewrites the draft."""
        mechanisms = set()
        if draft.root_cause is not None:
            mechanisms.add(draft.root_cause.mechanism)
        mechanisms |= {h.mechanism for h in draft.hypotheses}
        vocabulary: set[str] = set()
        for h in draft.hypotheses:
            vocabulary |= set(_content_words(h.component.replace("_", " "))) | {"gc", "oom", "dns", "cpu", "tls", "jvm"} & set(h.mechanism.split("_") + h.component.split("_"))
        result = SemanticResult(judge=self.judge.name)
        try:
            for claim in draft.claims:
                premise = [c.excerpt for c in snapshot.for_claim(claim.id)]
                ctx = {"mechanisms": mechanisms, "vocabulary": vocabulary, "question": question, "tool_trace": tool_trace or []}
                result.verdicts.append(self.judge.judge(claim, premise, ctx))
        except Exception as exc:  # fail closed: any judge failure withholds the draft
            result.available = False
            result.error = f"{type(exc).__name__}: {str(exc)[:200]}"
        return result
