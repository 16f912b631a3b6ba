"""One run of a container: a process group on this machine, its log file, and its end.

The process leads a new session (so its whole group can be signalled) with a clean environment
and stdout+stderr appended to its log. It gets PR_SET_PDEATHSIG=SIGKILL, so it dies with the
agent even on SIGKILL; Linux sends that signal when the *thread* that forked it exits, so a pod
worker thread starts its containers and outlives them. When the leader exits, what is left of
its group is killed, as a container's cgroup would be, and the group is forgotten.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

import psutil

from specdeploy_sandbox.enginenode.pgids import PgidRegistry, kill_group

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_parent(parent: int) -> Callable[[], None]:
    """preexec_fn: SIGKILL when the parent goes; exit at once if it already has (a fork race)."""

    def preexec() -> None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(137)

    return preexec


class ContainerProcess:
    """A started container run. ``on_exit`` is called (from a waiter thread) once the group is gone."""

    def __init__(
        self,
        argv: list[str],
        env: Mapping[str, str],
        cwd: Path,
        log: Path,
        registry: PgidRegistry,
        on_exit: Callable[[], None],
    ) -> None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            self._popen = subprocess.Popen(
                argv, env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
                preexec_fn=_die_with_parent(os.getpid()),
            )  # fmt: skip
        self.pid = self._popen.pid
        self.log = log
        try:
            self.started = psutil.Process(self.pid).create_time()
        except psutil.Error:
            self.started = 0.0
        self._registry = registry
        registry.record(self.pid, self.started)
        self._on_exit = on_exit
        self._done = threading.Event()
        self.returncode: int | None = None
        threading.Thread(target=self._wait, name=f"wait-{self.pid}", daemon=True).start()

    def _wait(self) -> None:
        returncode = self._popen.wait()
        kill_group(self.pid, self.started)
        self._registry.forget(self.pid)
        self.returncode = returncode
        self._done.set()
        self._on_exit()

    @property
    def finished(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float) -> bool:
        return self._done.wait(timeout)

    def signal(self, signum: int) -> None:
        """Signal the whole group (a no-op once it is gone)."""
        if not self._done.is_set():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signum)


def exit_code(returncode: int) -> int:
    """A shell-style exit code: 128 + N for a process killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode
