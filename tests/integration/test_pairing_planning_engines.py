"""Pairing check, GPU planning and the SGLang engine, end to end on the sandbox."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from sdeplib import apply, container, ready
from support.kube import Cluster, Kubectl, WaitFor, condition, get
from support.paths import REPO, SEED_EXAMPLE

pytestmark = pytest.mark.usefixtures("operator")

SGLANG_EXAMPLE = REPO / "manifests" / "examples" / "qwen3-coder-30b-a3b-instruct-sglang-eagle3.yaml"


def resource(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "specdeploy.io/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": name},
        "spec": spec,
    }


def status_condition(kubectl: Kubectl, namespace: str, name: str, type_: str) -> dict[str, Any] | None:
    return condition(get(kubectl, namespace, "sdep", name), type_)


def wait_for_condition(
    kubectl: Kubectl, wait_for: WaitFor, namespace: str, name: str, type_: str, status: str, timeout: float
) -> dict[str, Any]:
    """The condition once it has ``status``; fails with a cluster dump after ``timeout``."""

    def reached() -> dict[str, Any] | None:
        cond = status_condition(kubectl, namespace, name, type_)
        return cond if cond and cond["status"] == status else None

    return wait_for(reached, timeout, f"{type_}={status} on {name}")


def apply_example_on(kubectl: Kubectl, namespace: str, name: str, gpu_product: str) -> None:
    """The example pair at TP 1, named ``name``, asking for one GPU product."""
    body: dict[str, Any] = yaml.safe_load(SEED_EXAMPLE.read_text())
    body["metadata"]["name"] = name
    body["spec"]["parallelism"] = {"tensor": 1, "gpuProduct": gpu_product}
    apply(kubectl, namespace, body)


def pods_of(kubectl: Kubectl, namespace: str, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get(kubectl, namespace, "pods", "-l", f"app.kubernetes.io/instance={name}")[
        "items"
    ]
    return items


def test_webhook_rejects_a_bad_pair(kubectl: Kubectl, namespace: str) -> None:
    """The real apiserver calls the operator's webhook over HTTPS and refuses the apply."""
    bad = resource(
        "mismatch",
        verifier={"model": "Qwen/Qwen3-8B"},
        speculator={"model": "RedHatAI/Qwen3-30B-A3B-Instruct-2507-speculator.eagle3"},
    )
    proc = kubectl.run("apply", "-f", "-", input=json.dumps(bad), namespace=namespace)
    assert proc.returncode != 0
    assert 'admission webhook "validate.specdeploy.io" denied the request' in proc.stderr
    assert "VerifierMismatch" in proc.stderr
    assert "hidden size: speculator expects 2048, verifier Qwen/Qwen3-8B has 4096" in proc.stderr
    assert kubectl.run("get", "sdep", "mismatch", namespace=namespace).returncode != 0


def test_opting_out_of_a_verifier_mismatch_is_admitted_with_a_warning(
    kubectl: Kubectl, namespace: str, wait_for: WaitFor
) -> None:
    """Same architecture, other verifier: the user may insist; the check still warns."""
    body = resource(
        "insisted",
        verifier={"model": "Qwen/Qwen3-Coder-30B-A3B-Instruct"},
        speculator={"model": "RedHatAI/Qwen3-30B-A3B-Instruct-2507-speculator.eagle3"},
        parallelism={"tensor": 1},
        pairing={"allowVerifierMismatch": True},
    )
    apply(kubectl, namespace, body)
    wait_for(lambda: ready(kubectl, namespace, "insisted"), 90, "Ready")
    checks = get(kubectl, namespace, "sdep", "insisted")["status"]["pairing"]["checks"]
    declared = next(c for c in checks if c["name"] == "declaredVerifier")
    assert declared["status"] == "Warning" and "Qwen/Qwen3-Coder-30B-A3B-Instruct" in declared["message"]


