"""One sandbox with an engine node, its model hub serving the tiny models by id, and one operator
pointed at that hub, shared by the end-to-end tests that run real engines (each engine uses about
4 GiB; the node has three slots: two pairs side by side and a benchmark's baseline). The
operator reads engine metrics every 5 s, so acceptance tests see a verdict within seconds of
their traffic.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from clusterlib import Kubectl, WaitFor, wait_crd_established
from enginelib import NS, REPO
from specdeploy.sandbox.cluster import Sandbox
from specdeploy.sandbox.operator_process import LocalOperator, start_operator

CRD_FILE = REPO / "crds" / "specdeploy.io_speculativedeployments.yaml"
NODES = """
nodeGroups:
  - name: engine
    count: 1
    engine: true
    # Declared for the scheduler: three engine pods' derived requests (4 CPUs, 8Gi each) and a
    # bench load Job (1 CPU, 2Gi).
    cpu: "16"
    memory: 64Gi
    gpu: {product: SANDBOX-CPU, count: 3, memoryMiB: 4096}
"""
READ_INTERVAL_S = 5


@pytest.fixture(scope="session")
def engine_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    root = tmp_path_factory.mktemp("engine-sandbox")
    nodes_file = root / "nodes.yaml"
    nodes_file.write_text(NODES)
    sandbox = Sandbox(f"e2e-engine-{os.getpid()}", root)
    try:
        sandbox.up(nodes_file=nodes_file, owner_pid=os.getpid(), timeout=300)
        yield sandbox
    finally:
        sandbox.down()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def k(engine_sandbox: Sandbox, kubectl_binary: str) -> Kubectl:
    return Kubectl(kubectl_binary, engine_sandbox.kubeconfig)


@pytest.fixture(scope="session")
def wait(k: Kubectl) -> WaitFor:
    return WaitFor(k, NS)


@pytest.fixture(scope="session")
def engine_operator(engine_sandbox: Sandbox, k: Kubectl) -> Iterator[LocalOperator]:
    k("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    wait_crd_established(k, "speculativedeployments.specdeploy.io")
    k("create", "namespace", NS)
    workdir = engine_sandbox.dir / "operator-under-test"
    running = start_operator(
        engine_sandbox.kubeconfig,
        workdir / "operator.log",
        workdir / "tls",
        extra_args=("--acceptance-interval", str(READ_INTERVAL_S)),
        hub_endpoint=engine_sandbox.hub_endpoint(),
        webhook_client_ca=engine_sandbox.webhook_client_ca(),
    )
    try:
        yield running
    finally:
        running.stop()
        print(f"\n--- operator log (tail) ---\n{running.log_tail()}")
