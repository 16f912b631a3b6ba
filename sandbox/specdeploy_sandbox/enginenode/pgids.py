"""The process groups of an engine node's containers, recorded on disk so none outlives the node.

Each container runs as the leader of its own process group. The agent records every group in
``<state-dir>/pgids.json`` with its leader's start time and forgets it once the group is empty;
whatever is still recorded after the agent is gone (SIGKILL, crash) is killed by the sandbox's
``down`` and by the next agent's start. Only members started no earlier than the recorded leader
are killed, so a group id the kernel has since handed to an unrelated process is left alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from pathlib import Path

import psutil

PGIDS_FILE = "pgids.json"
# psutil's create_time has the kernel's 1/100 s resolution.
_CLOCK_SLACK_S = 0.02


def group_members(pgid: int, since: float | None = None) -> list[psutil.Process]:
    """Live (non-zombie) processes of group ``pgid``, started at or after ``since`` when given."""
    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) != pgid or process.status() == psutil.STATUS_ZOMBIE:
                continue
            if since is not None and process.create_time() < since - _CLOCK_SLACK_S:
                continue
        except (psutil.Error, ProcessLookupError):
            continue
        members.append(process)
    return members


def kill_group(pgid: int, since: float | None, wait_s: float = 5.0) -> bool:
    """SIGKILL the group's members (see group_members); True once none is left within ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        members = group_members(pgid, since)
        if not members:
            return True
        for member in members:
            with contextlib.suppress(psutil.Error):
                member.send_signal(signal.SIGKILL)
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


class PgidRegistry:
    """``pgids.json`` of one agent: pgid -> leader start time (seconds since the epoch)."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / PGIDS_FILE
        self._lock = threading.Lock()

    def _read(self) -> dict[str, float]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def _write(self, groups: dict[str, float]) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(groups))
        tmp.replace(self.path)

    def record(self, pgid: int, started: float) -> None:
        with self._lock:
            self._write(self._read() | {str(pgid): started})

    def forget(self, pgid: int) -> None:
        with self._lock:
            groups = self._read()
            if groups.pop(str(pgid), None) is not None:
                self._write(groups)

    def kill_all(self) -> list[int]:
        """Kill every recorded group; returns the pgids that still had members."""
        with self._lock:
            groups = self._read()
            hit = [int(pgid) for pgid, since in groups.items() if group_members(int(pgid), since)]
            for pgid in hit:
                kill_group(pgid, groups[str(pgid)])
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            return hit


def kill_leftovers(state_dir: Path) -> list[int]:
    """What ``sandbox down`` calls once an agent has stopped: kill its recorded groups."""
    return PgidRegistry(state_dir).kill_all()
