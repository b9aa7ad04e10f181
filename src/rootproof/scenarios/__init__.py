"""Scenarios: folders of frozen tool data, a question and (for the evaluator) the answer.

See `docs/scenario-files.md`. `load_scenario` gives the agent phase what it may see;
`load_ground_truth` is for the evaluator only.
"""

from rootproof.scenarios.loader import (
    list_scenarios,
    load_ground_truth,
    load_scenario,
    scenario_folder,
    validate_scenario,
)
from rootproof.scenarios.types import (
    Alert,
    Alternative,
    EvidenceMatch,
    ExpectedOutcome,
    GroundTruth,
    LogEntry,
    LogLine,
    MetricSeries,
    Recovery,
    RedHerring,
    RequiredEvidence,
    RootCause,
    Row,
    Scenario,
    ToolResponses,
    format_timestamp,
)

__all__ = [
    "Alert",
    "Alternative",
    "EvidenceMatch",
    "ExpectedOutcome",
    "GroundTruth",
    "LogEntry",
    "LogLine",
    "MetricSeries",
    "Recovery",
    "RedHerring",
    "RequiredEvidence",
    "RootCause",
    "Row",
    "Scenario",
    "ToolResponses",
    "format_timestamp",
    "list_scenarios",
    "load_ground_truth",
    "load_scenario",
    "scenario_folder",
    "validate_scenario",
]
