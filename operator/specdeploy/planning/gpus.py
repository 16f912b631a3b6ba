"""GPU products: the built-in table, product-string lookup, and how NVIDIA labels GPU nodes.

The one place for the GPU feature discovery (GFD) label names and the GPU taint with its
toleration (the resource name itself is ``api.GPU_RESOURCE``): the inventory reads nodes with
them, the planner's placement pins and tolerates with them, the sandbox labels and taints its
simulated nodes with them. The built-in table (data/gpus.yaml) fills gaps in node labels and
makes offline planning possible.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from specdeploy.api import GPU_RESOURCE

PRESENT_LABEL = "nvidia.com/gpu.present"
PRODUCT_LABEL = "nvidia.com/gpu.product"
MEMORY_LABEL = "nvidia.com/gpu.memory"
COUNT_LABEL = "nvidia.com/gpu.count"
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


def known_aliases() -> str:
    """The documented aliases, comma-separated, for error messages."""
    return ", ".join(gpu.alias for gpu in gpu_table())
