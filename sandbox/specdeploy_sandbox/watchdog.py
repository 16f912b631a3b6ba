"""Stop a sandbox once the process that owns it exits.

The test suite starts its sandbox detached; if pytest is killed before its fixtures finalise,
this keeps the control plane from outliving it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from specdeploy_sandbox.cluster import Sandbox
from specdeploy_sandbox.processes import pid_alive

MAX_LIFETIME_SECONDS = 24 * 3600
POLL_SECONDS = 1.0


def main(argv: list[str]) -> int:
    name, root, owner = argv
    sandbox = Sandbox(name, Path(root))
    deadline = time.monotonic() + MAX_LIFETIME_SECONDS
    while pid_alive(int(owner)) and sandbox.read_state() is not None and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
    if sandbox.read_state() is not None:
        sandbox.down()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
