"""The operator under test: the CRD installed and ``specdeploy run`` as a real subprocess.

One operator per session, started with its admission webhook on loopback and the webhook
configuration managed by the operator itself (the sandbox path, as ``specdeploy demo`` runs it).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterlib import Cluster, Kubectl, wait_crd_established
from specdeploy.sandbox.cluster import SandboxError
from specdeploy.sandbox.operator_process import LocalOperator, start_operator

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "crds" / "specdeploy.io_speculativedeployments.yaml"
CRD_NAME = "speculativedeployments.specdeploy.io"
# The engine metrics reader's interval: a verdict on a new resource's (simulated, silent) pods
# within seconds, so tests that wait for a settled resource do not wait 30 s.
READ_INTERVAL_S = 5


@pytest.fixture(scope="session")
def crd(kubectl: Kubectl) -> None:
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    wait_crd_established(kubectl, CRD_NAME)


@pytest.fixture(scope="session")
def operator(
    cluster: Cluster, crd: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalOperator]:
    workdir = tmp_path_factory.mktemp("operator")
    try:
        running = start_operator(
            cluster.kubeconfig,
            workdir / "operator.log",
            workdir / "tls",
            extra_args=("--acceptance-interval", str(READ_INTERVAL_S), "--read-token-secrets"),
            webhook_client_ca=cluster.webhook_client_ca,
        )
    except SandboxError as exc:
        pytest.fail(str(exc))
    try:
        yield running
    finally:
        running.stop()
        print(f"\n--- operator log (tail) ---\n{running.log_tail()}")
