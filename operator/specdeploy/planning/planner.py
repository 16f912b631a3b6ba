"""The GPU planner: how many GPUs of which product one replica needs, and why.

Pure functions over the spec, the models' config.json and a GPU inventory: ``pipeline.compute``
calls ``plan`` on every reconcile and ``specdeploy plan`` calls it offline, so both always agree. The
memory model it applies is described in ``planning.memory``.

One module, over 400 lines, because it is one decision: the candidates, their ranking and the
reasons a refused one gets are read together; the memory model, the sharding rules and the
inventory it decides over are apart (``memory``, ``parallelism``, ``inventory``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from specdeploy import api
from specdeploy.api import GPU_RESOURCE
from specdeploy.modelinfo import ModelInfo
from specdeploy.planning.gpus import (
    GIB,
    GPU_TOLERATION,
    MEMORY_LABEL,
    PRODUCT_LABEL,
    display_name,
    gpu_table,
    known_aliases,
    label_values,
    lookup_gpu,
    same_gpu,
)
from specdeploy.planning.inventory import GpuNode, Inventory, ProductCapacity
from specdeploy.planning.memory import MemoryEstimate, PerGpu, estimate_memory
from specdeploy.planning.parallelism import (
    draft_tensor_parallel_size,
    draft_tp_violation,
    pipeline_capable,
    pipeline_violation,
    tensor_parallel_violations,
)
from specdeploy.planning.shape import (
    IncompleteConfigError,
    bytes_per_parameter,
    fp8_block_sizes,
    model_context_limit,
)

AUTO_TENSOR_SIZES = (1, 2, 4, 8)
_AUTO_SIZES = ", ".join(map(str, AUTO_TENSOR_SIZES))
# Default context when spec.maxModelLen is unset: the model's own limit, capped here. Long-context
# models (Qwen3 MoE: 262144) would otherwise reserve ~24 GiB of KV cache per sequence and make
# every plan several times larger than typical chat or coding traffic needs.
DEFAULT_MAX_MODEL_LEN = 32768


class Reason(StrEnum):
    """Stable reason codes, used as the Schedulable condition's reason."""

    PLANNED = "Planned"
    PLANNED_ON_NODE_POOL = "PlannedOnNodePool"
    NO_NODE_FITS = "NoNodeFits"
    INVALID_TENSOR_PARALLEL_SIZE = "InvalidTensorParallelSize"
    INVALID_DRAFT_TENSOR_PARALLEL_SIZE = "InvalidDraftTensorParallelSize"
    UNKNOWN_GPU_PRODUCT = "UnknownGpuProduct"
    GPU_NODE_NOT_RECOGNIZED = "GpuNodeNotRecognized"
    INVALID_MAX_MODEL_LEN = "InvalidMaxModelLen"
    INCOMPLETE_MODEL_CONFIG = "IncompleteModelConfig"


@dataclass(frozen=True)
class Layout:
    """How one replica is split: tensor parallelism within (or across) nodes, pipeline stages
    across them, and the nodes it spans."""

    tensor: int
    pipeline: int = 1
    nodes: int = 1

    @property
    def gpus(self) -> int:
        return self.tensor * self.pipeline

    @property
    def gpus_per_node(self) -> int:
        return self.gpus // self.nodes

    def describe(self) -> str:
        """How the GPUs of one replica are split, in words."""
        if self.nodes == 1:
            return f"tensor {self.tensor}"
        if self.pipeline > 1:
            return f"tensor {self.tensor} within each node, pipeline {self.pipeline} across the nodes"
        return f"tensor {self.tensor} across the nodes"


@dataclass(frozen=True)
class Alternative:
    """One (product, layout) option the planner weighed, and its verdict."""

    tensor_parallel_size: int
    gpu_product: str | None
    fits: bool
    reason: str
    pipeline_parallel_size: int = 1
    nodes: int = 1


