"""The memory model of one replica: what each GPU must hold at a tensor-parallel size.

Memory model, per GPU of a replica at tensor-parallel size TP and PP pipeline stages (all sizes
in GiB = 2**30 bytes):

    weights / (TP x PP)               verifier weights; embeddings and lm_head are sharded too,
                                      layers split evenly over the stages
  + speculator / draft TP             the whole draft sits on rank 0 when its TP is 1, and on
                                      the last pipeline stage (the one that samples)
  + KV cache per token x tokens       tokens = maxModelLen x minConcurrentSequences
  + 2 GiB runtime reserve             CUDA context, cuBLAS/NCCL workspaces, CUDA graphs,
                                      activation peak of the engine's profiling run
  <= GPU memory x gpuMemoryUtilization

KV cache per token and GPU = layers of the stage (ceil(layers / PP)) x ceil(KV heads / TP) x
head dim x 2 (K and V) x dtype bytes, for the verifier plus the draft's own layers (KV heads are
replicated once TP exceeds them). The last stage, which holds the draft, is the one sized.
Verifier weights are the safetensors total when known, else parameters x bytes per parameter
computed from config.json (see ``parameter_count``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from specdeploy import api
from specdeploy.enginefacts import facts_for
from specdeploy.modelinfo import ModelInfo
from specdeploy.modelinfo.config import draft_layer_config, is_eagle3_draft
from specdeploy.planning.gpus import GIB
from specdeploy.planning.shape import (
    ModelShape,
    bytes_per_parameter,
    draft_parameter_count,
    model_shape,
    parameter_count,
)

RUNTIME_RESERVE_GIB = 2.0
WeightsSource = Literal["metadata", "config"]


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

    def kv_bytes_per_token(self, tp: int, draft_tp: int, pp: int = 1) -> int:
        """KV cache bytes per token on the most loaded GPU (rank 0 of the last stage, which holds
        a TP-1 draft)."""
        per_token = _kv_per_token(self.verifier, tp, self.kv_dtype_bytes, pp)
        if self.speculator is not None:
            per_token += _kv_per_token(self.speculator, draft_tp, self.kv_dtype_bytes)
        return per_token

    def per_gpu(self, tp: int, draft_tp: int, pp: int = 1) -> PerGpu:
        return PerGpu(
            weights=self.weights_bytes / (tp * pp) / GIB,
            speculator=self.speculator_bytes / draft_tp / GIB,
            kv_cache=self.kv_bytes_per_token(tp, draft_tp, pp) * self.tokens / GIB,
            reserve=self.reserve_gib,
        )

    def kv_cache_gib(self, tp: int, draft_tp: int) -> float:
        """KV cache of the whole replica for ``tokens``, replicated KV heads included."""
        verifier = _kv_per_token(self.verifier, tp, self.kv_dtype_bytes) * tp
        draft = 0
        if self.speculator is not None:
            draft = _kv_per_token(self.speculator, draft_tp, self.kv_dtype_bytes) * draft_tp
        return (verifier + draft) * self.tokens / GIB

    def min_gpu_gib(self, tp: int, draft_tp: int, pp: int = 1) -> float:
        """The smallest GPU memory that holds one shard at this utilisation."""
        return self.per_gpu(tp, draft_tp, pp).total / self.utilization


def _kv_per_token(shape: ModelShape, tp: int, dtype_bytes: int, pp: int = 1) -> int:
    layers = math.ceil(shape.num_layers / pp)
    return layers * math.ceil(shape.num_kv_heads / tp) * shape.head_dim * 2 * dtype_bytes


def kv_cache_dtype_bytes(spec: api.SpeculativeDeploymentSpec) -> int:
    """1 for an FP8 KV cache (vLLM --kv-cache-dtype fp8*), else 2 (the bf16/fp16 activations).

    Only vLLM's options carry one; it counts when the engine's facts list it, so vLLM options
    left on another engine's spec change nothing.
    """
    options = spec.engine.vllm
    dtype = (options.kv_cache_dtype if options is not None else None) or "auto"
    return 1 if dtype in facts_for(spec.engine.name).kv_cache_dtypes and dtype.startswith("fp8") else 2


def estimate_memory(
    spec: api.SpeculativeDeploymentSpec,
    verifier: ModelInfo,
    speculator: ModelInfo | None,
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
        draft_shape = model_shape(draft_layer_config(speculator.config))
        if speculator.weights_bytes:
            draft_bytes = speculator.weights_bytes
        else:
            eagle3 = is_eagle3_draft(speculator.config)
            count = draft_parameter_count(speculator.config) if eagle3 else parameter_count(draft_shape)
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
