"""Ground-truth audit of a live diagnosis (`eval live`): put on the PYTHONPATH of the
`rootproof diagnose` subprocess only, with RP_GROUND_TRUTH_AUDIT_FILE naming where to write.

Python imports `sitecustomize` at start-up; this one installs an audit hook (`sys.addaudithook`,
event `open`) that appends the path of every opened file named `ground_truth.yaml` to that file,
one per line, as it happens (a killed run keeps what it recorded). The evaluator reads it after
the run: a non-empty file trips the `ground_truth_read` hard gate. It never raises and changes
nothing else; the hook cannot be removed, which is why it is installed in the subprocess alone.
"""

from __future__ import annotations

import os
import sys
from typing import Any

_OUT = os.environ.get("RP_GROUND_TRUTH_AUDIT_FILE")
_NAME = "ground_truth.yaml"


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event != "open" or not args or _OUT is None:
        return
    try:
        path = args[0]
        if isinstance(path, int):
            return
        text = os.fsdecode(path)
        if os.path.basename(text) != _NAME:
            return
        fd = os.open(_OUT, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (os.path.abspath(text) + "\n").encode("utf-8", "surrogateescape"))
        finally:
            os.close(fd)
    except Exception:  # an audit hook must never break the audited call
        return


if _OUT:
    sys.addaudithook(_hook)
