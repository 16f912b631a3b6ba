"""The sandbox is a real control plane: scheduling on GPU nodes, GC, RBAC, CRDs, clean shutdown."""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.kube import Cluster, Kubectl, WaitFor, wait_crd_established

pytestmark = pytest.mark.cluster

H100 = "NVIDIA-H100-80GB-HBM3"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def gpu_deployment(name: str, gpus: int, node_selector: dict[str, str] | None = None) -> str:
    pod_spec: dict[str, Any] = {
        "tolerations": [GPU_TOLERATION],
        "containers": [
            {
                "name": "server",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
            }
        ],
    }
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    return json.dumps(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec},
            },
        }
    )


def pods(kubectl: Kubectl, namespace: str, app: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(
        kubectl("get", "pods", "-l", f"app={app}", "-o", "json", namespace=namespace)
    )["items"]
    return items


def running_and_ready(pod: dict[str, Any]) -> bool:
    status = pod.get("status", {})
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", []))
    return status.get("phase") == "Running" and ready and bool(status.get("podIP"))


def test_gpu_deployment_runs_on_an_h100_node(
    kubectl: Kubectl, namespace: str, wait_for: WaitFor, cluster: Cluster
) -> None:
    kubectl(
        "apply",
        "-f",
        "-",
        input=gpu_deployment("two-gpus", 2, {"nvidia.com/gpu.product": H100}),
        namespace=namespace,
    )

    [pod] = wait_for(
        lambda: [p for p in pods(kubectl, namespace, "two-gpus") if running_and_ready(p)],
        timeout=60,
        describe="the 2-GPU pod to be Running and Ready",
    )

    node = json.loads(kubectl("get", "node", pod["spec"]["nodeName"], "-o", "json"))
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == H100
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    pod_ip = ipaddress.ip_address(pod["status"]["podIP"])
    assert pod_ip in ipaddress.ip_network("127.0.0.0/8")
    if cluster.pod_cidr:
        assert pod_ip in ipaddress.ip_network(cluster.pod_cidr)


def test_oversized_gpu_request_stays_pending(kubectl: Kubectl, namespace: str, wait_for: WaitFor) -> None:
    kubectl("apply", "-f", "-", input=gpu_deployment("sixteen-gpus", 16), namespace=namespace)

    def failed_scheduling() -> list[str]:
        events = json.loads(
            kubectl(
                "get", "events", "--field-selector=reason=FailedScheduling", "-o", "json", namespace=namespace
            )
        )["items"]
        return [e["message"] for e in events if "Insufficient nvidia.com/gpu" in e["message"]]

    messages = wait_for(failed_scheduling, timeout=60, describe="a FailedScheduling event for 16 GPUs")
    assert "Insufficient nvidia.com/gpu" in messages[0]
    [pod] = pods(kubectl, namespace, "sixteen-gpus")
    assert pod["status"]["phase"] == "Pending"
    assert not pod["spec"].get("nodeName")


def test_deleting_a_deployment_garbage_collects_replicasets_and_pods(
    kubectl: Kubectl, namespace: str, wait_for: WaitFor
) -> None:
    kubectl("apply", "-f", "-", input=gpu_deployment("collected", 1), namespace=namespace)
    wait_for(
        lambda: [p for p in pods(kubectl, namespace, "collected") if running_and_ready(p)],
        timeout=60,
        describe="the pod to be Running",
    )
    assert kubectl("get", "replicasets", "-l", "app=collected", "-o", "name", namespace=namespace).strip()

    kubectl("delete", "deployment", "collected", "--wait=false", namespace=namespace)

    wait_for(
        lambda: (
            not kubectl(
                "get", "replicasets,pods", "-l", "app=collected", "-o", "name", namespace=namespace
            ).strip()
        ),
        timeout=60,
        describe="the ReplicaSet and Pods to be garbage-collected",
    )


def _api_get(kubeconfig: Path, path: str, token: str) -> int:
    """Status of a GET made with nothing but a bearer token (no client certificate)."""
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    context = ssl.create_default_context(
        cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
    )
    request = urllib.request.Request(cluster["server"] + path, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_rbac_forbids_a_service_account_without_bindings(
    kubectl: Kubectl, namespace: str, wait_for: WaitFor, cluster: Cluster
) -> None:
    kubectl("create", "serviceaccount", "reader", namespace=namespace)
    subject = f"system:serviceaccount:{namespace}:reader"

    can_i = kubectl.run("auth", "can-i", "list", "pods", f"--as={subject}", namespace=namespace)
    assert can_i.stdout.strip() == "no"
    token = kubectl("create", "token", "reader", namespace=namespace).strip()
    pods_path = f"/api/v1/namespaces/{namespace}/pods"
    assert _api_get(cluster.kubeconfig, pods_path, token) == 403

    # The same token works once RBAC grants it: the 403 above was authorization, not authentication.
    kubectl("create", "role", "pod-reader", "--verb=list", "--resource=pods", namespace=namespace)
    kubectl(
        "create",
        "rolebinding",
        "reader",
        "--role=pod-reader",
        f"--serviceaccount={namespace}:reader",
        namespace=namespace,
    )
    wait_for(
        lambda: _api_get(cluster.kubeconfig, pods_path, token) == 200,
        timeout=30,
        describe="the RoleBinding to take effect",
    )


def test_custom_resource_definition_and_custom_resource(kubectl: Kubectl, namespace: str) -> None:
    group = f"{namespace}.test.specdeploy.io"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {"type": "object", "properties": {"size": {"type": "integer"}}}
                            },
                        }
                    },
                }
            ],
        },
    }
    kubectl("apply", "-f", "-", input=json.dumps(crd))
    try:
        wait_crd_established(kubectl, f"widgets.{group}")
        widget = {
            "apiVersion": f"{group}/v1",
            "kind": "Widget",
            "metadata": {"name": "w1"},
            "spec": {"size": 3},
        }
        kubectl("apply", "-f", "-", input=json.dumps(widget), namespace=namespace)

        read = json.loads(kubectl("get", f"widgets.{group}", "w1", "-o", "json", namespace=namespace))
        assert read["spec"] == {"size": 3}
        assert read["kind"] == "Widget"
    finally:
        kubectl.run("delete", "crd", f"widgets.{group}", "--wait=false")


