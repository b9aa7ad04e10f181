"""SemanticGuard: does the verified evidence, and only it, support each claim?

Verdict per claim SUPPORTED | UNSUPPORTED; the draft publishes only if every claim is
SUPPORTED. The offline judge (default) is deterministic; the LLM judge asks the configured
model one claim per call. Errors, timeouts and unparseable output fail closed.
"""

from __future__ import annotations

import difflib
import json
import re
import unicodedata
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Literal, Protocol

from rootproof.agent.draft import Claim, DiagnosisDraft
from rootproof.guard.evidence import VerifiedEvidenceSnapshot
from rootproof.guard.rules import rules_for
from rootproof.tools.refs import fold_text

__all__ = [
    "JUDGE_VERSION",
    "ClaimVerdict",
    "GuardCode",
    "LlmCode",
    "LlmJudge",
    "OfflineCode",
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


class GuardCode(StrEnum):
    """Rules of the guard itself, whichever judge runs (`semantic_guard.common` in rules.yaml)."""

    EVERY_CLAIM_SUPPORTED = "EVERY_CLAIM_SUPPORTED"
    FAIL_CLOSED = "FAIL_CLOSED"


class OfflineCode(StrEnum):
    """Why the offline judge finds a claim UNSUPPORTED (`semantic_guard.offline`)."""

    NO_EVIDENCE = "NO_EVIDENCE"
    QUOTE_NOT_IN_EVIDENCE = "QUOTE_NOT_IN_EVIDENCE"
    ALTERED_COPY = "ALTERED_COPY"
    NUMBER_NOT_IN_EVIDENCE = "NUMBER_NOT_IN_EVIDENCE"
    IDENTIFIER_NOT_IN_EVIDENCE = "IDENTIFIER_NOT_IN_EVIDENCE"
    NEGATION_ADDED = "NEGATION_ADDED"
    NEGATION_DROPPED = "NEGATION_DROPPED"
    CAUSE_INVENTED = "CAUSE_INVENTED"
    COVERAGE_LOW = "COVERAGE_LOW"


class LlmCode(StrEnum):
    """Why the LLM judge finds a claim UNSUPPORTED (`semantic_guard.llm`)."""

    JUDGE_UNSUPPORTED = "JUDGE_UNSUPPORTED"
    JUDGE_NOT_ENOUGH_INFO = "JUDGE_NOT_ENOUGH_INFO"


@dataclass(frozen=True, kw_only=True)
class ClaimVerdict:
    """The judge's verdict on one claim, with the reason."""

    claim_id: str
    verdict: Verdict
    reason: str
    coverage: float | None = None
    code: str | None = None
    """The rule that failed (UNSUPPORTED only)."""


@dataclass(kw_only=True)
class SemanticResult:
    """Every claim's verdict; `available` False when the judge failed (fail closed)."""

    verdicts: list[ClaimVerdict] = field(default_factory=list)
    available: bool = True
    error: str | None = None
    judge: str = JUDGE_VERSION
    rule_set_version: str = ""
    rules: list[dict[str, str]] = field(default_factory=list)
    """The rules that ran: the guard's own and its judge's ({id, code, description})."""

    @property
    def supported(self) -> bool:
        """True only if the judge ran and every claim is SUPPORTED."""
        return self.available and all(v.verdict == "SUPPORTED" for v in self.verdicts)

    def as_dict(self) -> dict[str, Any]:
        """For the trace (`self_evaluation.semantic_guard`)."""
        return {
            "judge": self.judge,
            "rule_set_version": self.rule_set_version,
            "rules": self.rules,
            "available": self.available,
            "error": self.error,
            "supported": self.supported,
            "verdicts": [asdict(v) for v in self.verdicts],
        }


class Judge(Protocol):
    """Judges one claim against its premise (the verified excerpts)."""

    name: str
    rule_section: ClassVar[str]
    """Its section of rules.yaml (`offline`, `llm`)."""
    codes: ClassVar[type[StrEnum]]

    def judge(self, claim: Claim, premise: list[str], context: dict[str, Any]) -> ClaimVerdict:
        """Return the verdict; raise on failure (the guard fails closed)."""
        ...


_NUM = re.compile(r"(?<![A-Za-z0-9_.])\d+(?:\.\d+)?")
_IDENT = re.compile(
    r"\b(?:[A-Za-z0-9]+(?:[-_.:/][A-Za-z0-9]+)+|[A-Za-z]*\d+[A-Za-z][A-Za-z0-9]*|[A-Z]{2,}[0-9]*)\b"
)
_QUOTED = re.compile(r"[\"“「『]([^\"”」』]{4,})[\"”」』]")
_QUOTED_GREEDY = re.compile(r"[\"“「『](.+)[\"”」』]", re.S)
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
# Cues that name a failure mechanism, as sets of word stems (English) or substrings (Chinese).
# A claim may name only mechanisms its evidence shows or the draft itself investigates (its
# root cause and hypotheses); anything else is a cause the claim invented.
_CUE_PHRASES: dict[str, tuple[str, ...]] = {
    m: cues
    for m, cues in {
        "row_lock_contention": ("lock contention", "row lock", "lock wait", "blocking session"),
        "deadlock": ("deadlock",),
        "connection_exhaustion": ("connection exhaustion", "connections exhausted", "too many connections", "connection slots", "pool exhaustion", "pool exhausted"),
        "pool_leak": ("pool leak", "connection leak", "leak connection"),
        "slow_query": ("slow query", "query slow", "sequential scan", "missing index"),
        "replication_lag": ("replication lag", "replica lag", "replay lag"),
        "max_clients_reached": ("max client", "maxclient"),
        "memory_eviction": ("evict", "eviction", "maxmemory"),
        "upstream_timeout": ("upstream timeout", "upstream time", "gateway timeout"),
        "gc_pause": ("gc pause", "garbage collection", "full gc", "stop the world"),
        "oom_kill": ("oom", "out of memory", "oomkilled", "oom killer", "memory limit killed"),
        "disk_full": ("disk full", "disk being full", "disk is full", "disk was full", "no space left", "out of space", "enospc", "disk space"),
        "dns_resolution_failure": ("dns", "name resolution", "resolve the host", "nxdomain", "servfail"),
        "certificate_expired": ("certificate expired", "expired certificate", "expired tls certificate", "cert expired", "expired cert", "certificate has expired", "certificate expiry"),
        "bad_config_rollout": ("config rollout", "bad config", "configuration change", "config change", "rollout"),
        "cpu_saturation": ("cpu saturation", "cpu starvation", "cpu throttling", "high cpu", "cpu saturated"),
        "thread_pool_exhaustion": ("thread pool", "thread starvation", "executor saturated"),
        "queue_backlog": ("backlog", "consumer lag", "queue lag"),
        "network_partition": ("network partition", "packet loss", "network split"),
        # Narrow on purpose: "failover" alone also names nginx retrying the next upstream.
        "failover": ("database failover", "instance failover", "failed over to the standby", "failover to the standby"),
        "storage_full": ("storage full", "storage is full", "out of storage", "storage exhausted"),
        "checkpoint_storm": ("checkpoint storm", "frequent checkpoint", "checkpoints occurring too frequently"),
        "vacuum_storm": ("vacuum storm", "autovacuum storm", "wraparound"),
    }.items()
}
MECHANISM_CUES_ZH: dict[str, tuple[str, ...]] = {
    "row_lock_contention": ("行锁", "锁等待", "锁争用"),
    "deadlock": ("死锁",),
    "connection_exhaustion": ("连接耗尽", "连接数耗尽", "连接数打满"),
    "pool_leak": ("泄漏", "泄露"),
    "slow_query": ("慢查询",),
    "replication_lag": ("复制延迟", "主从延迟"),
    "max_clients_reached": ("最大客户端",),
    "memory_eviction": ("驱逐", "淘汰"),
    "upstream_timeout": ("上游超时",),
    "gc_pause": ("垃圾回收", "停顿"),
    "oom_kill": ("内存溢出", "内存不足", "oom"),
    "disk_full": ("磁盘满", "磁盘空间", "磁盘已满"),
    "dns_resolution_failure": ("域名解析", "解析失败"),
    "certificate_expired": ("证书过期", "证书已过期", "证书到期"),
    "bad_config_rollout": ("配置变更", "配置发布", "配置错误", "回滚"),
    "cpu_saturation": ("cpu 饱和", "cpu 打满"),
    "thread_pool_exhaustion": ("线程池",),
    "queue_backlog": ("积压",),
    "network_partition": ("网络分区", "丢包"),
    "failover": ("故障切换", "主备切换"),
    "storage_full": ("存储空间耗尽", "存储已满", "存储空间已满"),
    "checkpoint_storm": ("检查点风暴", "检查点过于频繁"),
    "vacuum_storm": ("vacuum 风暴", "清理风暴", "回卷"),
}
_FRAMING_STOP = frozenset(
    "root cause evidence partial signal ruled out points knowledge card query found match finding confirmed suggests "
    "indicates shows because due caused".split()
)


def _squash(text: str) -> str:
    return " ".join(fold_text(text).split())


def _numbers(text: str) -> set[str]:
    out = set()
    for m in _NUM.findall(text):
        out.add(m.rstrip("0").rstrip(".") if "." in m else m)
    return out


def _idents(text: str) -> set[str]:
    return {m.casefold() for m in _IDENT.findall(unicodedata.normalize("NFKC", text))}


def _content_words(text: str) -> list[str]:
    return [w for w in _LATIN_WORD.findall(fold_text(text)) if w not in _STOP and len(w) > 2]


def _stem(word: str) -> str:
    for suf in ("ing", "ed", "es", "s"):
        if word.endswith(suf) and len(word) - len(suf) >= 4:
            return word[: -len(suf)]
    return word


_PREFIXES = ("expir", "saturat", "exhaust", "resol", "evict", "collect", "starv", "throttl", "partition")


def _stem_word(w: str) -> str:
    for pre in _PREFIXES:
        if w.startswith(pre):
            return pre
    return _stem(w)


def _stem_seq(text: str) -> str:
    """The text as a sequence of word stems, space-separated and padded (for phrase lookups)."""
    return " " + " ".join(_stem_word(w) for w in re.findall(r"[a-z0-9]+", fold_text(text))) + " "


_CUE_SEQ: dict[str, tuple[str, ...]] = {}


def _cues(mechanism: str) -> tuple[str, ...]:
    """A mechanism's cue phrases as stem sequences (cached)."""
    if mechanism not in _CUE_SEQ:
        _CUE_SEQ[mechanism] = tuple(_stem_seq(p) for p in _CUE_PHRASES.get(mechanism, ()))
    return _CUE_SEQ[mechanism]


def _framing(text: str, excerpts: list[str]) -> tuple[str, bool]:
    """The claim text with every verbatim excerpt removed; whether any excerpt was quoted."""
    out = _squash(text)
    quoted = False
    for ex in sorted({_squash(e) for e in excerpts if e.strip()}, key=len, reverse=True):
        if ex and ex in out:
            out = out.replace(ex, " ")
            quoted = True
    # A quoted phrase taken from an excerpt is verbatim too ("… logs "No space left on device" …").
    # Not in JSON-like text or metric labels (`{k="v",…}`): there quotes delimit keys and values,
    # and removing them would cut a near-copy of a row or series into pieces the altered-copy and
    # quote checks no longer see.
    if '":' in out or '{"' in out or '="' in out:
        return out, quoted
    joined = "\n".join(_squash(e) for e in excerpts)
    for q in _QUOTED.findall(out):
        piece = _squash(q)
        if len(piece) >= 12 and " " in piece and piece in joined:
            out = out.replace(q, " ")
            quoted = True
    return out, quoted


def _altered_copy(framing: str, premise: str) -> str | None:
    """If the claim copies a stretch of the evidence and swaps a short piece of it, that piece.

    A near-verbatim claim ("Observed: starting job X on host-1") that changes a word next to
    a copied stretch ("… on deployer") replaces evidence rather than quoting it.
    """
    a, b = framing.strip(), _squash(premise)
    if len(a) < 12:
        return None
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    blocks = [blk for blk in sm.get_matching_blocks() if blk.size >= 12]
    if not blocks or sum(blk.size for blk in blocks) / len(a) < 0.5:
        return None
    # Re-align around the long blocks only: the piece of the claim between (or after) copied
    # stretches, against the evidence text at the same place.
    for blk, nxt in zip(blocks, [*blocks[1:], None], strict=True):
        i1, j1 = blk.a + blk.size, blk.b + blk.size
        i2 = nxt.a if nxt is not None else len(a)
        j2 = nxt.b if nxt is not None else min(len(b), j1 + 40)
        piece, orig = a[i1:i2].strip(), b[j1:j2].strip()
        if not piece or not orig or len(piece) > 40 or (nxt is None and "\n" in b[j1:j2]):
            continue
        # A swap is an entity (one or two tokens); longer text is commentary, judged by coverage.
        if len(piece.split()) <= 2 and piece != orig and re.search(r"[0-9a-z\u4e00-\u9fff]{2,}", piece) and not orig.startswith(piece):
            return piece
    return None


def _named_mechanisms(text: str, allowed: set[str] | frozenset[str] = frozenset()) -> set[str]:
    """Mechanisms the text names (as consecutive word stems, or Chinese cues), after removing the
    names of the `allowed` mechanisms so that, e.g., "thread pool exhaustion" is not read as
    "pool exhaustion"."""
    seq = _stem_seq(text)
    low = fold_text(text)
    for m in allowed:
        for cue in (_stem_seq(m.replace("_", " ")), *_cues(m)):
            seq = seq.replace(cue, " | ")
        for zh in MECHANISM_CUES_ZH.get(m, ()):
            low = low.replace(zh, " ")
    named = {m for m in _CUE_PHRASES if any(c in seq for c in _cues(m))}
    named |= {m for m, cues in MECHANISM_CUES_ZH.items() if any(c in low for c in cues)}
    return named


class OfflineJudge:
    """Deterministic judge over the claim's framing (its text minus the verbatim excerpts).

    Numbers and identifiers anywhere in the claim must occur in the verified evidence; the
    framing may not add a negation (or, without a quote, negate what the evidence states),
    may not name a mechanism the evidence does not show and the draft does not investigate,
    and its content words must be covered by the evidence (or, across languages, be close to
    it in the multilingual embedding).
    """

    name = JUDGE_VERSION
    rule_section: ClassVar[str] = "offline"
    codes: ClassVar[type[StrEnum]] = OfflineCode

    def __init__(self, embed: Callable[[list[str]], Any] | None = None, threshold: float = COVERAGE_THRESHOLD) -> None:
        self._embed = embed
        self.threshold = threshold

    def judge(self, claim: Claim, premise: list[str], context: dict[str, Any]) -> ClaimVerdict:
        text = unicodedata.normalize("NFKC", claim.text)
        prem = "\n".join(premise)
        prem_n = fold_text(prem)
        cid = claim.id

        def no(code: str, reason: str, cov: float | None = None) -> ClaimVerdict:
            return ClaimVerdict(claim_id=cid, verdict="UNSUPPORTED", reason=reason, coverage=cov, code=code)

        if not premise:
            return no(OfflineCode.NO_EVIDENCE, "no verified evidence")
        framing, quoted = _framing(text, premise)
        if not quoted:
            # A quote that is not one of the verified excerpts verbatim must still be in the evidence.
            for q in _QUOTED_GREEDY.findall(text) or _QUOTED.findall(text):
                if len(q.strip()) >= 4 and _squash(q) not in _squash(prem):
                    return no(OfflineCode.QUOTE_NOT_IN_EVIDENCE, f"quoted text not in the evidence: {q[:80]!r}")
        if not quoted:
            altered = _altered_copy(framing, prem)
            if altered is not None:
                return no(OfflineCode.ALTERED_COPY, f"the claim copies the evidence but changes it: {altered[:60]!r}")
        missing_num = _numbers(text) - _numbers(prem)
        if missing_num:
            return no(OfflineCode.NUMBER_NOT_IN_EVIDENCE, f"numbers not in the evidence: {sorted(missing_num)[:5]}")
        allowed = set(context.get("mechanisms", ()))
        exempt = {w.casefold() for w in context.get("vocabulary", ())} | {t.casefold() for t in context.get("tools", ())}
        prem_ids = _idents(prem)
        missing_id = {i for i in _idents(text) if i not in prem_ids and i not in prem_n and i not in exempt}
        if missing_id:
            return no(OfflineCode.IDENTIFIER_NOT_IN_EVIDENCE, f"identifiers not in the evidence: {sorted(missing_id)[:5]}")
        if claim.kind != "negative_observation":
            neg_en, neg_zh = _NEG_EN.search(framing), (_CJK.search(framing) and _NEG_ZH.search(framing))
            if quoted and (neg_en or neg_zh):
                return no(OfflineCode.NEGATION_ADDED, "the claim adds a negation to the evidence it quotes")
            if neg_en and not _NEG_EN.search(prem):
                return no(OfflineCode.NEGATION_ADDED, "the claim negates what the evidence states")
            if neg_zh and not (_NEG_EN.search(prem) or _NEG_ZH.search(prem)):
                return no(OfflineCode.NEGATION_ADDED, "the claim negates what the evidence states")
            for neg, word in _NEG_FOLLOW.findall(prem):
                w = word.casefold()
                if re.search(rf"\b{re.escape(w)}\b", framing) and not re.search(rf"\b(?:not|no|never|cannot)\s+{re.escape(w)}", framing):
                    return no(OfflineCode.NEGATION_DROPPED, f"the evidence says '{neg} {word}' but the claim drops the negation")
        shown = _named_mechanisms(prem)
        invented = sorted(_named_mechanisms(framing, allowed) - allowed - shown)
        if invented:
            return no(OfflineCode.CAUSE_INVENTED, f"names a cause the evidence does not show: {invented[0]}")
        words = [w for w in _content_words(framing) if w not in _FRAMING_STOP]
        if len(words) < 3:
            if quoted or not _CJK.search(framing) or self._embed is None:
                return ClaimVerdict(claim_id=cid, verdict="SUPPORTED", reason="quoted or identifier-level claim: numbers, identifiers and terms found in the evidence")
        else:
            prem_words = {_stem(w) for w in _content_words(prem)}
            allowed_words = {_stem(w) for m in allowed for w in m.split("_")} | {_stem(w) for w in context.get("vocabulary", ())}
            hits = sum(1 for w in words if _stem(w) in prem_words or _stem(w) in allowed_words)
            cov = hits / len(words)
            if cov >= self.threshold:
                return ClaimVerdict(claim_id=cid, verdict="SUPPORTED", reason="numbers, identifiers and terms found in the evidence", coverage=round(cov, 3))
            if not _CJK.search(framing) or self._embed is None:
                return no(OfflineCode.COVERAGE_LOW, f"term coverage {cov:.2f} below {self.threshold}", round(cov, 3))
        if self._embed is None:
            return no(OfflineCode.COVERAGE_LOW, "cross-lingual claim and no embedding to compare it")
        vecs = self._embed([framing if not quoted else text, prem[:2000]])
        sim = float((vecs[0] * vecs[1]).sum())
        if sim >= DENSE_THRESHOLD:
            return ClaimVerdict(claim_id=cid, verdict="SUPPORTED", reason=f"cross-lingual similarity {sim:.2f}", coverage=round(sim, 3))
        return no(OfflineCode.COVERAGE_LOW, f"similarity {sim:.2f} below {DENSE_THRESHOLD}", round(sim, 3))


class LlmJudge:
    """Asks a model one claim per call; 'not enough info' counts as UNSUPPORTED."""

    name = "llm-judge-v1"
    rule_section: ClassVar[str] = "llm"
    codes: ClassVar[type[StrEnum]] = LlmCode

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
        reason = str(data.get("reason", ""))[:500]
        if verdict == "SUPPORTED":
            return ClaimVerdict(claim_id=claim.id, verdict="SUPPORTED", reason=reason)
        code = LlmCode.JUDGE_NOT_ENOUGH_INFO if verdict == "NOT_ENOUGH_INFO" else LlmCode.JUDGE_UNSUPPORTED
        return ClaimVerdict(claim_id=claim.id, verdict="UNSUPPORTED", reason=reason, code=code)


class SemanticGuard:
    """Runs the judge on every claim; any failure fails closed."""

    def __init__(self, judge: Judge) -> None:
        self.judge = judge

    def check(self, draft: DiagnosisDraft, snapshot: VerifiedEvidenceSnapshot, *, question: str = "", tool_trace: list[dict[str, Any]] | None = None) -> SemanticResult:
        """Verdict per claim; the guard never rewrites the draft.

        Every claim is judged, so the claims of the root cause and of each contributing cause
        are each held to their own evidence; the causes' mechanisms are what the draft itself
        investigates (a claim may name them)."""
        mechanisms = {cause.mechanism for cause in draft.causes()}
        mechanisms |= {h.mechanism for h in draft.hypotheses}
        vocabulary: set[str] = set()
        for h in draft.hypotheses:
            vocabulary |= set(_content_words(h.component.replace("_", " "))) | set(h.mechanism.split("_") + h.component.split("_"))
        version, common = rules_for("semantic_guard.common", GuardCode)
        _, own = rules_for(f"semantic_guard.{self.judge.rule_section}", self.judge.codes)
        result = SemanticResult(judge=self.judge.name, rule_set_version=version, rules=common + own)
        try:
            for claim in draft.claims:
                premise = [c.excerpt for c in snapshot.for_claim(claim.id)]
                ctx = {"mechanisms": mechanisms, "vocabulary": vocabulary, "question": question, "tool_trace": tool_trace or [], "tools": {c.tool_name for c in snapshot.citations}}
                result.verdicts.append(self.judge.judge(claim, premise, ctx))
        except Exception as exc:  # fail closed: any judge failure withholds the draft
            result.available = False
            result.error = f"{type(exc).__name__}: {str(exc)[:200]}"
        return result