def test_an_update_that_breaks_the_pair_keeps_the_last_good_deployment(
    kubectl: Kubectl, namespace: str, wait_for: WaitFor
) -> None:
    body: dict[str, Any] = yaml.safe_load(SEED_EXAMPLE.read_text())
    apply(kubectl, namespace, body)
    wait_for(lambda: ready(kubectl, namespace, body["metadata"]["name"]), 90, "Ready")
    name = body["metadata"]["name"]
    good = get(kubectl, namespace, "deployment", name)
    # A ConfigMap that describes the speculator as a Llama-sized draft: the webhook cannot know
    # it (it does not read ConfigMaps), the reconcile does, and the check fails.
    wrong = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": 4096,
        "num_hidden_layers": 1,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "draft_vocab_size": 32000,
        "intermediate_size": 14336,
    }
    kubectl(
        "create",
        "configmap",
        "draft-metadata",
        f"--from-literal=speculator.json={json.dumps(wrong)}",
        namespace=namespace,
    )
    kubectl(
        "patch",
        "sdep",
        name,
        "--type=merge",
        "-p",
        '{"spec": {"pairing": {"metadataConfigMap": "draft-metadata"}}}',
        namespace=namespace,
    )

    def degraded() -> dict[str, Any] | None:
        current = get(kubectl, namespace, "sdep", name)
        cond = condition(current, "Degraded")
        fresh = current["status"].get("observedGeneration") == current["metadata"]["generation"]
        return current if fresh and cond and cond["status"] == "True" else None

    current = wait_for(degraded, 30, "Degraded")
    pairing = condition(current, "PairingVerified")
    assert pairing is not None and pairing["status"] == "False"
    assert "hidden size: speculator expects 4096" in pairing["message"]
    kept = get(kubectl, namespace, "deployment", name)
    assert container(kept)["command"] == container(good)["command"]
    assert kept["metadata"]["generation"] == good["metadata"]["generation"]
    assert condition(current, "Ready")["reason"] == "PreviousVersionServing"
    assert [p["status"]["phase"] for p in pods_of(kubectl, namespace, name)] == ["Running"]


def test_a_pair_that_fails_its_check_never_starts_pods(
    kubectl: Kubectl, namespace: str, wait_for: WaitFor
) -> None:
    wrong = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": 4096,
        "num_hidden_layers": 1,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 151936,
        "draft_vocab_size": 32000,
    }
    kubectl(
        "create",
        "configmap",
        "draft-metadata",
        f"--from-literal=speculator.json={json.dumps(wrong)}",
        namespace=namespace,
    )
    body = resource(
        "never",
        verifier={"model": "Qwen/Qwen3-30B-A3B-Instruct-2507"},
        speculator={"model": "acme/private-draft"},
        pairing={"metadataConfigMap": "draft-metadata"},
    )
    apply(kubectl, namespace, body)
    cond = wait_for_condition(kubectl, wait_for, namespace, "never", "PairingVerified", "False", 30)
    assert cond["reason"] == "HiddenSizeMismatch"
    assert kubectl.run("get", "deployment", "never", namespace=namespace).returncode != 0
    assert pods_of(kubectl, namespace, "never") == []


def test_an_unreachable_hub_is_a_condition_not_a_crash(
    kubectl: Kubectl, namespace: str, wait_for: WaitFor, operator: Any
) -> None:
    body = resource(
        "offline",
        verifier={"model": "acme/private-model"},
        speculator={"model": "acme/private-draft"},
        modelAccess={"endpoint": "http://127.0.0.1:9"},
    )
    apply(kubectl, namespace, body)
    cond = wait_for_condition(kubectl, wait_for, namespace, "offline", "PairingVerified", "Unknown", 60)
    assert cond["reason"] == "HubUnreachable" and "acme/private" in cond["message"]
    assert operator.process.poll() is None
    assert kubectl.run("get", "deployment", "offline", namespace=namespace).returncode != 0


