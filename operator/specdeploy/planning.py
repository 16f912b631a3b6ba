"""GPU planning: how many GPUs of which product one replica needs, and why.

Pure functions over the spec, the models' config.json and a GPU inventory: the operator calls
``plan`` on every reconcile and ``specdeploy plan`` calls it offline, so both always agree.

Memory model, per GPU of a replica at tensor-parallel size TP (all sizes in GiB = 2**30 bytes):

    weights / TP                      verifier weights; embeddings and lm_head are sharded too
  + speculator / draft TP             the whole draft sits on rank 0 when its TP is 1
  + KV cache per token x tokens       tokens = maxModelLen x minConcurrentSequences
  + 2 GiB runtime reserve             CUDA context, cuBLAS/NCCL workspaces, CUDA graphs,
                                      activation peak of the engine's profiling run
  <= GPU memory x gpuMemoryUtilization

KV cache per token and GPU = layers x ceil(KV heads / TP) x head dim x 2 (K and V) x dtype bytes,
for the verifier plus the draft's own layers (KV heads are replicated once TP exceeds them).
Verifier weights are the safetensors total when known, else parameters x bytes per parameter
computed from config.json (see ``parameter_count``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Literal

from specdeploy import api
from specdeploy.gpus import (
    GIB,
    GPU_RESOURCE,
    PRODUCT_LABEL,
    GpuNode,
    Inventory,
    ProductCapacity,
    display_name,
    gpu_table,
    known_aliases,
    lookup_gpu,
    same_gpu,
)
from specdeploy.metadata import ModelMetadata

AUTO_TENSOR_SIZES = (1, 2, 4, 8)
# Default context when spec.maxModelLen is unset: the model's own limit, capped here. Long-context
# models (Qwen3 MoE: 262144) would otherwise reserve ~24 GiB of KV cache per sequence and make
# every plan several times larger than typical chat or coding traffic needs.
DEFAULT_MAX_MODEL_LEN = 32768
RUNTIME_RESERVE_GIB = 2.0
WeightsSource = Literal["metadata", "config"]
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
# rope_scaling types for which vLLM multiplies max_position_embeddings by the factor.
_NON_EXTENDING_ROPE = {"su", "longrope", "llama3", "default", "mrope"}


class Reason(StrEnum):
    """Stable reason codes, used as the Schedulable condition's reason."""

    PLANNED = "Planned"
    NO_NODE_FITS = "NoNodeFits"
    INVALID_TENSOR_PARALLEL_SIZE = "InvalidTensorParallelSize"
    INVALID_DRAFT_TENSOR_PARALLEL_SIZE = "InvalidDraftTensorParallelSize"
    UNKNOWN_GPU_PRODUCT = "UnknownGpuProduct"
    INVALID_MAX_MODEL_LEN = "InvalidMaxModelLen"
    INCOMPLETE_MODEL_CONFIG = "IncompleteModelConfig"


class IncompleteConfigError(ValueError):
    """config.json lacks a field the memory model needs."""