@dataclass(frozen=True)
class PlanOutcome:
    """The planner's answer: a plan when something fits, else a reason code and what would fit."""

    fits: bool
    reason: Reason
    message: str
    plan: api.Plan | None = None
    alternatives: tuple[Alternative, ...] = ()
    estimate: MemoryEstimate | None = None


def _gib(value: float) -> str:
    return f"{value:.1f} GiB"


def _breakdown(per_gpu: PerGpu) -> str:
    return (
        f"{per_gpu.weights:.1f} weights + {per_gpu.speculator:.1f} speculator + "
        f"{per_gpu.kv_cache:.1f} KV cache + {per_gpu.reserve:.1f} reserve"
    )


def _largest_node(nodes: Sequence[GpuNode]) -> GpuNode | None:
    if not nodes:
        return None
    return max(nodes, key=lambda n: (n.gpus * (n.memory_mib or 0), n.gpus, n.product))


def _fails_on(cap: ProductCapacity, layout: Layout, draft_tp: int, estimate: MemoryEstimate) -> str | None:
    """Why one replica in ``layout`` does not fit nodes of this product, or None when it does."""
    if cap.max_gpus_per_node < layout.gpus_per_node:
        where = "one node" if layout.nodes == 1 else f"each of {layout.nodes} nodes"
        return f"needs {layout.gpus_per_node} GPUs on {where}; at most {cap.max_gpus_per_node} allocatable"
    if cap.memory_gib is None:
        return f"GPU memory unknown (no {MEMORY_LABEL} label and not in the built-in table)"
    per_gpu = estimate.per_gpu(layout.tensor, draft_tp, layout.pipeline)
    usable = cap.memory_gib * estimate.utilization
    if per_gpu.total > usable:
        return f"needs {_gib(per_gpu.total)} per GPU ({_breakdown(per_gpu)}); {_gib(usable)} usable"
    return None


# How the planner ranks fitting options: the smallest tuple wins.
_Rank = tuple[int | str, ...]


def _preference(cap: ProductCapacity, layout: Layout, verifier: ModelInfo) -> _Rank:
    """Fewest GPUs per replica, then native FP8 for FP8 checkpoints, then the smallest GPU that fits."""
    fp8_checkpoint = bool(fp8_block_sizes(verifier.config)) or bytes_per_parameter(verifier.config) == 1.0
    native_fp8 = cap.gpu_type.fp8 if cap.gpu_type else False
    return (layout.gpus, int(fp8_checkpoint and not native_fp8), cap.memory_mib or 0, cap.product)


class _Refused(Exception):
    """A planning step found no plan; ``outcome`` says why."""

    def __init__(self, outcome: PlanOutcome) -> None:
        super().__init__(outcome.message)
        self.outcome = outcome


@dataclass(frozen=True)
class _Shardable:
    """The TP sizes the engine can shard verifier and draft into, and why the others were rejected."""

    sizes: list[int]
    rejected: list[Alternative]


def plan(
    spec: api.SpeculativeDeploymentSpec,
    verifier: ModelInfo,
    speculator: ModelInfo | None,
    inventory: Inventory,
    on_pool: str | None = None,
) -> PlanOutcome:
    """Choose the tensor-parallel size and GPU product of one replica, never overriding the user.

    ``tensor: auto`` takes the smallest size in 1, 2, 4, 8 that the engine can shard the model
    into, that fits in memory and that one node of the product can host; an explicit size is only
    checked. Among products that fit, the fewest GPUs per replica wins, then (for FP8 checkpoints)
    native FP8 support, then the smallest GPU memory, which keeps big GPUs free for big models.
    Where no node up fits, the node pools are weighed the same way; ``on_pool`` is the pool the
    resource is planned on already, whose own nodes up then count as the pool's, not as nodes
    up, so the plan stays the pool's once they came.
    """
    nodes_up = inventory.without_members_of(on_pool) if on_pool else inventory
    outcome = _plan_on(spec, verifier, speculator, nodes_up)
    if not outcome.fits and outcome.reason in _PLACEMENT_FAILURES and inventory.pools:
        creatable = inventory.provisionable()
        provisioned = _plan_on(spec, verifier, speculator, creatable)
        planned = _on_pool(outcome, provisioned, inventory, on_pool)
        if planned is not None:
            return planned
        pools = "; ".join(pool.describe() for pool in inventory.pools)
        why = provisioned.message if creatable.nodes else "their limits allow no more nodes"
        outcome = replace(outcome, message=f"{outcome.message}; no node pool can create one ({pools}): {why}")
    return _with_unlabelled_nodes(outcome, inventory)


