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
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError

from specdeploy.api import GPU_RESOURCE
from specdeploy.planning.gpus import GPU_TAINT, PRODUCT_LABEL, discovery_labels, lookup_gpu
from specdeploy.planning.inventory import NOT_READY_TAINT
from specdeploy.planning.offline import CPU_PER_GPU, MEMORY_GIB_PER_GPU, offline_node_groups

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_ANNOTATION_VALUE = "fake"
NODE_GROUP_LABEL = "sandbox.specdeploy.io/node-group"
# Engine nodes run their pods as local processes (see ``sandbox.enginenode``), not through KWOK.
ENGINE_NODE_LABEL = "sandbox.specdeploy.io/engine-node"
NODE_IP = "127.0.0.1"
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
    engine: bool = False


def gpu_node(
    name: str,
    product: str,
    gpus: int,
    gpu_memory_mib: int | None = None,
    cpu: str | None = None,
    memory: str | None = None,
) -> NodeSpec:
    """A GPU node spec; the GPU memory defaults to what GFD reports for known products, CPU and
    memory to a GPU server's (``planning.offline``: 24 cores and 250 GiB a GPU)."""
    known = lookup_gpu(product)
    memory_mib = gpu_memory_mib or (known.memory_mib if known else None)
    if memory_mib is None:
        raise NodeFileError(f"unknown GPU product {product!r}: give its memory in MiB")
    if gpus < 1:
        raise NodeFileError(f"node {name}: a GPU node needs at least one GPU")
    return NodeSpec(
        name=name,
        cpu=cpu or str(CPU_PER_GPU * gpus),
        memory=memory or f"{MEMORY_GIB_PER_GPU * gpus}Gi",
        gpu=GpuSpec(product, gpus, memory_mib),
        group=name,
    )


class _Schema(BaseModel):
    """Unknown fields are errors (a typo must not silently drop a setting); numbers are accepted
    where YAML users write strings (``cpu: 96``), but never booleans, and counts must be integers."""

    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)


class _GpuGroup(_Schema):
    product: str
    count: StrictInt = Field(ge=1)
    memory_mib: StrictInt = Field(alias="memoryMiB", ge=1)


class _NodeGroup(_Schema):
    name: str
    count: StrictInt = Field(1, ge=0)
    cpu: str = "32"
    memory: str = "128Gi"
    pods: StrictInt = Field(110, ge=1)
    gpu: _GpuGroup | None = None
    taint: StrictBool = True
    labels: dict[str, str] | None = None
    engine: StrictBool = False


class _NodeFile(BaseModel):
    node_groups: list[_NodeGroup] = Field(alias="nodeGroups")


def _problems(error: ValidationError) -> list[str]:
    """One line per offending entry, named by its path in the file (``nodeGroups[1].gpu.count``)."""
    problems: list[str] = []
    unknown: dict[str, list[str]] = {}
    for item in error.errors():
        where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in item["loc"])[1:]
        if len(item["loc"]) <= 1:
            problems.append("the node file needs a top-level 'nodeGroups' list")
        elif item["type"] == "extra_forbidden":
            parent, _, field_name = where.rpartition(".")
            unknown.setdefault(parent, []).append(field_name)
        elif item["type"] == "missing":
            problems.append(f"{where}: {item['msg']}")
        elif item["type"] in ("model_type", "dict_type"):
            problems.append(f"{where}: expected a mapping, got {item['input']!r}")
        else:
            problems.append(f"{where}: {item['msg']}, got {item['input']!r}")
    problems += [f"{where}: unknown fields {sorted(fields)}" for where, fields in unknown.items()]
    return problems


