"""The docs in `docs/` stay true to the code: every field, kind, value and label is documented,
the examples validate and yield the ref texts the docs quote, and no doc needs anything outside
the repository."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import pytest
import yaml
from pydantic import BaseModel

from rootproof.backends.snapshot import SnapshotBackend, ref_paths_with_sources
from rootproof.scenarios import _schema
from rootproof.scenarios.loader import load_scenario, validate_scenario
from rootproof.taxonomy import COMPONENTS, MECHANISMS, RECOVERY_ACTIONS
from rootproof.tools.base import TOOLS, InspectNginxArgs, InspectPostgresArgs, InspectRedisArgs
from rootproof.tools.refs import NO_EVIDENCE_PATH, ref_text
from tests.cli_support import run_cli

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
FORMAT = (DOCS / "scenario-files.md").read_text(encoding="utf-8")
TAXONOMY = (DOCS / "taxonomy.md").read_text(encoding="utf-8")
INSPECTORS: dict[str, type[BaseModel]] = {
    "inspect_postgres": InspectPostgresArgs,
    "inspect_redis": InspectRedisArgs,
    "inspect_nginx": InspectNginxArgs,
}
FILE_MODELS: tuple[type[BaseModel], ...] = (
    _schema.ScenarioModel,
    _schema.ResponsesModel,
    _schema.GroundTruthModel,
    _schema.ProvenanceModel,
)


def _models_and_literals(tp: Any, models: dict[str, type[BaseModel]], literals: set[str]) -> None:
    """Every border model reachable from `tp`, and every Literal value on the way."""
    origin = get_origin(tp)
    if origin is Literal:
        literals.update(str(v) for v in get_args(tp))
        return
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        if tp.__name__ in models:
            return
        models[tp.__name__] = tp
        for info in tp.model_fields.values():
            _models_and_literals(info.annotation, models, literals)
        return
    if origin is not None or str(type(tp)) == "<class 'types.UnionType'>" or origin is Union:
        for arg in get_args(tp):
            _models_and_literals(arg, models, literals)


def _reachable() -> tuple[dict[str, type[BaseModel]], set[str]]:
    models: dict[str, type[BaseModel]] = {}
    literals: set[str] = set()
    for m in FILE_MODELS:
        _models_and_literals(m, models, literals)
    return models, literals


def _section(text: str, heading: str) -> str:
    """The text under a heading, up to the next heading of the same or a higher level."""
    level = len(heading) - len(heading.lstrip("#"))
    start = text.index(heading + "\n")
    rest = text[start + len(heading) + 1 :]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.M)
    return rest[: end.start()] if end else rest


def _examples(text: str) -> dict[str, str]:
    """`<!-- example: PATH -->` followed by a fenced YAML block → {PATH: text}."""
    found = re.findall(r"<!-- example: (\S+) -->\n```yaml\n(.*?)```", text, re.S)
    return dict(found)


def _write_examples(tmp_path: Path) -> Path:
    for rel, body in _examples(FORMAT).items():
        target = tmp_path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(body, encoding="utf-8")
    return tmp_path


def _every_kind(tmp_path: Path) -> Path:
    """The every-kind responses beside the minimal example's other files, every tool allowed."""
    root = _write_examples(tmp_path)
    folder = root / "every-kind"
    base = root / "orders-row-lock"
    scenario = yaml.safe_load((base / "scenario.yaml").read_text(encoding="utf-8"))
    scenario["id"] = "every-kind"
    scenario["allowed_tools"] = list(TOOLS)
    scenario["now"] = "2026-07-22T17:41:00Z"
    scenario["alert"]["starts_at"] = "2026-07-22T17:38:00Z"
    (folder / "scenario.yaml").write_text(yaml.safe_dump(scenario), encoding="utf-8")
    for name in ("ground_truth.yaml", "provenance.yaml"):
        (folder / name).write_text((base / name).read_text(encoding="utf-8"), encoding="utf-8")
    return folder


def _ref_texts(folder: Path, tool: str, args: dict[str, Any]) -> dict[str, str]:
    scenario = load_scenario(folder)
    result = SnapshotBackend(scenario).call(
        tool, TOOLS[tool].args_model(**args), now=scenario.now, run_id="docs"
    )
    return {p: ref_text(tool, result.json(), p) for p in ref_paths_with_sources(result)}


def _table_cell(section: str, kind: str, column: int) -> str:
    """The cell of the row for `kind` (a backticked first cell) in a Markdown table."""
    for line in section.splitlines():
        if line.startswith(f"| `{kind}` |"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            return cells[column]
    raise AssertionError(f"no table row for {kind!r}")


# -- scenario-files.md -------------------------------------------------------------------------


def test_every_field_of_every_scenario_file_model_is_documented() -> None:
    models, _ = _reachable()
    assert {"_AlertModel", "_PostgresModel", "_RedisModel", "_NginxModel", "_RecoveryModel"} <= set(models)
    missing = sorted(
        f"{name}.{field}"
        for name, m in models.items()
        for field in m.model_fields
        if f"`{field}`" not in FORMAT
    )
    assert not missing, f"docs/scenario-files.md does not mention: {', '.join(missing)}"


def test_every_allowed_value_of_the_scenario_files_is_documented() -> None:
    _, literals = _reachable()
    assert {
        "EVIDENCE_VALIDATION_FAILED",
        "ROOT_CAUSE_MOCK_ONLY",
        "SYSTEM",
        "FATAL",
        "recorded_live_run",
    } <= literals
    missing = sorted(v for v in literals if f"`{v}`" not in FORMAT)
    assert not missing, f"docs/scenario-files.md does not mention: {', '.join(missing)}"


@pytest.mark.parametrize("tool", sorted(INSPECTORS))
def test_every_inspector_kind_has_a_row_in_its_tools_table(tool: str) -> None:
    kinds = get_args(INSPECTORS[tool].model_fields["kind"].annotation)
    section = _section(FORMAT, f"### `{tool}`")
    for kind in kinds:
        assert _table_cell(section, kind, 1), f"{tool} {kind}: no shape documented"
    rows = re.findall(r"^\| `([a-z_]+)` \|", section, re.M)
    assert sorted(rows) == sorted(kinds), f"{tool}: documented kinds {rows} != code {kinds}"


def test_every_kind_of_ref_path_is_in_the_ref_text_table() -> None:
    table = _section(FORMAT, "## Evidence refs")
    for head in ("entries", "series", "rows", "lines", "config", "results", "settings", "status", "info"):
        assert f"`$.{head}" in table, head
    assert f"`{NO_EVIDENCE_PATH}`" in table


def test_the_minimal_example_validates_with_the_cli(tmp_path: Path) -> None:
    root = _write_examples(tmp_path)
    assert {p.split("/")[0] for p in _examples(FORMAT)} == {"orders-row-lock", "every-kind"}
    assert sorted(p.relative_to(root).as_posix() for p in (root / "orders-row-lock").rglob("*.yaml")) == [
        "orders-row-lock/ground_truth.yaml",
        "orders-row-lock/provenance.yaml",
        "orders-row-lock/scenario.yaml",
        "orders-row-lock/snapshot/tool_responses.yaml",
    ]
    env = {**os.environ, "ROOTPROOF_HOME": str(tmp_path / "home")}
    env.pop("ROOTPROOF_CARDS_DIR", None)
    p = run_cli(["scenarios", "validate", str(root / "orders-row-lock")], env=env, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr


def test_the_minimal_example_yields_the_ref_texts_the_doc_quotes(tmp_path: Path) -> None:
    folder = _write_examples(tmp_path) / "orders-row-lock"
    logs = _ref_texts(folder, "query_logs", {})
    metrics = _ref_texts(folder, "query_metrics", {"metric": "pg_*"})
    locks = _ref_texts(folder, "inspect_postgres", {"kind": "locks"})
    nothing = _ref_texts(folder, "query_logs", {"query": "nothing-here", "scope": "DATABASE"})
    for texts, path in ((logs, "$.entries[0]"), (metrics, "$.series[0]"), (locks, "$.rows[0]")):
        assert f"`{texts[path]}`" in FORMAT, texts[path]
    assert f"`{nothing[NO_EVIDENCE_PATH]}`" in FORMAT


def test_every_inspector_kind_of_the_example_yields_the_ref_text_its_row_shows(tmp_path: Path) -> None:
    folder = _every_kind(tmp_path)
    assert validate_scenario(folder) == []
    for tool, args_model in INSPECTORS.items():
        section = _section(FORMAT, f"### `{tool}`")
        for kind in get_args(args_model.model_fields["kind"].annotation):
            texts = _ref_texts(folder, tool, {"kind": kind})
            assert NO_EVIDENCE_PATH not in texts, f"the example has no {tool} {kind} data"
            shown = _table_cell(section, kind, 4).replace("\\|", "|")
            assert shown.startswith("`") and shown.endswith("`"), shown
            assert shown[1:-1] in texts.values(), f"{tool} {kind}: {shown} not among {list(texts.values())}"


def test_the_mock_marking_works_as_the_doc_says(tmp_path: Path) -> None:
    """File `snapshot`, section `redis: mock`, one `clients` row back to `snapshot`."""
    scenario = load_scenario(_every_kind(tmp_path))
    backend = SnapshotBackend(scenario)

    def sources(tool: str, kind: str) -> set[str]:
        result = backend.call(tool, TOOLS[tool].args_model(kind=kind), now=scenario.now, run_id="docs")
        return set(ref_paths_with_sources(result).values())

    assert sources("inspect_redis", "info") == {"mock"}
    assert sources("inspect_redis", "clients") == {"snapshot"}
    assert sources("inspect_postgres", "locks") == {"snapshot"}


# -- taxonomy.md -------------------------------------------------------------------------------


def test_every_taxonomy_label_has_a_row_with_its_meaning() -> None:
    for heading, labels in (
        ("## Components", COMPONENTS),
        ("## Mechanisms", MECHANISMS),
        ("## Recovery actions", set(RECOVERY_ACTIONS)),
    ):
        section = _section(TAXONOMY, heading)
        rows = re.findall(r"^\| `([a-z_]+)` \|", section, re.M)
        assert sorted(rows) == sorted(labels), heading
        for label in labels:
            assert len(_table_cell(section, label, -1)) > 10, f"{label}: no meaning given"


def test_every_recovery_action_row_shows_its_risk_and_approval() -> None:
    section = _section(TAXONOMY, "## Recovery actions")
    for action, (risk, approval) in RECOVERY_ACTIONS.items():
        assert _table_cell(section, action, 1) == risk, action
        assert _table_cell(section, action, 2) == ("yes" if approval else "no"), action


# -- self-contained --------------------------------------------------------------------------

_OUTSIDE = re.compile(
    r"\.\./shared|/work/shared|DESIGN\.md|STYLE\.md|\bseed (?:`|story)|\bseed's|\b00[0-4]_|"
    r"scenario-format\.md\W+the shared"
)


@pytest.mark.parametrize("doc", ["README.md", *sorted(p.name for p in DOCS.glob("*.md"))])
def test_user_docs_need_nothing_outside_the_repository(doc: str) -> None:
    path = ROOT / doc if doc == "README.md" else DOCS / doc
    hits = [
        f"{doc}:{n}: {line.strip()}"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _OUTSIDE.search(line)
    ]
    assert not hits, "\n".join(hits)


def test_docs_link_the_format_and_the_taxonomy() -> None:
    assert "`docs/scenario-files.md`" in (DOCS / "scenarios.md").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for doc in ("scenario-files.md", "taxonomy.md", "knowledge-cards.md", "alerts.md"):
        assert f"docs/{doc}" in readme, doc
    assert "## Adding mechanisms" in (DOCS / "knowledge-cards.md").read_text(encoding="utf-8")


def test_every_setting_is_in_the_readme() -> None:
    """Every `ROOTPROOF_*` setting the loader registers is named in README's Settings section."""
    from rootproof.settings import Settings

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = [f"ROOTPROOF_{f.upper()}" for f in Settings.model_fields if f"`{f.upper()}`" not in readme]
    assert missing == []
