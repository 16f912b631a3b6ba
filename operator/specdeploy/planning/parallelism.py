"""Parallelism rules: which tensor-parallel sizes the engines can shard a model (and its draft) into.

The one place for these rules: the planner weighs sizes with them and the engines' ``validate``
reports them on the fields a user set.
"""

from __future__ import annotations

from collections.abc import Sequence

from specdeploy import api
from specdeploy.enginefacts import facts_for
from specdeploy.planning.shape import ModelShape


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


def allowed_draft_tp(engine: api.EngineName, tp: int) -> tuple[int, ...]:
    """The draft TP sizes ``engine`` runs beside a verifier sharded ``tp`` ways.

    vLLM also runs the draft unsharded (TP 1, on rank 0); SGLang shards it like the verifier.
    """
    return (1, tp) if facts_for(engine).draft_tp_one else (tp,)


def explicit_draft_tp(spec: api.SpeculativeDeploymentSpec) -> int | None:
    """The draft TP the user set, or None to take the engine's default."""
    return spec.speculator.draft_tensor_parallel_size if spec.speculator else None


def draft_tp_violation(spec: api.SpeculativeDeploymentSpec, tp: int) -> str | None:
    """Why the spec's draft TP cannot run beside a verifier at ``tp`` (None when it can)."""
    draft_tp = explicit_draft_tp(spec)
    allowed = allowed_draft_tp(spec.engine.name, tp)
    if draft_tp is None or draft_tp in allowed:
        return None
    engine = facts_for(spec.engine.name).display_name
    if len(allowed) > 1:
        return (
            f"{engine} runs the draft at tensor-parallel size {allowed[0]} or the verifier's ({tp}), "
            f"not {draft_tp}"
        )
    return f"{engine} runs the draft at the verifier's tensor-parallel size ({tp}), not {draft_tp}"


def draft_tensor_parallel_size(spec: api.SpeculativeDeploymentSpec, tp: int) -> int:
    """The draft's TP: the user's value, else the verifier's (both engines' default)."""
    return explicit_draft_tp(spec) or tp


def pipeline_capable(engine: api.EngineName, architectures: Sequence[str]) -> bool:
    """Whether ``engine`` runs an EAGLE-3 draft beside this verifier split into pipeline stages.

    vLLM keeps the draft on the last stage and relays the verifier's auxiliary hidden states to
    it. SGLang's documented multi-node form spans the nodes with tensor parallelism, so it is
    planned that way.
    """
    pipeline = facts_for(engine).pipeline
    return pipeline is not None and any(a in pipeline.architectures for a in architectures)


def pipeline_violation(
    engine: api.EngineName, architectures: Sequence[str], pipeline: int, nodes: int, model: str
) -> str | None:
    """Why a replica cannot run ``pipeline`` stages over ``nodes`` nodes (None when it can)."""
    if pipeline == 1:
        return None
    if pipeline != nodes:
        return f"pipeline size {pipeline} must be 1 or the replica's {nodes} nodes (one stage per node)"
    if pipeline_capable(engine, architectures):
        return None
    facts = facts_for(engine)
    if facts.pipeline is None:
        return f"{facts.display_name} spans nodes with tensor parallelism: set parallelism.pipeline to 1"
    named = ", ".join(architectures) or "an unknown architecture"
    return (
        f"{facts.display_name} runs EAGLE-3 across pipeline stages only for {facts.pipeline.described} "
        f"verifiers, not {named} ({model}): set parallelism.pipeline to 1"
    )
