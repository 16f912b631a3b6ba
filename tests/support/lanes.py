"""Two lanes on one machine: a readers-writer lock across the pytest-xdist workers of one run.

Every test runs holding the lock shared; a test marked ``quiet_machine`` (one whose assertion
compares throughput measured at two moments, such as a benchmark's speed-up) holds it alone while
it runs (its fixtures start under the shared lock), so the other lane waits between two of its
tests, and what that lane wrote (a virtual environment's install, say) is flushed to disk first,
so the kernel's writeback does not run inside the quiet test's window. A writer first takes the
gate, which readers pass through on their way in, so a lane that runs test after test cannot
starve it.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path


class MachineLock:
    def __init__(self, directory: Path) -> None:
        self.gate = directory / "lanes-gate.lock"
        self.room = directory / "lanes-room.lock"

    @contextmanager
    def held(self, exclusive: bool) -> Iterator[None]:
        with ExitStack() as files:
            gate = files.enter_context(open(self.gate, "a+b"))
            room = files.enter_context(open(self.room, "a+b"))
            fcntl.flock(gate, fcntl.LOCK_EX)
            try:
                fcntl.flock(room, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            finally:
                if not exclusive:
                    fcntl.flock(gate, fcntl.LOCK_UN)
            if exclusive:
                os.sync()
            try:
                yield
            finally:
                fcntl.flock(room, fcntl.LOCK_UN)
                if exclusive:
                    fcntl.flock(gate, fcntl.LOCK_UN)
