"""GPU capacity a node provisioner can create: Karpenter NodePools and node pools declared to the
operator (cluster-autoscaler groups, GKE node auto-provisioning).

On clusters whose GPU nodes scale from zero there is no node to plan on until a pod asks for one,
so the planner also weighs these pools: the GPU product, GPUs per node and memory their nodes
will have, how many more nodes their limits allow, and what pins a pod to them. A pool the
planner cannot read a shape from is kept aside with the fix, as unlabelled nodes are.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specdeploy.api import GPU_RESOURCE
from specdeploy.planning.gpus import (
    ACCELERATOR_LABELS,
    COUNT_LABEL,
    GPU_TAINT,
    INSTANCE_TYPE_LABEL,
    MEMORY_LABEL,
    PRODUCT_LABEL,
    lookup_gpu,
    node_product,
)

KARPENTER_GROUP = "karpenter.sh"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
# Karpenter's well-known GPU requirement labels on AWS: the GPU's short name ("l4", "h100"),
# GPUs per instance and MiB per GPU.
AWS_GPU_NAME_LABEL = "karpenter.k8s.aws/instance-gpu-name"
AWS_GPU_COUNT_LABEL = "karpenter.k8s.aws/instance-gpu-count"
AWS_GPU_MEMORY_LABEL = "karpenter.k8s.aws/instance-gpu-memory"
_GPU_LABELS = (PRODUCT_LABEL, *ACCELERATOR_LABELS, AWS_GPU_NAME_LABEL, COUNT_LABEL, AWS_GPU_COUNT_LABEL)


class PoolError(ValueError):
    """A declared node pool is invalid; the message names the pool and the field."""


@dataclass(frozen=True)
class NodePool:
    """Nodes of one GPU shape a provisioner can create, and what makes it create them.

    ``max_nodes`` is the most nodes it may have, those up included (None: no limit set): a
    Karpenter ``nvidia.com/gpu`` limit in whole nodes, a declared group's maximum size. It does
    not move as nodes come and go, so neither does a plan on the pool.
    ``node_requirements`` and ``tolerations`` go on an engine pod planned on the pool.
    """

    name: str
    kind: str
    product: str
    gpus: int
    memory_mib: int | None
    max_nodes: int | None
    node_requirements: tuple[dict[str, Any], ...]
    tolerations: tuple[dict[str, Any], ...] = ()

    def holds(self, labels: Iterable[tuple[str, str]]) -> bool:
        """Whether a node with these labels is one of the pool's (meets every requirement)."""
        found = dict(labels)
        return all(found.get(r["key"]) in r["values"] for r in self.node_requirements)

    def shape(self) -> str:
        """E.g. "Karpenter NodePool gpu-l4 (nodes of 4 x NVIDIA-L4)": what a plan's reason names,
        the same before and after the pool creates a node."""
        return f"{self.kind} {self.name} ({self._nodes()})"

    def describe(self) -> str:
        """The shape and the bound, e.g. "... (nodes of 4 x NVIDIA-L4, at most 2 nodes)"."""
        bound = "no limit" if self.max_nodes is None else f"at most {self.max_nodes} nodes"
        return f"{self.kind} {self.name} ({self._nodes()}, {bound})"

    def _nodes(self) -> str:
        return f"nodes of {self.gpus} x {self.product}"


@dataclass(frozen=True)
class UnusablePool:
    """A pool that provisions GPU nodes but whose shape the planner cannot read."""

    name: str
    kind: str
    problem: str

    def describe(self) -> str:
        return f"{self.kind} {self.name}: {self.problem}"


def _requirement_values(requirements: Sequence[Mapping[str, Any]], key: str) -> tuple[str, ...] | None:
    """The values an ``In`` requirement on ``key`` allows (None: no such requirement)."""
    for requirement in requirements:
        if requirement.get("key") == key and requirement.get("operator") == "In":
            return tuple(str(v) for v in requirement.get("values") or ())
    return None


def _whole(text: str, least: int = 1) -> int | None:
    """A whole number of at least ``least`` (None: anything else)."""
    try:
        number = int(text)
    except ValueError:
        return None
    return number if number >= least else None


