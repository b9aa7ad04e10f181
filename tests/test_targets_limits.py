"""Targets: the `max_bytes` ceiling and how `password_file` is read (bounded, never blocking, never quoted)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from rootproof.errors import ConfigError
from rootproof.targets import NginxTarget, PrometheusTarget, secret_of

MIB = 1024 * 1024


def test_max_bytes_is_at_most_32_mib() -> None:
    assert NginxTarget(kind="nginx", name="edge", max_bytes=32 * MIB).max_bytes == 32 * MIB
    with pytest.raises(ValidationError, match="less than or equal to 33554432"):
        NginxTarget(kind="nginx", name="edge", max_bytes=32 * MIB + 1)
    with pytest.raises(ValidationError):
        NginxTarget(kind="nginx", name="edge", max_bytes=256 * MIB)


def _secret(path: Path) -> str | None:
    return secret_of(PrometheusTarget(kind="prometheus", name="prom", url="http://127.0.0.1:9090", password_file=path), {})


def _within_2s(path: Path) -> BaseException | str | None:
    box: dict[str, BaseException | str | None] = {}

    def run() -> None:
        try:
            box["v"] = _secret(path)
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box["v"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(2)
    if thread.is_alive():  # release the reader blocked opening the FIFO
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        thread.join(2)
        pytest.fail(f"secret_of blocked on {path}")
    return box["v"]


def test_password_file_first_line(tmp_path: Path) -> None:
    path = tmp_path / "pw"
    path.write_text("s3cret-pw\nsecond line\n")
    assert _secret(path) == "s3cret-pw"
    path.write_text("")
    assert _secret(path) == ""


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_password_file_that_is_not_a_regular_file_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "pw"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    started = time.monotonic()
    got = _within_2s(path)
    assert isinstance(got, ConfigError) and str(got) == f"targets: prom: password_file: {path}: not a regular file"
    assert time.monotonic() - started < 2


def test_password_file_is_read_bounded(tmp_path: Path) -> None:
    path = tmp_path / "pw"
    path.write_bytes(b"x" * 5000)
    got = _within_2s(path)
    assert isinstance(got, ConfigError) and "more than the 4096 bytes a password file may have" in str(got) and "xxxx" not in str(got)
    (tmp_path / "dir").mkdir()
    with pytest.raises(ConfigError, match="is a directory, not a password file"):
        _secret(tmp_path / "dir")


def test_password_file_errors_never_quote_the_secret(tmp_path: Path) -> None:
    path = tmp_path / "pw"
    path.write_bytes(b"hunter\xe9\xff2\n")
    with pytest.raises(ConfigError) as info:
        _secret(path)
    text = str(info.value)
    assert text == f"targets: prom: password_file: {path}: not UTF-8 text"
    assert "0xe9" not in text and "0xff" not in text and "hunter" not in text and "position" not in text
    assert info.value.__cause__ is None and info.value.__context__ is None  # the decode error holds the bytes
    missing = tmp_path / "absent"
    with pytest.raises(ConfigError, match=f"password_file: {missing}: cannot be read \\(No such file or directory\\)"):
        _secret(missing)
