"""The GPU inventory of a cluster, real (Node objects) or hypothetical (``--gpus``).

The planner needs, per GPU product, its memory and how many GPUs one node can give a pod:
allocatable ``nvidia.com/gpu`` says the second, GPU feature discovery labels or the built-in
table (``planning.gpus``) the first. Which product a node has comes from GPU feature discovery's
label or, on managed clouds, from their accelerator or instance-type labels; a GPU node no label
names is kept aside, so the planner can say which node to label and how.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from specdeploy.api import GPU_RESOURCE, MAX_NODES
from specdeploy.planning.gpus import (
    COUNT_LABEL,
    GIB,
    GPU_NODE_LABELS,
    MEMORY_LABEL,
    MIB,
    PRODUCT_LABEL,
    GpuType,
    known_aliases,
    lookup_gpu,
    node_product,
)
from specdeploy.planning.pools import NodePool, UnusablePool

# The node lifecycle controller's taints on a node it does not consider Ready.
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"


def _gib(mib: int | None) -> float | None:
    return None if mib is None else mib * MIB / GIB


class GpuInventoryError(ValueError):
    """An inventory description (or GPU name) is invalid; the message names the bad part."""


@dataclass(frozen=True)
class GpuNode:
    """One schedulable node's GPUs: what a single pod there could request.

    ``label`` is the node label that named the product; engine pods are pinned with it.
    """

    name: str
    product: str
    gpus: int
    memory_mib: int | None
    label: str = PRODUCT_LABEL
    # Read for pool membership only: a label the planner does not read changes no plan.
    labels: tuple[tuple[str, str], ...] = field(default=(), repr=False, compare=False)

    @property
    def memory_gib(self) -> float | None:
        return _gib(self.memory_mib)


@dataclass(frozen=True)
class UnlabelledGpuNode:
    """A schedulable node that has GPUs (or says it has) but no label the planner can use."""

    name: str
    gpus: int
    labels: tuple[tuple[str, str], ...]

    def problem(self) -> str:
        """What is wrong with the node and the labels to add, for a condition message."""
        shown = ", ".join(f"{k}={v}" for k, v in self.labels[:_SHOWN_LABELS]) or "none"
        if len(self.labels) > _SHOWN_LABELS:
            shown += f", ... ({len(self.labels) - _SHOWN_LABELS} more)"
        if self.gpus == 0:
            return (
                f"node {self.name} is labelled as a GPU node but has no allocatable {GPU_RESOURCE}: "
                f"is the NVIDIA device plugin running there? (labels: {shown})"
            )
        return (
            f"node {self.name} has {self.gpus} allocatable {GPU_RESOURCE} but no label naming its GPU "
            f"(labels: {shown}); add one: kubectl label node {self.name} {PRODUCT_LABEL}=<product, "
            f"e.g. NVIDIA-L4> {MEMORY_LABEL}=<MiB per GPU> (GPU feature discovery sets both; a product "
            f"in the built-in table needs no memory label)"
        )


_SHOWN_LABELS = 12


@dataclass(frozen=True)
class ProductCapacity:
    """One GPU product present in the inventory, summed over its nodes."""

    product: str
    memory_mib: int | None
    max_gpus_per_node: int
    nodes: int
    gpu_type: GpuType | None

    @property
    def memory_gib(self) -> float | None:
        return _gib(self.memory_mib)

    @property
    def display(self) -> str:
        return self.gpu_type.name if self.gpu_type else self.product


@dataclass(frozen=True)
class Inventory:
    """The GPU nodes a replica could be placed on, and the node pools that can create more."""

    nodes: tuple[GpuNode, ...] = ()
    unlabelled: tuple[UnlabelledGpuNode, ...] = ()
    pools: tuple[NodePool, ...] = ()
    unusable_pools: tuple[UnusablePool, ...] = ()
    # without_members_of's answers, per pool (not part of the inventory's value).
    _without: dict[str, Inventory] = field(default_factory=dict, init=False, repr=False, compare=False)

    def with_pools(self, pools: Iterable[NodePool], unusable: Iterable[UnusablePool] = ()) -> Inventory:
        """This inventory with the pools a provisioner can create nodes from."""
        return replace(
            self,
            pools=tuple(sorted(pools, key=lambda p: (p.name, p.product))),
            unusable_pools=tuple(sorted(unusable, key=lambda p: p.name)),
        )

    def without_members_of(self, pool: str) -> Inventory:
        """The nodes up that are not the pool's (a node whose labels meet its requirements is):
        a resource planned on the pool keeps that plan, and its pod template, once the pool's
        nodes are up. Once per pool and inventory: every resource planned on the pool asks on
        every pass, and each answer is a walk over every node."""
        found = self._without.get(pool)
        if found is None:
            owned = [p for p in self.pools if p.name == pool]
            kept = tuple(
                n for n in self.nodes if not any(p.product == n.product and p.holds(n.labels) for p in owned)
            )
            found = self._without[pool] = replace(self, nodes=kept)
        return found

    def provisionable(self) -> Inventory:
        """The nodes the pools may have (no more per pool than a replica may span), as an
        inventory the planner weighs like real nodes when no node up fits."""
        nodes = []
        for pool in self.pools:
            count = MAX_NODES if pool.max_nodes is None else min(pool.max_nodes, MAX_NODES)
            shape = (pool.product, pool.gpus, pool.memory_mib)
            nodes += [GpuNode(f"{pool.name}/{i}", *shape) for i in range(count)]
        return Inventory(tuple(nodes))

    def pool_for(
        self, product: str, gpus_per_node: int, nodes: int, prefer: str | None = None
    ) -> NodePool | None:
        """The pool whose nodes a plan is for: of that product, with enough GPUs per node and
        nodes; ``prefer`` (the pool a resource is planned on) if it is one, else the fewest GPUs
        per node (the smallest instance), then by name."""
        fitting = [
            p
            for p in self.pools
            if p.product == product
            and p.gpus >= gpus_per_node
            and (nodes if p.max_nodes is None else p.max_nodes) >= nodes
        ]
        return min(fitting, key=lambda p: (p.name != prefer, p.gpus, p.name), default=None)

    def pool_named(self, name: str, product: str | None) -> NodePool | None:
        return next((p for p in self.pools if p.name == name and p.product == product), None)

    def products(self) -> list[ProductCapacity]:
        """Products present, sorted by name; memory is the smallest any node reports (safe side)."""
        return list(self._products)

    def nodes_of(self, product: str) -> tuple[GpuNode, ...]:
        """The nodes of one product (in name order)."""
        return self._by_product.get(product, ())

    @cached_property
    def _by_product(self) -> dict[str, tuple[GpuNode, ...]]:
        """Nodes grouped by product, once per inventory: every pass plans against the same
        inventory, and regrouping its nodes each time made a rollout's planning grow with
        resources times nodes."""
        grouped: dict[str, list[GpuNode]] = {}
        for node in self.nodes:
            grouped.setdefault(node.product, []).append(node)
        return {product: tuple(nodes) for product, nodes in sorted(grouped.items())}

    @cached_property
    def _products(self) -> tuple[ProductCapacity, ...]:
        capacities = []
        for product, nodes in self._by_product.items():
            memories = [n.memory_mib for n in nodes if n.memory_mib is not None]
            capacities.append(
                ProductCapacity(
                    product=product,
                    memory_mib=min(memories) if memories else None,
                    max_gpus_per_node=max(n.gpus for n in nodes),
                    nodes=len(nodes),
                    gpu_type=lookup_gpu(product),
                )
            )
        return tuple(capacities)

    def signature(self) -> str:
        """Changes only when the GPU capacity the planner sees changes (not on heartbeats)."""
        return hashlib.sha256(repr(self).encode()).hexdigest()

    def describe(self) -> str:
        """One line per product, e.g. "2 nodes x 8 H100 80GB (NVIDIA-H100-80GB-HBM3, 79.6 GiB)"."""
        lines = []
        for cap in self.products():
            memory = "memory unknown" if cap.memory_gib is None else f"{cap.memory_gib:.1f} GiB"
            plural = "node" if cap.nodes == 1 else "nodes"
            lines.append(
                f"{cap.nodes} {plural} x {cap.max_gpus_per_node} {cap.display} ({cap.product}, {memory})"
            )
        lines += [f"unusable: {node.problem()}" for node in self.unlabelled]
        lines += [f"can provision: {pool.describe()}" for pool in self.pools]
        lines += [f"unusable: {pool.describe()}" for pool in self.unusable_pools]
        return "\n".join(lines) if lines else "no schedulable GPU nodes"

    def label_counts(self, product: str) -> dict[str, int]:
        """For the nodes of ``product``: how many carry each label that named it."""
        return dict(self._label_counts.get(product, {}))

    @cached_property
    def _label_counts(self) -> dict[str, dict[str, int]]:
        return {product: dict(Counter(n.label for n in nodes)) for product, nodes in self._by_product.items()}


def _positive_int(value: Any) -> int | None:
    """A count or size from a label or quantity string; None unless it is a whole number above 0."""
    try:
        number = int(str(value))
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def _schedulable(node: Mapping[str, Any]) -> bool:
    """False for cordoned nodes and nodes whose Ready condition is not True.

    A node that reports no Ready condition yet (just registered) counts as schedulable unless it
    carries the node controller's not-ready/unreachable taints: the scheduler decides the same way.
    """
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return False
    for taint in spec.get("taints") or []:
        if taint.get("key") in (NOT_READY_TAINT, UNREACHABLE_TAINT) and (
            taint.get("effect") in ("NoSchedule", "NoExecute")
        ):
            return False
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return True


def planner_view(node: Mapping[str, Any]) -> dict[str, Any]:
    """What the inventory reads of a Node, without heartbeat timestamps: a heartbeat leaves it equal.

    Labels, taints, schedulability, allocatable and condition statuses; the operator keeps only
    this projection of each node and compares it to skip events that change nothing here.
    """
    metadata = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    return {
        "metadata": {"name": metadata.get("name"), "labels": dict(metadata.get("labels") or {})},
        "spec": {k: v for k, v in spec.items() if k in ("taints", "unschedulable")},
        "status": {
            "allocatable": dict(status.get("allocatable") or {}),
            "conditions": [
                {"type": c.get("type"), "status": c.get("status")} for c in status.get("conditions") or []
            ],
        },
    }


def inventory_from_nodes(nodes: Iterable[Mapping[str, Any]]) -> Inventory:
    """The GPU inventory of Node objects (camelCase JSON dicts, as the API returns them).

    Allocatable ``nvidia.com/gpu`` is what a pod can request, so it decides the GPU count; the
    ``nvidia.com/gpu.count`` label is only a fallback while the device plugin has not reported.
    Nodes without GPUs, cordoned or not Ready are left out; GPU nodes no label names (or labelled
    as GPU nodes without allocatable GPUs) go to ``unlabelled``. Memory comes from the GFD label,
    else from the built-in table; an unknown product without the label keeps memory None. Nodes
    are sorted by name, so the same cluster always gives an equal inventory.
    """
    found = []
    unlabelled = []
    for node in nodes:
        if not _schedulable(node):
            continue
        metadata = node.get("metadata") or {}
        labels = metadata.get("labels") or {}
        status = node.get("status") or {}
        allocatable = (status.get("allocatable") or {}).get(GPU_RESOURCE)
        gpus = _positive_int(allocatable if allocatable is not None else labels.get(COUNT_LABEL))
        named = node_product(labels)
        name = str(metadata.get("name", ""))
        if gpus is None or named is None:
            if gpus is not None or any(label in labels for label in GPU_NODE_LABELS):
                unlabelled.append(UnlabelledGpuNode(name, gpus or 0, tuple(sorted(labels.items()))))
            continue
        memory_mib = _positive_int(labels.get(MEMORY_LABEL))
        if memory_mib is None:
            gpu = lookup_gpu(named.product)
            memory_mib = gpu.memory_mib if gpu else None
        pairs = tuple(sorted(labels.items()))
        found.append(GpuNode(name, named.product, gpus, memory_mib, named.label, pairs))
    return Inventory(
        tuple(sorted(found, key=lambda n: n.name)), tuple(sorted(unlabelled, key=lambda n: n.name))
    )


_ENTRY = re.compile(r"^(?P<gpu>[A-Za-z0-9][A-Za-z0-9._-]*):(?P<gpus>\d+)(?:x(?P<nodes>\d+))?$")


def parse_gpus_flag(text: str) -> Inventory:
    """A hypothetical inventory from ``ALIAS:GPUS[xNODES],...``, e.g. ``h100-80gb:8,l4:4x2``.

    Each entry is a node (or NODES identical nodes) with GPUS GPUs of one product from the
    built-in table, named by alias or GFD product string.
    """
    nodes: list[GpuNode] = []
    entries = [entry.strip() for entry in text.split(",")]
    if not any(entries):
        raise GpuInventoryError("--gpus is empty: expected ALIAS:GPUS[xNODES],... e.g. h100-80gb:8,l4:4")
    for entry in entries:
        match = _ENTRY.match(entry)
        if match is None:
            raise GpuInventoryError(f"--gpus entry {entry!r}: expected ALIAS:GPUS[xNODES], e.g. h100-80gb:8")
        gpu = lookup_gpu(match["gpu"])
        if gpu is None:
            raise GpuInventoryError(
                f"--gpus entry {entry!r}: unknown GPU {match['gpu']!r}; known: {known_aliases()}"
            )
        gpus, count = int(match["gpus"]), int(match["nodes"] or 1)
        if gpus < 1 or count < 1:
            raise GpuInventoryError(f"--gpus entry {entry!r}: GPU and node counts must be at least 1")
        start = sum(1 for n in nodes if n.product == gpu.product)
        nodes.extend(
            GpuNode(f"{gpu.alias}-{start + i}", gpu.product, gpus, gpu.memory_mib) for i in range(count)
        )
    return Inventory(tuple(nodes))
