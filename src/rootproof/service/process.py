"""`rootproof serve` as a process of its own, on a free loopback port: how the load benchmark
and the replica tests start a real server and stop (or kill) it."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

__all__ = ["ServeProcess", "free_port", "start_serve"]


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ServeProcess:
    """A running `rootproof serve`."""

    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def log_tail(self, chars: int = 3000) -> str:
        """The end of what the server printed."""
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL: nothing of it runs its shutdown."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.wait(timeout=10)

    def stop(self, timeout_s: float = 30) -> None:
        """SIGTERM (its graceful shutdown), then SIGKILL after `timeout_s`."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()


def start_serve(env: dict[str, str], log: Path, *, ready_s: float = 120, cwd: Path | None = None) -> ServeProcess:
    """Start `rootproof serve` (this interpreter's) with `env` on a free port, its output in
    `log`, and wait until `/readyz` answers 200; RuntimeError with the log's end otherwise."""
    port = free_port()
    exe = Path(sys.executable).with_name("rootproof")
    base = [str(exe)] if exe.exists() else [sys.executable, "-m", "rootproof.cli"]
    with log.open("wb") as out:
        proc = subprocess.Popen([*base, "serve", "--port", str(port)], env=env, stdout=out, stderr=subprocess.STDOUT, cwd=cwd)
    server = ServeProcess(proc=proc, url=f"http://127.0.0.1:{port}", log=log)
    deadline = time.monotonic() + ready_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"rootproof serve exited with {proc.returncode}:\n{server.log_tail()}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(server.url + "/readyz", timeout=2).status_code == 200:
                return server
        time.sleep(0.2)
    server.kill()
    raise RuntimeError(f"rootproof serve did not become ready in {ready_s:.0f} s:\n{server.log_tail()}")
