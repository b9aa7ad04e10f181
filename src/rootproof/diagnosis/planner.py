"""The evidence-first planner (docs/diagnosis.md): the offline model's whole decision, one
stage per module (`plan`, `candidates`, `verdict`, `draft`), driven by `step`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rootproof.agent.models.base import ModelRequest, ModelTurn
from rootproof.agent.models.evidence_view import (
    Observation,
    observations_from,
)
from rootproof.diagnosis.impact import impact_seen

if TYPE_CHECKING:
    from rootproof.kb import KnowledgeBase
from rootproof.diagnosis.candidates import CandidateStage
from rootproof.diagnosis.draft import DraftStage
from rootproof.diagnosis.plan import PlanStage, _schema_enum, _schema_kinds
from rootproof.diagnosis.reach import Gap
from rootproof.diagnosis.state import MAX_CALLS_PER_TOOL, MAX_TOOL_CALLS, _alert, _question
from rootproof.diagnosis.verdict import VerdictStage


class EvidencePlanner(PlanStage, CandidateStage, VerdictStage, DraftStage):
    """Implements the `Model` protocol without a language model."""

    name = "offline-planner-v1"

    def __init__(self, knowledge: KnowledgeBase) -> None:
        self.kb = knowledge
        self._kinds: dict[str, frozenset[str]] = {}
        self._targets: dict[str, tuple[str, ...]] = {}
        self._offered: set[str] = set()
        self._impact: str | None = None
        """What shows impact in the window (`diagnosis.impact`), set by `step`."""
        self._observations: list[Observation] = []
        self._alerted = False
        self._gaps: dict[str, Gap] = {}
        """Hypotheses whose evidence does not reach the impact seen (`diagnosis.reach`), by key."""
        self._explained: set[str] = set()
        """Symptoms the verdict found explained by the root cause it chose (set by `_verdict`)."""
        self._max_calls = MAX_TOOL_CALLS
        self._per_tool = MAX_CALLS_PER_TOOL

    def step(self, request: ModelRequest) -> ModelTurn:
        question = _question(request)
        observations = observations_from(request.messages)
        offered = {t.name for t in request.tools}
        # What the run can call (the draft step lists them without offering them): the verdict's
        # gates ask whether a signal could still be checked.
        self._offered = offered or {t.name for t in request.listed_tools}
        # The run's budget when the loop gives one (a scenario's or the settings'), else the defaults.
        self._max_calls = request.tool_calls or MAX_TOOL_CALLS
        self._per_tool = request.calls_per_tool or MAX_CALLS_PER_TOOL
        self._kinds = {t.name: k for t in request.tools if (k := _schema_kinds(t.parameters)) is not None}
        # A system with several targets (two Redis of one targets file) asks for one by name:
        # every one of them is looked at, and each has its own calls.
        self._targets = {t.name: n for t in request.tools if (n := _schema_enum(t.parameters, "target"))}
        if not observations and request.mode == "gather":
            return ModelTurn(tool_calls=self._first_look(question, offered, request.step_index))
        candidates = self._candidates(observations)
        self._score(candidates, observations)
        self._impact = impact_seen(observations, bool(_alert(question)))
        self._observations = observations
        self._alerted = bool(_alert(question))
        if request.mode == "gather":
            calls = self._next_calls(question, candidates, observations, offered, request.step_index)
            if calls:
                return ModelTurn(tool_calls=calls)
        return ModelTurn(draft=self._draft(question, candidates, observations))
