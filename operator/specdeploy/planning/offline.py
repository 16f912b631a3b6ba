"""The cluster offline planning assumes: what ``plan`` and ``render`` plan against with ``--offline``
(and without a kubeconfig).

Kept as product data (data/offline-cluster.yaml) rather than in the local sandbox, so the
operator's own commands never need the sandbox installed; the sandbox reads the same groups to
start its simulated GPU nodes, so the two always describe one cluster.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml

from specdeploy.api import GPU_RESOURCE
from specdeploy.planning.gpus import GPU_TAINT, discovery_labels, lookup_gpu
from specdeploy.planning.inventory import Inventory, inventory_from_nodes

OFFLINE_CLUSTER_FILE = "offline-cluster.yaml"
# A GPU server's CPU and memory per GPU (192 cores and 2000 GiB for 8, as an H100 node), so every
# GPU can take an engine pod with the requests the operator derives.
CPU_PER_GPU = 24
MEMORY_GIB_PER_GPU = 250


def offline_node_groups() -> list[dict[str, Any]]:
    """The node groups of the offline cluster, in the sandbox node file's format."""
    text = resources.files("specdeploy").joinpath("data", OFFLINE_CLUSTER_FILE).read_text()
    groups: list[dict[str, Any]] = yaml.safe_load(text)["nodeGroups"]
    return groups


def gpu_node_object(
    name: str,
    product: str,
    gpus: int,
    memory_mib: int | None = None,
    cpu: str | None = None,
    memory: str | None = None,
) -> dict[str, Any]:
    """A GPU Node as the API returns it once NVIDIA's device plugin and GPU feature discovery ran.

    ``memory_mib`` defaults to the built-in table's value for the product, ``cpu`` and ``memory``
    to a GPU server's.
    """
    known = lookup_gpu(product)
    gpu_memory = memory_mib or (known.memory_mib if known else None)
    if gpu_memory is None:
        raise ValueError(f"unknown GPU product {product!r}: give its memory in MiB")
    labels = discovery_labels(product, gpus, gpu_memory)
    capacity = {
        "cpu": cpu or str(CPU_PER_GPU * gpus),
        "memory": memory or f"{MEMORY_GIB_PER_GPU * gpus}Gi",
        GPU_RESOURCE: str(gpus),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "spec": {"taints": [dict(GPU_TAINT)]},
        "status": {"capacity": dict(capacity), "allocatable": dict(capacity)},
    }


def offline_node_objects() -> list[dict[str, Any]]:
    """The offline cluster's GPU nodes, named ``<group>-<n>`` as the sandbox names them."""
    return [
        gpu_node_object(
            f"{group['name']}-{number}",
            group["gpu"]["product"],
            group["gpu"]["count"],
            group["gpu"]["memoryMiB"],
            group["cpu"],
            group["memory"],
        )
        for group in offline_node_groups()
        for number in range(group["count"])
    ]


def offline_inventory() -> Inventory:
    """The GPU inventory of the offline cluster, as the operator would read it from its Nodes."""
    return inventory_from_nodes(offline_node_objects())
