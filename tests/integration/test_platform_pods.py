"""Issue: day one on a real platform, items 6 and 8: engine pods a platform can fit into its
cluster (``spec.podTemplate``) and operator-wide defaults for them (``specdeploy run --default-*``).

A sandbox of its own, because the operator under test starts with a default toleration and the
cluster's GPU nodes carry AKS's extra taint (``sku=gpu:NoSchedule``): the suite's shared operator
has no defaults and would reconcile these resources too, and its cluster's GPU nodes have no such
taint. Every pod is a phantom; the apiserver, scheduler and admission are real.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from sdeplib import apply, ready
from specdeploy_sandbox.cluster import SandboxError
from specdeploy_sandbox.operator_process import LocalOperator, start_operator
from support.kube import Kubectl, WaitFor, fresh_namespace, get, install_crd
from support.paths import SEED_EXAMPLE
from support.sandboxes import PLAIN, running_cluster

AKS_TAINT = "sku=gpu:NoSchedule"
AKS_TOLERATION = {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
GPU_NODES = "nvidia.com/gpu.present=true"
NAME = "qwen3-30b-a3b-eagle3"


@dataclass(frozen=True)
class Platform:
    kubectl: Kubectl
    operator: LocalOperator


@pytest.fixture(scope="module")
def platform(kubectl_binary: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    """A sandbox whose GPU nodes all carry AKS's taint, and an operator that tolerates it for
    every resource."""
    root = tmp_path_factory.mktemp("platform")
    with running_cluster(PLAIN, root / "sandbox", f"pytest-platform-{os.getpid()}") as cluster:
        kubectl = Kubectl(kubectl_binary, cluster.kubeconfig)
        install_crd(kubectl)
        kubectl("taint", "nodes", "-l", GPU_NODES, AKS_TAINT)
        try:
            operator = start_operator(
                cluster.kubeconfig,
                root / "operator.log",
                root / "tls",
                extra_args=("--acceptance-interval", "0", "--default-toleration", AKS_TAINT),
                webhook_client_ca=cluster.webhook_client_ca,
            )
        except SandboxError as exc:
            pytest.fail(str(exc))
        try:
            yield Platform(kubectl, operator)
        finally:
            operator.stop()
            print(f"\n--- operator log (tail) ---\n{operator.log_tail()}")


@pytest.fixture
def namespace(platform: Platform, request: pytest.FixtureRequest) -> Iterator[str]:
    with fresh_namespace(platform.kubectl, request.node.name) as name:
        yield name


def example(**spec_changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load(SEED_EXAMPLE.read_text())
    body["spec"].update(spec_changes)
    return body


def test_a_resource_without_a_toleration_runs_on_tainted_gpu_nodes(
    platform: Platform, namespace: str
) -> None:
    k = platform.kubectl
    body = example()
    assert "tolerations" not in body["spec"].get("scheduling", {})
    apply(k, namespace, body)
    WaitFor(k, namespace)(lambda: ready(k, namespace, NAME), 120, f"{NAME} Ready")
    template = get(k, namespace, "deployment", NAME)["spec"]["template"]["spec"]
    assert AKS_TOLERATION in template["tolerations"]
    [pod] = get(k, namespace, "pods", "-l", f"app.kubernetes.io/instance={NAME}")["items"]
    node = get(k, None, "node", pod["spec"]["nodeName"])
    assert {"key": "sku", "value": "gpu", "effect": "NoSchedule"} in node["spec"]["taints"]


POD_TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"team": "search"}},
    "spec": {
        "imagePullSecrets": [{"name": "regcred"}],
        "serviceAccountName": "engine",
        "volumes": [{"name": "ca", "configMap": {"name": "corp-ca"}}],
        "containers": [
            {
                "name": "engine",
                "env": [
                    {"name": "API_TOKEN", "valueFrom": {"secretKeyRef": {"name": "tokens", "key": "api"}}}
                ],
                "envFrom": [{"secretRef": {"name": "engine-env"}}],
                "volumeMounts": [{"name": "ca", "mountPath": "/etc/ssl/corp", "readOnly": True}],
            }
        ],
    },
}


def test_a_pod_template_reaches_the_engine_pods(platform: Platform, namespace: str) -> None:
    k = platform.kubectl
    k("create", "serviceaccount", "engine", namespace=namespace)
    apply(k, namespace, example(podTemplate=POD_TEMPLATE))
    WaitFor(k, namespace)(lambda: ready(k, namespace, NAME), 120, f"{NAME} Ready")
    # The Deployment as the apiserver stored it, and the pod the scheduler placed.
    template = get(k, namespace, "deployment", NAME)["spec"]["template"]
    [pod] = get(k, namespace, "pods", "-l", f"app.kubernetes.io/instance={NAME}")["items"]
    for spec in (template["spec"], pod["spec"]):
        assert spec["imagePullSecrets"] == [{"name": "regcred"}] and spec["serviceAccountName"] == "engine"
        assert {"name": "ca", "configMap": {"name": "corp-ca", "defaultMode": 420}} in spec["volumes"]
        [engine] = [c for c in spec["containers"] if c["name"] == "engine"]
        assert POD_TEMPLATE["spec"]["containers"][0]["env"][0] in engine["env"]
        assert engine["envFrom"] == [{"secretRef": {"name": "engine-env"}}]
        assert {"name": "ca", "mountPath": "/etc/ssl/corp", "readOnly": True} in engine["volumeMounts"]
        assert engine["command"][:2] == ["vllm", "serve"]
    assert template["metadata"]["labels"]["team"] == "search"


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"spec": {"containers": [{"name": "engine", "command": ["sleep", "inf"]}]}},
         "spec.podTemplate.spec.containers[0].command"),
        ({"spec": {"containers": [{"name": "engine", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}},
         "spec.podTemplate.spec.containers[0].resources"),
        ({"spec": {"affinity": {"nodeAffinity": {}}}}, "spec.podTemplate.spec.affinity"),
        ({"metadata": {"labels": {"app.kubernetes.io/instance": "other"}}},
         "spec.podTemplate.metadata.labels"),
    ],
)  # fmt: skip
def test_the_operators_fields_are_refused_at_apply_with_the_field_named(
    platform: Platform, namespace: str, patch: dict[str, Any], field: str
) -> None:
    refused = platform.kubectl.run(
        "apply", "-f", "-", input=yaml.safe_dump(example(podTemplate=patch)), namespace=namespace
    )
    assert refused.returncode != 0 and field in refused.stderr, refused.stderr
    assert not get(platform.kubectl, namespace, "sdep")["items"]