def _gpu_limit(limits: Mapping[str, Any] | None) -> int | None:
    """A NodePool's whole ``nvidia.com/gpu`` limit, 0 included (a paused pool); None: none set."""
    value = (limits or {}).get(GPU_RESOURCE)
    return None if value is None else _whole(str(value), least=0)


class _Shape:
    """What a NodePool's template says its nodes will carry: labels set outright and the values
    its ``In`` requirements allow."""

    def __init__(self, labels: Mapping[str, str], requirements: Sequence[Mapping[str, Any]]) -> None:
        self.labels = labels
        self.requirements = requirements

    def values(self, key: str) -> tuple[str, ...]:
        if key in self.labels:
            return (str(self.labels[key]),)
        return _requirement_values(self.requirements, key) or ()

    def mentions_gpus(self) -> bool:
        return bool(self.products()) or any(self.values(key) for key in _GPU_LABELS)

    def products(self) -> dict[str, tuple[str, tuple[str, ...]]]:
        """Product -> (label, values) for each GPU the nodes may have, from the first label that
        names one: a pod pinned to those values is one the pool can create a node for."""
        for label in (PRODUCT_LABEL, *ACCELERATOR_LABELS, INSTANCE_TYPE_LABEL, AWS_GPU_NAME_LABEL):
            found: dict[str, tuple[str, tuple[str, ...]]] = {}
            for value in self.values(label):
                product = _product_named(label, value)
                if product is not None:
                    found[product] = (label, (*found.get(product, (label, ()))[1], value))
            if found:
                return found
        return {}

    def gpus(self) -> int | None:
        counts = [_whole(v) for key in (COUNT_LABEL, AWS_GPU_COUNT_LABEL) for v in self.values(key)]
        whole = [c for c in counts if c is not None]
        return max(whole) if whole else None

    def memory_mib(self) -> int | None:
        sizes = [_whole(v) for key in (MEMORY_LABEL, AWS_GPU_MEMORY_LABEL) for v in self.values(key)]
        whole = [s for s in sizes if s is not None]
        return min(whole) if whole else None


def _product_named(label: str, value: str) -> str | None:
    """The GPU product a label value names: AWS's GPU names are the table's aliases, the other
    labels are read as on a node."""
    if label == AWS_GPU_NAME_LABEL:
        gpu = lookup_gpu(value)
        return gpu.product if gpu is not None else None
    named = node_product({label: value})
    return named.product if named is not None else None


def _tolerations(taints: Iterable[Mapping[str, Any]]) -> tuple[dict[str, Any], ...]:
    """What tolerates a pool's taints, the GPU taint aside (engine pods tolerate it already)."""
    tolerations = []
    for taint in taints:
        if taint.get("key") == GPU_TAINT["key"] and taint.get("effect") == GPU_TAINT["effect"]:
            continue
        toleration = {"key": taint.get("key"), "effect": taint.get("effect")}
        value = taint.get("value")
        toleration |= {"operator": "Equal", "value": value} if value else {"operator": "Exists"}
        tolerations.append(toleration)
    return tuple(tolerations)


def karpenter_pools(nodepools: Iterable[Mapping[str, Any]]) -> tuple[list[NodePool], list[UnusablePool]]:
    """The GPU shapes of Karpenter NodePools (``karpenter.sh/v1``, camelCase JSON dicts).

    The GPU comes from the template's labels or single requirements the planner reads on nodes
    (GPU feature discovery's product label, a cloud accelerator label, the instance type) or from
    ``karpenter.k8s.aws/instance-gpu-name``; GPUs per node from ``nvidia.com/gpu.count`` or
    ``karpenter.k8s.aws/instance-gpu-count`` (the largest allowed); memory from the GFD or AWS
    memory label, else the built-in table. A ``nvidia.com/gpu`` limit bounds the nodes (0: a
    paused pool). Pools that mention no GPU label nor limit are not GPU pools and are left out.
    """
    pools: list[NodePool] = []
    unusable: list[UnusablePool] = []
    kind = "Karpenter NodePool"
    for nodepool in nodepools:
        name = str((nodepool.get("metadata") or {}).get("name", ""))
        spec = nodepool.get("spec") or {}
        template = spec.get("template") or {}
        shape = _Shape(
            (template.get("metadata") or {}).get("labels") or {},
            (template.get("spec") or {}).get("requirements") or [],
        )
        limit = _gpu_limit(spec.get("limits"))
        if not shape.mentions_gpus() and limit is None:
            continue
        products = shape.products()
        gpus = shape.gpus()
        if not products or gpus is None:
            missing = "which GPU" if not products else "how many GPUs per node"
            unusable.append(
                UnusablePool(
                    name,
                    kind,
                    f"provisions GPU nodes but its template does not say {missing}: add a label or an "
                    f"In requirement {PRODUCT_LABEL if not products else COUNT_LABEL} (or "
                    f"{AWS_GPU_NAME_LABEL if not products else AWS_GPU_COUNT_LABEL}) to spec.template",
                )
            )
            continue
        max_nodes = None if limit is None else limit // gpus
        tolerations = _tolerations((template.get("spec") or {}).get("taints") or [])
        for product, (label, values) in products.items():
            gpu = lookup_gpu(product)
            memory = shape.memory_mib() or (gpu.memory_mib if gpu else None)
            pin = (
                {"key": NODEPOOL_LABEL, "operator": "In", "values": [name]},
                {"key": label, "operator": "In", "values": list(values)},
            )
            pools.append(NodePool(name, kind, product, gpus, memory, max_nodes, pin, tolerations))
    return pools, unusable


