"""GPU nodes on demand, for real: a sandbox started with ``--provisioner`` has no GPU node, and
Karpenter (its KWOK provider) creates one when the seed pair, planned on its NodePool, asks for
it, then removes it once the pair is deleted.

A control plane of its own: the shared one has GPU nodes up, on which the planner would place the
pair without any pool.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sdeplib import apply, ready
from specdeploy_sandbox.cluster import SandboxError
from specdeploy_sandbox.operator_process import LocalOperator, start_operator
from support.kube import Cluster, Kubectl, WaitFor, condition, fresh_namespace, get, install_crd
from support.paths import SEED_EXAMPLE
from support.sandboxes import PROVISIONED, running_cluster

NAME = "qwen3-30b-a3b-eagle3"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
POOL = "gpu-h100"


@pytest.fixture(scope="module")
def provisioned(tmp_path_factory: pytest.TempPathFactory, kubectl_binary: str) -> Iterator[Kubectl]:
    """The sandbox with Karpenter and no GPU node, and an operator on it."""
    root = tmp_path_factory.mktemp("provisioned")
    with running_cluster(PROVISIONED, root / "sandboxes", f"pytest-prov-{os.getpid()}") as cluster:
        kubectl = Kubectl(kubectl_binary, cluster.kubeconfig)
        install_crd(kubectl)
        operator = _operator(cluster, root)
        try:
            yield kubectl
        finally:
            operator.stop()
            print(f"\n--- operator log (tail) ---\n{operator.log_tail()}")


def _operator(cluster: Cluster, root: Path) -> LocalOperator:
    try:
        return start_operator(cluster.kubeconfig, root / "operator.log", root / "tls")
    except SandboxError as exc:
        pytest.fail(str(exc))


def gpu_nodes(kubectl: Kubectl) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = get(kubectl, None, "nodes", "-l", "nvidia.com/gpu.present=true")["items"]
    return found


def test_the_seed_pair_gets_a_node_karpenter_creates_and_the_node_goes_with_the_pair(
    provisioned: Kubectl, request: pytest.FixtureRequest
) -> None:
    kubectl = provisioned
    assert gpu_nodes(kubectl) == []
    with fresh_namespace(kubectl, request.node.name) as namespace:
        wait_for = WaitFor(kubectl, namespace)
        applied = time.monotonic()
        apply(kubectl, namespace, yaml.safe_load(SEED_EXAMPLE.read_text()))

        def planned() -> dict[str, Any] | None:
            body = get(kubectl, namespace, "sdep", NAME)
            return body if condition(body, "Schedulable").get("reason") == "PlannedOnNodePool" else None

        body = wait_for(planned, 60, "the pair to be planned on a NodePool")
        assert body["status"]["plan"]["nodePool"] == POOL

        def created() -> dict[str, Any] | None:
            pooled = [n for n in gpu_nodes(kubectl) if n["metadata"]["labels"].get(NODEPOOL_LABEL) == POOL]
            return pooled[0] if pooled else None

        node = wait_for(created, 120, "Karpenter to create a node")
        node_seconds = time.monotonic() - applied
        body = wait_for(lambda: ready(kubectl, namespace, NAME), 120, "the pair to be Ready on it")
        ready_seconds = time.monotonic() - applied
        (pod,) = get(kubectl, namespace, "pods", "-l", f"app.kubernetes.io/instance={NAME}")["items"]
        assert pod["spec"]["nodeName"] == node["metadata"]["name"]
        assert body["status"]["plan"]["nodePool"] == POOL  # the node's arrival changed no plan
        print(f"\napply -> node {node_seconds:.1f} s; apply -> Ready {ready_seconds:.1f} s")

        kubectl("delete", "sdep", NAME, namespace=namespace)
        deleted = time.monotonic()
        wait_for(lambda: gpu_nodes(kubectl) == [] or None, 150, "Karpenter to remove the empty node")
        print(f"delete -> node removed {time.monotonic() - deleted:.1f} s")
