"""The offline model: the evidence-first planner of `rootproof.diagnosis` (docs/diagnosis.md) as a
`Model`, and the KNOWLEDGE_QUERY path's knowledge answerer. Deterministic and explainable: no
scenario ids, no ground truth, no per-incident rules."""

from __future__ import annotations

from typing import Any

from rootproof.agent.models.base import ModelRequest, ModelTurn, ToolCall
from rootproof.agent.models.evidence_view import observations_from
from rootproof.diagnosis.candidates import Candidate
from rootproof.diagnosis.plan import _widest_since
from rootproof.diagnosis.planner import EvidencePlanner
from rootproof.diagnosis.state import _excerpt, _question, _record

__all__ = ["Candidate", "KnowledgeAnswerer", "OfflinePlanner", "_record", "_widest_since"]


class OfflinePlanner(EvidencePlanner):
    """The embedded default model (`MODEL=offline`): the evidence-first planner, unchanged."""


class KnowledgeAnswerer:
    """The KNOWLEDGE_QUERY path's offline model: look the question up, answer citing the cards."""

    name = "offline-knowledge-v1"

    def __init__(self, language: str) -> None:
        self.zh = language == "zh"

    def step(self, request: ModelRequest) -> ModelTurn:
        question = _question(request)
        observations = observations_from(request.messages)
        if not observations and request.mode == "gather":
            return ModelTurn(tool_calls=[ToolCall(id="k0", name="lookup_knowledge", arguments={"query": question[:1000], "top_k": 3})])
        claims: list[dict[str, Any]] = []
        titles: list[str] = []
        for o in observations:
            if not o.ready:
                continue
            for ref in o.refs[:3]:
                path = str(ref.get("raw_path"))
                text = str(ref.get("text", ""))
                ex = _excerpt(text, [])
                if path == "$.no_evidence":
                    claims.append({"id": f"c{len(claims) + 1}", "text": (f"知识库没有匹配：“{ex}”" if self.zh else f"The knowledge base found no match: \"{ex}\""), "kind": "negative_observation", "citations": [{"invocation_id": o.invocation_id, "tool_name": o.tool, "raw_path": path, "excerpt": ex}]})
                    continue
                titles.append(text.split("]", 1)[-1].split(":", 1)[0].strip())
                claims.append({"id": f"c{len(claims) + 1}", "text": (f"知识卡片：“{ex}”" if self.zh else f"Knowledge card: \"{ex}\""), "kind": "finding", "citations": [{"invocation_id": o.invocation_id, "tool_name": o.tool, "raw_path": path, "excerpt": ex}]})
        if titles:
            summary = ("相关知识卡片：" if self.zh else "Relevant knowledge cards: ") + "; ".join(titles)
        else:
            summary = "知识库中没有覆盖这个问题的卡片。" if self.zh else "No knowledge card covers this question."
        return ModelTurn(draft={"answer_version": "diagnosis_draft_v1", "summary": summary, "root_cause": None, "claims": claims[:12]})
