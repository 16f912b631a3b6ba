"""A replica on several nodes, for real: the operator's LeaderWorkerSet run by the LWS controller
in the sandbox, its pods scheduled on simulated H100 nodes, scaled, and repaired."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from sdeplib import apply
from specdeploy import api, children
from specdeploy.children.leaderworkerset import ROLE_LABEL
from specdeploy_sandbox import nodes
from specdeploy_sandbox.operator_process import LocalOperator
from support.kube import Cluster, Kubectl, RoseThenQuiet, WaitFor, condition, get, operator_writes, reconciles

VERIFIER = "meta-llama/Llama-3.3-70B-Instruct"
SPECULATOR = "RedHatAI/Llama-3.3-70B-Instruct-speculator.eagle3"
H100 = "NVIDIA-H100-80GB-HBM3"
# The test's own nodes: other tests' pods never land there (the taint), and its pods land nowhere
# else (the selector), so the group's placement is the test's to check.
POOL_LABEL, TAINT_KEY = "specdeploy.io/test-pool", "specdeploy.io/test-pool"
POOL_SIZE = 4


@pytest.fixture
def h100_pool(cluster: Cluster, kubectl: Kubectl, namespace: str) -> Iterator[list[str]]:
    """Four 8 x H100 nodes of this test only, deleted after it."""
    pool = namespace[-6:]
    names = [f"h100-pool-{pool}-{i}" for i in range(POOL_SIZE)]
    core = nodes.core_v1_for(cluster.kubeconfig)
    for name in names:
        spec = dataclasses.replace(nodes.gpu_node(name, H100, 8), labels={POOL_LABEL: pool})
        manifest = nodes.node_manifest(spec)
        manifest["spec"]["taints"].append({"key": TAINT_KEY, "value": pool, "effect": "NoSchedule"})
        core.create_node(body=manifest)
    try:
        yield names
    finally:
        for name in names:
            kubectl.run("delete", "node", name, "--wait=false")


def multi_node_resource(name: str, pool: str, replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "metadata": {"name": name},
        "spec": {
            "verifier": {"model": VERIFIER},
            "speculator": {"model": SPECULATOR},
            "parallelism": {"nodes": 2, "gpuProduct": "h100-80gb"},
            "replicas": replicas,
            "scheduling": {
                "nodeSelector": {POOL_LABEL: pool},
                "tolerations": [
                    {"key": TAINT_KEY, "operator": "Equal", "value": pool, "effect": "NoSchedule"}
                ],
            },
        },
    }


def group_pods(kubectl: Kubectl, namespace: str, name: str) -> list[dict[str, Any]]:
    selector = f"{children.INSTANCE_LABEL}={name}"
    found = get(kubectl, namespace, "pods", "-l", selector)["items"]
    return [p for p in found if not p["metadata"].get("deletionTimestamp")]


def ready_pods(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def ready(pod: dict[str, Any]) -> bool:
        conds = (pod.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

    return [p for p in pods if ready(p)]


def ready_with(kubectl: Kubectl, namespace: str, name: str, replicas: int) -> dict[str, Any] | None:
    body = get(kubectl, namespace, "sdep", name)
    ready = condition(body, "Ready")
    status = body.get("status") or {}
    if ready and ready["status"] == "True" and status.get("readyReplicas") == replicas:
        return body
    return None


def test_a_multi_node_resource_runs_as_a_group_scales_and_is_repaired(
    kubectl: Kubectl,
    namespace: str,
    wait_for: WaitFor,
    cluster: Cluster,
    operator: LocalOperator,
    h100_pool: list[str],
) -> None:
    name, pool = "llama-70b-2-nodes", namespace[-6:]
    apply(kubectl, namespace, multi_node_resource(name, pool))
    body = wait_for(lambda: ready_with(kubectl, namespace, name, 1), 120, "Ready with one group")
    plan = body["status"]["plan"]
    assert (plan["nodesPerReplica"], plan["tensorParallelSize"], plan["pipelineParallelSize"]) == (2, 8, 2)
    assert kubectl.run("get", "deployment", name, namespace=namespace).returncode != 0
    lws = get(kubectl, namespace, "leaderworkerset", name)
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert lws["metadata"]["ownerReferences"][0]["kind"] == api.KIND
    service = get(kubectl, namespace, "service", name)
    assert service["spec"]["selector"][ROLE_LABEL] == "leader"

    pods = ready_pods(group_pods(kubectl, namespace, name))
    roles = sorted(p["metadata"]["labels"][ROLE_LABEL] for p in pods)
    assert roles == ["leader", "worker"]
    assert len({p["spec"]["nodeName"] for p in pods}) == 2
    assert {p["spec"]["nodeName"] for p in pods} <= set(h100_pool)
    for pod in pods:
        engine = pod["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in engine.get("env") or []}
        assert env["LWS_WORKER_INDEX"] == ("0" if pod["metadata"]["labels"][ROLE_LABEL] == "leader" else "1")
        assert env["LWS_LEADER_ADDRESS"].startswith(f"{name}-0.")
        assert engine["resources"]["limits"][api.GPU_RESOURCE] == "8"
    # The pods the Service selects (the sandbox routes no Service: the selector is the contract):
    # the leader only, as workers serve no HTTP.
    selector = ",".join(f"{k}={v}" for k, v in service["spec"]["selector"].items())
    selected = [p["metadata"]["name"] for p in get(kubectl, namespace, "pods", "-l", selector)["items"]]
    leaders = [p["metadata"]["name"] for p in pods if p["metadata"]["labels"][ROLE_LABEL] == "leader"]
    assert selected == leaders

    # The group as the LWS webhook defaulted it matches what the operator applies: an event on it
    # makes the operator reconcile, and write no child.
    if cluster.audit_log is not None:
        mark = cluster.audit_log.stat().st_size
        reconciled = RoseThenQuiet(lambda: reconciles(operator), at_least=1, quiet=3.0)
        kubectl("label", "leaderworkerset", name, "touched=1", namespace=namespace)
        wait_for(reconciled, 30, "a reconcile after the group was touched, then 3 s without one")
        writes = operator_writes(cluster.audit_log, namespace, mark)
        kinds = ("leaderworkersets", "deployments", "services", "poddisruptionbudgets")
        assert [w["objectRef"] for w in writes if w["objectRef"].get("resource") in kinds] == []

    kubectl("patch", "sdep", name, "--type=merge", "-p", '{"spec":{"replicas":2}}', namespace=namespace)
    wait_for(lambda: ready_with(kubectl, namespace, name, 2), 120, "Ready with two groups")
    # LeaderWorkerSet's status can count a group ready a moment before the last pod's own status
    # says so (seen once with the machine under load): the four pods, once all are Ready.
    pods = wait_for(
        lambda: found if len(found := ready_pods(group_pods(kubectl, namespace, name))) == 4 else None,
        30,
        "four Ready pods in the two groups",
    )
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(h100_pool)

    # The group controller may replace a pod between the listing and the delete (seen once under
    # load: the delete found no such pod), so the worker deleted is one that still existed.
    def deleted_worker() -> set[str] | None:
        current = ready_pods(group_pods(kubectl, namespace, name))
        if len(current) != 4:
            return None
        worker = next(p for p in current if p["metadata"]["labels"][ROLE_LABEL] == "worker")
        pod = worker["metadata"]["name"]
        deleted = kubectl.run("delete", "pod", pod, "--wait=false", namespace=namespace)
        return {p["metadata"]["uid"] for p in current} if deleted.returncode == 0 else None

    old = wait_for(deleted_worker, 30, "a worker pod deleted")

    def repaired() -> bool:
        current = ready_pods(group_pods(kubectl, namespace, name))
        replaced = [p for p in current if p["metadata"]["uid"] not in old]
        return len(current) == 4 and bool(replaced) and ready_with(kubectl, namespace, name, 2) is not None

    wait_for(repaired, 120, "the group repaired after its worker was deleted")

    # Back to one node (one replica first, so the pool has free GPUs for the Deployment beside
    # the group): the group serves until the Deployment is ready, then it is deleted.
    kubectl("patch", "sdep", name, "--type=merge", "-p", '{"spec":{"replicas":1}}', namespace=namespace)
    wait_for(lambda: len(group_pods(kubectl, namespace, name)) == 2, 120, "one group left")
    one_node = '{"spec":{"parallelism":{"nodes":1}}}'
    kubectl("patch", "sdep", name, "--type=merge", "-p", one_node, namespace=namespace)

    def moved() -> dict[str, Any] | None:
        gone = kubectl.run("get", "leaderworkerset", name, namespace=namespace).returncode != 0
        return ready_with(kubectl, namespace, name, 1) if gone else None

    body = wait_for(moved, 120, "the Deployment ready and the group deleted")
    assert body["status"]["plan"]["nodesPerReplica"] == 1
    assert get(kubectl, namespace, "deployment", name)["status"]["readyReplicas"] == 1
    assert ROLE_LABEL not in get(kubectl, namespace, "service", name)["spec"]["selector"]
