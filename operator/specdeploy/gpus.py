"""GPU products and the GPU inventory of a cluster, real (Node objects) or hypothetical (--gpus).

The planner needs, per GPU product, its memory and how many GPUs one node can give a pod.
Node labels from NVIDIA GPU feature discovery (GFD) say the first, allocatable ``nvidia.com/gpu``
the second; the built-in table (data/gpus.yaml) fills gaps and makes offline planning possible.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

GPU_RESOURCE = "nvidia.com/gpu"
PRODUCT_LABEL = "nvidia.com/gpu.product"
MEMORY_LABEL = "nvidia.com/gpu.memory"
COUNT_LABEL = "nvidia.com/gpu.count"
MIB = 1 << 20
GIB = 1 << 30

# GFD appends this to the product label when time-slicing or MPS shares a GPU.
_SHARED_SUFFIX = "-shared"


class GpuInventoryError(ValueError):
    """An inventory description (or GPU name) is invalid; the message names the bad part."""


@dataclass(frozen=True)
class GpuType:
    """One row of the built-in GPU table."""

    alias: str
    aliases: tuple[str, ...]
    name: str
    products: tuple[str, ...]
    memory_mib: int
    fp8: bool

    @property
    def product(self) -> str:
        """The canonical GFD product string."""
        return self.products[0]


@cache
def gpu_table() -> tuple[GpuType, ...]:
    """The built-in GPU table, loaded once from the package data."""
    text = resources.files("specdeploy").joinpath("data", "gpus.yaml").read_text()
    rows = yaml.safe_load(text)["gpus"]
    return tuple(
        GpuType(
            alias=row["alias"],
            aliases=tuple(row.get("aliases", ())),
            name=row["name"],
            products=tuple(row["products"]),
            memory_mib=int(row["memoryMiB"]),
            fp8=bool(row["fp8"]),
        )
        for row in rows
    )


def _key(name: str) -> str:
    key = re.sub(r"[\s_]+", "-", name.strip().lower())
    return key.removesuffix(_SHARED_SUFFIX)


@cache
def _index() -> dict[str, GpuType]:
    index: dict[str, GpuType] = {}
    for gpu in gpu_table():
        for name in (gpu.alias, *gpu.aliases, *gpu.products):
            index[_key(name)] = gpu
    return index


def lookup_gpu(name: str) -> GpuType | None:
    """The table row for an alias or GFD product string (case-insensitive), or None."""
    return _index().get(_key(name))


def same_gpu(product: str, wanted: str) -> bool:
    """Whether a node's product string is the GPU the user named (alias or product string)."""
    if _key(product) == _key(wanted):
        return True
    gpu = lookup_gpu(wanted)
    return gpu is not None and lookup_gpu(product) == gpu


def display_name(product: str) -> str:
    """A short human name ("A100 40GB") for a product string, or the string itself."""
    gpu = lookup_gpu(product)
    return gpu.name if gpu else product


@dataclass(frozen=True)
class GpuNode:
    """One schedulable node's GPUs: what a single pod there could request."""

    name: str
    product: str
    gpus: int
    memory_mib: int | None

    @property
    def memory_gib(self) -> float | None:
        return None if self.memory_mib is None else self.memory_mib * MIB / GIB


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
        return None if self.memory_mib is None else self.memory_mib * MIB / GIB

    @property
    def display(self) -> str:
        return self.gpu_type.name if self.gpu_type else self.product


@dataclass(frozen=True)
class Inventory:
    """The GPU nodes a replica could be placed on."""

    nodes: tuple[GpuNode, ...] = ()

    def products(self) -> list[ProductCapacity]:
        """Products present, sorted by name; memory is the smallest any node reports (safe side)."""
        grouped: dict[str, list[GpuNode]] = {}
        for node in self.nodes:
            grouped.setdefault(node.product, []).append(node)
        capacities = []
        for product, nodes in sorted(grouped.items()):
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
        return capacities

    def describe(self) -> str:
        """One line per product, e.g. "2 nodes x 8 H100 80GB (NVIDIA-H100-80GB-HBM3, 79.6 GiB)"."""
        lines = []
        for cap in self.products():
            memory = "memory unknown" if cap.memory_gib is None else f"{cap.memory_gib:.1f} GiB"
            plural = "node" if cap.nodes == 1 else "nodes"
            lines.append(
                f"{cap.nodes} {plural} x {cap.max_gpus_per_node} {cap.display} ({cap.product}, {memory})"
            )
        return "\n".join(lines) if lines else "no schedulable GPU nodes"


def _int_or_none(value: Any) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def _schedulable(node: Mapping[str, Any]) -> bool:
    """False for cordoned nodes and nodes whose Ready condition is not True.

    A node that reports no Ready condition yet (just registered) counts as schedulable unless it
    carries the node controller's not-ready/unreachable taints: the scheduler decides the same way.
    """
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return False
    for taint in spec.get("taints") or []:
        if taint.get("key") in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable") and (
            taint.get("effect") in ("NoSchedule", "NoExecute")
        ):
            return False
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return True


def inventory_from_nodes(nodes: Iterable[Mapping[str, Any]]) -> Inventory:
    """The GPU inventory of Node objects (camelCase JSON dicts, as the API returns them).

    Allocatable ``nvidia.com/gpu`` is what a pod can request, so it decides the GPU count; the
    ``nvidia.com/gpu.count`` label is only a fallback while the device plugin has not reported.
    Nodes without GPUs, cordoned or not Ready are left out. Memory comes from the GFD label, else
    from the built-in table; an unknown product without the label keeps memory None. Nodes are
    sorted by name, so the same cluster always gives an equal inventory.
    """
    found = []
    for node in nodes:
        if not _schedulable(node):
            continue
        metadata = node.get("metadata") or {}
        labels = metadata.get("labels") or {}
        status = node.get("status") or {}
        allocatable = (status.get("allocatable") or {}).get(GPU_RESOURCE)
        gpus = _int_or_none(allocatable) if allocatable is not None else _int_or_none(labels.get(COUNT_LABEL))
        if not gpus or gpus < 1:
            continue
        product = labels.get(PRODUCT_LABEL) or "unknown"
        memory_mib = _int_or_none(labels.get(MEMORY_LABEL))
        if memory_mib is None:
            gpu = lookup_gpu(product)
            memory_mib = gpu.memory_mib if gpu else None
        name = str(metadata.get("name", ""))
        found.append(GpuNode(name=name, product=product, gpus=gpus, memory_mib=memory_mib))
    return Inventory(tuple(sorted(found, key=lambda n: n.name)))


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
            GpuNode(f"{gpu.alias}-{start + i}", gpu.product, gpus, gpu.memory_mib)
            for i in range(count)
        )
    return Inventory(tuple(nodes))


def default_inventory() -> Inventory:
    """The GPUs of the sandbox's default cluster (2 x 8 H100 80GB, 1 x 8 A100 40GB, 2 x 4 L4).

    Read from the node file ``specdeploy sandbox up`` uses, so offline planning and the sandbox
    agree."""
    from specdeploy.sandbox.nodes import load_node_specs, node_manifest

    return inventory_from_nodes(node_manifest(spec) for spec in load_node_specs())


def known_aliases() -> str:
    """The documented aliases, comma-separated, for error messages."""
    return ", ".join(gpu.alias for gpu in gpu_table())