@dataclass(frozen=True)
class ModelShape:
    """The config.json fields that size a transformer decoder."""

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    intermediate_size: int
    tie_word_embeddings: bool
    num_experts: int
    moe_intermediate_size: int
    moe_layers: int
    shared_expert_intermediate_size: int
    max_position_embeddings: int | None


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language-model part of a config (multimodal configs nest it under text_config)."""
    text = config.get("text_config")
    return text if isinstance(text, Mapping) else config


def _required(config: Mapping[str, Any], *names: str) -> int:
    for name in names:
        value = config.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    raise IncompleteConfigError(f"config.json has no {' or '.join(names)}")


def model_shape(config: Mapping[str, Any]) -> ModelShape:
    """Read the sizing fields of a (verifier or single-layer draft) config."""
    cfg = _text_config(config)
    hidden = _required(cfg, "hidden_size")
    layers = _required(cfg, "num_hidden_layers")
    heads = _required(cfg, "num_attention_heads")
    kv_heads = cfg.get("num_key_value_heads") or heads
    head_dim = cfg.get("head_dim") or hidden // heads
    experts = int(cfg.get("num_experts") or cfg.get("num_local_experts") or cfg.get("n_routed_experts") or 0)
    intermediate = int(cfg.get("intermediate_size") or 0)
    moe_intermediate = int(cfg.get("moe_intermediate_size") or intermediate)
    moe_layers = 0
    if experts:
        dense_only = set(cfg.get("mlp_only_layers") or ())
        step = int(cfg.get("decoder_sparse_step") or 1)
        first_dense = int(cfg.get("first_k_dense_replace") or 0)
        moe_layers = sum(
            1 for i in range(layers) if i not in dense_only and (i + 1) % step == 0 and i >= first_dense
        )
    shared = int(cfg.get("shared_expert_intermediate_size") or 0)
    shared += int(cfg.get("n_shared_experts") or 0) * moe_intermediate
    max_pos = cfg.get("max_position_embeddings")
    return ModelShape(
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=int(kv_heads),
        head_dim=int(head_dim),
        vocab_size=_required(cfg, "vocab_size"),
        intermediate_size=intermediate,
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        num_experts=experts,
        moe_intermediate_size=moe_intermediate,
        moe_layers=moe_layers,
        shared_expert_intermediate_size=shared,
        max_position_embeddings=int(max_pos) if isinstance(max_pos, int) else None,
    )


def parameter_count(shape: ModelShape) -> int:
    """Parameters of a decoder-only transformer with GQA attention and gated (SwiGLU) MLPs.

    embeddings (vocab x hidden, twice unless tied)
    + per layer: attention hidden x head_dim x (2 x heads + 2 x KV heads) + 2 norms
      + dense MLP 3 x hidden x intermediate, or for MoE layers
        experts x 3 x hidden x moe_intermediate + router hidden x experts
        + shared experts 3 x hidden x shared_intermediate.
    Biases and q/k norms are ignored (well under 0.1 %).
    """
    h = shape.hidden_size
    embeddings = shape.vocab_size * h * (1 if shape.tie_word_embeddings else 2)
    attention = h * shape.head_dim * (2 * shape.num_heads + 2 * shape.num_kv_heads) + 2 * h
    dense_mlp = 3 * h * shape.intermediate_size
    moe_mlp = shape.num_experts * (3 * h * shape.moe_intermediate_size + h)
    moe_mlp += 3 * h * shape.shared_expert_intermediate_size
    dense_layers = shape.num_layers - shape.moe_layers
    return embeddings + shape.num_layers * attention + dense_layers * dense_mlp + shape.moe_layers * moe_mlp


def bytes_per_parameter(config: Mapping[str, Any]) -> float:
    """Bytes per weight: the quantisation's bits, else 2 (engines serve fp32 checkpoints as bf16)."""
    quant = config.get("quantization_config")
    if isinstance(quant, Mapping):
        method = str(quant.get("quant_method", "")).lower()
        bits = quant.get("bits") or quant.get("w_bit")
        if isinstance(bits, int):
            return bits / 8
        if "fp8" in method:
            return 1.0
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    return 1.0 if "float8" in dtype else 2.0


def fp8_block_sizes(config: Mapping[str, Any]) -> tuple[int, ...]:
    """The FP8 weight block sizes ([128, 128] for block-quantised checkpoints), else ()."""
    quant = config.get("quantization_config")
    if not isinstance(quant, Mapping) or "fp8" not in str(quant.get("quant_method", "")).lower():
        return ()
    blocks = quant.get("weight_block_size")
    if not isinstance(blocks, Sequence):
        return ()
    return tuple(sorted({int(b) for b in blocks}))


def is_eagle3_draft(config: Mapping[str, Any]) -> bool:
    architectures = config.get("architectures") or []
    return (
        config.get("speculators_model_type") == "eagle3"
        or "transformer_layer_config" in config
        or "draft_vocab_size" in config
        or any("Eagle3" in str(a) for a in architectures)
    )


def _draft_layer_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    layer = config.get("transformer_layer_config")
    return layer if isinstance(layer, Mapping) else config