# Refusals that another node could lift: node pools are weighed after them.
_PLACEMENT_FAILURES = (Reason.NO_NODE_FITS, Reason.UNKNOWN_GPU_PRODUCT)


def _plan_on(
    spec: api.SpeculativeDeploymentSpec,
    verifier: ModelInfo,
    speculator: ModelInfo | None,
    inventory: Inventory,
) -> PlanOutcome:
    """The plan on the nodes of ``inventory``: real ones, or those its pools could create."""
    try:
        estimate = _estimate(spec, verifier, speculator, _context_length(spec, verifier))
        shardable = _shardable(spec, verifier, speculator, estimate)
        capacities, nodes = _candidates(spec, inventory, estimate, shardable)
        outcome = _choose(spec, verifier, estimate, shardable, capacities, nodes)
        if not outcome.fits and spec.parallelism.nodes != 1:
            outcome = _choose_nodes(spec, verifier, speculator, estimate, capacities, inventory, outcome)
    except _Refused as refused:
        outcome = refused.outcome
    return outcome


def _on_pool(
    nodes: PlanOutcome, provisioned: PlanOutcome, inventory: Inventory, current: str | None
) -> PlanOutcome | None:
    """A plan the pools fit, naming the pool whose nodes it is for (the ``current`` one when it
    still fits), with why no node did."""
    planned = provisioned.plan
    if not provisioned.fits or planned is None or planned.gpu_product is None:
        return None
    per_node = planned.gpus_per_replica // planned.nodes_per_replica
    pool = inventory.pool_for(planned.gpu_product, per_node, planned.nodes_per_replica, current)
    if pool is None:
        return None
    reason = f"no node up fits ({nodes.message}); {pool.shape()} can create them: {planned.reason}"
    plan = planned.model_copy(update={"node_pool": pool.name, "reason": reason})
    alternatives = (*nodes.alternatives, *provisioned.alternatives)
    return replace(
        provisioned, reason=Reason.PLANNED_ON_NODE_POOL, message=reason, plan=plan, alternatives=alternatives
    )


def _with_unlabelled_nodes(outcome: PlanOutcome, inventory: Inventory) -> PlanOutcome:
    """A placement failure while GPU nodes or node pools lack a usable label names them and the
    fix: the GPUs that would fit may be there."""
    unusable = [node.problem() for node in inventory.unlabelled]
    unusable += [pool.describe() for pool in inventory.unusable_pools]
    if outcome.fits or not unusable or outcome.reason not in _PLACEMENT_FAILURES:
        return outcome
    problems = "; ".join(unusable)
    return replace(outcome, reason=Reason.GPU_NODE_NOT_RECOGNIZED, message=f"{outcome.message}; {problems}")


def _context_length(spec: api.SpeculativeDeploymentSpec, verifier: ModelInfo) -> int:
    """``maxModelLen`` within the model's limit, else that limit capped at DEFAULT_MAX_MODEL_LEN."""
    limit = model_context_limit(verifier.config)
    if spec.max_model_len is None:
        return min(limit or DEFAULT_MAX_MODEL_LEN, DEFAULT_MAX_MODEL_LEN)
    if limit is not None and spec.max_model_len > limit:
        raise _Refused(
            PlanOutcome(
                False,
                Reason.INVALID_MAX_MODEL_LEN,
                f"maxModelLen {spec.max_model_len} exceeds the {limit} tokens {verifier.model_id} supports",
            )
        )
    return spec.max_model_len