def parse_node_groups(text: str, engine_nodes: int | None = None) -> list[NodeSpec]:
    """Expand the ``nodeGroups`` of a node file into one spec per node.

    ``engine_nodes`` replaces the count of every engine group (0 drops them); None keeps the file's.
    """
    try:
        document = _NodeFile.model_validate(yaml.safe_load(text))
    except ValidationError as exc:
        raise NodeFileError("; ".join(_problems(exc))) from None
    if engine_nodes is not None and engine_nodes < 0:
        raise NodeFileError(f"the engine node count must be 0 or more, got {engine_nodes}")
    if engine_nodes and not any(group.engine for group in document.node_groups):
        raise NodeFileError(f"{engine_nodes} engine nodes asked for, but the node file has no engine group")
    specs: list[NodeSpec] = []
    for group in document.node_groups:
        gpu = GpuSpec(group.gpu.product, group.gpu.count, group.gpu.memory_mib) if group.gpu else None
        count = engine_nodes if group.engine and engine_nodes is not None else group.count
        specs += [
            NodeSpec(
                name=f"{group.name}-{number}",
                cpu=group.cpu,
                memory=group.memory,
                pods=group.pods,
                gpu=gpu,
                taint=group.taint,
                group=group.name,
                labels=dict(group.labels or {}),
                engine=group.engine,
            )
            for number in range(count)
        ]
    names = [spec.name for spec in specs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise NodeFileError(f"duplicate node names: {duplicates}")
    return specs


def default_nodes_text() -> str:
    """The default cluster: the operator's offline GPU groups, then the sandbox's own groups.

    The GPU groups come from the product's offline cluster so that ``specdeploy plan --offline``
    plans against the very nodes ``sandbox up`` starts.
    """
    packaged = resources.files("specdeploy_sandbox").joinpath("data", DEFAULT_NODES_FILE)
    own = yaml.safe_load(packaged.read_text())
    return yaml.safe_dump({"nodeGroups": [*offline_node_groups(), *own["nodeGroups"]]}, sort_keys=False)


def load_node_specs(path: Path | None = None, engine_nodes: int | None = None) -> list[NodeSpec]:
    """Node specs from ``path``, or the packaged default cluster (``engine_nodes``: see parse_node_groups)."""
    text = path.read_text() if path is not None else default_nodes_text()
    try:
        return parse_node_groups(text, engine_nodes)
    except yaml.YAMLError as exc:
        raise NodeFileError(f"{path or DEFAULT_NODES_FILE}: not valid YAML: {exc}") from exc


def node_manifest(spec: NodeSpec, kubelet_port: int | None = None) -> dict[str, Any]:
    """The Node object for ``spec``, status included (the apiserver keeps status set at creation).

    A KWOK node carries the annotation KWOK manages; an engine node instead has the loopback
    address and (when known) the port of its agent's kubelet API, which the apiserver calls for
    ``kubectl logs``. The agent sets both again when it starts.
    """
    labels = {
        "kubernetes.io/hostname": spec.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        **({ENGINE_NODE_LABEL: "true"} if spec.engine else {"type": "kwok"}),
        NODE_GROUP_LABEL: spec.group or spec.name,
        **spec.labels,
    }
    resources_: dict[str, str] = {"cpu": spec.cpu, "memory": spec.memory, "pods": str(spec.pods)}
    taints: list[dict[str, str]] = []
    if spec.gpu is not None:
        labels |= discovery_labels(spec.gpu.product, spec.gpu.count, spec.gpu.memory_mib)
        resources_[GPU_RESOURCE] = str(spec.gpu.count)
        if spec.taint:
            taints.append(dict(GPU_TAINT))
    status: dict[str, Any] = {"capacity": dict(resources_), "allocatable": dict(resources_)}
    annotations = {"node.alpha.kubernetes.io/ttl": "0"}
    if spec.engine:
        status["addresses"] = [{"type": "InternalIP", "address": NODE_IP}]
        if kubelet_port is not None:
            status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": kubelet_port}}
    else:
        annotations[KWOK_ANNOTATION] = KWOK_ANNOTATION_VALUE
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": spec.name, "labels": labels, "annotations": annotations},
        "spec": {"taints": taints},
        "status": status,
    }


def core_v1_for(kubeconfig: Path) -> Any:
    """A CoreV1Api bound to ``kubeconfig`` (its own ApiClient, no global configuration)."""
    from kubernetes import client, config

    api_client = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
    return client.CoreV1Api(api_client)


def add_node(
    spec: NodeSpec, *, kubeconfig: Path | None = None, core_v1: Any = None, kubelet_port: int | None = None
) -> None:
    """Create a node in a running sandbox; KWOK (or the engine node's agent) marks it Ready."""
    if core_v1 is None:
        if kubeconfig is None:
            raise ValueError("add_node needs a kubeconfig or a CoreV1Api")
        core_v1 = core_v1_for(kubeconfig)
    core_v1.create_node(body=node_manifest(spec, kubelet_port))


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
