"""Planning on a node pool, for real: Karpenter's own NodePool CRD served by the sandbox's
apiserver, a NodePool of B200 nodes (a GPU no sandbox node has), the seed pair restricted to
B200, and the node the pool would create joining the cluster."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sdeplib import apply, ready
from specdeploy_sandbox import nodes
from specdeploy_sandbox.binaries import karpenter_crds
from support.kube import Cluster, Kubectl, WaitFor, condition, get, wait_crd_established
from support.paths import SEED_EXAMPLE

from .conftest import NODE_WAIT_S

pytestmark = pytest.mark.usefixtures("operator")

B200 = "NVIDIA-B200"
NAME = "qwen3-30b-a3b-eagle3"
NODE_CLASS = {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}


@pytest.fixture(scope="module")
def karpenter(kubectl: Kubectl) -> None:
    """Karpenter's NodePool and NodeClaim CRDs, as its release ships them."""
    for path in karpenter_crds():
        kubectl("apply", "--server-side", "-f", str(path))
        wait_crd_established(kubectl, str(yaml.safe_load(path.read_text())["metadata"]["name"]))


@pytest.fixture
def b200_pool(karpenter: None, kubectl: Kubectl, namespace: str) -> Iterator[str]:
    """A NodePool of 8 x B200 nodes, labelled as GPU feature discovery will label them."""
    name = f"b200-{namespace[-6:]}"
    labels = {"nvidia.com/gpu.product": B200, "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "183359"}
    nodepool = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeClassRef": NODE_CLASS,
                    "requirements": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}],
                    "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
                },
            },
            "limits": {"nvidia.com/gpu": "16"},
        },
    }
    apply(kubectl, "", nodepool)
    try:
        yield name
    finally:
        kubectl.run("delete", "nodepool", name, "--wait=false")


def on_b200() -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load(SEED_EXAMPLE.read_text())
    body["spec"].setdefault("parallelism", {})["gpuProduct"] = "b200"
    return body


def test_specdeploy_plan_weighs_the_clusters_nodepools_as_the_operator_does(
    cluster: Cluster, b200_pool: str, tmp_path: Path
) -> None:
    pinned = tmp_path / "b200.yaml"
    pinned.write_text(yaml.safe_dump(on_b200()))
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "specdeploy", "plan", "-f", str(pinned), "-o", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)["plan"]
    assert (plan["nodePool"], plan["gpuProduct"]) == (b200_pool, B200)


def test_a_pair_no_node_fits_is_planned_on_a_nodepool_and_runs_on_the_node_it_creates(
    cluster: Cluster, kubectl: Kubectl, namespace: str, wait_for: WaitFor, b200_pool: str
) -> None:
    apply(kubectl, namespace, on_b200())

    def planned() -> dict[str, Any] | None:
        body = get(kubectl, namespace, "sdep", NAME)
        return body if condition(body, "Schedulable").get("reason") == "PlannedOnNodePool" else None

    body = wait_for(planned, 60, "the pair to be planned on the NodePool")
    assert body["status"]["plan"]["nodePool"] == b200_pool
    assert body["status"]["plan"]["gpuProduct"] == B200
    message = condition(body, "Schedulable")["message"]
    assert f"Karpenter NodePool {b200_pool} (nodes of 8 x {B200})" in message

    deployment = wait_for(lambda: get(kubectl, namespace, "deployment", NAME), 30, "the Deployment")
    terms = deployment["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert {"key": "karpenter.sh/nodepool", "operator": "In", "values": [b200_pool]} in terms[0][
        "matchExpressions"
    ]
    selector = f"app.kubernetes.io/instance={NAME}"

    def unschedulable() -> dict[str, Any] | None:
        for pod in get(kubectl, namespace, "pods", "-l", selector)["items"]:
            scheduled = condition(pod, "PodScheduled")
            if scheduled.get("reason") == "Unschedulable":
                return pod
        return None

    # Pending where a provisioner sees it: what makes Karpenter create the node.
    pod = wait_for(unschedulable, 60, "the engine pod to wait for a node")

    def reported(type_: str, reason: str) -> dict[str, Any] | None:
        found = condition(get(kubectl, namespace, "sdep", NAME), type_)
        return found if found.get("reason") == reason else None

    waiting = wait_for(lambda: reported("Ready", "WaitingForNode"), 30, "Ready to say the pod waits")
    pod_name = pod["metadata"]["name"]
    assert f"pod {pod_name} waits for node pool {b200_pool} to create a node: " in waiting["message"]
    assert condition(pod, "PodScheduled")["message"] in waiting["message"]
    # No node within --node-wait: one pass at the deadline says so, with the scheduler's words.
    late = wait_for(
        lambda: reported("Degraded", "NodeNotProvisioned"), NODE_WAIT_S + 30, "NodeNotProvisioned"
    )
    assert late["status"] == "True"
    assert late["message"].startswith(f"no node for pod {pod_name} within {NODE_WAIT_S} s")

    # The node the pool creates, as Karpenter's KWOK provider labels it.
    node_name = f"{b200_pool}-x7k2p"
    created = nodes.gpu_node(node_name, B200, 8)
    spec = dataclasses.replace(created, labels={"karpenter.sh/nodepool": b200_pool})
    nodes.core_v1_for(cluster.kubeconfig).create_node(body=nodes.node_manifest(spec))
    try:
        body = wait_for(lambda: ready(kubectl, namespace, NAME), 90, "the pair to be Ready on the new node")
        (pod,) = get(kubectl, namespace, "pods", "-l", selector)["items"]
        assert pod["spec"]["nodeName"] == node_name
        assert condition(body, "Degraded")["status"] == "False"
        # The pool's node changed nothing the operator wrote: same plan, no rollout.
        assert body["status"]["plan"]["nodePool"] == b200_pool
        after = get(kubectl, namespace, "deployment", NAME)
        assert after["metadata"]["generation"] == deployment["metadata"]["generation"]
    finally:
        kubectl.run("delete", "node", node_name, "--wait=false")