def draft_parameter_count(config: Mapping[str, Any]) -> int:
    """Parameters of an EAGLE-3 draft (speculators or SpecForge/SGLang layout).

    Its decoder layer attends over [embedding; hidden state], so q/k/v take 2 x hidden inputs; an
    fc layer fuses three verifier hidden states (3 x target hidden -> hidden); the lm_head maps to
    the draft vocabulary. The embedding (verifier vocabulary) is counted although some
    checkpoints share the verifier's: the estimate stays on the safe side by < 1 GiB.
    """
    shape = model_shape(_draft_layer_config(config))
    h = shape.hidden_size
    target_hidden = config.get("target_hidden_size") or h
    draft_vocab = int(config.get("draft_vocab_size") or shape.vocab_size)
    qkv = 2 * h * shape.head_dim * (shape.num_heads + 2 * shape.num_kv_heads)
    layer = qkv + shape.num_heads * shape.head_dim * h + 3 * h * shape.intermediate_size + 3 * h
    return shape.num_layers * layer + 3 * int(target_hidden) * h + shape.vocab_size * h + h * draft_vocab


def model_context_limit(config: Mapping[str, Any]) -> int | None:
    """The longest context the engine accepts for this model (max_position_embeddings x rope factor)."""
    cfg = _text_config(config)
    max_pos = cfg.get("max_position_embeddings")
    if not isinstance(max_pos, int):
        return None
    rope = cfg.get("rope_scaling")
    if isinstance(rope, Mapping):
        rope_type = str(rope.get("rope_type") or rope.get("type") or "default")
        factor = rope.get("factor")
        if rope_type not in _NON_EXTENDING_ROPE and isinstance(factor, int | float) and factor > 1:
            return int(max_pos * factor)
    return max_pos


@dataclass(frozen=True)
class PerGpu:
    """Memory one GPU of a replica needs, in GiB."""

    weights: float
    speculator: float
    kv_cache: float
    reserve: float

    @property
    def total(self) -> float:
        return self.weights + self.speculator + self.kv_cache + self.reserve


@dataclass(frozen=True)
class MemoryEstimate:
    """Everything that sizes a replica, independent of the GPU it lands on."""

    verifier: ModelShape
    weights_bytes: int
    weights_source: WeightsSource
    speculator: ModelShape | None
    speculator_bytes: int
    kv_dtype_bytes: int
    max_model_len: int
    sequences: int
    utilization: float
    reserve_gib: float = RUNTIME_RESERVE_GIB

    @property
    def tokens(self) -> int:
        return self.max_model_len * self.sequences

    def kv_bytes_per_token(self, tp: int, draft_tp: int) -> int:
        """KV cache bytes per token on the most loaded GPU (rank 0, which holds a TP-1 draft)."""
        per_token = _kv_per_token(self.verifier, tp, self.kv_dtype_bytes)
        if self.speculator is not None:
            per_token += _kv_per_token(self.speculator, draft_tp, self.kv_dtype_bytes)
        return per_token

    def per_gpu(self, tp: int, draft_tp: int) -> PerGpu:
        return PerGpu(
            weights=self.weights_bytes / tp / GIB,
            speculator=self.speculator_bytes / draft_tp / GIB,
            kv_cache=self.kv_bytes_per_token(tp, draft_tp) * self.tokens / GIB,
            reserve=self.reserve_gib,
        )

    def kv_cache_gib(self, tp: int, draft_tp: int) -> float:
        """KV cache of the whole replica for ``tokens``, replicated KV heads included."""
        verifier = _kv_per_token(self.verifier, tp, self.kv_dtype_bytes) * tp
        draft = 0
        if self.speculator is not None:
            draft = _kv_per_token(self.speculator, draft_tp, self.kv_dtype_bytes) * draft_tp
        return (verifier + draft) * self.tokens / GIB

    def min_gpu_gib(self, tp: int, draft_tp: int) -> float:
        """The smallest GPU memory that holds one shard at this utilisation."""
        return self.per_gpu(tp, draft_tp).total / self.utilization


def _kv_per_token(shape: ModelShape, tp: int, dtype_bytes: int) -> int:
    return shape.num_layers * math.ceil(shape.num_kv_heads / tp) * shape.head_dim * 2 * dtype_bytes


def kv_cache_dtype_bytes(spec: api.SpeculativeDeploymentSpec) -> int:
    """1 for an FP8 KV cache (vLLM --kv-cache-dtype fp8*), else 2 (the bf16/fp16 activations)."""
    vllm = spec.engine.vllm
    if spec.engine.name == "vllm" and vllm is not None and (vllm.kv_cache_dtype or "auto").startswith("fp8"):
        return 1
    return 2


