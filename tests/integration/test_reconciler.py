"""Issue: SpeculativeDeployment v1alpha1 and the vLLM reconciler, end to end on the sandbox.

Driven with kubectl as a user would; the operator runs as a real process (see conftest).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import yaml

from sdeplib import apply, container, ready
from specdeploy_sandbox.operator_process import LocalOperator
from support.kube import Cluster, Kubectl, RoseThenQuiet, WaitFor, condition, get, operator_writes, reconciles
from support.paths import SEED_EXAMPLE

pytestmark = pytest.mark.usefixtures("operator")

SEED_SPECULATIVE_CONFIG = {
    "model": "RedHatAI/Qwen3-30B-A3B-Instruct-2507-speculator.eagle3",
    "num_speculative_tokens": 3,
    "method": "eagle3",
}


def example(**spec_changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load(SEED_EXAMPLE.read_text())
    body["spec"].update(spec_changes)
    return body


def speculative_config(command: list[str]) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(command[command.index("--speculative-config") + 1])
    return result


def test_seed_example_becomes_ready_on_a_gpu_node(
    kubectl: Kubectl, namespace: str, wait_for: WaitFor
) -> None:
    apply(kubectl, namespace, example())
    body = wait_for(lambda: ready(kubectl, namespace, "qwen3-30b-a3b-eagle3"), 90, "the example to be Ready")

    deployment = get(kubectl, namespace, "deployment", "qwen3-30b-a3b-eagle3")
    command = container(deployment)["command"]
    # The seed's command: vllm serve <verifier> -tp 1 --speculative-config '{...}'
    assert command[:3] == ["vllm", "serve", "Qwen/Qwen3-30B-A3B-Instruct-2507"]
    assert command[command.index("--tensor-parallel-size") + 1] == "1"
    assert speculative_config(command) == SEED_SPECULATIVE_CONFIG
    assert command[command.index("--port") + 1] == "8000"
    assert container(deployment)["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert body["status"]["command"] == command
    assert body["status"]["verifier"] == "Qwen/Qwen3-30B-A3B-Instruct-2507"
    assert body["status"]["endpoint"] == f"http://qwen3-30b-a3b-eagle3.{namespace}.svc:8000/v1"
    assert condition(body, "PairingVerified")["status"] == "True"

    owner = deployment["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == (
        "SpeculativeDeployment",
        body["metadata"]["name"],
        True,
    )
    pods = get(kubectl, namespace, "pods", "-l", "app.kubernetes.io/instance=qwen3-30b-a3b-eagle3")["items"]
    assert len(pods) == 1
    node = get(kubectl, "", "node", pods[0]["spec"]["nodeName"])
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == body["status"]["plan"]["gpuProduct"]
    service = get(kubectl, namespace, "service", "qwen3-30b-a3b-eagle3")
    assert service["spec"]["ports"][0]["port"] == 8000

    # The Event follows the status write that turned Ready True, so it may land just after it.
    wait_for(lambda: "Ready" in _events_of(kubectl, namespace, "qwen3-30b-a3b-eagle3"), 15, "the Ready Event")
    # The sandbox's loopback pod IPs are no valid endpoint: its endpoint controllers are off.
    everything = get(kubectl, namespace, "events")["items"]
    failed = [e for e in everything if "FailedToUpdateEndpoint" in e["reason"]]
    assert failed == [], failed

    printed = kubectl("get", "sdep", "qwen3-30b-a3b-eagle3", namespace=namespace)
    assert "Qwen/Qwen3-30B-A3B-Instruct-2507" in printed and "Ready" in printed.split()
    assert "vllm" in kubectl("get", "sdep", "qwen3-30b-a3b-eagle3", "-o", "wide", namespace=namespace)


def test_update_rolls_out_and_observed_generation_follows(
    kubectl: Kubectl, namespace: str, wait_for: WaitFor
) -> None:
    apply(kubectl, namespace, example())
    first = wait_for(lambda: ready(kubectl, namespace, "qwen3-30b-a3b-eagle3"), 90, "Ready")
    kubectl(
        "patch",
        "sdep",
        "qwen3-30b-a3b-eagle3",
        "--type=merge",
        "-p",
        '{"spec": {"speculator": {"numSpeculativeTokens": 4}}}',
        namespace=namespace,
    )
    second = wait_for(lambda: ready(kubectl, namespace, "qwen3-30b-a3b-eagle3"), 90, "Ready after the update")
    assert second["metadata"]["generation"] == first["metadata"]["generation"] + 1
    assert second["status"]["observedGeneration"] == second["metadata"]["generation"]
    deployment = get(kubectl, namespace, "deployment", "qwen3-30b-a3b-eagle3")
    assert speculative_config(container(deployment)["command"])["num_speculative_tokens"] == 4
    pods = get(kubectl, namespace, "pods", "-l", "app.kubernetes.io/instance=qwen3-30b-a3b-eagle3")["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    assert live, "no live pod after the update"
    assert all(
        speculative_config(p["spec"]["containers"][0]["command"])["num_speculative_tokens"] == 4 for p in live
    )


def test_scale_subresource(kubectl: Kubectl, namespace: str, wait_for: WaitFor) -> None:
    apply(kubectl, namespace, example())
    wait_for(lambda: ready(kubectl, namespace, "qwen3-30b-a3b-eagle3"), 90, "Ready")
    kubectl("scale", "sdep/qwen3-30b-a3b-eagle3", "--replicas=2", namespace=namespace)
    body = wait_for(
        lambda: (
            (b := ready(kubectl, namespace, "qwen3-30b-a3b-eagle3"))
            and b["status"]["readyReplicas"] == 2
            and b
        ),
        90,
        "two ready replicas",
    )
    assert body["status"]["replicas"] == 2
    assert get(kubectl, namespace, "deployment", "qwen3-30b-a3b-eagle3")["spec"]["replicas"] == 2

    # Each new count written to the Deployment is one Scaled Event; the same change again within
    # ten minutes raises that Event's count (aggregated, as client-go's recorder does).
    def deployment_replicas(count: int) -> bool:
        deployment = get(kubectl, namespace, "deployment", "qwen3-30b-a3b-eagle3")
        return bool(deployment["spec"]["replicas"] == count)

    for count in (1, 2):
        kubectl("scale", "sdep/qwen3-30b-a3b-eagle3", f"--replicas={count}", namespace=namespace)
        wait_for(lambda count=count: deployment_replicas(count), 30, f"the Deployment at {count}")

    def scaled() -> dict[str, int]:
        selector = "involvedObject.name=qwen3-30b-a3b-eagle3,reason=Scaled"
        found = get(kubectl, namespace, "events", "--field-selector", selector)["items"]
        return {e["message"]: e["count"] for e in found if e["type"] == "Normal"}

    expected = {"scaled from 1 to 2 replicas": 2, "scaled from 2 to 1 replicas": 1}
    wait_for(lambda: scaled() == expected, 15, f"the Scaled Events {expected}")


def test_drift_is_repaired(kubectl: Kubectl, namespace: str, wait_for: WaitFor) -> None:
    apply(kubectl, namespace, example())
    wait_for(lambda: ready(kubectl, namespace, "qwen3-30b-a3b-eagle3"), 90, "Ready")
    original = container(get(kubectl, namespace, "deployment", "qwen3-30b-a3b-eagle3"))["command"]

    patch = [{"op": "replace", "path": "/spec/template/spec/containers/0/command", "value": ["sleep", "inf"]}]
    kubectl(
        "patch",
        "deployment",
        "qwen3-30b-a3b-eagle3",
        "--type=json",
        "-p",
        json.dumps(patch),
        namespace=namespace,
    )
    started = time.monotonic()
    wait_for(
        lambda: (
            container(get(kubectl, namespace, "deployment", "qwen3-30b-a3b-eagle3"))["command"] == original
        ),
        15,
        "the edited command to be reverted",
    )
    reverted_after = time.monotonic() - started

    kubectl("delete", "deployment", "qwen3-30b-a3b-eagle3", "--wait=false", namespace=namespace)
    kubectl("delete", "service", "qwen3-30b-a3b-eagle3", "--wait=false", namespace=namespace)
    wait_for(
        lambda: (
            (
                d := kubectl.run(
                    "get", "deployment", "qwen3-30b-a3b-eagle3", "-o", "json", namespace=namespace
                )
            ).returncode
            == 0
            and not json.loads(d.stdout)["metadata"].get("deletionTimestamp")
            and kubectl.run("get", "service", "qwen3-30b-a3b-eagle3", namespace=namespace).returncode == 0
        ),
        15,
        "the deleted Deployment and Service to come back",
    )
    assert reverted_after < 15


def test_deleting_the_resource_removes_every_child(
    kubectl: Kubectl, namespace: str, wait_for: WaitFor
) -> None:
    apply(kubectl, namespace, example())
    wait_for(lambda: ready(kubectl, namespace, "qwen3-30b-a3b-eagle3"), 90, "Ready")
    kubectl("delete", "sdep", "qwen3-30b-a3b-eagle3", namespace=namespace)
    selector = "app.kubernetes.io/instance=qwen3-30b-a3b-eagle3"
    wait_for(
        lambda: not get(kubectl, namespace, "deployments,replicasets,pods,services", "-l", selector)["items"],
        60,
        "every child to be garbage-collected",
    )


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (
            {
                "speculator": {
                    "model": "RedHatAI/Qwen3-30B-A3B-Instruct-2507-speculator.eagle3",
                    "numSpeculativeTokens": 0,
                }
            },
            "spec.speculator.numSpeculativeTokens",
        ),
        ({"engine": {"name": "tgi"}}, "spec.engine.name"),
        ({"verifier": None, "speculator": None}, "spec.verifier"),
        ({"replicas": -1}, "spec.replicas"),
        ({"parallelism": {"tensor": 3}}, "spec.parallelism.tensor"),
        ({"engine": {"name": "vllm", "sglang": {"numSteps": 5}}}, "spec.engine.sglang"),
        (
            {"engine": {"name": "sglang", "sglang": {"numSteps": 3, "eagleTopk": 1, "numDraftTokens": 8}}},
            "spec.engine.sglang.numDraftTokens",
        ),
        ({"engine": {"name": "vllm", "args": ["--tensor-parallel-size", "2"]}}, "spec.engine.args[0]"),
        (
            {
                "speculator": {
                    "model": "RedHatAI/Qwen3-30B-A3B-Instruct-2507-speculator.eagle3",
                    "draftTensorParallelSize": 2,
                }
            },
            "spec.speculator.draftTensorParallelSize",
        ),
    ],
    ids=[
        "zero-tokens",
        "unknown-engine",
        "no-verifier",
        "negative-replicas",
        "tp-3",
        "sglang-knobs-on-vllm",
        "sglang-topk1-draft-tokens",
        "args-duplicate-an-owned-flag",
        "draft-tp-not-1-or-tp",
    ],
)
def test_invalid_resources_are_rejected_naming_the_field(
    kubectl: Kubectl, namespace: str, change: dict[str, Any], field: str
) -> None:
    body = example()
    for key, value in change.items():
        if value is None:
            body["spec"].pop(key)
        else:
            body["spec"][key] = value
    proc = kubectl.run("apply", "-f", "-", input=json.dumps(body), namespace=namespace)
    assert proc.returncode != 0, proc.stdout
    assert field in proc.stderr, proc.stderr
    assert "qwen3-30b-a3b-eagle3" not in kubectl("get", "sdep", namespace=namespace)


def _events_of(kubectl: Kubectl, namespace: str, name: str) -> list[str]:
    selector = f"involvedObject.kind=SpeculativeDeployment,involvedObject.name={name}"
    return [e["reason"] for e in get(kubectl, namespace, "events", "--field-selector", selector)["items"]]


def _settled(kubectl: Kubectl, namespace: str, name: str) -> bool:
    """The rollout is complete, with its Event posted, and the engine metrics reader found the
    simulated pod silent for a whole window (MetricsUnavailable, no Event): the last writes the
    operator makes for a new resource (an Event follows its status patch). The rollout's news is
    a Ready Event, or a RolloutComplete one when Ready turned True in an earlier pass."""
    body = ready(kubectl, namespace, name)
    progressing = condition(body, "Progressing") if body else None
    if not progressing or progressing["reason"] != "RolloutComplete":
        return False
    effective = condition(body, "SpeculationEffective") if body else None
    if not effective or effective["reason"] != "MetricsUnavailable":
        return False
    return bool(set(_events_of(kubectl, namespace, name)) & {"Ready", "RolloutComplete"})


def test_unchanged_resource_reconciles_with_zero_writes(
    kubectl: Kubectl, namespace: str, wait_for: WaitFor, cluster: Cluster, operator: LocalOperator
) -> None:
    if cluster.audit_log is None:
        pytest.skip("needs the sandbox's audit log")
    created = cluster.audit_log.stat().st_size
    # The shortest window, so that the reader's verdict on the silent pod comes within the wait.
    apply(kubectl, namespace, example(acceptance={"windowSeconds": 30}))
    wait_for(lambda: _settled(kubectl, namespace, "qwen3-30b-a3b-eagle3"), 90, "the rollout to complete")
    # A RolloutComplete event may still follow a Ready one posted by an earlier pass.
    posted = RoseThenQuiet(lambda: len(_events_of(kubectl, namespace, "qwen3-30b-a3b-eagle3")), 0, 2.0)
    wait_for(posted, 30, "no new event for 2 s")
    # The filter below sees the writes that made the resource, so an empty result later means something.
    assert operator_writes(cluster.audit_log, namespace, created), "the audit log shows no operator write"
    mark = cluster.audit_log.stat().st_size
    reconciled = RoseThenQuiet(lambda: reconciles(operator), at_least=3, quiet=3.0)
    # Three events that each make the operator reconcile an unchanged resource: a label on the
    # resource, and a label on each child (the children's watch triggers the parent). Labels,
    # not annotations: a Deployment's generation moves with its annotations, which is a real
    # (if brief) rollout for the deployment controller.
    for kind in ("sdep", "deployment", "service"):
        kubectl("label", kind, "qwen3-30b-a3b-eagle3", "touched=1", namespace=namespace)
    # The operator sees those events: it reconciles at least once per event. A reconcile is
    # counted after its writes returned, so every write it made is in the audit log by then; the
    # quiet period after the rise also takes in the reconciles that follow-up events cause.
    wait_for(reconciled, 30, "a reconcile per touched object, then 3 s without one")
    writes = operator_writes(cluster.audit_log, namespace, mark)
    assert writes == [], [(w["verb"], w["objectRef"]) for w in writes]


def test_a_refused_child_is_a_condition_and_retried_until_it_is_admitted(
    kubectl: Kubectl, namespace: str, wait_for: WaitFor, operator: LocalOperator
) -> None:
    """A quota forbids the Service: the apiserver's refusal lands in status, the pass is retried,
    and the resource converges once the quota is lifted."""
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "no-services"},
        "spec": {"hard": {"services": "0"}},
    }
    kubectl("apply", "-f", "-", input=json.dumps(quota), namespace=namespace)
    retries_before = reconciles(operator, "retry")
    apply(kubectl, namespace, example())

    def refused() -> dict[str, Any] | None:
        cond = condition(get(kubectl, namespace, "sdep", "qwen3-30b-a3b-eagle3"), "Degraded")
        return cond if cond and cond["reason"] == "ChildRejected" else None

    cond = wait_for(refused, 30, "Degraded=True ChildRejected")
    assert cond["status"] == "True"
    assert "the apiserver refused the Service" in cond["message"] and "exceeded quota" in cond["message"]
    wait_for(lambda: reconciles(operator, "retry") > retries_before, 30, "a pass counted as retry")
    assert kubectl.run("get", "service", "qwen3-30b-a3b-eagle3", namespace=namespace).returncode != 0
    assert operator.process.poll() is None
    kubectl("delete", "resourcequota", "no-services", namespace=namespace)
    wait_for(lambda: ready(kubectl, namespace, "qwen3-30b-a3b-eagle3"), 60, "Ready once the quota is gone")
    assert kubectl.run("get", "service", "qwen3-30b-a3b-eagle3", namespace=namespace).returncode == 0