def pool_view(nodepool: Mapping[str, Any]) -> dict[str, Any]:
    """What ``karpenter_pools`` reads of a NodePool: the operator keeps only this projection, and
    a change elsewhere (its status as nodes come and go, its disruption settings) leaves it
    equal."""
    spec = nodepool.get("spec") or {}
    template = spec.get("template") or {}
    template_spec = template.get("spec") or {}
    return {
        "metadata": {"name": (nodepool.get("metadata") or {}).get("name")},
        "spec": {
            "template": {
                "metadata": {"labels": dict((template.get("metadata") or {}).get("labels") or {})},
                "spec": {k: template_spec[k] for k in ("requirements", "taints") if k in template_spec},
            },
            "limits": dict(spec.get("limits") or {}),
        },
    }


class DeclaredPool(BaseModel):
    """One node pool declared to the operator (``--node-pools``; the chart's ``nodePools``)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    name: str = Field(min_length=1, description="A name for messages and status.")
    gpu_product: str = Field(alias="gpuProduct", min_length=1, description="GFD product string or alias.")
    gpus_per_node: int = Field(alias="gpusPerNode", gt=0)
    gpu_memory_mib: int | None = Field(default=None, alias="gpuMemoryMiB", gt=0)
    max_nodes: int = Field(alias="maxNodes", gt=0, description="The group's maximum size, nodes up included.")
    node_selector: dict[str, str] = Field(alias="nodeSelector", min_length=1)
    tolerations: tuple[dict[str, Any], ...] = ()


class _DeclaredPools(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pools: tuple[DeclaredPool, ...]


def parse_declared_pools(data: Any) -> tuple[DeclaredPool, ...]:
    """Declared pools from a parsed YAML list, each checked; the error names the entry and field."""
    try:
        pools = _DeclaredPools.model_validate({"pools": data or []}).pools
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"][1:])
        raise PoolError(f"node pool {where}: {first['msg']}") from exc
    for pool in pools:
        if lookup_gpu(pool.gpu_product) is None and pool.gpu_memory_mib is None:
            raise PoolError(
                f"node pool {pool.name}: gpuProduct {pool.gpu_product!r} is not in the built-in table; "
                "set gpuMemoryMiB"
            )
    return pools


def declared_pools(declared: Iterable[DeclaredPool]) -> list[NodePool]:
    """Declared pools as provisionable shapes; a pool's nodes are those carrying its whole
    nodeSelector."""
    pools = []
    for pool in declared:
        gpu = lookup_gpu(pool.gpu_product)
        product = gpu.product if gpu else pool.gpu_product
        selector = sorted(pool.node_selector.items())
        pin = tuple({"key": key, "operator": "In", "values": [value]} for key, value in selector)
        pools.append(
            NodePool(
                pool.name,
                "node pool",
                product,
                pool.gpus_per_node,
                pool.gpu_memory_mib or (gpu.memory_mib if gpu else None),
                pool.max_nodes,
                pin,
                tuple(pool.tolerations),
            )
        )
    return pools
