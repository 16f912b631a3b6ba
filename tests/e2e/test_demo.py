"""README's main command, `specdeploy demo`, then `sandbox down`: last of the end-to-end tests.

It runs on the session's engine sandbox, which was started the way the demo starts one
(``Sandbox.up`` with an engine node beside the default simulated GPU nodes), with the operator
registered as the sandbox's own and the tiny example already serving. So the demo takes the path
of a second run on a developer's machine: it reuses the sandbox and the operator, applies the
seed example (Ready on the simulated H100 nodes) and the tiny example (unchanged, so no engine
loads again), chats with the real engine, sends traffic and shows the acceptance verdict. Then
the operator the demo left running gets what a rollout or a drain sends a pod, SIGTERM, and must
exit by itself within 5 s, and `sandbox down` stops everything the session started, engines
included.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

from specdeploy_sandbox import operator_process
from specdeploy_sandbox.cluster import Sandbox
from specdeploy_sandbox.operator_process import LocalOperator
from support.kube import Kubectl
from support.paths import REPO

SIGTERM_EXIT_S = 5.0


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


def _sigterm_exit(operator: LocalOperator) -> tuple[float, int | None]:
    """Seconds from SIGTERM until the operator exited, and its exit code (None: still running
    after 30 s, when it is killed)."""
    started = time.monotonic()
    operator.process.terminate()
    try:
        code = operator.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        operator.process.kill()
        operator.process.wait(timeout=10)
        return time.monotonic() - started, None
    return time.monotonic() - started, code


def test_demo_deploys_the_seed_example_and_a_real_engine_and_down_stops_everything(
    engine_sandbox: Sandbox, engine_operator: LocalOperator, k: Kubectl, pairs: dict[str, str]
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
        # The operator the demo reused, serving its resources: SIGTERM ends it within 5 s, with 0.
        assert operator_process.running_pid(engine_sandbox) == engine_operator.process.pid
        exited, code = _sigterm_exit(engine_operator)
        assert code == 0 and exited < SIGTERM_EXIT_S, f"exit code {code} {exited:.1f}s after SIGTERM"
        # It runs unelected (one replica), so no Lease is left held for a successor to wait out.
        leases = json.loads(k("get", "leases", "-A", "-o", "json"))["items"]
        assert not [lease for lease in leases if lease["metadata"]["name"] == "specdeploy-operator"]
        print(f"\noperator exited {exited:.2f}s after SIGTERM with code {code}")
    finally:
        down = specdeploy("sandbox", "down", env=env, timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    after = specdeploy("sandbox", "status", env=env, timeout=60)
    assert "not running" in after.stdout + after.stderr