def estimate_memory(
    spec: api.SpeculativeDeploymentSpec,
    verifier: ModelMetadata,
    speculator: ModelMetadata | None,
    max_model_len: int,
) -> MemoryEstimate:
    """The replica's memory model; raises IncompleteConfigError when config.json is too sparse."""
    shape = model_shape(verifier.config)
    source: WeightsSource
    if verifier.weights_bytes:
        weights, source = verifier.weights_bytes, "metadata"
    else:
        weights = int(parameter_count(shape) * bytes_per_parameter(verifier.config))
        source = "config"
    draft_shape: ModelShape | None = None
    draft_bytes = 0
    if speculator is not None:
        draft_shape = model_shape(_draft_layer_config(speculator.config))
        if speculator.weights_bytes:
            draft_bytes = speculator.weights_bytes
        else:
            count = draft_parameter_count(speculator.config) if is_eagle3_draft(speculator.config) else (
                parameter_count(draft_shape)
            )
            draft_bytes = int(count * bytes_per_parameter(speculator.config))
    return MemoryEstimate(
        verifier=shape,
        weights_bytes=weights,
        weights_source=source,
        speculator=draft_shape,
        speculator_bytes=draft_bytes,
        kv_dtype_bytes=kv_cache_dtype_bytes(spec),
        max_model_len=max_model_len,
        sequences=spec.parallelism.min_concurrent_sequences,
        utilization=spec.gpu_memory_utilization,
    )


