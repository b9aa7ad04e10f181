"""A private Redis: a free loopback port, no persistence, a small `maxclients`, log and dir in the run folder.

The `default` user (no password) is the order service's and the fault injector's. The
diagnosis gets an ACL user `rootproof` that may run only the read commands the live Redis
backend sends (docs/targets.md), with its password in `<run>/secrets/redis-rootproof.password`;
the users are in `<run>/redis/redis.conf` (0600), never on the command line.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from rootproof.live.components.base import Component, Health, Started, redis_ping, spawn_process
from rootproof.live.layout import RunSpec

__all__ = ["READ_ONLY_ACL", "RedisComponent"]

READ_ONLY_ACL = "-@all +ping +select +info +client|list +client|id +client|setname +slowlog|get +slowlog|len +config|get"
"""The commands of the diagnosis' ACL user (what docs/targets.md recommends)."""
SECRET = "redis-rootproof"
"""The name of the diagnosis user's password file in `<run>/secrets/`."""


class RedisComponent(Component):
    """`redis-server` in the foreground."""

    name = "redis"
    binaries = ("redis-server",)

    def log_file(self, spec: RunSpec) -> Path:
        return spec.paths.redis_log

    def prepare(self, spec: RunSpec) -> None:
        spec.paths.redis.mkdir(parents=True, exist_ok=True)
        password = secrets.token_urlsafe(24)
        fd = os.open(spec.paths.secret(SECRET), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(password + "\n")
        fd = os.open(spec.paths.redis / "redis.conf", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(f"user default on nopass ~* &* +@all\nuser rootproof on >{password} ~* {READ_ONLY_ACL}\n")

    def spawn(self, spec: RunSpec) -> Started:
        p = spec.paths
        argv = [spec.binaries["redis-server"], str(p.redis / "redis.conf"), "--port", str(spec.port("redis"))]
        argv += ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no"]
        argv += ["--maxclients", str(spec.config.redis_maxclients), "--logfile", str(p.redis_log), "--dir", str(p.redis)]
        return spawn_process(self.name, argv, cwd=p.redis, log=p.redis / "stdout.log")

    def health(self, spec: RunSpec) -> Health:
        return redis_ping(spec.port("redis"))
