"""Issue: production clusters, engine pods that survive. On the sandbox's simulated GPU nodes:
sized requests, the disruption budget the eviction API honours, and a rollout of a replicated
pair that never has more than one replica down (or none, with a surge)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client, config, watch

from sdeplib import apply, ready
from support.kube import Cluster, Kubectl, WaitFor, get
from support.paths import SEED_EXAMPLE

pytestmark = pytest.mark.usefixtures("operator")

NAME = "qwen3-30b-a3b-eagle3"
REPLICAS = 3
# The rollout is watched for this long at most (the simulated pods turn Ready within seconds).
ROLLOUT_WATCH_S = 90
GPU_NODES = "nvidia.com/gpu.present=true"


def example(**spec_changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load(SEED_EXAMPLE.read_text())
    body["spec"].update(spec_changes)
    return body


def all_ready(kubectl: Kubectl, namespace: str, replicas: int) -> dict[str, Any] | None:
    body = ready(kubectl, namespace, NAME)
    return body if body and body["status"].get("readyReplicas") == replicas else None


def live_pods(kubectl: Kubectl, namespace: str) -> list[dict[str, Any]]:
    pods = get(kubectl, namespace, "pods", "-l", f"app.kubernetes.io/instance={NAME}")["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def evict(kubectl: Kubectl, namespace: str, pod: str) -> str:
    """POST an Eviction as ``kubectl drain`` does; the apiserver's answer ("" when granted)."""
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": namespace},
    }
    path = f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction"
    result = kubectl.run("create", "--raw", path, "-f", "-", input=json.dumps(eviction))
    return "" if result.returncode == 0 else result.stderr


def rollout_statuses(cluster: Cluster, namespace: str, since: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The Deployment's status (with its ``generation``) at each write of a spec newer than
    ``since``, the Deployment as it was before, until that rollout has finished."""
    with config.new_client_from_config(str(cluster.kubeconfig)) as api_client:
        apps = client.AppsV1Api(api_client)
        events = watch.Watch().stream(
            apps.list_namespaced_deployment,
            namespace,
            field_selector=f"metadata.name={NAME}",
            resource_version=since["metadata"]["resourceVersion"],
            timeout_seconds=ROLLOUT_WATCH_S,
        )
        for event in events:
            deployment = event["object"]
            written = api_client.sanitize_for_serialization(deployment.status)
            status = {"generation": deployment.metadata.generation, **written}
            if status["generation"] <= since["metadata"]["generation"]:
                continue
            yield status
            if rolled_out(status):
                return


def rolled_out(status: dict[str, Any]) -> bool:
    counts = ("updatedReplicas", "readyReplicas", "replicas")
    return status.get("observedGeneration") == status["generation"] and all(
        status.get(count) == REPLICAS for count in counts
    )


def test_engine_pods_have_requests_and_a_budget_the_eviction_api_honours(
    kubectl: Kubectl, namespace: str, wait_for: WaitFor
) -> None:
    apply(kubectl, namespace, example(replicas=REPLICAS))
    wait_for(lambda: all_ready(kubectl, namespace, REPLICAS), 90, "three ready replicas")

    pods = live_pods(kubectl, namespace)
    assert len(pods) == REPLICAS
    for pod in pods:
        resources = pod["spec"]["containers"][0]["resources"]
        assert set(resources["requests"]) == {"cpu", "memory", "nvidia.com/gpu"}, resources
        assert resources["limits"]["memory"] == resources["requests"]["memory"]
        assert pod["status"]["qosClass"] == "Burstable"
        spread = pod["spec"]["topologySpreadConstraints"][0]
        assert spread["topologyKey"] == "kubernetes.io/hostname"
    budget = get(kubectl, namespace, "pdb", NAME)
    assert budget["metadata"]["ownerReferences"][0]["kind"] == "SpeculativeDeployment"
    wait_for(
        lambda: get(kubectl, namespace, "pdb", NAME)["status"].get("disruptionsAllowed") == 1,
        30,
        "the budget to allow one disruption",
    )

    # A drain cordons, then evicts pods one by one: the first is granted, the second refused while
    # the first one's replacement cannot be Ready (here: nowhere to schedule it until uncordoned).
    first, second = (p["metadata"]["name"] for p in pods[:2])
    kubectl("cordon", "-l", GPU_NODES)
    try:
        assert evict(kubectl, namespace, first) == ""
        refused = evict(kubectl, namespace, second)
        assert "disruption budget" in refused, refused
    finally:
        kubectl("uncordon", "-l", GPU_NODES)
    wait_for(lambda: all_ready(kubectl, namespace, REPLICAS), 90, "the evicted replica to be replaced")
    wait_for(lambda: evict(kubectl, namespace, second) == "", 60, "the second eviction to be granted")

    # The budget is a child like the others: deleted, it comes back.
    kubectl("delete", "pdb", NAME, namespace=namespace)
    back = lambda: kubectl.run("get", "pdb", NAME, namespace=namespace).returncode == 0  # noqa: E731
    wait_for(back, 15, "the budget to come back")


@pytest.mark.parametrize(("strategy", "least_ready"), [("NoSurge", REPLICAS - 1), ("Surge", REPLICAS)])
def test_a_spec_change_never_drops_below_the_budget(
    cluster: Cluster, kubectl: Kubectl, namespace: str, wait_for: WaitFor, strategy: str, least_ready: int
) -> None:
    apply(kubectl, namespace, example(replicas=REPLICAS, rollout={"strategy": strategy}))
    wait_for(lambda: all_ready(kubectl, namespace, REPLICAS), 90, "three ready replicas")
    before = get(kubectl, namespace, "deployment", NAME)
    kubectl(
        "patch", "sdep", NAME, "--type=merge", "-p",
        '{"spec": {"speculator": {"numSpeculativeTokens": 4}}}', namespace=namespace,
    )  # fmt: skip

    # Every ready pod serves (the simulated engines are Ready once started). The Deployment
    # controller writes its status at every step of the rollout; watching from before the patch
    # sees each of those writes, however fast the simulated pods turn Ready.
    statuses = list(rollout_statuses(cluster, namespace, before))
    finished = statuses and rolled_out(statuses[-1])
    assert finished, f"no finished rollout in {ROLLOUT_WATCH_S} s: {statuses[-3:]}"
    ready_counts = [status.get("readyReplicas", 0) for status in statuses]
    assert min(ready_counts) >= least_ready, ready_counts
    assert any(status.get("updatedReplicas", 0) < REPLICAS for status in statuses), (
        f"no step of the rollout was observed: {statuses}"
    )
    for pod in live_pods(kubectl, namespace):
        command = pod["spec"]["containers"][0]["command"]
        assert json.loads(command[command.index("--speculative-config") + 1])["num_speculative_tokens"] == 4