def test_auto_tensor_parallel_lands_on_a_fitting_node(
    kubectl: Kubectl, namespace: str, wait_for: WaitFor
) -> None:
    body = resource(
        "llama70b",
        verifier={"model": "meta-llama/Llama-3.3-70B-Instruct"},
        speculator={"model": "RedHatAI/Llama-3.3-70B-Instruct-speculator.eagle3"},
    )
    apply(kubectl, namespace, body)
    current = wait_for(lambda: ready(kubectl, namespace, "llama70b"), 90, "Ready")
    plan = current["status"]["plan"]
    tp = plan["tensorParallelSize"]
    assert tp > 1 and current["status"]["tensorParallelSize"] == tp
    deployment = get(kubectl, namespace, "deployment", "llama70b")
    assert container(deployment)["resources"]["limits"]["nvidia.com/gpu"] == str(tp)
    command = container(deployment)["command"]
    assert command[command.index("--tensor-parallel-size") + 1] == str(tp)
    node = get(kubectl, "", "node", pods_of(kubectl, namespace, "llama70b")[0]["spec"]["nodeName"])
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == plan["gpuProduct"]
    assert int(node["status"]["allocatable"]["nvidia.com/gpu"]) >= tp


def test_no_node_fits_until_a_suitable_node_joins(
    kubectl: Kubectl, namespace: str, wait_for: WaitFor, cluster: Cluster
) -> None:
    from specdeploy_sandbox import nodes

    apply_example_on(kubectl, namespace, "b200-only", "b200")
    cond = wait_for_condition(kubectl, wait_for, namespace, "b200-only", "Schedulable", "False", 30)
    assert cond["reason"] == "NoNodeFits"
    assert "B200" in cond["message"]
    assert kubectl.run("get", "deployment", "b200-only", namespace=namespace).returncode != 0
    assert pods_of(kubectl, namespace, "b200-only") == []

    node_name = f"b200-{namespace[-6:]}"
    nodes.add_node(
        nodes.gpu_node(node_name, "NVIDIA-B200", 8, 183359),
        kubeconfig=cluster.kubeconfig,
    )
    try:
        wait_for(lambda: ready(kubectl, namespace, "b200-only"), 60, "Ready after a B200 node joined")
        assert pods_of(kubectl, namespace, "b200-only")[0]["spec"]["nodeName"] == node_name
    finally:
        kubectl("delete", "node", node_name, "--wait=false")


def test_sglang_example_is_ready_with_eight_gpus_on_one_node(
    kubectl: Kubectl, namespace: str, wait_for: WaitFor
) -> None:
    body: dict[str, Any] = yaml.safe_load(SGLANG_EXAMPLE.read_text())
    name = body["metadata"]["name"]
    apply(kubectl, namespace, body)
    current = wait_for(lambda: ready(kubectl, namespace, name), 90, "Ready")
    deployment = get(kubectl, namespace, "deployment", name)
    command = container(deployment)["command"]
    assert command[:3] == ["python3", "-m", "sglang.launch_server"]
    assert command[command.index("--speculative-algorithm") + 1] == "EAGLE3"
    for flag, value in (
        ("--speculative-num-steps", "5"),
        ("--speculative-eagle-topk", "8"),
        ("--speculative-num-draft-tokens", "64"),
        ("--tp-size", "8"),
    ):
        assert command[command.index(flag) + 1] == value
    assert container(deployment)["resources"]["limits"]["nvidia.com/gpu"] == "8"
    pod = pods_of(kubectl, namespace, name)[0]
    node = get(kubectl, "", "node", pod["spec"]["nodeName"])
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert current["status"]["endpoint"].endswith(":30000/v1")


