"""Issue: production clusters, engine pods that survive. On the sandbox's simulated GPU nodes:
sized requests, the disruption budget the eviction API honours, and a rollout of a replicated
pair that never has more than one replica down (or none, with a surge)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import yaml

from clusterlib import Kubectl, WaitFor
from sdeplib import EXAMPLE, apply, get, ready

pytestmark = pytest.mark.usefixtures("operator")

NAME = "qwen3-30b-a3b-eagle3"
REPLICAS = 3
# The rollout is watched for this long at most (the simulated pods turn Ready within seconds).
ROLLOUT_WATCH_S = 90
GPU_NODES = "nvidia.com/gpu.present=true"


def example(**spec_changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
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
    kubectl: Kubectl, namespace: str, wait_for: WaitFor, strategy: str, least_ready: int
) -> None:
    apply(kubectl, namespace, example(replicas=REPLICAS, rollout={"strategy": strategy}))
    wait_for(lambda: all_ready(kubectl, namespace, REPLICAS), 90, "three ready replicas")
    before = get(kubectl, namespace, "deployment", NAME)["metadata"]["generation"]
    kubectl(
        "patch", "sdep", NAME, "--type=merge", "-p",
        '{"spec": {"speculator": {"numSpeculativeTokens": 4}}}', namespace=namespace,
    )  # fmt: skip

    # Every ready pod serves (the simulated engines are Ready once started): sample the ready
    # count of the Deployment's pods until every replica runs the new command.
    samples: list[int] = []
    deadline = time.monotonic() + ROLLOUT_WATCH_S
    while time.monotonic() < deadline:
        deployment = get(kubectl, namespace, "deployment", NAME)
        status = deployment.get("status", {})
        samples.append(status.get("readyReplicas", 0))
        done = (
            deployment["metadata"]["generation"] > before
            and status.get("observedGeneration") == deployment["metadata"]["generation"]
            and status.get("updatedReplicas") == REPLICAS
            and status.get("readyReplicas") == REPLICAS
            and status.get("replicas") == REPLICAS
        )
        if done:
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"the rollout did not finish in {ROLLOUT_WATCH_S} s: {samples[-5:]}")
    assert min(samples) >= least_ready, samples
    assert len(samples) > 2, "the rollout was not observed"
    for pod in live_pods(kubectl, namespace):
        command = pod["spec"]["containers"][0]["command"]
        assert json.loads(command[command.index("--speculative-config") + 1])["num_speculative_tokens"] == 4
