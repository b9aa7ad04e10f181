"""Small real backends for `targets check` tests: they open real TCP connections and read real
files (no service is mocked). `tcp_factory` has `open_live_backends`' signature, so tests can
inject it into `check_targets`, or into the CLI of a subprocess (`DRIVER`)."""

from __future__ import annotations

import contextlib
import glob
import os
import socket
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rootproof.targets import (
    LogsTarget,
    LokiTarget,
    NginxTarget,
    PostgresTarget,
    PrometheusTarget,
    RedisTarget,
    Target,
    TargetCheck,
    TargetsFile,
    secret_of,
)

CLOSED: list[str] = []
"""Names of the backends closed so far, in order (each test clears it)."""
CLOSED_AFTER_HANGING: list[str] = []
"""Names of HangingBackends closed (by their own thread, once the server let their check return)."""

DRIVER = (
    "import sys, rootproof.targets_check as c\n"
    "from tests import targets_support\n"
    "c.open_live_backends = targets_support.tcp_factory\n"
    "from rootproof.cli import main\n"
    "sys.argv = ['rootproof', *sys.argv[1:]]\n"
    "main()\n"
)
"""`python -c DRIVER targets check FILE`: the real CLI with `tcp_factory` as its backend factory."""


def _address(target: Target) -> tuple[str, int]:
    url = {
        PostgresTarget: lambda t: t.dsn,
        RedisTarget: lambda t: t.url,
        LokiTarget: lambda t: t.url,
        PrometheusTarget: lambda t: t.url,
        NginxTarget: lambda t: t.status_url or "http://127.0.0.1:1",
    }[type(target)](target)
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 1


class TcpBackend:
    """Usable when the target's host:port accepts a TCP connection; warns of an unreadable `log`."""

    def __init__(self, target: Target, *, environ: Mapping[str, str]) -> None:
        self.target = target
        if isinstance(target, PostgresTarget | RedisTarget | LokiTarget | PrometheusTarget):
            self.secret = secret_of(target, environ)  # ConfigError when password_env is unset
        self.address = _address(target)

    def check(self) -> TargetCheck:
        t = self.target
        host, port = self.address
        try:
            with socket.create_connection((host, port), timeout=t.timeout_s):
                pass
        except OSError as exc:
            return TargetCheck(name=t.name, kind=t.kind, usable=False, problem=f"cannot connect to {host}:{port} ({exc.strerror or exc})")
        warnings = []
        log = getattr(t, "log", None)
        if log is not None and not os.access(log, os.R_OK):
            warnings.append(f"the log {log} is not readable")
        return TargetCheck(name=t.name, kind=t.kind, usable=True, warnings=warnings)

    def call(self, *_: Any, **__: Any) -> Any:
        raise NotImplementedError("check only")

    def close(self) -> None:
        CLOSED.append(self.target.name)


class GlobBackend(TcpBackend):
    """A logs target: usable when its globs match at least one readable file."""

    def __init__(self, target: LogsTarget, *, environ: Mapping[str, str]) -> None:
        self.target = target

    def check(self) -> TargetCheck:
        t = self.target
        assert isinstance(t, LogsTarget)
        files = [p for g in t.paths for p in glob.glob(g) if Path(p).is_file() and os.access(p, os.R_OK)]
        if not files:
            return TargetCheck(name=t.name, kind=t.kind, usable=False, problem=f"no readable file matches {', '.join(t.paths)}")
        return TargetCheck(name=t.name, kind=t.kind, usable=True)


class HangingBackend(TcpBackend):
    """Its check waits for a reply from a server that accepts and never answers (a real socket)."""

    def check(self) -> TargetCheck:
        with socket.create_connection(self.address, timeout=60) as s:
            s.recv(1)
        return TargetCheck(name=self.target.name, kind=self.target.kind, usable=True)

    def close(self) -> None:
        CLOSED_AFTER_HANGING.append(self.target.name)


class LeakyBackend(TcpBackend):
    """Its check puts the target's password in its problem and a warning (what scrubbing must catch)."""

    def check(self) -> TargetCheck:
        t = self.target
        return TargetCheck(
            name=t.name,
            kind=t.kind,
            usable=False,
            problem=f"auth failed with {self.secret} at postgresql://app:{self.secret}@127.0.0.1/db",
            warnings=[f"retry with {self.secret}"],
        )


class FailingBackend(TcpBackend):
    """Its check raises (a check must never raise; `check_targets` reports it)."""

    def check(self) -> TargetCheck:
        raise RuntimeError("driver state broken")


def tcp_factory(targets: TargetsFile, environ: Mapping[str, str]) -> list[tuple[str, Any]]:
    """`open_live_backends` over TcpBackend / GlobBackend."""
    return [
        (f"{t.kind}:{t.name}", GlobBackend(t, environ=environ) if isinstance(t, LogsTarget) else TcpBackend(t, environ=environ))
        for t in targets.targets
    ]


def factory_of(cls: type[TcpBackend]) -> Any:
    """A factory building `cls` for every target."""

    def build(targets: TargetsFile, environ: Mapping[str, str]) -> list[tuple[str, Any]]:
        return [(f"{t.kind}:{t.name}", cls(t, environ=environ)) for t in targets.targets]

    return build


class SilentServer:
    """A loopback TCP server that accepts connections and never writes (real socket)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = int(self.sock.getsockname()[1])
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._held.append(conn)

    def close(self) -> None:
        # The listener first, and the accept loop ended, so no connection is accepted after the
        # held ones are closed. shutdown() wakes the accept() blocked in the thread.
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join(timeout=5)
        for c in self._held:
            c.close()
