"""Reading a small configuration file (YAML, or TOML by its `.toml` suffix), bounded.

Errors are ConfigError, one line naming the file: `FILE: problem` for the file as a whole
(unreadable, a directory, too large, not UTF-8), `FILE: line N: problem` for its syntax. Syntax
errors never quote the offending line (it may hold a secret).
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from pathlib import Path

from rootproof.errors import ConfigError

__all__ = ["read_config_file", "read_regular"]


def read_regular(path: Path, max_bytes: int, *, what: str) -> bytes:
    """The bytes of a regular file of at most `max_bytes`, read bounded; ConfigError `FILE: problem` otherwise.

    Opened without blocking (`O_NONBLOCK`: a FIFO never makes it wait) and checked on the opened
    descriptor, so a file swapped for a FIFO or a device after a check is refused too.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not {what}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise ConfigError(f"{path}: is a directory, not {what}")
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{path}: not a regular file")
        if st.st_size > max_bytes:
            raise ConfigError(f"{path}: {st.st_size} bytes, more than the {max_bytes} bytes {what} may have")
        raw = os.read(fd, max_bytes + 1)  # it may have grown since fstat; a regular file reads whole
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if len(raw) > max_bytes:
        raise ConfigError(f"{path}: more than the {max_bytes} bytes {what} may have")
    return raw


_TOML_AT = re.compile(r"\s*\(at line (\d+), column \d+\)$")


def _parse(path: Path, text: str) -> object:
    """YAML or TOML (by the `.toml` suffix) to plain data; errors name the line, never quote it."""
    if path.suffix.lower() == ".toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            msg = str(exc)
            m = _TOML_AT.search(msg)
            where = f"line {m.group(1)}: " if m else ""
            raise ConfigError(f"{path}: {where}invalid TOML: {msg[: m.start()] if m else msg}") from None
        except RecursionError:
            raise ConfigError(f"{path}: invalid TOML: nested too deep") from None
    import yaml

    from rootproof.scenarios.yamlio import parse_yaml_values

    try:
        return parse_yaml_values(text, str(path))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise ConfigError(f"{path}: {where}invalid YAML: {exc.problem or exc.context or 'syntax error'}") from None
    except yaml.YAMLError:
        raise ConfigError(f"{path}: invalid YAML") from None


def read_config_file(path: Path, max_bytes: int, *, what: str) -> tuple[bytes, object]:
    """The file's bytes and its parsed data (`what` names the kind of file in messages).

    YAML goes through the scenario reader's refusals (anchors, aliases, merge keys, deep nesting).
    """
    raw = read_regular(path, max_bytes, what=what)
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    return raw, _parse(path, text)
