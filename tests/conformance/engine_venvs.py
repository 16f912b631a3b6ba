"""Cached virtual environments holding each engine at the version of its default image.

The engines are several GB each and take minutes to install, so they live outside the checkout
under ``${XDG_CACHE_HOME:-~/.cache}/specdeploy/venvs/<engine>-<version>`` and are reused by every
later run. A venv counts as ready only once the marker file exists, which is written after pip
succeeded; an interrupted install is removed and redone. A file lock keeps two concurrent test
sessions from installing into the same directory. ``python engine_venvs.py vllm 0.33.0`` builds
one ahead of a test run (a CI cache warm-up step).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

MARKER = ".specdeploy-ready"
DEFAULT_INSTALL_TIMEOUT_S = 1500


class InstallError(RuntimeError):
    """The engine could not be installed; the message carries the command and pip's own words."""


@dataclass(frozen=True)
class EngineVenv:
    """A ready venv: its interpreter runs the engine's own argument parser."""

    path: Path
    python: Path


def venvs_root() -> Path:
    """Per-user cache directory shared by all checkouts and CI jobs on the machine."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specdeploy" / "venvs"


def install_timeout() -> float:
    """Upper bound for creating one venv (SPECDEPLOY_CONFORMANCE_INSTALL_TIMEOUT, seconds)."""
    return float(os.environ.get("SPECDEPLOY_CONFORMANCE_INSTALL_TIMEOUT", DEFAULT_INSTALL_TIMEOUT_S))


def _run(cmd: list[str], deadline: float, log: Path) -> None:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise InstallError(f"install timed out before running: {' '.join(cmd)}")
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        try:
            proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=remaining, check=False)
        except subprocess.TimeoutExpired as exc:
            raise InstallError(f"timed out after {exc.timeout:.0f}s: {' '.join(cmd)}") from exc
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").strip().splitlines()[-20:])
        raise InstallError(f"exit {proc.returncode}: {' '.join(cmd)}\n{tail}")


def ensure_venv(engine: str, version: str, requirement: str, timeout: float | None = None) -> EngineVenv:
    """Return the ready venv for ``engine==version``, installing ``requirement`` on first use."""
    root = venvs_root()
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{engine}-{version}"
    python = path / "bin" / "python"
    with (root / f"{engine}-{version}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (path / MARKER).is_file():
            return EngineVenv(path=path, python=python)
        shutil.rmtree(path, ignore_errors=True)
        deadline = time.monotonic() + (install_timeout() if timeout is None else timeout)
        log = root / f"{engine}-{version}.install.log"
        log.write_text("")
        started = time.monotonic()
        try:
            _run([sys.executable, "-m", "venv", str(path)], deadline, log)
            _run([str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"], deadline, log)
            _run([str(python), "-m", "pip", "install", requirement], deadline, log)
        except InstallError:
            shutil.rmtree(path, ignore_errors=True)
            raise
        (path / MARKER).write_text(f"{requirement}\ninstalled in {time.monotonic() - started:.0f}s\n")
        return EngineVenv(path=path, python=python)


if __name__ == "__main__":
    engine_name, engine_version = sys.argv[1], sys.argv[2]
    venv = ensure_venv(engine_name, engine_version, f"{engine_name}=={engine_version}")
    print(venv.path)