def _estimate(
    spec: api.SpeculativeDeploymentSpec,
    verifier: ModelInfo,
    speculator: ModelInfo | None,
    max_model_len: int,
) -> MemoryEstimate:
    try:
        return estimate_memory(spec, verifier, speculator, max_model_len)
    except IncompleteConfigError as exc:
        raise _Refused(
            PlanOutcome(False, Reason.INCOMPLETE_MODEL_CONFIG, f"cannot size the models: {exc}")
        ) from exc


def _explicit_tp(spec: api.SpeculativeDeploymentSpec) -> int | None:
    return spec.parallelism.tensor if isinstance(spec.parallelism.tensor, int) else None


def _shardable(
    spec: api.SpeculativeDeploymentSpec,
    verifier: ModelInfo,
    speculator: ModelInfo | None,
    estimate: MemoryEstimate,
) -> _Shardable:
    """The sizes to try (the explicit one, else AUTO_TENSOR_SIZES) that verifier and draft shard into."""
    explicit = _explicit_tp(spec)
    shardable = _Shardable([], [])
    draft_only = False
    for tp in (explicit,) if explicit is not None else AUTO_TENSOR_SIZES:
        problems, draft_problem = _tp_problems(spec, verifier, speculator, estimate, tp)
        draft_only = draft_only or (draft_problem and len(problems) == 1)
        if problems:
            shardable.rejected.append(Alternative(tp, None, False, "; ".join(problems)))
        else:
            shardable.sizes.append(tp)
    if shardable.sizes:
        return shardable
    alternatives = shardable.rejected
    reason = Reason.INVALID_DRAFT_TENSOR_PARALLEL_SIZE if draft_only else Reason.INVALID_TENSOR_PARALLEL_SIZE
    message = (
        alternatives[0].reason
        if explicit is not None
        else (
            f"no tensor-parallel size in {_AUTO_SIZES} works: "
            + "; ".join(f"{a.tensor_parallel_size}: {a.reason}" for a in alternatives)
        )
    )
    raise _Refused(PlanOutcome(False, reason, message, None, tuple(alternatives), estimate))


def _tp_problems(
    spec: api.SpeculativeDeploymentSpec,
    verifier: ModelInfo,
    speculator: ModelInfo | None,
    estimate: MemoryEstimate,
    tp: int,
) -> tuple[list[str], bool]:
    """Why verifier and draft cannot be sharded ``tp`` ways, and whether the draft's TP is one reason."""
    problems = tensor_parallel_violations(
        estimate.verifier, tp, fp8_block_sizes(verifier.config), verifier.model_id
    )
    draft_problem = draft_tp_violation(spec, tp)
    if draft_problem is not None:
        problems.append(draft_problem)
    elif speculator is not None and estimate.speculator is not None:
        problems += tensor_parallel_violations(
            estimate.speculator, draft_tensor_parallel_size(spec, tp), (), speculator.model_id
        )
    return problems, draft_problem is not None


def _candidates(
    spec: api.SpeculativeDeploymentSpec,
    inventory: Inventory,
    estimate: MemoryEstimate,
    shardable: _Shardable,
) -> tuple[list[ProductCapacity], list[GpuNode]]:
    """The products (with their nodes) a replica may use: all, or the one ``gpuProduct`` names."""
    capacities, nodes = inventory.products(), list(inventory.nodes)
    wanted = spec.parallelism.gpu_product
    if not wanted:
        return capacities, nodes
    capacities = [c for c in capacities if same_gpu(c.product, wanted)]
    nodes = [n for c in capacities for n in inventory.nodes_of(c.product)]
    if capacities:
        return capacities, nodes
    present = ", ".join(c.product for c in inventory.products()) or "none"
    if lookup_gpu(wanted) is None:
        reason = Reason.UNKNOWN_GPU_PRODUCT
        message = (
            f"unknown GPU product {wanted!r}: name a product present in the cluster ({present}) "
            f"or an alias ({known_aliases()})"
        )
    else:
        reason = Reason.NO_NODE_FITS
        message = (
            f"{_no_fit_need(estimate, spec, shardable.sizes, nodes)}; no schedulable node has "
            f"{display_name(wanted)} GPUs ({wanted}); products present: {present}"
        )
    raise _Refused(PlanOutcome(False, reason, message, None, tuple(shardable.rejected), estimate))


