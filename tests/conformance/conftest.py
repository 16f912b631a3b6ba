"""Fixtures running rendered argvs through each engine's own parser in its cached venv.

Installing an engine can fail on machines without network or disk space. Then the tests skip
with pip's exact message; set SPECDEPLOY_CONFORMANCE_REQUIRED=1 (as CI should) to fail instead.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine_venvs import run_helper

HELPER = Path(__file__).with_name("parse_argv.py")
RESULT_MARKER = "SPECDEPLOY-PARSE-RESULT "
PARSE_TIMEOUT_S = 600


def _parse(engine: str, argvs: list[list[str]]) -> dict[str, Any]:
    response: dict[str, Any] = run_helper(
        engine, HELPER, {"engine": engine, "argvs": argvs}, RESULT_MARKER, PARSE_TIMEOUT_S
    )
    return response


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
