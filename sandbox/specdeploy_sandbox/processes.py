"""The processes and ports of a sandbox: spawning, identity across pid reuse, liveness, stopping.

A sandbox outlives the command that started it, so a process is known by the pid *and* start time
written to its state file; psutil reads both back, and a pid whose start time differs is a new
process that happens to have the same number and is never signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil

# A process as recorded in the state file: its pid and start time (None when unknown).
Recorded = tuple[int, str | None]

_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports (all held open together so none is handed out twice)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def port_is_free(port: int) -> bool:
    """True when a server could listen on 127.0.0.1:port right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen(1)
        except OSError:
            return False
    return True


def wait_ports_free(ports: list[int], seconds: float = 5.0) -> list[int]:
    """Poll until every port is free or ``seconds`` pass; returns the ports still busy."""
    deadline = time.monotonic() + seconds
    busy = [p for p in ports if not port_is_free(p)]
    while busy and time.monotonic() < deadline:
        time.sleep(0.1)
        busy = [p for p in busy if not port_is_free(p)]
    return busy


def _start_time(process: psutil.Process) -> str:
    """Seconds from boot to the process's start: unlike the wall-clock create time, a clock step
    between ``up`` and ``down`` does not change it (1/100 s is the kernel's resolution)."""
    return f"{process.create_time() - psutil.boot_time():.2f}"


def process_start_time(pid: int) -> str | None:
    try:
        return _start_time(psutil.Process(pid))
    except psutil.Error:
        return None


def pid_alive(pid: int, start_time: str | None = None) -> bool:
    """Alive, not a zombie, and (when known) the same process that was recorded."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)  # reap our own exited children so they stop looking alive
    try:
        process = psutil.Process(pid)
        if process.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            return False
        return start_time is None or _start_time(process) == start_time
    except psutil.NoSuchProcess:  # ZombieProcess included
        return False
    except psutil.AccessDenied:  # another user's process: it exists, but cannot be told apart
        return True


def rss_mib(pid: int) -> float | None:
    try:
        rss: int = psutil.Process(pid).memory_info().rss
    except psutil.Error:
        return None
    return rss / 2**20


def stop_child(process: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM a child of this process, SIGKILL it if it is still there after ``timeout``, reap it."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout)


def spawn(argv: list[str], log: Path, cwd: Path, env: dict[str, str] | None = None) -> int:
    """Start ``argv`` in its own session (so it outlives this command), output to ``log``; with
    ``env``, in that environment instead of this process's."""
    with open(log, "wb") as out:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=True,
            close_fds=True,
            env=env,
        )
    _CHILDREN[process.pid] = process
    return process.pid


def stop_in_tiers(tiers: list[list[Recorded]], timeout: float) -> None:
    """Terminate each tier before the next (all within ``timeout``), then reap our own children."""
    deadline = time.monotonic() + timeout
    for tier in tiers:
        _terminate(tier, deadline)
    for pid, _ in (recorded for tier in tiers for recorded in tier):
        child = _CHILDREN.pop(pid, None)
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=1)


def kill_and_wait(processes: list[Recorded], timeout: float) -> None:
    """SIGKILL at once (a crash, not a shutdown) and wait, bounded, until they are gone."""
    for pid, _ in processes:
        _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while any(pid_alive(pid, start) for pid, start in processes) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid, _ in processes:
        child = _CHILDREN.pop(pid, None)
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=1)


def _signal(pid: int, signum: int) -> None:
    """Signal the process group each component leads (start_new_session), else just the pid."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)


def _terminate(processes: list[Recorded], deadline: float) -> None:
    """SIGTERM, wait until ``deadline``, then SIGKILL and wait (bounded) for the stragglers."""
    for pid, _ in processes:
        _signal(pid, signal.SIGTERM)
    while any(pid_alive(pid, start) for pid, start in processes) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid, start in processes:
        if pid_alive(pid, start):
            _signal(pid, signal.SIGKILL)
    kill_deadline = time.monotonic() + 5.0
    while any(pid_alive(pid, start) for pid, start in processes) and time.monotonic() < kill_deadline:
        time.sleep(0.05)
