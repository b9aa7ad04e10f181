"""`rootproof import opensre DIR OUT`: OpenSRE's synthetic RDS cases as rootproof scenarios.

OpenSRE (Tracer-Cloud/opensre, Apache-2.0) ships synthetic RDS PostgreSQL diagnosis cases under
`tests/synthetic/rds_postgres/`: `scenario.yml`, `alert.json`, CloudWatch metrics, RDS events,
Performance Insights and an answer key. `import_opensre` converts one case folder, or every
case folder of a folder, into scenario folders (docs/scenario-files.md, docs/importing.md):

- `scenario.yaml` and `snapshot/tool_responses.yaml` hold only the alert and the evidence, as
  given (`_opensre_scenario`, `_opensre_evidence`);
- `ground_truth.yaml` is derived from `answer.yml` (`_opensre_truth`), its `match` strings
  checked against the converted refs;
- `provenance.yaml` names the source case and its license; the source's `LICENSE` is copied.

Everything is read and converted before anything is written: bad input is one
`ScenarioError` naming the file and the field, and leaves OUT untouched.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rootproof.errors import ScenarioError, UsageError
from rootproof.scenarios.importers._opensre_evidence import Evidence, convert_evidence
from rootproof.scenarios.importers._opensre_read import CaseInput, ImportLimits, find_cases, read_case
from rootproof.scenarios.importers._opensre_scenario import provenance_document, scenario_document
from rootproof.scenarios.importers._opensre_truth import ground_truth
from rootproof.scenarios.loader import validate_scenario
from rootproof.scenarios.yamlio import parse_yaml, plain_is_text

__all__ = ["CaseResult", "ImportLimits", "ImportResult", "import_opensre"]

LICENSE_NAMES = ("LICENSE", "LICENSE.txt", "LICENSE.md")
LICENSE_BYTES = 1024 * 1024


class _Dumper(yaml.SafeDumper):
    """Plain YAML without anchors; a text that would read back as another type is quoted."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = '"' if "\n" in value or not plain_is_text(value) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _list(dumper: yaml.SafeDumper, value: list[Any]) -> yaml.SequenceNode:
    return dumper.represent_sequence(
        "tag:yaml.org,2002:seq", value, flow_style=all(_scalar(v) for v in value)
    )


def _dict(dumper: yaml.SafeDumper, value: dict[str, Any]) -> yaml.MappingNode:
    small = (
        len(value) <= 4
        and all(_scalar(v) for v in value.values())
        and sum(len(str(v)) for v in value.values()) < 80
    )
    return dumper.represent_mapping("tag:yaml.org,2002:map", value, flow_style=small)


_Dumper.add_representer(str, _str)
_Dumper.add_representer(list, _list)
_Dumper.add_representer(dict, _dict)


def dump_yaml(data: Any, name: str, *, header: list[str] | None = None) -> str:
    """YAML text for plain data, checked to read back as the same data with the scenario loader."""
    text = yaml.dump(data, Dumper=_Dumper, allow_unicode=True, sort_keys=False, width=1 << 20)
    if parse_yaml(text, name).data != data:  # a writer bug, never bad input
        raise RuntimeError(f"{name}: the YAML written does not read back as the data converted")
    lines = "".join(f"# {' '.join(h.split())}\n" for h in header or [])
    return lines + text


@dataclass(frozen=True, kw_only=True)
class CaseResult:
    """One converted case."""

    case: str
    """The source case folder's name."""
    id: str
    """The scenario id (its folder under OUT)."""
    bases: tuple[str, ...]
    sources: dict[str, list[str]]
    """Evidence kind → the files it was read from (`<case>/<file>`)."""
    files: tuple[str, ...]
    """The files written, relative to OUT."""
    counts: dict[str, int]
    warnings: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        """Plain data for `--json`."""
        return {
            "case": self.case,
            "id": self.id,
            "bases": list(self.bases),
            "sources": self.sources,
            "files": list(self.files),
            "evidence": self.counts,
            "warnings": list(self.warnings),
        }


@dataclass(frozen=True, kw_only=True)
class ImportResult:
    """What `import_opensre` wrote."""

    out: Path
    cases: tuple[CaseResult, ...]

    @property
    def warnings(self) -> list[str]:
        """Every case's warnings, in case order."""
        return [w for c in self.cases for w in c.warnings]

    def as_dict(self) -> dict[str, Any]:
        """Plain data for `--json`: cases converted, files, warnings."""
        return {
            "out": str(self.out),
            "converted": len(self.cases),
            "cases": [c.as_dict() for c in self.cases],
            "warnings": self.warnings,
        }


