"""What the operator knows about each inference engine, as data: one record per engine.

The planner, the acceptance counters and the metrics reader read these records instead of
asking which engine they are looking at, so an engine that behaves like one of these needs a
record here and a renderer in ``engines/``, nothing else. Rendering and flag validation stay
with each engine in ``engines/``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

from specdeploy import api


class UnknownEngine(ValueError):
    """A name no record describes: a pod or a resource from another release, or a bug upstream."""


@dataclass(frozen=True, slots=True)
class PerStepMetrics:
    """Counters of every verifier step (vLLM's): proposals, proposed tokens, kept tokens, and kept
    tokens by their position in the proposal."""

    families: tuple[str, ...]
    drafts: str
    draft_tokens: str
    accepted: str
    accepted_per_position: str


@dataclass(frozen=True, slots=True)
class PerRequestMetrics:
    """Counts of finished requests (SGLang's), from which the kept drafts are derived, plus the
    scheduler's gauges for the drafts one round proposes."""

    families: tuple[str, ...]
    verify_calls: str
    generation_tokens: str
    requests: str
    draft_tokens_per_round: str
    steps_per_round: str


# How an engine exports its speculative decoding counts; ``families`` are the name prefixes a
# reader of /metrics keeps (an exposition is a hundred times larger than these few lines).
SpecMetrics = PerStepMetrics | PerRequestMetrics


@dataclass(frozen=True, slots=True)
class PipelineSupport:
    """The verifiers an engine runs an EAGLE-3 draft beside while splitting them into pipeline
    stages, and how messages name them."""

    architectures: frozenset[str]
    described: str


@dataclass(frozen=True, slots=True)
class EngineFacts:
    """One engine's behaviour that the layers below its renderer plan and measure by.

    ``draft_tp_one``: the draft may run unsharded (TP 1) as well as at the verifier's TP; without
    it the draft is sharded like the verifier. ``pipeline``: None when the engine spans nodes with
    tensor parallelism only. ``kv_cache_dtypes``: what ``spec.engine.<name>.kvCacheDtype`` may
    choose (an ``fp8`` one stores a byte per value); empty when the KV cache keeps the
    activations' dtype. ``per_batch_size_draft_length``: the engine takes a draft length per
    range of batch sizes in its speculative config.
    """

    name: api.EngineName
    display_name: str
    draft_tp_one: bool
    pipeline: PipelineSupport | None
    kv_cache_dtypes: tuple[str, ...]
    metrics: SpecMetrics
    per_batch_size_draft_length: bool


VLLM_METRICS = PerStepMetrics(
    families=("vllm:spec_decode_num_",),
    drafts="vllm:spec_decode_num_drafts_total",
    draft_tokens="vllm:spec_decode_num_draft_tokens_total",
    accepted="vllm:spec_decode_num_accepted_tokens_total",
    accepted_per_position="vllm:spec_decode_num_accepted_tokens_per_pos_total",
)

SGLANG_METRICS = PerRequestMetrics(
    families=(
        "sglang:generation_tokens",
        "sglang:num_requests",
        "sglang:spec_verify_calls",
        "sglang:spec_num_",
    ),
    verify_calls="sglang:spec_verify_calls_total",
    generation_tokens="sglang:generation_tokens_total",
    requests="sglang:num_requests_total",
    draft_tokens_per_round="sglang:spec_num_draft_tokens",
    steps_per_round="sglang:spec_num_steps",
)

VLLM = EngineFacts(
    name="vllm",
    display_name="vLLM",
    draft_tp_one=True,
    # ``supports_aux_hidden_states_over_pp`` in vLLM's model code: Llama, and Qwen2, whose model
    # Qwen3's dense one extends; vLLM refuses EAGLE-3 over pipeline stages for any other verifier.
    pipeline=PipelineSupport(
        frozenset({"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"}),
        "Llama, Qwen2 and Qwen3 dense",
    ),
    kv_cache_dtypes=get_args(api.VllmKvCacheDtype),
    metrics=VLLM_METRICS,
    # ``num_speculative_tokens_per_batch_size`` in ``--speculative-config`` (dynamic speculation).
    per_batch_size_draft_length=True,
)

SGLANG = EngineFacts(
    name="sglang",
    display_name="SGLang",
    draft_tp_one=False,
    # Its documented multi-node form spans the nodes with tensor parallelism.
    pipeline=None,
    kv_cache_dtypes=(),
    metrics=SGLANG_METRICS,
    per_batch_size_draft_length=False,
)

FACTS: dict[str, EngineFacts] = {facts.name: facts for facts in (VLLM, SGLANG)}


def facts_for(name: str) -> EngineFacts:
    """The record of the engine called ``name``; UnknownEngine for any other name."""
    facts = FACTS.get(name)
    if facts is None:
        raise UnknownEngine(f"unknown engine {name!r}; known: {', '.join(FACTS)}")
    return facts
