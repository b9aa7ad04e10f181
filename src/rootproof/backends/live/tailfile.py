"""Bounded reads of log files from their end (the newest part), for the nginx and logs backends.

A call never reads more than its byte budget: the last `budget` bytes of a file are read, and
when that cuts a line, the cut line (the oldest, at the start of the read) is dropped. Bytes
are decoded as UTF-8 with undecodable bytes replaced, so hostile input cannot fail a read.

Every file the live backends read outside PostgreSQL is opened by `open_regular`: without
blocking (`O_NONBLOCK | O_NOCTTY`), then refused unless it is a regular file, so a FIFO, a
device (`/dev/zero`) or a symlink to one named as a log or config fails at once instead of
hanging the call or reading without end. `cut_record` cuts one line or message at
`MAX_RECORD_CHARS` and says how much was cut.
"""

from __future__ import annotations

import glob
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from rootproof.errors import BackendQueryError

__all__ = ["MAX_RECORD_CHARS", "Tail", "cut_record", "newest_first", "open_regular", "read_head", "read_tail"]

MAX_RECORD_CHARS = 32 * 1024
"""Most characters of one log line or message a result holds; a longer one is cut, and says so."""


def cut_record(text: str) -> str:
    """`text` cut at `MAX_RECORD_CHARS`, with a marker saying how many characters were cut."""
    if len(text) <= MAX_RECORD_CHARS:
        return text
    return text[:MAX_RECORD_CHARS] + f" …[cut: {len(text) - MAX_RECORD_CHARS} more characters]"


def open_regular(path: Path) -> BinaryIO:
    """`path` opened for binary reading without blocking; BackendQueryError unless it is a readable regular file.

    `O_NONBLOCK` makes opening a FIFO return at once (a plain open waits for a writer for ever);
    `fstat` of the opened descriptor (symlinks followed, no race with the name) refuses FIFOs,
    sockets and devices. The returned file is the caller's to close.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise BackendQueryError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise BackendQueryError(f"{path}: not a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


@dataclass(frozen=True, kw_only=True)
class Tail:
    """The newest whole lines of a file, oldest first, and what reading them cost."""

    path: Path
    lines: list[str]
    bytes_read: int
    """Bytes read from the file (a cut first line included)."""
    truncated: bool
    """The file holds more than was read (older lines were left unread)."""


def read_tail(path: Path, budget: int) -> Tail:
    """The lines in the last `budget` bytes of `path` (oldest first); BackendQueryError naming the path if unreadable."""
    try:
        with open_regular(path) as fh:
            size = os.fstat(fh.fileno()).st_size
            start = max(0, size - budget)
            fh.seek(start)
            data = fh.read(min(size, budget))
    except OSError as exc:
        raise BackendQueryError(f"cannot read {path}: {exc.strerror or exc}") from exc
    truncated = start > 0
    raw = len(data)
    if truncated:
        cut = data.find(b"\n")
        data = data[cut + 1 :] if cut >= 0 else b""
    text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return Tail(path=path, lines=[ln.removesuffix("\r") for ln in lines], bytes_read=raw, truncated=truncated)


def read_head(path: Path, budget: int) -> Tail:
    """The first lines of `path` within `budget` bytes (a cut last line dropped); for configuration files."""
    try:
        with open_regular(path) as fh:
            data = fh.read(budget + 1)
    except OSError as exc:
        raise BackendQueryError(f"cannot read {path}: {exc.strerror or exc}") from exc
    truncated = len(data) > budget
    if truncated:
        data = data[:budget]
        cut = data.rfind(b"\n")
        data = data[: cut + 1] if cut >= 0 else b""
    text = data.decode("utf-8", errors="replace")
    return Tail(path=path, lines=text.splitlines(), bytes_read=len(data), truncated=truncated)


def newest_first(patterns: list[str]) -> list[tuple[Path, float]]:
    """Regular files matching any of the globs, newest (modification time) first, each once."""
    seen: dict[str, float] = {}
    for pattern in patterns:
        for name in glob.glob(os.path.expanduser(pattern), recursive=True):
            if name in seen:
                continue
            try:
                st = os.stat(name)
            except OSError:
                continue
            if os.path.isfile(name):
                seen[name] = st.st_mtime
    return sorted(((Path(n), m) for n, m in seen.items()), key=lambda p: (-p[1], str(p[0])))