def add_cloud_node(
    cluster: Cluster, name: str, product: str, memory_mib: int, labels: dict[str, str]
) -> None:
    """A simulated GPU node labelled as a managed cloud labels it: no GPU feature discovery labels."""
    from specdeploy_sandbox import nodes

    manifest = nodes.node_manifest(nodes.gpu_node(name, product, 8, memory_mib))
    node_labels = manifest["metadata"]["labels"]
    for gfd in [key for key in node_labels if key.startswith("nvidia.com/gpu.")]:
        del node_labels[gfd]
    node_labels |= labels
    nodes.core_v1_for(cluster.kubeconfig).create_node(body=manifest)


@pytest.mark.parametrize(
    ("cloud", "product", "memory_mib", "alias", "labels", "pin"),
    [
        (
            "gke",
            "NVIDIA-B200",
            183359,
            "b200",
            {"cloud.google.com/gke-accelerator": "nvidia-b200"},
            "cloud.google.com/gke-accelerator",
        ),
        (
            "eks",
            "NVIDIA-H200",
            143771,
            "h200",
            {"node.kubernetes.io/instance-type": "p5e.48xlarge"},
            "node.kubernetes.io/instance-type",
        ),
        (
            "aks",
            "NVIDIA-A100-SXM4-80GB",
            81920,
            "a100-80gb",
            {
                "kubernetes.azure.com/accelerator": "nvidia",
                "node.kubernetes.io/instance-type": "Standard_ND96amsr_A100_v4",
            },
            "node.kubernetes.io/instance-type",
        ),
    ],
)
def test_cloud_labelled_gpu_nodes_are_planned_like_gfd_nodes(
    kubectl: Kubectl,
    namespace: str,
    wait_for: WaitFor,
    cluster: Cluster,
    cloud: str,
    product: str,
    memory_mib: int,
    alias: str,
    labels: dict[str, str],
    pin: str,
) -> None:
    node_name = f"{cloud}-{namespace[-6:]}"
    add_cloud_node(cluster, node_name, product, memory_mib, labels)
    try:
        apply_example_on(kubectl, namespace, f"on-{cloud}", alias)
        current = wait_for(lambda: ready(kubectl, namespace, f"on-{cloud}"), 60, f"Ready on a {cloud} node")
        assert current["status"]["plan"]["gpuProduct"] == product
        assert pods_of(kubectl, namespace, f"on-{cloud}")[0]["spec"]["nodeName"] == node_name
        pod_spec = get(kubectl, namespace, "deployment", f"on-{cloud}")["spec"]["template"]["spec"]
        terms = pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        (requirement,) = terms["nodeSelectorTerms"][0]["matchExpressions"]
        assert requirement["key"] == pin and labels[pin] in requirement["values"]
    finally:
        kubectl("delete", "node", node_name, "--wait=false")


def test_an_unlabelled_gpu_node_is_named_with_the_fix(
    kubectl: Kubectl, namespace: str, wait_for: WaitFor, cluster: Cluster
) -> None:
    node_name = f"bare-{namespace[-6:]}"
    add_cloud_node(cluster, node_name, "NVIDIA-H200", 143771, {})
    try:
        apply_example_on(kubectl, namespace, "on-bare", "h200")
        # The operator may plan once before its node watch shows the new node (NoNodeFits); the
        # node's arrival re-plans the waiting resource.
        cond = wait_for(
            lambda: (
                (c := status_condition(kubectl, namespace, "on-bare", "Schedulable"))
                and c["reason"] == "GpuNodeNotRecognized"
                and c
            ),
            30,
            "Schedulable=False GpuNodeNotRecognized on on-bare",
        )
        assert cond["status"] == "False"
        assert (
            f"node {node_name} has 8 allocatable nvidia.com/gpu but no label naming its GPU"
            in cond["message"]
        )
        assert f"kubectl label node {node_name} nvidia.com/gpu.product=" in cond["message"]
        assert pods_of(kubectl, namespace, "on-bare") == []
    finally:
        kubectl("delete", "node", node_name, "--wait=false")
