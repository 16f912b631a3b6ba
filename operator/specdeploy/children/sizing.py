"""CPU, memory and volume sizes of one engine pod, derived from its GPU plan.

Per pod, for ``G`` GPUs and weights ``W`` = verifier + speculator (``plan.weightsGiB`` +
``plan.speculatorWeightsGiB``), all in GiB and rounded up; a replica on ``N`` nodes has one pod
per node, each with ``G`` = its GPUs per replica / N, loading ``W / N`` of the weights into its
GPUs but downloading the whole checkpoint into its own cache:

    cpu      = 2 + 2 x G              the API server and the engine's scheduler loop, then per GPU
                                      its worker process (it spins on its CUDA stream) and the
                                      threads beside it (tokenising, detokenising, sampling)
    shm      = min(2 x G, 16)         the RAM-backed /dev/shm: NCCL's host buffers and the
                                      engine's shared-memory queues between its processes
    memory   = W/N + shm + 4 + 2 x G  the weights pass through host memory while they load (page
                                      cache of the safetensors files, counted against the pod);
                                      /dev/shm is memory the pod is charged for; 4 GiB for the
                                      Python, torch and engine processes; per GPU its worker's
                                      CUDA context, pinned transfer buffers and CUDA graph pools
    cache    = W x 1.2 + 5            the model cache emptyDir: the downloaded weights, the hub's
                                      partial files while a download runs, tokenizer and configs

A user value in ``spec.resources`` wins for cpu or memory. Memory is limited to its request (a
pod never grows into its neighbours' memory, and the kubelet evicts it last under memory
pressure); CPU has no limit (CFS throttling would stall the engine's busy loops, raising latency).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specdeploy import api

CPU_BASE = 2
CPU_PER_GPU = 2
SHM_PER_GPU_GIB = 2
SHM_MAX_GIB = 16
MEMORY_BASE_GIB = 4
MEMORY_PER_GPU_GIB = 2
CACHE_MARGIN = 0.2
CACHE_EXTRA_GIB = 5
SIZED = ("cpu", "memory")


@dataclass(frozen=True)
class PodSizing:
    """The derived sizes, as Kubernetes quantities."""

    cpu: str
    memory: str
    shm: str
    cache: str


def _gib(value: float) -> str:
    return f"{math.ceil(value)}Gi"


def pod_sizing(plan: api.Plan) -> PodSizing:
    """The sizes of one pod of ``plan`` (module docstring)."""
    nodes = plan.nodes_per_replica
    gpus = plan.gpus_per_replica // nodes
    weights = (plan.weights_gib or 0.0) + (plan.speculator_weights_gib or 0.0)
    shm = min(SHM_PER_GPU_GIB * gpus, SHM_MAX_GIB)
    return PodSizing(
        cpu=str(CPU_BASE + CPU_PER_GPU * gpus),
        memory=_gib(weights / nodes + shm + MEMORY_BASE_GIB + MEMORY_PER_GPU_GIB * gpus),
        shm=_gib(shm),
        cache=_gib(weights * (1 + CACHE_MARGIN) + CACHE_EXTRA_GIB),
    )


def container_resources(resources: api.Resources, sizing: PodSizing, gpus: int) -> dict[str, dict[str, str]]:
    """``spec.resources`` with the derived cpu and memory where the user set neither a request nor
    a limit (a limit alone is the request too, as the apiserver would default it), memory limited
    to its request unless a limit is set, and the plan's GPUs."""
    requests, limits = dict(resources.requests), dict(resources.limits)
    derived = {"cpu": sizing.cpu, "memory": sizing.memory}
    for name in SIZED:
        requests.setdefault(name, limits.get(name, derived[name]))
    limits.setdefault("memory", requests["memory"])
    requests[api.GPU_RESOURCE] = limits[api.GPU_RESOURCE] = str(gpus)
    return {"requests": requests, "limits": limits}