def test_a_node_added_at_runtime_takes_a_pending_pod(
    kubectl: Kubectl, namespace: str, wait_for: WaitFor, cluster: Cluster
) -> None:
    """add_node (used by later suites to satisfy a waiting resource) makes a Ready, schedulable node."""
    from specdeploy_sandbox.nodes import add_node, gpu_node

    product = "NVIDIA-H200"
    kubectl(
        "apply",
        "-f",
        "-",
        input=gpu_deployment("waits", 8, {"nvidia.com/gpu.product": product}),
        namespace=namespace,
    )
    wait_for(lambda: pods(kubectl, namespace, "waits"), timeout=30, describe="the pod to be created")
    assert not any(running_and_ready(p) for p in pods(kubectl, namespace, "waits"))

    node = f"h200-{namespace}"[:63]
    add_node(gpu_node(node, product, 8), kubeconfig=cluster.kubeconfig)
    try:
        [pod] = wait_for(
            lambda: [p for p in pods(kubectl, namespace, "waits") if running_and_ready(p)],
            timeout=60,
            describe="the pod to run on the new node",
        )
        assert pod["spec"]["nodeName"] == node
    finally:
        kubectl.run("delete", "node", node, "--wait=false")


def test_down_stops_every_process_and_frees_every_port(tmp_path: Path) -> None:
    """Drives the CLI like a user: up returns with the cluster still running, down cleans up."""
    from specdeploy_sandbox.cluster import COMPONENTS, Sandbox
    from specdeploy_sandbox.processes import pid_alive, port_is_free

    name = f"pytest-down-{os.getpid()}"
    nodes_file = tmp_path / "nodes.yaml"
    nodes_file.write_text(
        yaml.safe_dump(
            {
                "nodeGroups": [
                    {"name": "h100", "count": 1, "gpu": {"product": H100, "count": 8, "memoryMiB": 81559}},
                ]
            }
        )
    )
    root = tmp_path / "sandboxes"
    env = {**os.environ, "SPECDEPLOY_SANDBOX_ROOT": str(root), "SPECDEPLOY_SANDBOX": name}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "specdeploy", "sandbox", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )

    sandbox = Sandbox(name, root)
    try:
        up = cli("up", "--nodes", str(nodes_file))
        assert up.returncode == 0, up.stderr
        assert "is up in" in up.stdout
        state = json.loads(sandbox.state_file.read_text())
        processes = state["processes"]
        assert set(processes) >= set(COMPONENTS)
        # With the recorded start time, a pid the kernel reused for another process never counts.
        alive = [pid_alive(p["pid"], p.get("start_time")) for p in processes.values()]
        assert all(alive), "up must leave the cluster running"

        again = cli("up")
        assert again.returncode == 0, again.stderr
        assert "already running" in again.stdout
        status = cli("status")
        assert status.returncode == 0, status.stderr
        assert "h100-0" in status.stdout and "Ready" in status.stdout
        env_line = cli("env")
        assert env_line.stdout.strip() == f"export KUBECONFIG={sandbox.kubeconfig}"

        down = cli("down")
        assert down.returncode == 0, down.stderr
        assert not [p["pid"] for p in processes.values() if pid_alive(p["pid"], p.get("start_time"))]
        ports = [port for p in processes.values() for port in p["ports"]]
        assert len(ports) >= 5
        assert all(port_is_free(port) for port in ports)
        assert not sandbox.state_file.exists()
        assert cli("status").returncode == 1
    finally:
        sandbox.down()