def _choose(
    spec: api.SpeculativeDeploymentSpec,
    verifier: ModelInfo,
    estimate: MemoryEstimate,
    shardable: _Shardable,
    capacities: Sequence[ProductCapacity],
    nodes: Sequence[GpuNode],
) -> PlanOutcome:
    """Weigh every product at each shardable size (the smallest that fits on one node) and take the
    preferred. A spec that asks for several nodes or pipeline stages is weighed by ``_choose_nodes``."""
    alternatives = list(shardable.rejected)
    fitting: list[tuple[_Rank, ProductCapacity, Layout]] = []
    one_node = spec.parallelism.nodes in ("auto", 1) and spec.parallelism.pipeline in ("auto", 1)
    for cap in capacities if one_node else ():
        for tp in shardable.sizes:
            layout = Layout(tp)
            problem = _fails_on(cap, layout, draft_tensor_parallel_size(spec, tp), estimate)
            alternatives.append(Alternative(tp, cap.product, problem is None, problem or "fits"))
            if problem is None:
                fitting.append((_preference(cap, layout, verifier), cap, layout))
                break
    return _chosen(spec, estimate, shardable.sizes, nodes, alternatives, fitting)


def _chosen(
    spec: api.SpeculativeDeploymentSpec,
    estimate: MemoryEstimate,
    sizes: Sequence[int],
    nodes: Sequence[GpuNode],
    alternatives: list[Alternative],
    fitting: list[tuple[_Rank, ProductCapacity, Layout]],
) -> PlanOutcome:
    """The preferred fitting option as a plan, else NoNodeFits naming the shape that would fit."""
    if not fitting:
        largest = _largest_node(nodes)
        where = (
            f"largest allocatable: {largest.gpus} x {display_name(largest.product)}"
            if largest
            else f"no schedulable node has allocatable {GPU_RESOURCE}"
        )
        message = f"{_no_fit_need(estimate, spec, sizes, nodes)}; {where}"
        return PlanOutcome(False, Reason.NO_NODE_FITS, message, None, tuple(alternatives), estimate)
    _, cap, layout = min(fitting, key=lambda item: item[0])
    alternatives = [
        replace(alt, reason="chosen" if alt.gpu_product == cap.product else "fits; not preferred")
        if alt.fits
        else alt
        for alt in alternatives
    ]
    result = _plan_for(spec, estimate, cap, layout)
    return PlanOutcome(True, Reason.PLANNED, result.reason, result, tuple(alternatives), estimate)


