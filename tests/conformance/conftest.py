"""Fixtures running rendered argvs through each engine's own parser in its cached venv.

Installing an engine can fail on machines without network or disk space. Then the tests skip
with pip's exact message; set SPECDEPLOY_CONFORMANCE_REQUIRED=1 (as CI should) to fail instead.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine_venvs import ensure_venv
from specdeploy import engines
from specdeploy.sandbox.venvs import VenvInstallError

HELPER = Path(__file__).with_name("parse_argv.py")
RESULT_MARKER = "SPECDEPLOY-PARSE-RESULT "
PARSE_TIMEOUT_S = 600


@functools.cache
def _install(engine: str) -> Path | str:
    """The engine venv's python, or why it cannot be installed; tried once per session."""
    version = engines.engine_for(engine).version
    try:
        return ensure_venv(engine, version, f"{engine}=={version}")
    except VenvInstallError as exc:
        return f"cannot install {engine}=={version} for the conformance test: {exc}"


def _engine_python(engine: str) -> Path:
    installed = _install(engine)
    if isinstance(installed, Path):
        return installed
    if os.environ.get("SPECDEPLOY_CONFORMANCE_REQUIRED") == "1":
        pytest.fail(installed)
    pytest.skip(installed)


def _parse(engine: str, argvs: list[list[str]]) -> dict[str, Any]:
    """Run the helper in the engine venv; offline, so parsing never reaches for the hub."""
    python = _engine_python(engine)
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [str(python), str(HELPER)],
        input=json.dumps({"engine": engine, "argvs": argvs}),
        capture_output=True,
        text=True,
        env=env,
        timeout=PARSE_TIMEOUT_S,
        check=False,
    )
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_MARKER):
            response: dict[str, Any] = json.loads(line[len(RESULT_MARKER) :])
            return response
    raise AssertionError(f"{engine} parser helper failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")


@pytest.fixture(scope="session")
def parse_all() -> Callable[[str, list[list[str]]], dict[str, Any]]:
    """``parse_all(engine, argvs)``: the engine parser's options and one result per argv (memoized)."""
    memo: dict[str, dict[str, Any]] = {}

    def run(engine: str, argvs: list[list[str]]) -> dict[str, Any]:
        key = json.dumps([engine, argvs])
        if key not in memo:
            memo[key] = _parse(engine, argvs)
        return memo[key]

    return run
