"""Fixtures running rendered argvs through each engine's own parser in its cached venv: one
long-lived parser process per engine for the whole session (importing an engine takes seconds).

Installing an engine can fail on machines without network or disk space. Then the tests skip
with pip's exact message; set SPECDEPLOY_CONFORMANCE_REQUIRED=1 (as CI should) to fail instead.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import parse_argv
from engine_venvs import HelperWorker

HELPER = Path(parse_argv.__file__)
PARSE_TIMEOUT_S = 600
# Requests of these kinds go to another engine's venv: `vllm bench serve` is vLLM's.
VENV_OF = {"vllm-bench": "vllm"}


@pytest.fixture(scope="session")
def parse_all() -> Iterator[Callable[[str, list[list[str]]], dict[str, Any]]]:
    """``parse_all(engine, argvs)``: the engine parser's options and one result per argv (memoized);
    ``engine`` is vllm, sglang or vllm-bench (``vllm bench serve``)."""
    memo: dict[str, dict[str, Any]] = {}
    workers: dict[str, HelperWorker] = {}

    def run(engine: str, argvs: list[list[str]]) -> dict[str, Any]:
        key = json.dumps([engine, argvs])
        if key not in memo:
            venv = VENV_OF.get(engine, engine)
            worker = workers.setdefault(venv, HelperWorker(venv, HELPER, parse_argv.RESULT_MARKER))
            memo[key] = worker.ask({"engine": engine, "argvs": argvs}, PARSE_TIMEOUT_S)
        return memo[key]

    yield run
    for worker in workers.values():
        worker.close()
