"""The `rootproof` command line run inside the test process.

`run_cli(args, env=..., cwd=..., input=...)` runs `rootproof.cli.main` as `python -m
rootproof.cli ARGS` would, with exactly the environment `env` (os.environ is replaced for the
call and restored after), the working folder `cwd` and `input` on stdin, and returns a
`subprocess.CompletedProcess`: the exit code, stdout and stderr, apart. A process costs a
second of imports per call; here the modules are already loaded.

What only a separate process shows stays a subprocess: signals, a closed pipe, a crash, a
memory limit, which modules get imported, a server that keeps running.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from unittest import mock

from click.testing import CliRunner


def run_cli(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    input: str | None = None,  # noqa: A002 - subprocess.run's name
) -> subprocess.CompletedProcess[str]:
    """`rootproof ARGS` in this process; the result as `subprocess.run(..., text=True)` gives it."""
    from rootproof import cli

    argv = ["rootproof", *args]
    code: int = 0
    with contextlib.ExitStack() as stack:
        if env is not None:
            stack.enter_context(mock.patch.dict(os.environ, dict(env), clear=True))
        if cwd is not None:
            stack.enter_context(contextlib.chdir(cwd))
        stack.enter_context(mock.patch.object(sys, "argv", argv))
        out, err, _ = stack.enter_context(CliRunner().isolation(input=input))
        try:
            cli.main()
        except SystemExit as exc:
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        stdout, stderr = out.getvalue(), err.getvalue()
    return subprocess.CompletedProcess(argv, code, _text(stdout), _text(stderr))


def _text(data: bytes) -> str:
    """Bytes written to a stream, as `text=True` reads them (universal newlines)."""
    return data.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")
