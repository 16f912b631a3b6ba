"""Cached virtual environments of the sandbox's tools: the vLLM CPU runtime and the model hub.

Each lives under ``${XDG_CACHE_HOME:-~/.cache}/specdeploy/venvs/<name>``, shared by every sandbox
and checkout of the user, and counts as ready only once its marker file exists, written after the
install succeeded. An interrupted install is removed and redone; a file lock keeps two runs from
installing into the same directory. Every command's output goes to ``<name>.install.log`` and one
progress line per step to the caller; a failure names the step and ends with the log's tail.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from specdeploy_sandbox.binaries import cache_root

MARKER = ".specdeploy-ready"
_LOG_TAIL_LINES = 20


class VenvInstallError(RuntimeError):
    """A tool's environment could not be installed; the message names the step and the log."""


def venv_path(name: str) -> Path:
    return cache_root() / "venvs" / name


def is_ready(path: Path) -> bool:
    return (path / MARKER).is_file()


def pip_install(python: Path) -> list[str]:
    """``pip install`` into ``python``'s environment: uv when there is one (several times faster
    at resolving large dependency sets), else the environment's own pip."""
    beside = Path(sys.executable).parent / "uv"
    uv = str(beside) if beside.is_file() else shutil.which("uv")
    return [uv, "pip", "install", "--python", str(python)] if uv else [str(python), "-m", "pip", "install"]


@dataclass(frozen=True)
class Steps:
    """One install run: each step's command logged, one progress line per step."""

    log: Path
    progress: TextIO
    deadline: float

    def run(self, what: str, argv: list[str]) -> None:
        print(f"[specdeploy]   {what}", file=self.progress, flush=True)
        remaining = self.deadline - time.monotonic()
        with self.log.open("a") as out:
            out.write(f"$ {' '.join(argv)}\n")
            out.flush()
            try:
                done = subprocess.run(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=max(remaining, 1.0),
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise VenvInstallError(f"{what}: timed out; log: {self.log}\n{self._tail()}") from None
        if done.returncode != 0:
            raise VenvInstallError(f"{what}: exit {done.returncode}; log: {self.log}\n{self._tail()}")

    def _tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").strip().splitlines()[-_LOG_TAIL_LINES:])


def ensure(
    name: str,
    description: str,
    install: Callable[[Path, Steps], None],
    progress: TextIO,
    timeout: float,
) -> Path:
    """The ready environment ``name``; on first use a fresh venv that ``install`` fills."""
    path = venv_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with (path.parent / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_ready(path):
            return path
        shutil.rmtree(path, ignore_errors=True)
        log = path.parent / f"{name}.install.log"
        log.write_text("")
        started = time.monotonic()
        print(f"[specdeploy] installing {description} into {path}, once", file=progress, flush=True)
        steps = Steps(log, progress, started + timeout)
        try:
            steps.run("creating the virtual environment", [sys.executable, "-m", "venv", str(path)])
            install(path, steps)
        except (VenvInstallError, OSError) as exc:
            shutil.rmtree(path, ignore_errors=True)
            if isinstance(exc, VenvInstallError):
                raise
            raise VenvInstallError(f"installing {description} failed: {exc}; log: {log}") from exc
        seconds = time.monotonic() - started
        (path / MARKER).write_text(f"{description}\ninstalled in {seconds:.0f}s\n")
        print(f"[specdeploy] {description} installed in {seconds:.0f}s", file=progress, flush=True)
        return path
