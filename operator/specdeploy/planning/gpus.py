"""GPU products: the built-in table, product-string lookup, and how clusters label GPU nodes.

The one place for the node label names that say which GPU a node has (NVIDIA GPU feature
discovery's, and the ones GKE, EKS and AKS set) and for the GPU taint with its toleration (the
resource name itself is ``api.GPU_RESOURCE``): the inventory reads nodes with them, the planner's
placement pins and tolerates with them, the sandbox labels and taints its simulated nodes with
them. The built-in table (data/gpus.yaml) maps cloud label values to products, fills gaps in node
labels and makes offline planning possible.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from specdeploy.api import GPU_RESOURCE

PRESENT_LABEL = "nvidia.com/gpu.present"
PRODUCT_LABEL = "nvidia.com/gpu.product"
MEMORY_LABEL = "nvidia.com/gpu.memory"
COUNT_LABEL = "nvidia.com/gpu.count"
# What managed clouds put on GPU nodes instead of (or before) GPU feature discovery's labels.
GKE_ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
EKS_ACCELERATOR_LABEL = "k8s.amazonaws.com/accelerator"
# AKS labels GPU nodes with the vendor only ("nvidia"): the instance type names the GPU there.
AKS_ACCELERATOR_LABEL = "kubernetes.azure.com/accelerator"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
# Labels whose values name a GPU in the table's `accelerators` lists, in the order they are read.
ACCELERATOR_LABELS = (GKE_ACCELERATOR_LABEL, EKS_ACCELERATOR_LABEL)
# Labels that say a node has GPUs, even where they name none the table knows.
GPU_NODE_LABELS = (PRESENT_LABEL, PRODUCT_LABEL, *ACCELERATOR_LABELS, AKS_ACCELERATOR_LABEL)
# GPU nodes are tainted so that only pods asking for GPUs land there; engine pods tolerate it.
GPU_TAINT = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
MIB = 1 << 20
GIB = 1 << 30

# GFD appends this to the product label when time-slicing or MPS shares a GPU.
_SHARED_SUFFIX = "-shared"


class GpuType(BaseModel):
    """One row of the built-in GPU table (data/gpus.yaml documents each field)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    alias: str = Field(min_length=1)
    aliases: tuple[str, ...] = ()
    name: str = Field(min_length=1)
    products: tuple[str, ...] = Field(min_length=1)
    memory_mib: int = Field(alias="memoryMiB", gt=0)
    fp8: bool
    accelerators: tuple[str, ...] = ()
    instance_types: tuple[str, ...] = Field(default=(), alias="instanceTypes")

    @property
    def product(self) -> str:
        """The canonical GFD product string."""
        return self.products[0]


class _GpuTable(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpus: tuple[GpuType, ...]


@cache
def gpu_table() -> tuple[GpuType, ...]:
    """The built-in GPU table, loaded and validated once from the package data."""
    text = resources.files("specdeploy").joinpath("data", "gpus.yaml").read_text()
    data: Any = yaml.safe_load(text)
    return _GpuTable.model_validate(data).gpus


@lru_cache(maxsize=1024)
def _key(name: str) -> str:
    """A name normalised for lookup (cached: node products are matched on every pass)."""
    key = re.sub(r"[\s_]+", "-", name.strip().lower())
    return key.removesuffix(_SHARED_SUFFIX)


@cache
def _index() -> dict[str, GpuType]:
    index: dict[str, GpuType] = {}
    for gpu in gpu_table():
        for name in (gpu.alias, *gpu.aliases, *gpu.products):
            index[_key(name)] = gpu
    return index


@cache
def _label_index() -> dict[tuple[str, str], GpuType]:
    """(label, value) -> GPU for the cloud labels the table lists values of."""
    index = {
        (label, value): gpu
        for gpu in gpu_table()
        for value in gpu.accelerators
        for label in ACCELERATOR_LABELS
    }
    index |= {(INSTANCE_TYPE_LABEL, value): gpu for gpu in gpu_table() for value in gpu.instance_types}
    return index


def label_values(label: str, product: str) -> tuple[str, ...]:
    """The values of ``label`` that name ``product``: the table's (all of them, so a pin does not
    change as nodes come and go) for cloud labels, the product string itself for GPU feature
    discovery's label."""
    if label == PRODUCT_LABEL:
        return (product,)
    gpu = lookup_gpu(product)
    if gpu is None:
        return ()
    if label in ACCELERATOR_LABELS:
        return tuple(sorted(gpu.accelerators))
    if label == INSTANCE_TYPE_LABEL:
        return tuple(sorted(gpu.instance_types))
    return ()


@dataclass(frozen=True)
class NodeProduct:
    """The GPU a node's labels name: ``product`` for planning, ``label`` to pin pods with."""

    product: str
    label: str


def node_product(labels: Mapping[str, str]) -> NodeProduct | None:
    """Which GPU a node has, from the first label that says: GPU feature discovery's product
    label (any value, known or not), then a cloud accelerator label, then the instance type; the
    last two only when the built-in table knows the value. None: no label names the GPU."""
    gfd = labels.get(PRODUCT_LABEL)
    if gfd:
        return NodeProduct(gfd, PRODUCT_LABEL)
    for label in (*ACCELERATOR_LABELS, INSTANCE_TYPE_LABEL):
        value = labels.get(label)
        gpu = _label_index().get((label, value)) if value else None
        if value and gpu is not None:
            return NodeProduct(gpu.product, label)
    return None


def discovery_labels(product: str, gpus: int, memory_mib: int) -> dict[str, str]:
    """The labels GPU feature discovery puts on a node with ``gpus`` of ``product``."""
    return {
        PRESENT_LABEL: "true",
        PRODUCT_LABEL: product,
        MEMORY_LABEL: str(memory_mib),
        COUNT_LABEL: str(gpus),
    }


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


def known_aliases() -> str:
    """The documented aliases, comma-separated, for error messages."""
    return ", ".join(gpu.alias for gpu in gpu_table())
