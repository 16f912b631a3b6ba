"""Cached virtual environments holding each engine at the version of its default image.

The engines are several GB each and take minutes to install, so they live outside the checkout
under ``${XDG_CACHE_HOME:-~/.cache}/specdeploy/venvs/<engine>-<version>``, installed (with pip)
by the sandbox's cached-venv installer, ``specdeploy.sandbox.venvs``: ready once its marker is
written, redone after an interrupted install, locked against concurrent test sessions.
``python engine_venvs.py vllm 0.33.0`` builds one ahead of a test run (a CI cache warm-up step).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from specdeploy import engines
from specdeploy.sandbox import venvs

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


def run_helper(engine: str, helper: Path, job: Any, marker: str, timeout: float) -> Any:
    """Run ``helper`` with the engine venv's python, ``job`` as JSON on stdin, offline (nothing
    reaches for the hub) and outside any prometheus multiprocess directory; the JSON it prints
    after ``marker`` (engines log to stdout too)."""
    python = engine_python(engine)
    env = {key: value for key, value in os.environ.items() if key.upper() != "PROMETHEUS_MULTIPROC_DIR"}
    env.update(VLLM_TARGET_DEVICE="cpu", HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [str(python), str(helper)],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    for line in proc.stdout.splitlines():
        if line.startswith(marker):
            return json.loads(line[len(marker) :])
    failed = f"{engine} helper {helper.name} failed (exit {proc.returncode})"
    raise AssertionError(f"{failed}:\n{proc.stderr[-4000:]}")


if __name__ == "__main__":
    engine_name, engine_version = sys.argv[1], sys.argv[2]
    print(ensure_venv(engine_name, engine_version, f"{engine_name}=={engine_version}").parent.parent)
