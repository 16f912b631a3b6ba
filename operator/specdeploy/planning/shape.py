"""Model shapes from config.json: the sizing fields, parameter counts and bytes per weight.

The memory model (``planning.memory``) and the parallelism rules (``planning.parallelism``) read
models only through :class:`ModelShape`, so every config.json quirk is handled here once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specdeploy.modelinfo.config import as_int, draft_layer_config, text_config

# rope_scaling types for which vLLM multiplies max_position_embeddings by the factor.
_NON_EXTENDING_ROPE = {"su", "longrope", "llama3", "default", "mrope"}


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


def _required(config: Mapping[str, Any], *names: str) -> int:
    for name in names:
        value = as_int(config.get(name))
        if value is not None and value > 0:
            return value
    raise IncompleteConfigError(f"config.json has no positive integer {' or '.join(names)}")


def _optional(config: Mapping[str, Any], *names: str) -> int:
    """The first of ``names`` that holds a positive integer, else 0 (absent, null or malformed:
    a hand-written override may say anything, and the estimate must not fail on it)."""
    for name in names:
        value = as_int(config.get(name))
        if value is not None and value > 0:
            return value
    return 0


def model_shape(config: Mapping[str, Any]) -> ModelShape:
    """Read the sizing fields of a (verifier or single-layer draft) config."""
    cfg = text_config(config)
    hidden = _required(cfg, "hidden_size")
    layers = _required(cfg, "num_hidden_layers")
    heads = _required(cfg, "num_attention_heads")
    kv_heads = _optional(cfg, "num_key_value_heads") or heads
    head_dim = _optional(cfg, "head_dim") or hidden // heads
    experts = _optional(cfg, "num_experts", "num_local_experts", "n_routed_experts")
    intermediate = _optional(cfg, "intermediate_size")
    moe_intermediate = _optional(cfg, "moe_intermediate_size") or intermediate
    moe_layers = 0
    if experts:
        listed = cfg.get("mlp_only_layers")
        dense_only = set(listed) if isinstance(listed, list) else set()
        step = _optional(cfg, "decoder_sparse_step") or 1
        first_dense = _optional(cfg, "first_k_dense_replace")
        moe_layers = sum(
            1 for i in range(layers) if i not in dense_only and (i + 1) % step == 0 and i >= first_dense
        )
    shared = _optional(cfg, "shared_expert_intermediate_size")
    shared += _optional(cfg, "n_shared_experts") * moe_intermediate
    return ModelShape(
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=_required(cfg, "vocab_size"),
        intermediate_size=intermediate,
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        num_experts=experts,
        moe_intermediate_size=moe_intermediate,
        moe_layers=moe_layers,
        shared_expert_intermediate_size=shared,
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
    if not isinstance(blocks, Sequence) or any(as_int(b) is None for b in blocks):
        return ()
    return tuple(sorted({int(b) for b in blocks}))


def draft_parameter_count(config: Mapping[str, Any]) -> int:
    """Parameters of an EAGLE-3 draft (speculators or SpecForge/SGLang layout).

    Its decoder layer attends over [embedding; hidden state], so q/k/v take 2 x hidden inputs; an
    fc layer fuses three verifier hidden states (3 x target hidden -> hidden); the lm_head maps to
    the draft vocabulary. The embedding (verifier vocabulary) is counted although some
    checkpoints share the verifier's: the estimate stays on the safe side by < 1 GiB.
    """
    shape = model_shape(draft_layer_config(config))
    h = shape.hidden_size
    target_hidden = as_int(config.get("target_hidden_size")) or h
    draft_vocab = as_int(config.get("draft_vocab_size")) or shape.vocab_size
    qkv = 2 * h * shape.head_dim * (shape.num_heads + 2 * shape.num_kv_heads)
    layer = qkv + shape.num_heads * shape.head_dim * h + 3 * h * shape.intermediate_size + 3 * h
    return shape.num_layers * layer + 3 * target_hidden * h + shape.vocab_size * h + h * draft_vocab


def model_context_limit(config: Mapping[str, Any]) -> int | None:
    """The longest context the engine accepts for this model (max_position_embeddings x rope factor)."""
    cfg = text_config(config)
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