def _choose_nodes(
    spec: api.SpeculativeDeploymentSpec,
    verifier: ModelInfo,
    speculator: ModelInfo | None,
    estimate: MemoryEstimate,
    capacities: Sequence[ProductCapacity],
    inventory: Inventory,
    one_node: PlanOutcome,
) -> PlanOutcome:
    """Replicas spanning several identical nodes, when none fits on one (or the spec asks for it).

    Per product, the fewest nodes (2 to MAX_NODES, or the count set) whose layout shards, fits in
    memory and has that many nodes in the cluster; then, across products, the fewest nodes, the
    fewest GPUs, native FP8 and the smallest GPU, as on one node. Without any, the one-node answer
    stands, with these alternatives added.
    """
    wanted, stages = spec.parallelism.nodes, spec.parallelism.pipeline
    counts: Sequence[int] = range(2, api.MAX_NODES + 1)
    if isinstance(wanted, int) or (isinstance(stages, int) and stages > 1):
        counts = (wanted if isinstance(wanted, int) else int(stages),)
    architectures = tuple(verifier.config.get("architectures") or ())
    alternatives = list(one_node.alternatives)
    fitting: list[tuple[_Rank, ProductCapacity, Layout]] = []
    short: list[str] = []
    for cap in capacities:
        for count in counts:
            layout = _layout(spec, architectures, cap, count)
            problems, _ = _tp_problems(spec, verifier, speculator, estimate, layout.tensor)
            split = pipeline_violation(
                spec.engine.name, architectures, layout.pipeline, count, verifier.model_id
            )
            problems += [split] if split else []
            if layout.gpus % count:
                problems.append(f"{layout.gpus} GPUs do not split evenly over {count} nodes")
            present = sum(1 for n in inventory.nodes_of(cap.product) if n.gpus >= layout.gpus_per_node)
            problem = "; ".join(problems) or _fails_on(
                cap, layout, draft_tensor_parallel_size(spec, layout.tensor), estimate
            )
            if problem is None and present < count:
                problem = (
                    f"needs {count} nodes with {layout.gpus_per_node} allocatable {cap.display} GPUs "
                    f"({layout.describe()}); the cluster has {present}"
                )
                short.append(problem)
            alternatives.append(
                Alternative(
                    layout.tensor, cap.product, problem is None, problem or "fits", layout.pipeline, count
                )
            )
            if problem is None:
                fitting.append(((count, *_preference(cap, layout, verifier)), cap, layout))
            if problem is None or short[-1:] == [problem]:
                break
    if not fitting:
        if len(counts) == 1:
            message = (
                "; ".join(a.reason for a in alternatives[len(one_node.alternatives) :]) or one_node.message
            )
        else:
            message = "; or ".join([one_node.message, *short])
        return replace(one_node, message=message, alternatives=tuple(alternatives))
    return _chosen(spec, estimate, (), (), alternatives, fitting)


def _layout(
    spec: api.SpeculativeDeploymentSpec, architectures: Sequence[str], cap: ProductCapacity, count: int
) -> Layout:
    """The split of a replica over ``count`` nodes of ``cap``: one pipeline stage per node with
    tensor parallelism inside it where the engine runs EAGLE-3 that way, else tensor parallelism
    across all the nodes; an explicit tensor or pipeline size is kept as set."""
    per_node = max((size for size in AUTO_TENSOR_SIZES if size <= cap.max_gpus_per_node), default=1)
    tensor = _explicit_tp(spec)
    pipeline = spec.parallelism.pipeline
    if pipeline == "auto":
        fits_a_node = tensor is None or tensor <= cap.max_gpus_per_node
        staged = pipeline_capable(spec.engine.name, architectures) and fits_a_node
        pipeline = count if staged else 1
    if pipeline == count:
        return Layout(tensor or per_node, pipeline, count)
    return Layout(tensor or per_node * count, pipeline, count)


def _plan_for(
    spec: api.SpeculativeDeploymentSpec, estimate: MemoryEstimate, cap: ProductCapacity, layout: Layout
) -> api.Plan:
    """The chosen plan, with the sizes behind it and a reason a user can check by hand."""
    tp, pp = layout.tensor, layout.pipeline
    draft_tp = draft_tensor_parallel_size(spec, tp)
    per_gpu = estimate.per_gpu(tp, draft_tp, pp)
    if layout.nodes > 1:
        split = f"{layout.gpus_per_node} GPUs each, {layout.describe()}"
        how = f"nodes {layout.nodes} as set ({split})"
        if not isinstance(spec.parallelism.nodes, int):
            how = f"nodes auto: no one node holds a replica, {layout.nodes} is the fewest that do ({split})"
    elif _explicit_tp(spec) is not None:
        how = f"tensor {tp} as set"
    else:
        how = f"tensor auto: {tp} is the smallest size in {_AUTO_SIZES} that shards and fits"
    choice = (
        f"{cap.display} as set"
        if spec.parallelism.gpu_product
        else f"{cap.display} preferred (fewest GPUs, then smallest memory)"
    )
    usable = (cap.memory_gib or 0.0) * estimate.utilization
    reason = (
        f"{how}; {choice}; per GPU {_breakdown(per_gpu)} = {_gib(per_gpu.total)} of {_gib(usable)} usable"
    )
    return api.Plan(
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        nodes_per_replica=layout.nodes,
        gpu_product=cap.product,
        gpus_per_replica=layout.gpus,
        gpu_memory_gib=round(cap.memory_gib or 0.0, 2),
        weights_gib=round(estimate.weights_bytes / GIB, 2),
        speculator_weights_gib=(
            round(estimate.speculator_bytes / GIB, 2) if estimate.speculator is not None else None
        ),
        kv_cache_gib=round(estimate.kv_cache_gib(tp, draft_tp), 2),
        max_model_len=estimate.max_model_len,
        reason=reason,
    )


