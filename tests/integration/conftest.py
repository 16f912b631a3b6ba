"""The integration suite's cluster and operator: one plain sandbox (every pod a phantom) for the
suite, a namespace per test, the CRD installed and ``specdeploy run`` as a real subprocess.

One operator for the suite, started with its admission webhook on loopback and the webhook
configuration managed by the operator itself (the sandbox path, as ``specdeploy demo`` runs it).
Both stop when the suite's last test is done (package scope).

Set SPECDEPLOY_TEST_KUBECONFIG to run the suite against an already running cluster (e.g.
`specdeploy sandbox up` in another terminal) instead of starting a sandbox.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from specdeploy_sandbox.cluster import SandboxError
from specdeploy_sandbox.operator_process import LocalOperator, start_operator
from support.kube import Cluster, Kubectl, WaitFor, fresh_namespace, install_crd
from support.sandboxes import PLAIN, running_cluster

KUBECONFIG_ENV = "SPECDEPLOY_TEST_KUBECONFIG"

# The engine metrics reader's interval: a verdict on a new resource's (simulated, silent) pods
# within seconds, so tests that wait for a settled resource do not wait 30 s.
READ_INTERVAL_S = 5
# How long an engine pod planned on a node pool waits for its node before Degraded says so: the
# node pool test waits that long once, rather than the default quarter hour.
NODE_WAIT_S = 15


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A running cluster for the suite, stopped at its end even when tests fail."""
    external = os.environ.get(KUBECONFIG_ENV)
    if external:
        yield Cluster(kubeconfig=Path(external), pod_cidr=None, audit_log=None)
        return
    with running_cluster(PLAIN, tmp_path_factory.mktemp("sandboxes"), f"pytest-{os.getpid()}") as running:
        yield running


@pytest.fixture(scope="package")
def kubectl(kubectl_binary: str, cluster: Cluster) -> Kubectl:
    return Kubectl(kubectl_binary, cluster.kubeconfig)


@pytest.fixture
def namespace(kubectl: Kubectl, request: pytest.FixtureRequest) -> Iterator[str]:
    with fresh_namespace(kubectl, request.node.name) as name:
        yield name


@pytest.fixture
def wait_for(kubectl: Kubectl, namespace: str) -> WaitFor:
    return WaitFor(kubectl, namespace)


@pytest.fixture(scope="package")
def crd(kubectl: Kubectl) -> None:
    install_crd(kubectl)


@pytest.fixture(scope="package")
def operator(
    cluster: Cluster, crd: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalOperator]:
    workdir = tmp_path_factory.mktemp("operator")
    try:
        running = start_operator(
            cluster.kubeconfig,
            workdir / "operator.log",
            workdir / "tls",
            extra_args=(
                "--acceptance-interval",
                str(READ_INTERVAL_S),
                "--read-token-secrets",
                "--node-wait",
                str(NODE_WAIT_S),
            ),
            webhook_client_ca=cluster.webhook_client_ca,
        )
    except SandboxError as exc:
        pytest.fail(str(exc))
    try:
        yield running
    finally:
        running.stop()
        print(f"\n--- operator log (tail) ---\n{running.log_tail()}")
