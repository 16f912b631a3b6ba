"""The sandbox the real-engine benchmark scripts run in: one engine node of CPU engine slots, the
CRD, and the operator as a real process pointed at the sandbox's model hub, all torn down after.

Shared by ``speculation_ab.py`` and ``adaptive_ab.py``. Every server is on loopback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from specdeploy_sandbox.binaries import ensure_kubectl
from specdeploy_sandbox.cluster import Sandbox
from specdeploy_sandbox.operator_process import start_operator

REPO = Path(__file__).resolve().parents[1]
CRD = REPO / "crds" / "specdeploy.io_speculativedeployments.yaml"
EXAMPLE = REPO / "manifests" / "examples" / "sandbox-tiny-eagle3.yaml"


def nodes(slots: int) -> str:
    """One engine node of ``slots`` CPU engines, declared large enough for the scheduler: the
    engine pods' derived requests (4 CPUs, 8Gi each) and a load Job's (1 CPU, 2Gi)."""
    return f"""
nodeGroups:
  - name: engine
    count: 1
    engine: true
    cpu: "{4 * slots + 4}"
    memory: {8 * slots + 16}Gi
    gpu: {{product: SANDBOX-CPU, count: {slots}, memoryMiB: 4096}}
"""


def kubectl(binary: Path, kubeconfig: Path, *argv: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [str(binary), f"--kubeconfig={kubeconfig}", *argv],
        input=stdin, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return done.stdout


@contextmanager
def engine_sandbox(name: str, slots: int, operator_args: tuple[str, ...] = ()) -> Iterator[tuple[Path, Path]]:
    """(kubectl binary, kubeconfig) of a running sandbox with the CRD installed before the operator
    starts (it watches the resource's API from its first moment)."""
    binary = ensure_kubectl()
    with tempfile.TemporaryDirectory(prefix=f"specdeploy-{name}-") as tmp:
        workdir = Path(tmp)
        nodes_file = workdir / "nodes.yaml"
        nodes_file.write_text(nodes(slots))
        sandbox = Sandbox(f"{name}-{os.getpid()}", workdir / "sandboxes")
        sandbox.up(nodes_file=nodes_file, owner_pid=os.getpid(), timeout=300)
        operator = None
        try:
            kubectl(binary, sandbox.kubeconfig, "apply", "--server-side", "-f", str(CRD))
            kubectl(
                binary,
                sandbox.kubeconfig,
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "-f",
                str(CRD),
            )
            operator = start_operator(
                sandbox.kubeconfig,
                workdir / "operator.log",
                None,
                operator_args,
                hub_endpoint=sandbox.hub_endpoint(),
            )
            yield binary, sandbox.kubeconfig
        finally:
            if operator is not None:
                operator.stop()
                print(f"\n--- operator log (tail) ---\n{operator.log_tail()}")
            sandbox.down()


def run_bench(kubeconfig: Path, argv: list[str], result: Path, timeout: float) -> dict[str, Any]:
    """``specdeploy bench ARGV --output json``; its report (with the seconds it took) written to
    ``result`` and returned. SystemExit with its stderr when it fails."""
    command = [sys.executable, "-m", "specdeploy", "bench", *argv, "--output", "json"]
    started = time.monotonic()
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, check=False,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"specdeploy bench {argv[0]} exited {done.returncode}:\n{done.stderr}")
    body: dict[str, Any] = json.loads(done.stdout)
    body["seconds"] = round(time.monotonic() - started, 1)
    result.write_text(json.dumps(body, indent=2) + "\n")
    return body