def _no_fit_need(
    estimate: MemoryEstimate,
    spec: api.SpeculativeDeploymentSpec,
    valid: Sequence[int],
    nodes: Sequence[GpuNode],
) -> str:
    """The replica shape that would fit: the fewest GPUs whose per-GPU need the cluster's biggest GPU
    (or, without GPUs, the biggest in the built-in table) could meet, else the widest shape."""
    memories = [n.memory_gib for n in nodes if n.memory_gib is not None]
    biggest = max(memories) if memories else max(g.memory_mib for g in gpu_table()) / 1024
    chosen = valid[-1]
    for tp in valid:
        if estimate.min_gpu_gib(tp, draft_tensor_parallel_size(spec, tp)) <= biggest:
            chosen = tp
            break
    need = math.ceil(estimate.min_gpu_gib(chosen, draft_tensor_parallel_size(spec, chosen)))
    gpus = "GPU" if chosen == 1 else "GPUs"
    return f"needs {chosen} x >= {need} GiB {gpus} on one node"


@dataclass(frozen=True)
class Placement:
    """What a plan imposes on an engine pod; ``children.build_deployment`` merges it with spec.scheduling.

    ``node_requirements`` are node-selector requirements ANDed into every required
    nodeSelectorTerm (the GPU product); ``tolerations`` admit the pod to tainted GPU nodes.
    """

    gpus: int
    node_requirements: tuple[dict[str, Any], ...]
    tolerations: tuple[dict[str, Any], ...]


def placement(plan: api.Plan, inventory: Inventory | None = None) -> Placement:
    """The plan's GPUs per pod (per replica, over its nodes), its GPU product as a node
    requirement, the GPU toleration; a plan on a node pool takes the pool's requirements and
    tolerations instead, which make its provisioner create the node.

    The product is pinned with the label that named it on the inventory's nodes (GPU feature
    discovery's, a cloud accelerator label or the instance type) and every value of that label
    naming the product; nodes of one product named by different labels are pinned by the label
    most of them carry (GPU feature discovery's on a tie).
    """
    pool = inventory.pool_named(plan.node_pool, plan.gpu_product) if plan.node_pool and inventory else None
    if pool is not None:
        return Placement(
            gpus=plan.gpus_per_replica // plan.nodes_per_replica,
            node_requirements=pool.node_requirements,
            tolerations=(dict(GPU_TOLERATION), *pool.tolerations),
        )
    requirements = []
    if plan.gpu_product:
        counts = inventory.label_counts(plan.gpu_product) if inventory is not None else {}
        key = max(counts, key=lambda k: (counts[k], k == PRODUCT_LABEL), default=PRODUCT_LABEL)
        values = label_values(key, plan.gpu_product) or (plan.gpu_product,)
        requirements.append({"key": key, "operator": "In", "values": list(values)})
    return Placement(
        gpus=plan.gpus_per_replica // plan.nodes_per_replica,
        node_requirements=tuple(requirements),
        tolerations=(dict(GPU_TOLERATION),),
    )
