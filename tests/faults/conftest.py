"""A sandbox of the fault suite's own: its control plane gets killed and restarted, so no other
suite shares it. The default simulated nodes plus enough H100 nodes for the largest fleet; the
CRD installed; each test starts (and kills) its own operator.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import config

from clusterlib import Kubectl, wait_crd_established
from faultlib import GPUS_PER_NODE, H100, Apis, OperatorUnderFault, count
from specdeploy.sandbox import nodes
from specdeploy.sandbox.cluster import Sandbox

CRD_NAME = "speculativedeployments.specdeploy.io"
CRD_FILE = Path(__file__).resolve().parents[2] / "crds" / "specdeploy.io_speculativedeployments.yaml"
# The largest fleet any test here creates (the rollout under operator kills).
FLEET = count("RESOURCES", 40)


@pytest.fixture(scope="session")
def fault_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    root = tmp_path_factory.mktemp("fault-sandbox")
    sandbox = Sandbox(f"faults-{os.getpid()}", root)
    try:
        sandbox.up(owner_pid=os.getpid(), engine_nodes=0)
        core = nodes.core_v1_for(sandbox.kubeconfig)
        names = [f"fault-h100-{i:04d}" for i in range(-(-FLEET // GPUS_PER_NODE) + 1)]
        for name in names:
            nodes.add_node(nodes.gpu_node(name, H100, GPUS_PER_NODE), core_v1=core)
        nodes.wait_nodes_ready(core, names, timeout=120)
        yield sandbox
    finally:
        sandbox.down()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def fk(fault_sandbox: Sandbox, kubectl_binary: str) -> Kubectl:
    k = Kubectl(kubectl_binary, fault_sandbox.kubeconfig)
    k("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    wait_crd_established(k, CRD_NAME)
    return k


@pytest.fixture
def apis(fault_sandbox: Sandbox, fk: Kubectl) -> Iterator[Apis]:
    with config.new_client_from_config(str(fault_sandbox.kubeconfig)) as api_client:
        yield Apis.of(api_client)


@pytest.fixture
def fault_ns(fk: Kubectl, request: pytest.FixtureRequest) -> Iterator[str]:
    slug = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower())[:44].strip("-")
    name = f"{slug}-{secrets.token_hex(3)}"
    fk("create", "namespace", name)
    try:
        yield name
    finally:
        fk.run("delete", "namespace", name, "--wait=false")


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
