"""A sandbox of the fault suite's own: its control plane gets killed and restarted, so no other
suite shares it. The default simulated nodes plus enough H100 nodes for the largest fleet; the
CRD installed; each test starts (and kills) its own operator, since what a test proves depends on
the operator's starts (one, for a control plane restart; several, for the kills).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import config

from faultlib import GPUS_PER_NODE, H100, Apis, OperatorUnderFault, count
from specdeploy_sandbox import nodes
from specdeploy_sandbox.cluster import Sandbox
from support.kube import Kubectl, fresh_namespace, install_crd
from support.sandboxes import PLAIN, running

# The largest fleet any test here creates (the rollout under operator kills).
FLEET = count("RESOURCES", 40)


@pytest.fixture(scope="package")
def fault_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    with running(PLAIN, tmp_path_factory.mktemp("fault-sandbox"), f"faults-{os.getpid()}") as sandbox:
        core = nodes.core_v1_for(sandbox.kubeconfig)
        names = [f"fault-h100-{i:04d}" for i in range(-(-FLEET // GPUS_PER_NODE) + 1)]
        for name in names:
            nodes.add_node(nodes.gpu_node(name, H100, GPUS_PER_NODE), core_v1=core)
        nodes.wait_nodes_ready(core, names, timeout=120)
        yield sandbox


@pytest.fixture(scope="package")
def fk(fault_sandbox: Sandbox, kubectl_binary: str) -> Kubectl:
    k = Kubectl(kubectl_binary, fault_sandbox.kubeconfig)
    install_crd(k)
    return k


@pytest.fixture
def apis(fault_sandbox: Sandbox, fk: Kubectl) -> Iterator[Apis]:
    with config.new_client_from_config(str(fault_sandbox.kubeconfig)) as api_client:
        yield Apis.of(api_client)


@pytest.fixture
def fault_ns(fk: Kubectl, request: pytest.FixtureRequest) -> Iterator[str]:
    with fresh_namespace(fk, request.node.name) as name:
        yield name


@pytest.fixture
def operator_under_fault(fault_sandbox: Sandbox, fk: Kubectl, tmp_path: Path) -> Iterator[OperatorUnderFault]:
    running = OperatorUnderFault(
        fault_sandbox.kubeconfig, tmp_path, webhook_client_ca=fault_sandbox.webhook_client_ca()
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()
        print("\n--- operator log (tail) ---\n" + "\n".join(running.log_lines()[-40:]))
