"""The live environment's pieces that need no server: names, the component table, run records,
stale detection, and what importing the package and its CLI loads."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer

import rootproof.live
from rootproof.errors import LiveEnvironmentError, MissingBinary, UsageError
from rootproof.live import COMPONENTS, LiveConfig, list_runs
from rootproof.live.components import COMPONENT_TYPES
from rootproof.live.layout import (
    PORTS,
    REQUIRES,
    RUN_ID_PATTERN,
    Owner,
    RunRecord,
    RunSpec,
    new_run_id,
    read_run,
    with_requirements,
    write_run,
)


def test_exported_names_are_sorted_and_each_resolves() -> None:
    assert rootproof.live.__all__ == sorted(rootproof.live.__all__)
    for name in rootproof.live.__all__:
        assert getattr(rootproof.live, name) is not None
    with pytest.raises(AttributeError):
        rootproof.live.nothing_here  # noqa: B018


def test_mounting_the_cli_loads_neither_the_environment_nor_the_order_services_stack() -> None:
    code = (
        "import sys, rootproof.cli\n"
        "bad = sorted(m for m in ('rootproof.live.env', 'rootproof.live.order_service', 'fastapi', 'uvicorn', 'sqlalchemy', 'redis', 'psycopg') if m in sys.modules)\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_the_component_table_follows_the_start_order_and_requirements_come_first() -> None:
    assert tuple(COMPONENT_TYPES) == COMPONENTS == tuple(REQUIRES) == tuple(PORTS)
    for name, needs in REQUIRES.items():
        assert all(COMPONENTS.index(n) < COMPONENTS.index(name) for n in needs), name
    assert with_requirements(("nginx",)) == ("postgres", "redis", "order_service", "nginx")
    assert with_requirements(("load",)) == ("postgres", "redis", "order_service", "nginx", "load")
    assert with_requirements(("prometheus",)) == ("postgres", "redis", "order_service", "postgres_exporter", "redis_exporter", "prometheus")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"components": ("mysql",)}, "unknown component 'mysql'"),
        ({"ports": {"pg": 5432}}, "unknown port name 'pg'"),
        ({"load_rate_per_s": 50}, "load_rate_per_s must be 0 to 20 (got 50)"),
    ],
)
def test_a_bad_config_is_refused_naming_the_field(tmp_path: Path, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        LiveConfig(root=tmp_path, **kwargs)  # type: ignore[arg-type]


def test_run_ids_are_unique_and_safe_as_folder_names() -> None:
    ids = {new_run_id() for _ in range(50)}
    assert len(ids) == 50 and all(RUN_ID_PATTERN.match(i) for i in ids)
    assert not RUN_ID_PATTERN.match("../20260101-000000-abcdef")


def test_run_json_round_trips_and_a_dead_owner_or_a_missing_record_is_stale(tmp_path: Path) -> None:
    cfg = LiveConfig(root=tmp_path, components=("redis",), ports={"redis": 6400})
    folder = tmp_path / new_run_id()
    folder.mkdir()
    spec = RunSpec(run_id=folder.name, folder=folder, config=cfg, components=("redis",), ports={"redis": 6400}, binaries={"redis-server": "/usr/bin/redis-server"}, pg_os_user=None)
    record = RunRecord(spec=spec, state="up", owner=Owner(pid=2**22 + 7, start_time=1), created_at="2026-12-01T00:00:00+00:00")
    write_run(record)
    assert read_run(folder) == record
    assert json.loads((folder / "run.json").read_text())["owner"] == {"pid": 2**22 + 7, "start_time": 1}
    (info,) = list_runs(tmp_path)
    assert info.stale == f"its owner, pid {2**22 + 7}, is gone" and info.state == "up" and not info.detached
    broken = tmp_path / new_run_id()
    broken.mkdir()
    assert [r.stale for r in list_runs(tmp_path) if r.folder == broken] == ["it has no readable run.json (its start was killed before it was written)"]


def _raise(exc: Exception) -> None:
    raise exc


@pytest.mark.parametrize(
    ("exc", "code", "line"),
    [
        (
            MissingBinary("redis", "redis-server", "redis-server", "/usr/bin/redis-server and PATH"),
            2,
            "Error: redis: redis-server is not installed (looked at /usr/bin/redis-server and PATH); install the Debian package redis-server: apt-get install redis-server",
        ),
        (LiveEnvironmentError("nginx", "exited with status 1 before it was ready"), 1, "Error: live environment: nginx: exited with status 1 before it was ready"),
        (UsageError("no live run 20260101-000000-abcdef under /x (runs there: none)"), 2, "Error: no live run 20260101-000000-abcdef under /x (runs there: none)"),
    ],
)
def test_the_cli_maps_each_failure_to_one_line_and_its_exit_code(exc: Exception, code: int, line: str, capsys: pytest.CaptureFixture[str]) -> None:
    from rootproof.live.cli import _run

    with pytest.raises(typer.Exit) as info:
        _run(lambda: _raise(exc))
    assert info.value.exit_code == code
    assert capsys.readouterr().err.splitlines() == [line]
