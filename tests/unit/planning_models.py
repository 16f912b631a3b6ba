"""config.json fixtures for GPU planning tests, built from the published model configs."""

from __future__ import annotations

from typing import Any

from specdeploy.modelinfo import ModelInfo

QWEN3_30B_A3B = "Qwen/Qwen3-30B-A3B-Instruct-2507"
QWEN3_CODER_30B_A3B = "Qwen/Qwen3-Coder-30B-A3B-Instruct"
QWEN3_32B = "Qwen/Qwen3-32B"
LLAMA_33_70B = "meta-llama/Llama-3.3-70B-Instruct"
REDHAT_QWEN3_30B_SPECULATOR = "RedHatAI/Qwen3-30B-A3B-Instruct-2507-speculator.eagle3"
SGLANG_CODER_DRAFT = "sgl-project/SGLang-EAGLE3-Qwen3-Coder-30B-A3B-Instruct"


def _qwen3_moe(max_pos: int = 262144) -> dict[str, Any]:
    return {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "num_hidden_layers": 48,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "vocab_size": 151936,
        "max_position_embeddings": max_pos,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 768,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "rope_scaling": None,
    }


def qwen3_30b_a3b(weights_bytes: int | None = 61_100_000_000) -> ModelInfo:
    return ModelInfo(QWEN3_30B_A3B, None, _qwen3_moe(), "inline", weights_bytes=weights_bytes)


def qwen3_30b_a3b_fp8() -> ModelInfo:
    config = _qwen3_moe() | {
        "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}
    }
    return ModelInfo(QWEN3_30B_A3B + "-FP8", None, config, "inline")


def qwen3_coder_30b_a3b() -> ModelInfo:
    return ModelInfo(QWEN3_CODER_30B_A3B, None, _qwen3_moe(), "inline", weights_bytes=61_100_000_000)


def qwen3_32b(weights_bytes: int | None = 65_500_000_000) -> ModelInfo:
    config = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": 5120,
        "intermediate_size": 25600,
        "num_hidden_layers": 64,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    return ModelInfo(QWEN3_32B, None, config, "inline", weights_bytes=weights_bytes)


def llama_33_70b(weights_bytes: int | None = 141_100_000_000) -> ModelInfo:
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "rope_scaling": {
            "factor": 8.0,
            "high_freq_factor": 4.0,
            "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    return ModelInfo(LLAMA_33_70B, None, config, "inline", weights_bytes=weights_bytes)


def _draft_layer(intermediate: int) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 2048,
        "intermediate_size": intermediate,
        "num_hidden_layers": 1,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "vocab_size": 151936,
        "max_position_embeddings": 2048,
        "torch_dtype": "bfloat16",
    }


def redhat_qwen3_30b_speculator() -> ModelInfo:
    """speculators format: the draft layer's config nested in transformer_layer_config."""
    config = {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "speculators_version": "0.1.0",
        "transformer_layer_config": _draft_layer(6144),
        "draft_vocab_size": 32000,
        "target_hidden_size": None,
        "norm_before_residual": True,
        "speculators_config": {
            "algorithm": "eagle3",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
            "default_proposal_method": "greedy",
            "verifier": {"name_or_path": QWEN3_30B_A3B, "architectures": ["Qwen3MoeForCausalLM"]},
        },
        "torch_dtype": "bfloat16",
    }
    return ModelInfo(REDHAT_QWEN3_30B_SPECULATOR, None, config, "inline")


def sglang_coder_draft() -> ModelInfo:
    """SpecForge layout: a one-layer llama config with the EAGLE-3 architecture name."""
    config = _draft_layer(12288) | {"architectures": ["LlamaForCausalLMEagle3"], "draft_vocab_size": 32000}
    return ModelInfo(SGLANG_CODER_DRAFT, None, config, "inline")
