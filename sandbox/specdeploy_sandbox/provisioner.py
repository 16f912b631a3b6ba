"""A real node provisioner in the sandbox: Karpenter with its KWOK cloud provider.

With ``specdeploy sandbox up --provisioner`` the sandbox starts with no GPU node. Each GPU group
of the node file becomes an instance type of the provider (its GPUs, CPUs and memory) and a
Karpenter NodePool that creates nodes of it on demand, labelled and tainted as GPU feature
discovery and the device plugin leave a GPU node, and removes them once empty. The nodes Karpenter
creates carry KWOK's annotation, so the sandbox's KWOK marks them Ready as it does the others.

The provider (``sigs.k8s.io/karpenter/kwok``, built once: ``binaries.ensure_karpenter``) binds
its metrics and health servers to every interface, so it runs in a network namespace of its own
(``loopback_bridge``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdeploy.api import GPU_RESOURCE
from specdeploy.planning.gpus import GPU_TAINT, INSTANCE_TYPE_LABEL, discovery_labels
from specdeploy_sandbox.nodes import NodeSpec

PROCESS = "karpenter"
BRIDGE = "karpenter-bridge"
NODE_CLASS = {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}
ZONE = "sandbox-a"
# An empty node goes this long after its last pod before Karpenter removes it.
CONSOLIDATE_AFTER = "10s"


@dataclass(frozen=True)
class GpuShape:
    """One GPU group of the node file, as the provisioner offers it."""

    name: str
    product: str
    gpus: int
    memory_mib: int
    cpu: str
    memory: str
    max_nodes: int

    @property
    def instance_type(self) -> str:
        return f"{self.name}-x{self.gpus}"


def shapes(specs: list[NodeSpec]) -> list[GpuShape]:
    """The node file's GPU groups (engine nodes aside), one shape per group, its count the most
    nodes its pool may create."""
    found: dict[str, GpuShape] = {}
    for spec in specs:
        if spec.gpu is None or spec.engine:
            continue
        group = spec.group or spec.name
        known = found.get(group)
        count = known.max_nodes + 1 if known else 1
        gpu = spec.gpu
        found[group] = GpuShape(group, gpu.product, gpu.count, gpu.memory_mib, spec.cpu, spec.memory, count)
    return list(found.values())


def instance_types(offered: list[GpuShape]) -> list[dict[str, Any]]:
    """The provider's instance types (its JSON file): one per shape, on demand in one zone."""
    return [
        {
            "name": shape.instance_type,
            "architecture": "amd64",
            "operatingSystems": ["linux"],
            "resources": {
                "cpu": shape.cpu,
                "memory": shape.memory,
                "pods": "110",
                "ephemeral-storage": "1Ti",
                GPU_RESOURCE: str(shape.gpus),
            },
            "offerings": [
                {
                    "Price": float(shape.gpus),
                    "Available": True,
                    "Requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [ZONE]},
                    ],
                }
            ],
        }
        for shape in offered
    ]


def node_class() -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.kwok.sh/v1alpha1",
        "kind": "KWOKNodeClass",
        "metadata": {"name": NODE_CLASS["name"]},
    }


def node_pool(shape: GpuShape) -> dict[str, Any]:
    """A NodePool creating nodes of one shape, as GPU feature discovery will label them, at most
    ``max_nodes`` (its ``nvidia.com/gpu`` limit), removed once empty."""
    name = f"gpu-{shape.name}"
    instance_type = {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": [shape.instance_type]}
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": discovery_labels(shape.product, shape.gpus, shape.memory_mib)},
                "spec": {
                    "nodeClassRef": dict(NODE_CLASS),
                    "requirements": [instance_type],
                    "taints": [dict(GPU_TAINT)],
                    "expireAfter": "Never",
                },
            },
            "limits": {GPU_RESOURCE: str(shape.gpus * shape.max_nodes)},
            "disruption": {
                "consolidationPolicy": "WhenEmpty",
                "consolidateAfter": CONSOLIDATE_AFTER,
                "budgets": [{"nodes": "100%"}],
            },
        },
    }


def env(kubeconfig: Path, instance_types_file: Path, ports: tuple[int, int]) -> dict[str, str]:
    """The provider's settings (it reads no flags it does not know, so all go by environment)."""
    metrics, health = ports
    return {
        "KUBECONFIG": str(kubeconfig),
        "DISABLE_LEADER_ELECTION": "true",
        "METRICS_PORT": str(metrics),
        "HEALTH_PROBE_PORT": str(health),
        "INSTANCE_TYPES_FILE_PATH": str(instance_types_file),
        "BATCH_IDLE_DURATION": "1s",
        "BATCH_MAX_DURATION": "5s",
        "LOG_LEVEL": "info",
    }


def commands(binary: Path, socket_path: Path, api_port: int) -> tuple[list[str], list[str]]:
    """The bridge outside the namespace, and the provider inside one behind its bridge."""
    bridge = [sys.executable, "-m", "specdeploy_sandbox.loopback_bridge"]
    outside = [*bridge, "outside", str(socket_path), str(api_port)]
    # --map-root-user: a user namespace of its own, so that no privilege is needed to make the
    # network namespace and bring its loopback up.
    namespace = ["unshare", "--net", "--map-root-user"]
    inside = [*namespace, *bridge, "inside", str(socket_path), str(api_port), "--", str(binary)]
    return outside, inside
