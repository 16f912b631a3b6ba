"""Simulated nodes: parse the user's node file and turn it into Node objects KWOK manages.

The labels, capacity and taint mirror what NVIDIA's device plugin and GPU feature discovery
put on real GPU nodes, so scheduling, placement and the operator's planning see the same
shape of cluster they would see in production.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from specdeploy.api import GPU_RESOURCE
from specdeploy.planning import Inventory, inventory_from_nodes
from specdeploy.planning.gpus import (
    COUNT_LABEL,
    GPU_TAINT,
    MEMORY_LABEL,
    PRESENT_LABEL,
    PRODUCT_LABEL,
    lookup_gpu,
)

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_ANNOTATION_VALUE = "fake"
NODE_GROUP_LABEL = "sandbox.specdeploy.io/node-group"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
DEFAULT_NODES_FILE = "sandbox-nodes.yaml"

class NodeFileError(ValueError):
    """The node description is invalid; the message names the offending entry."""


@dataclass(frozen=True)
class GpuSpec:
    product: str
    count: int
    memory_mib: int


@dataclass(frozen=True)
class NodeSpec:
    """One simulated node."""

    name: str
    cpu: str = "32"
    memory: str = "128Gi"
    pods: int = 110
    gpu: GpuSpec | None = None
    taint: bool = True
    group: str = ""
    labels: dict[str, str] = field(default_factory=dict)


def gpu_node(
    name: str,
    product: str,
    gpus: int,
    gpu_memory_mib: int | None = None,
    cpu: str = "96",
    memory: str = "512Gi",
) -> NodeSpec:
    """A GPU node spec; the GPU memory defaults to what GFD reports for known products."""
    known = lookup_gpu(product)
    memory_mib = gpu_memory_mib or (known.memory_mib if known else None)
    if memory_mib is None:
        raise NodeFileError(f"unknown GPU product {product!r}: give its memory in MiB")
    if gpus < 1:
        raise NodeFileError(f"node {name}: a GPU node needs at least one GPU")
    return NodeSpec(name=name, cpu=cpu, memory=memory, gpu=GpuSpec(product, gpus, memory_mib), group=name)


def _str(value: Any, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise NodeFileError(f"{where}: expected a string or number, got {value!r}")
    return str(value)


def _int(value: Any, where: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise NodeFileError(f"{where}: expected an integer >= {minimum}, got {value!r}")
    return value


def parse_node_groups(text: str) -> list[NodeSpec]:
    """Expand the ``nodeGroups`` of a node file into one spec per node."""
    document = yaml.safe_load(text)
    if not isinstance(document, dict) or not isinstance(document.get("nodeGroups"), list):
        raise NodeFileError("the node file needs a top-level 'nodeGroups' list")
    specs: list[NodeSpec] = []
    for index, group in enumerate(document["nodeGroups"]):
        where = f"nodeGroups[{index}]"
        if not isinstance(group, dict):
            raise NodeFileError(f"{where}: expected a mapping")
        unknown = set(group) - {"name", "count", "cpu", "memory", "pods", "gpu", "taint", "labels"}
        if unknown:
            raise NodeFileError(f"{where}: unknown fields {sorted(unknown)}")
        name = _str(group.get("name"), f"{where}.name")
        count = _int(group.get("count", 1), f"{where}.count", 0)
        gpu: GpuSpec | None = None
        if group.get("gpu") is not None:
            raw = group["gpu"]
            if not isinstance(raw, dict):
                raise NodeFileError(f"{where}.gpu: expected a mapping")
            gpu = GpuSpec(
                product=_str(raw.get("product"), f"{where}.gpu.product"),
                count=_int(raw.get("count"), f"{where}.gpu.count", 1),
                memory_mib=_int(raw.get("memoryMiB"), f"{where}.gpu.memoryMiB", 1),
            )
        labels = group.get("labels") or {}
        if not isinstance(labels, dict):
            raise NodeFileError(f"{where}.labels: expected a mapping")
        taint = group.get("taint", True)
        if not isinstance(taint, bool):
            raise NodeFileError(f"{where}.taint: expected true or false")
        for number in range(count):
            specs.append(
                NodeSpec(
                    name=f"{name}-{number}",
                    cpu=_str(group.get("cpu", "32"), f"{where}.cpu"),
                    memory=_str(group.get("memory", "128Gi"), f"{where}.memory"),
                    pods=_int(group.get("pods", 110), f"{where}.pods", 1),
                    gpu=gpu,
                    taint=taint,
                    group=name,
                    labels={str(k): _str(v, f"{where}.labels.{k}") for k, v in labels.items()},
                )
            )
    names = [spec.name for spec in specs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise NodeFileError(f"duplicate node names: {duplicates}")
    return specs


def default_nodes_text() -> str:
    return resources.files("specdeploy").joinpath("data", DEFAULT_NODES_FILE).read_text()


def load_node_specs(path: Path | None = None) -> list[NodeSpec]:
    """Node specs from ``path``, or the packaged default cluster."""
    text = path.read_text() if path is not None else default_nodes_text()
    try:
        return parse_node_groups(text)
    except yaml.YAMLError as exc:
        raise NodeFileError(f"{path or DEFAULT_NODES_FILE}: not valid YAML: {exc}") from exc


def node_manifest(spec: NodeSpec) -> dict[str, Any]:
    """The Node object for ``spec``, status included (the apiserver keeps status set at creation)."""
    labels = {
        "kubernetes.io/hostname": spec.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        NODE_GROUP_LABEL: spec.group or spec.name,
        **spec.labels,
    }
    resources_: dict[str, str] = {"cpu": spec.cpu, "memory": spec.memory, "pods": str(spec.pods)}
    taints: list[dict[str, str]] = []
    if spec.gpu is not None:
        labels |= {
            PRESENT_LABEL: "true",
            PRODUCT_LABEL: spec.gpu.product,
            MEMORY_LABEL: str(spec.gpu.memory_mib),
            COUNT_LABEL: str(spec.gpu.count),
        }
        resources_[GPU_RESOURCE] = str(spec.gpu.count)
        if spec.taint:
            taints.append(dict(GPU_TAINT))
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": spec.name,
            "labels": labels,
            "annotations": {KWOK_ANNOTATION: KWOK_ANNOTATION_VALUE, "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"taints": taints},
        "status": {"capacity": dict(resources_), "allocatable": dict(resources_)},
    }


def default_inventory() -> Inventory:
    """The GPUs of the default sandbox cluster (2 x 8 H100 80GB, 1 x 8 A100 40GB, 2 x 4 L4).

    What ``specdeploy plan`` and ``render`` plan against without ``--gpus``, so offline planning
    and the sandbox agree."""
    return inventory_from_nodes(node_manifest(spec) for spec in load_node_specs())


def core_v1_for(kubeconfig: Path) -> Any:
    """A CoreV1Api bound to ``kubeconfig`` (its own ApiClient, no global configuration)."""
    from kubernetes import client, config

    api_client = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
    return client.CoreV1Api(api_client)


def add_node(spec: NodeSpec, *, kubeconfig: Path | None = None, core_v1: Any = None) -> None:
    """Create a simulated node in a running sandbox; KWOK marks it Ready within seconds."""
    if core_v1 is None:
        if kubeconfig is None:
            raise ValueError("add_node needs a kubeconfig or a CoreV1Api")
        core_v1 = core_v1_for(kubeconfig)
    core_v1.create_node(body=node_manifest(spec))


def node_is_ready(node: Any) -> bool:
    """Ready condition True and the not-ready taint gone, i.e. the scheduler will use it."""
    conditions = (node.status.conditions if node.status else None) or []
    ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
    taints = (node.spec.taints if node.spec else None) or []
    return ready and not any(t.key == NOT_READY_TAINT for t in taints)


def wait_nodes_ready(core_v1: Any, names: list[str], timeout: float) -> None:
    """Block until every named node is Ready; TimeoutError lists the ones that are not."""
    deadline = time.monotonic() + timeout
    pending = set(names)
    while True:
        nodes = core_v1.list_node().items
        pending = set(names) - {n.metadata.name for n in nodes if node_is_ready(n)}
        if not pending:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"nodes not Ready after {timeout:.0f}s: {sorted(pending)}")
        time.sleep(0.5)


def node_rows(core_v1: Any) -> list[tuple[str, str, str, str]]:
    """(name, GPU product, GPU count, Ready) for every node, for `sandbox status`."""
    rows = []
    for node in sorted(core_v1.list_node().items, key=lambda n: n.metadata.name):
        labels = node.metadata.labels or {}
        rows.append(
            (
                node.metadata.name,
                labels.get(PRODUCT_LABEL, "-"),
                (node.status.allocatable or {}).get(GPU_RESOURCE, "0"),
                "Ready" if node_is_ready(node) else "NotReady",
            )
        )
    return rows
