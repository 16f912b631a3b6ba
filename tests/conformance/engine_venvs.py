"""Cached virtual environments holding each engine at the version of its default image.

The engines are several GB each and take minutes to install, so they live outside the checkout
under ``${XDG_CACHE_HOME:-~/.cache}/specdeploy/venvs/<engine>-<version>``, installed (with pip)
by the sandbox's cached-venv installer, ``specdeploy_sandbox.venvs``: ready once its marker is
written, redone after an interrupted install, locked against concurrent test sessions.
``python engine_venvs.py vllm 0.33.0`` builds one ahead of a test run (a CI cache warm-up step).
"""

from __future__ import annotations

import functools
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

import pytest

from specdeploy import engines
from specdeploy_sandbox import venvs

DEFAULT_INSTALL_TIMEOUT_S = 1500


def install_timeout() -> float:
    """Upper bound for creating one venv (SPECDEPLOY_CONFORMANCE_INSTALL_TIMEOUT, seconds)."""
    return float(os.environ.get("SPECDEPLOY_CONFORMANCE_INSTALL_TIMEOUT", DEFAULT_INSTALL_TIMEOUT_S))


def ensure_venv(engine: str, version: str, requirement: str) -> Path:
    """The python of the ready venv for ``engine==version``, installing ``requirement`` on first use."""

    def install(path: Path, steps: venvs.Steps) -> None:
        pip = [str(path / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        steps.run("upgrading pip", [*pip, "--upgrade", "pip"])
        steps.run(f"installing {requirement}", [*pip, requirement])

    name = f"{engine}-{version}"
    return venvs.ensure(name, requirement, install, sys.stderr, install_timeout()) / "bin" / "python"


@functools.cache
def _install(engine: str) -> Path | str:
    """The engine venv's python, or why it cannot be installed; tried once per session."""
    version = engines.engine_for(engine).version
    try:
        return ensure_venv(engine, version, f"{engine}=={version}")
    except venvs.VenvInstallError as exc:
        return f"cannot install {engine}=={version} for the conformance test: {exc}"


def engine_python(engine: str) -> Path:
    """The python of the engine's venv; a test that needs it skips when it cannot be installed
    (fails instead with SPECDEPLOY_CONFORMANCE_REQUIRED=1, as CI runs)."""
    installed = _install(engine)
    if isinstance(installed, Path):
        return installed
    if os.environ.get("SPECDEPLOY_CONFORMANCE_REQUIRED") == "1":
        pytest.fail(installed)
    pytest.skip(installed)


def _helper_env() -> dict[str, str]:
    """Offline (nothing reaches for the hub), CPU, and outside any prometheus multiprocess
    directory."""
    env = {key: value for key, value in os.environ.items() if key.upper() != "PROMETHEUS_MULTIPROC_DIR"}
    env.update(VLLM_TARGET_DEVICE="cpu", HF_HUB_OFFLINE="1")
    return env


def run_helper(engine: str, helper: Path, job: Any, marker: str, timeout: float) -> Any:
    """Run ``helper`` with the engine venv's python, ``job`` as JSON on stdin; the JSON it prints
    after ``marker`` (engines log to stdout too)."""
    python = engine_python(engine)
    proc = subprocess.run(
        [str(python), str(helper)],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        env=_helper_env(),
        timeout=timeout,
        check=False,
    )
    for line in proc.stdout.splitlines():
        if line.startswith(marker):
            return json.loads(line[len(marker) :])
    failed = f"{engine} helper {helper.name} failed (exit {proc.returncode})"
    raise AssertionError(f"{failed}:\n{proc.stderr[-4000:]}")


class HelperWorker:
    """``helper --serve`` in the engine's venv for as long as the test session needs it: one job
    per line of stdin, one answer per ``marker`` line of stdout, so the engine is imported once
    for every job. A job that kills it fails the test that sent it, with the helper's stderr; the
    next job starts a new one."""

    def __init__(self, engine: str, helper: Path, marker: str) -> None:
        self.engine, self.helper, self.marker = engine, helper, marker
        self.process: subprocess.Popen[str] | None = None
        self.stderr: IO[str] | None = None
        self.lines: queue.Queue[str | None] = queue.Queue()

    def _start(self) -> subprocess.Popen[str]:
        self.close()
        # Kept open for the worker's life (it writes there), closed by close().
        self.stderr = tempfile.TemporaryFile("w+")  # noqa: SIM115
        self.lines = queue.Queue()
        process = subprocess.Popen(
            [str(engine_python(self.engine)), str(self.helper), "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            env=_helper_env(),
        )
        lines = self.lines

        def read() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=read, name=f"{self.engine}-helper", daemon=True).start()
        self.process = process
        return process

    def _failure(self, what: str) -> AssertionError:
        tail = ""
        if self.stderr is not None:
            self.stderr.seek(0)
            tail = self.stderr.read()[-4000:]
        return AssertionError(f"{self.engine} helper {self.helper.name} {what}:\n{tail}")

    def ask(self, job: Any, timeout: float) -> Any:
        process = self.process if self.process is not None and self.process.poll() is None else self._start()
        assert process.stdin is not None
        process.stdin.write(json.dumps(job) + "\n")
        process.stdin.flush()
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.close()
                raise self._failure(f"did not answer within {timeout:.0f}s") from None
            if line is None:
                process.wait(timeout=10)
                raise self._failure(f"exited with {process.returncode}")
            if line.startswith(self.marker):
                return json.loads(line[len(self.marker) :])

    def close(self) -> None:
        if self.process is not None:
            if self.process.stdin is not None:
                self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
            self.process = None
        if self.stderr is not None:
            self.stderr.close()
            self.stderr = None


if __name__ == "__main__":
    engine_name, engine_version = sys.argv[1], sys.argv[2]
    print(ensure_venv(engine_name, engine_version, f"{engine_name}=={engine_version}").parent.parent)
