"""A process that owns a live environment (the tests kill it): starts one with the components
named on the command line under the root given, prints each progress line and then `READY
<run_id>` on stdout, and sleeps until it is signalled. Inside `with LiveEnvironment(...)`, so
SIGTERM stops the environment before the process exits; SIGKILL leaves it to the next preflight.

Run: python tests/live/_owner.py ROOT COMPONENT [COMPONENT ...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from rootproof.live import LiveConfig, LiveEnvironment


def main() -> None:
    root, components = Path(sys.argv[1]), tuple(sys.argv[2:])
    env = LiveEnvironment(LiveConfig(root=root, components=components, load_rate_per_s=1), progress=lambda line: print(line, flush=True))  # type: ignore[arg-type]
    with env:
        print(f"READY {env.run_id}", flush=True)
        while True:
            time.sleep(1)


if __name__ == "__main__":
    main()
