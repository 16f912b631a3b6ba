"""The spec's engine section: which engine serves the pair, its image and its own options
(vLLM's, SGLang's), and the plain environment variables its container gets."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from specdeploy.api import rules
from specdeploy.api.base import ApiModel, EngineName

# vLLM's --kv-cache-dtype values the API accepts; the fp8 ones store a byte per value.
VllmKvCacheDtype = Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]


class EnvVar(ApiModel):
    """A plain environment variable for the engine container (secrets go through modelAccess)."""

    name: str = Field(
        min_length=1, max_length=256, pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$", description="Variable name."
    )
    value: str = Field(default="", max_length=4096, description="Variable value.")


class VllmOptions(ApiModel):
    """Settings that only vLLM understands."""

    enable_expert_parallel: bool | None = Field(
        default=None, description="Pass --enable-expert-parallel (MoE verifiers)."
    )
    kv_cache_dtype: VllmKvCacheDtype | None = Field(
        default=None, description="KV cache data type (--kv-cache-dtype)."
    )


class SglangOptions(ApiModel):
    """Settings that only SGLang understands. Steps come from speculator.numSpeculativeTokens."""

    model_config = ConfigDict(json_schema_extra=rules.schema_extra("spec.engine.sglang"))

    num_steps: int | None = Field(
        default=None,
        ge=1,
        le=16,
        description="--speculative-num-steps; overrides speculator.numSpeculativeTokens.",
    )
    eagle_topk: int | None = Field(default=None, ge=1, le=64, description="--speculative-eagle-topk.")
    num_draft_tokens: int | None = Field(
        default=None, ge=1, le=1024, description="--speculative-num-draft-tokens."
    )
    mem_fraction_static: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description=(
            "--mem-fraction-static. Default: derived from gpuMemoryUtilization, lowered to leave "
            "room for the draft model."
        ),
    )


class Engine(ApiModel):
    """Which inference server runs the pair, and how."""

    model_config = ConfigDict(json_schema_extra=rules.schema_extra("spec.engine"))

    name: EngineName = Field(default="vllm", description="Inference engine: vllm or sglang.")
    image: str | None = Field(
        default=None,
        max_length=512,
        description="Engine container image. Default: the pinned image for the engine.",
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        default="IfNotPresent", description="Pull policy of the engine image."
    )
    args: list[Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=list, max_length=64, description="Extra arguments appended to the engine command."
    )
    env: list[EnvVar] = Field(default_factory=list, max_length=64, description="Extra environment variables.")
    vllm: VllmOptions | None = Field(default=None, description="vLLM-only settings.")
    sglang: SglangOptions | None = Field(default=None, description="SGLang-only settings.")
