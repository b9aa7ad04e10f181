"""What the live-environment tests share: a root folder, the skip rule, the CLI, and residue checks.

Every test starts its environments under a root of its own (`fresh_root()`: a folder under /tmp
the `postgres` OS user can reach, since PostgreSQL runs as that user when the tests run as
root), never the user's data folder. A missing server binary skips, or fails under
`ROOTPROOF_REQUIRE_SERVICES=1` (tests/conftest.py's `_unavailable`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rootproof.live.binaries import missing
from rootproof.live.components import COMPONENT_TYPES
from rootproof.live.layout import ComponentName, with_requirements
from rootproof.live.procs import ProcessRecord, is_running, listening
from tests.services import inherited_env, unavailable

__all__ = ["ROOT", "assert_gone", "cli", "fresh_root", "need_binaries", "owner", "read_until", "reap", "remove_root", "wait_for"]

ROOT = Path(__file__).resolve().parents[2]


def need_binaries(components: tuple[ComponentName, ...]) -> None:
    """Skip (or fail under ROOTPROOF_REQUIRE_SERVICES=1) unless every binary of `components` is installed."""
    names = [b for c in with_requirements(components) for b in COMPONENT_TYPES[c].binaries]
    if os.geteuid() == 0:
        names.append("runuser")
    gone = missing(names)
    if gone:
        unavailable("live environment: " + "; ".join(str(e) for e in gone))


def fresh_root() -> Path:
    """A new, empty live root under /tmp (mode 0755: the postgres OS user walks through it)."""
    root = Path(tempfile.mkdtemp(prefix="rp-live-", dir="/tmp"))
    root.chmod(0o755)
    return root


def remove_root(root: Path) -> None:
    """Remove a test root (its runs are stopped by then)."""
    shutil.rmtree(root, ignore_errors=True)


def root_cleaned_up() -> Iterator[Path]:
    """A fresh live root for one test (`root = pytest.fixture(root_cleaned_up)`); afterwards the
    runs a failed test left are brought down (`rootproof live down`), then the root is removed."""
    from rootproof.live import list_runs

    path = fresh_root()
    yield path
    for run in list_runs(path):  # whatever a failed test left
        cli("live", "down", run.run_id, root=path)
    remove_root(path)


def cli(*args: str, root: Path, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    """`rootproof ARGS` in a subprocess with ROOTPROOF_LIVE_ROOT=`root` and a data folder inside it."""
    base = inherited_env()
    base |= {"ROOTPROOF_HOME": str(root / "home"), "ROOTPROOF_LIVE_ROOT": str(root), "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run([sys.executable, "-m", "rootproof.cli", *args], capture_output=True, text=True, env=base | env, cwd=ROOT, timeout=timeout)


def owner(root: Path, *components: str) -> subprocess.Popen[str]:
    """tests/live/_owner.py: a process owning an environment of `components` under `root`."""
    env = inherited_env()
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    script = str(ROOT / "tests" / "live" / "_owner.py")
    return subprocess.Popen([sys.executable, script, str(root), *components], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def read_until(p: subprocess.Popen[str], prefix: str) -> str:
    """Read the owner's stdout up to the line starting with `prefix` (AssertionError if it exits first)."""
    assert p.stdout is not None
    for line in p.stdout:
        if line.startswith(prefix):
            return line.strip()
    raise AssertionError(f"the owner exited ({p.wait()}) before printing {prefix!r}: {p.stderr.read() if p.stderr else ''}")


def wait_for(what: str, check: Callable[[], object], timeout_s: float = 20.0) -> None:
    """Poll `check()` until it is truthy; AssertionError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.1)


def assert_gone(records: list[ProcessRecord], ports: list[int], folder: Path) -> None:
    """No recorded process runs, nothing listens on the ports, the folder is gone."""
    running = [f"{r.component} (pid {r.pid})" for r in records if is_running(r)]
    assert running == [], f"still running: {running}"
    assert listening(ports) == [], f"still listened on: {listening(ports)}"
    assert not folder.exists(), f"{folder} still exists: {sorted(p.name for p in folder.iterdir())}"


def reap(*procs: subprocess.Popen[Any]) -> None:
    """Kill each process still running, wait for it and close its pipes (a test's `finally`)."""
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
        for stream in (p.stdout, p.stderr):
            if stream is not None:
                stream.close()
