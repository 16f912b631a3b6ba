"""The operator under test: the CRD installed and ``specdeploy run`` as a real subprocess.

One operator per session, started with its admission webhook on loopback and the webhook
configuration managed by the operator itself (the sandbox path, as ``specdeploy demo`` runs it).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from clusterlib import Cluster, Kubectl

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "crds" / "specdeploy.io_speculativedeployments.yaml"


@dataclass(frozen=True)
class Operator:
    """A running operator process and where to read its metrics and log."""

    process: subprocess.Popen[bytes]
    metrics_url: str
    log: Path

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@pytest.fixture(scope="session")
def crd(kubectl: Kubectl) -> None:
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", "crd/speculativedeployments.specdeploy.io"
    )


@pytest.fixture(scope="session")
def operator(cluster: Cluster, crd: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    probe, metrics, webhook = _free_ports(3)
    workdir = tmp_path_factory.mktemp("operator")
    log = workdir / "operator.log"
    argv = [
        sys.executable,
        "-m",
        "specdeploy",
        "run",
        "--probe-address",
        "127.0.0.1",
        "--probe-port",
        str(probe),
        "--metrics-port",
        str(metrics),
        "--webhook-address",
        "127.0.0.1",
        "--webhook-port",
        str(webhook),
        "--webhook-host",
        "127.0.0.1",
        "--webhook-configure",
        "--webhook-cert-dir",
        str(workdir / "tls"),
    ]
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    with open(log, "wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    running = Operator(process, f"http://127.0.0.1:{metrics}/metrics", log)
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                pytest.fail(f"operator exited with {process.returncode}:\n{running.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{probe}/healthz", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"operator not healthy within 60s:\n{running.log_tail()}")
                time.sleep(0.3)
        yield running
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        print(f"\n--- operator log (tail) ---\n{running.log_tail()}")


@pytest.fixture(scope="session")
def helm_binary() -> str:
    """helm at the pinned version (built once, cached), like kubectl_binary."""
    from specdeploy.sandbox.binaries import ensure_helm

    return str(ensure_helm())