@dataclass(kw_only=True)
class _Converted:
    case: CaseInput
    ev: Evidence
    id: str
    texts: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _convert(folder: Path, base_dir: Path | None, limits: ImportLimits) -> _Converted:
    case = read_case(folder, base_dir=base_dir, limits=limits)
    ev = convert_evidence(case)
    scenario = scenario_document(case, ev, limits)
    truth = ground_truth(case, ev, limits)
    c = _Converted(case=case, ev=ev, id=scenario["id"])
    header = [
        f"Derived by `rootproof import opensre` from the answer key of OpenSRE case {case.name} (docs/importing.md).",
        *truth.notes,
    ]
    c.texts = {
        "scenario.yaml": dump_yaml(scenario, f"{c.id}/scenario.yaml"),
        "snapshot/tool_responses.yaml": dump_yaml(ev.responses(), f"{c.id}/snapshot/tool_responses.yaml"),
        "ground_truth.yaml": dump_yaml(truth.doc, f"{c.id}/ground_truth.yaml", header=header),
        "provenance.yaml": dump_yaml(provenance_document(case, ev), f"{c.id}/provenance.yaml"),
    }
    for name, text in c.texts.items():
        size = len(text.encode("utf-8"))
        if size > limits.file_bytes:
            raise ScenarioError(
                f"{case.name}: the converted {name} would be {size} bytes, more than the cap of "
                f"{limits.file_bytes} bytes (ROOTPROOF_MAX_SCENARIO_FILE_BYTES)"
            )
    c.warnings = list(dict.fromkeys([*case.warnings, *ev.warnings, *truth.warnings]))
    return c


def _license(src: Path, single: bool) -> bytes | None:
    """The source's license file (next to the cases), if there is one."""
    for folder in (src.parent,) if single else (src,):
        for name in LICENSE_NAMES:
            path = folder / name
            if path.is_file() and not path.is_symlink() and path.stat().st_size <= LICENSE_BYTES:
                return path.read_bytes()
    return None


def _check(folder: Path, limits: ImportLimits) -> None:
    """The written scenario validates, ground truth included (a problem here is a bug of the
    importer, never bad input: exit 1)."""
    problems = validate_scenario(folder, max_file_bytes=limits.file_bytes)
    if problems:
        raise RuntimeError(
            f"the converted scenario {folder.name} does not validate: {'; '.join(problems[:3])}"
        )


def _stage(staging: Path, c: _Converted, license_text: bytes | None, limits: ImportLimits) -> tuple[str, ...]:
    """Write a case into `staging/<id>` and check that it validates; the files written."""
    tmp = staging / c.id
    written = []
    for name, text in c.texts.items():
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(f"{c.id}/{name}")
    if license_text is not None:
        (tmp / "LICENSE").write_bytes(license_text)
        written.append(f"{c.id}/LICENSE")
    _check(tmp, limits)
    return tuple(written)


def import_opensre(
    src: Path,
    out: Path,
    *,
    base_dir: Path | None = None,
    force: bool = False,
    limits: ImportLimits | None = None,
) -> ImportResult:
    """Convert the OpenSRE case folder `src` (or every case folder in it) into scenario folders under `out`.

    Raises `ScenarioError` on bad input (naming the file and the field) and `UsageError` when a
    target folder exists without `force`; in both cases nothing is written.
    """
    limits = limits or ImportLimits()
    if base_dir is not None and not base_dir.is_dir():
        raise UsageError(f"--base {base_dir}: not a folder")
    folders = find_cases(src, limits)
    converted = [_convert(f, base_dir, limits) for f in folders]
    seen: dict[str, str] = {}
    for c in converted:
        if c.id in seen:
            raise ScenarioError(
                f"{c.case.name}: its scenario id {c.id} is the same as {seen[c.id]}'s; rename one folder"
            )
        seen[c.id] = c.case.name
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out}: not a folder")
    clashes = [c.id for c in converted if (out / c.id).exists()]
    if clashes and not force:
        raise UsageError(f"{out}: {', '.join(clashes)} exist(s) already; give --force to replace")
    for c in converted:
        if (out / c.id).exists() and not (out / c.id).is_dir():
            raise UsageError(f"{out / c.id}: exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    license_text = _license(src, len(folders) == 1 and folders[0] == src)
    staging = out / f".rootproof-import-{os.getpid()}"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()
    results = []
    try:  # every case is written and checked before the first one replaces anything in OUT
        written = [_stage(staging, c, license_text, limits) for c in converted]
        for c in converted:
            target = out / c.id
            if target.exists():
                shutil.rmtree(target)
            (staging / c.id).rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    for c, files in zip(converted, written, strict=True):
        results.append(
            CaseResult(
                case=c.case.name,
                id=c.id,
                bases=c.case.bases,
                sources={k: list(v) for k, v in c.case.files.items()},
                files=files,
                counts={
                    "logs": len(c.ev.logs),
                    "metrics": len(c.ev.metrics),
                    **{f"postgres.{k}": len(v) for k, v in c.ev.postgres.items()},
                },
                warnings=tuple(c.warnings),
            )
        )
    return ImportResult(out=out, cases=tuple(results))
