"""What the private-service helpers share: a free loopback port, and stopping a process by its pid."""

from __future__ import annotations

import os
import signal
import socket
import subprocess

__all__ = ["free_port", "stop_process"]


def free_port() -> int:
    """A TCP port nothing listens on at 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_process(proc: subprocess.Popen[bytes] | subprocess.Popen[str], sig: int = signal.SIGTERM, wait_s: float = 5) -> None:
    """Stop `proc` by its own pid: `sig`, then SIGKILL if it has not exited within `wait_s`."""
    if proc.poll() is not None:
        return
    os.kill(proc.pid, sig)
    try:
        proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=wait_s)