def tensor_parallel_violations(
    shape: ModelShape, tp: int, fp8_blocks: tuple[int, ...] = (), model: str = "the model"
) -> list[str]:
    """Why the engines cannot shard this model ``tp`` ways (empty when they can).

    vLLM and SGLang both shard attention heads evenly, replicate KV heads once TP exceeds them,
    and need each rank's slice of an FP8 block-quantised MoE intermediate to be whole blocks.
    """
    problems = []
    if shape.num_heads % tp:
        problems.append(
            f"tensor-parallel size {tp} does not divide the {shape.num_heads} attention heads of {model}"
        )
    kv = shape.num_kv_heads
    if tp >= kv and tp % kv:
        problems.append(f"tensor-parallel size {tp} is not a multiple of the {kv} KV heads of {model}")
    if tp < kv and kv % tp:
        problems.append(f"tensor-parallel size {tp} does not divide the {kv} KV heads of {model}")
    if shape.num_experts and fp8_blocks:
        inter = shape.moe_intermediate_size
        for block in fp8_blocks:
            if inter % tp or (inter // tp) % block:
                problems.append(
                    f"moe_intermediate_size {inter} / {tp} is not a multiple of the FP8 block {block} of "
                    f"{model} (use a lower tensor-parallel size or expert parallelism)"
                )
                break
    return problems


def draft_tp_violation(spec: api.SpeculativeDeploymentSpec, tp: int) -> str | None:
    """The engine rule on the draft's TP: vLLM takes 1 or the verifier's, SGLang only the verifier's."""
    draft_tp = _explicit_draft_tp(spec)
    if draft_tp is None or draft_tp == tp:
        return None
    if spec.engine.name == "vllm":
        if draft_tp == 1:
            return None
        return f"vLLM runs the draft at tensor-parallel size 1 or the verifier's ({tp}), not {draft_tp}"
    return f"SGLang runs the draft at the verifier's tensor-parallel size ({tp}), not {draft_tp}"


def _explicit_draft_tp(spec: api.SpeculativeDeploymentSpec) -> int | None:
    return spec.speculator.draft_tensor_parallel_size if spec.speculator else None


def draft_tensor_parallel_size(spec: api.SpeculativeDeploymentSpec, tp: int) -> int:
    """The draft's TP: the user's value, else the verifier's (both engines' default)."""
    return _explicit_draft_tp(spec) or tp


@dataclass(frozen=True)
class Alternative:
    """One (product, TP) option the planner weighed, and its verdict."""

    tensor_parallel_size: int
    gpu_product: str | None
    fits: bool
    reason: str


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


def _fails_on(cap: ProductCapacity, tp: int, draft_tp: int, estimate: MemoryEstimate) -> str | None:
    """Why one replica at ``tp`` does not fit a node of this product, or None when it does."""
    if cap.max_gpus_per_node < tp:
        return f"needs {tp} GPUs on one node; at most {cap.max_gpus_per_node} allocatable"
    if cap.memory_gib is None:
        return "GPU memory unknown (no nvidia.com/gpu.memory label and not in the built-in table)"
    per_gpu = estimate.per_gpu(tp, draft_tp)
    usable = cap.memory_gib * estimate.utilization
    if per_gpu.total > usable:
        return f"needs {_gib(per_gpu.total)} per GPU ({_breakdown(per_gpu)}); {_gib(usable)} usable"
    return None


def _preference(cap: ProductCapacity, tp: int, fp8_checkpoint: bool) -> tuple[int, bool, int, str]:
    """Fewest GPUs per replica, then native FP8 for FP8 checkpoints, then the smallest GPU that fits."""
    native_fp8 = cap.gpu_type.fp8 if cap.gpu_type else False
    return (tp, fp8_checkpoint and not native_fp8, cap.memory_mib or 0, cap.product)


def plan(
    spec: api.SpeculativeDeploymentSpec,
    verifier: ModelMetadata,
    speculator: ModelMetadata | None,
    inventory: Inventory,
) -> PlanOutcome:
    """Choose the tensor-parallel size and GPU product of one replica, never overriding the user.

    ``tensor: auto`` takes the smallest size in 1, 2, 4, 8 that the engine can shard the model
    into, that fits in memory and that one node of the product can host; an explicit size is only
    checked. Among products that fit, the fewest GPUs per replica wins, then (for FP8 checkpoints)
    native FP8 support, then the smallest GPU memory, which keeps big GPUs free for big models.
    """
    config = verifier.config  # quantization_config and torch_dtype sit at the top level
    model = verifier.model_id
    limit = model_context_limit(verifier.config)
    if spec.max_model_len is not None:
        if limit is not None and spec.max_model_len > limit:
            return PlanOutcome(
                False,
                Reason.INVALID_MAX_MODEL_LEN,
                f"maxModelLen {spec.max_model_len} exceeds the {limit} tokens {model} supports",
            )
        max_model_len = spec.max_model_len
    else:
        max_model_len = min(limit or DEFAULT_MAX_MODEL_LEN, DEFAULT_MAX_MODEL_LEN)
    try:
        estimate = estimate_memory(spec, verifier, speculator, max_model_len)
    except IncompleteConfigError as exc:
        return PlanOutcome(False, Reason.INCOMPLETE_MODEL_CONFIG, f"cannot size the models: {exc}")

    fp8_blocks = fp8_block_sizes(config)
    explicit = spec.parallelism.tensor if isinstance(spec.parallelism.tensor, int) else None
    sizes = (explicit,) if explicit is not None else AUTO_TENSOR_SIZES
    alternatives: list[Alternative] = []
    valid: list[int] = []
    draft_only = False
    for tp in sizes:
        problems = tensor_parallel_violations(estimate.verifier, tp, fp8_blocks, model)
        draft_problem = draft_tp_violation(spec, tp)
        if draft_problem is None and speculator is not None and estimate.speculator is not None:
            problems += tensor_parallel_violations(
                estimate.speculator, draft_tensor_parallel_size(spec, tp), (), speculator.model_id
            )
        elif draft_problem is not None:
            draft_only = draft_only or not problems
            problems.append(draft_problem)
        if problems:
            alternatives.append(Alternative(tp, None, False, "; ".join(problems)))
        else:
            valid.append(tp)
    if not valid:
        reason = (
            Reason.INVALID_DRAFT_TENSOR_PARALLEL_SIZE if draft_only else Reason.INVALID_TENSOR_PARALLEL_SIZE
        )
        message = alternatives[0].reason if explicit is not None else (
            "no tensor-parallel size in 1, 2, 4, 8 works: "
            + "; ".join(f"{a.tensor_parallel_size}: {a.reason}" for a in alternatives)
        )
        return PlanOutcome(False, reason, message, None, tuple(alternatives), estimate)

    nodes = list(inventory.nodes)
    capacities = inventory.products()
    wanted = spec.parallelism.gpu_product
    if wanted:
        capacities = [c for c in capacities if same_gpu(c.product, wanted)]
        nodes = [n for n in nodes if same_gpu(n.product, wanted)]
        if not capacities:
            if lookup_gpu(wanted) is None:
                return PlanOutcome(
                    False,
                    Reason.UNKNOWN_GPU_PRODUCT,
                    f"unknown GPU product {wanted!r}: name a product present in the cluster "
                    f"({', '.join(c.product for c in inventory.products()) or 'none'}) or an alias "
                    f"({known_aliases()})",
                    None,
                    tuple(alternatives),
                    estimate,
                )
            present = ", ".join(c.product for c in inventory.products()) or "none"
            return PlanOutcome(
                False,
                Reason.NO_NODE_FITS,
                f"{_no_fit_need(estimate, spec, valid, nodes)}; no schedulable node has "
                f"{display_name(wanted)} GPUs ({wanted}); products present: {present}",
                None,
                tuple(alternatives),
                estimate,
            )

    fp8_checkpoint = bool(fp8_blocks) or bytes_per_parameter(config) == 1.0
    fitting: list[tuple[tuple[int, bool, int, str], ProductCapacity, int]] = []
    for cap in capacities:
        for tp in valid:
            problem = _fails_on(cap, tp, draft_tensor_parallel_size(spec, tp), estimate)
            alternatives.append(Alternative(tp, cap.product, problem is None, problem or "fits"))
            if problem is None:
                fitting.append((_preference(cap, tp, fp8_checkpoint), cap, tp))
                break

    if not fitting:
        largest = _largest_node(nodes)
        where = (
            f"largest allocatable: {largest.gpus} x {display_name(largest.product)}"
            if largest
            else "no schedulable node has allocatable nvidia.com/gpu"
        )
        return PlanOutcome(
            False,
            Reason.NO_NODE_FITS,
            f"{_no_fit_need(estimate, spec, valid, nodes)}; {where}",
            None,
            tuple(alternatives),
            estimate,
        )

    _, cap, tp = min(fitting, key=lambda item: item[0])
    draft_tp = draft_tensor_parallel_size(spec, tp)
    per_gpu = estimate.per_gpu(tp, draft_tp)
    alternatives = [
        replace(alt, reason="chosen" if alt.gpu_product == cap.product else "fits; not preferred")
        if alt.fits
        else alt
        for alt in alternatives
    ]
    how = (
        f"tensor {tp} as set" if explicit is not None
        else f"tensor auto: {tp} is the smallest size in 1, 2, 4, 8 that shards and fits"
    )
    choice = (
        f"{cap.display} as set" if wanted else f"{cap.display} preferred (fewest GPUs, then smallest memory)"
    )
    usable = (cap.memory_gib or 0.0) * estimate.utilization
    reason_text = (
        f"{how}; {choice}; per GPU {_breakdown(per_gpu)} = {_gib(per_gpu.total)} of {_gib(usable)} usable"
    )
    result = api.Plan(
        tensor_parallel_size=tp,
        gpu_product=cap.product,
        gpus_per_replica=tp,
        gpu_memory_gib=round(cap.memory_gib or 0.0, 2),
        weights_gib=round(estimate.weights_bytes / GIB, 2),
        speculator_weights_gib=round(estimate.speculator_bytes / GIB, 2) if speculator is not None else None,
        kv_cache_gib=round(estimate.kv_cache_gib(tp, draft_tp), 2),
        max_model_len=max_model_len,
        reason=reason_text,
    )
    return PlanOutcome(True, Reason.PLANNED, reason_text, result, tuple(alternatives), estimate)


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


def placement(plan: api.Plan) -> dict[str, Any]:
    """What the plan imposes on an engine pod; the pod builder merges it with spec.scheduling.

    ``gpus``: the nvidia.com/gpu request and limit (= GPUs per replica); ``matchExpressions``:
    node-selector requirements to AND into every required nodeSelectorTerm (the GPU product);
    ``tolerations``: the GPU nodes' taint (nvidia.com/gpu, any value, NoSchedule).
    """
    expressions = []
    if plan.gpu_product:
        expressions.append({"key": PRODUCT_LABEL, "operator": "In", "values": [plan.gpu_product]})
    return {
        "gpus": plan.gpus_per_replica,
        "matchExpressions": expressions,
        "tolerations": [dict(GPU_TOLERATION)],
    }
