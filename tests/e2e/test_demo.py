"""README's main command, `specdeploy demo`, then `sandbox down`: last of the end-to-end tests.

It runs on the session's engine sandbox, which was started the way the demo starts one
(``Sandbox.up`` with an engine node beside the default simulated GPU nodes), with the operator
registered as the sandbox's own and the tiny example already serving. So the demo takes the path
of a second run on a developer's machine: it reuses the sandbox and the operator, applies the
seed example (Ready on the simulated H100 nodes) and the tiny example (unchanged, so no engine
loads again), chats with the real engine, sends traffic and shows the acceptance verdict. Then
`sandbox down` stops everything the session started, engines included.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from specdeploy_sandbox.cluster import Sandbox
from support.paths import REPO


def specdeploy(*args: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specdeploy", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_demo_deploys_the_seed_example_and_a_real_engine_and_down_stops_everything(
    engine_sandbox: Sandbox, pairs: dict[str, str]
) -> None:
    env = {
        **os.environ,
        "SPECDEPLOY_SANDBOX_ROOT": str(engine_sandbox.root),
        "SPECDEPLOY_SANDBOX": engine_sandbox.name,
    }
    try:
        first = specdeploy("demo", env=env, timeout=900)
        assert first.returncode == 0, first.stdout + first.stderr
        out = first.stdout
        assert "qwen3-30b-a3b-eagle3" in out and "Qwen/Qwen3-30B-A3B-Instruct-2507" in out
        assert "engine command: " in out and '"num_speculative_tokens":3' in out
        # The tiny pair ran on the engine node and answered a chat completion.
        assert "vllm serve sandbox/tiny-qwen3" in out
        assert re.search(r"==> reply: '.+'", out) and "/v1/chat/completions" in out
        assert "SpeculationEffective=True" in out
        assert "specdeploy sandbox down" in out
        # Running it twice is harmless: the sandbox and the operator are reused.
        second = specdeploy("demo", env=env, timeout=300)
        assert second.returncode == 0, second.stdout + second.stderr
        assert "reused" in second.stdout
        status = specdeploy("sandbox", "status", env=env, timeout=60)
        assert "specdeploy-operator" in status.stdout
    finally:
        down = specdeploy("sandbox", "down", env=env, timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    after = specdeploy("sandbox", "status", env=env, timeout=60)
    assert "not running" in after.stdout + after.stderr
