"""Parallelism rules: which tensor-parallel sizes the engines can shard a model (and its draft) into.

The one place for these rules: the planner weighs sizes with them and the engines' ``validate``
reports them on the fields a user set.
"""

from __future__ import annotations

from specdeploy import api
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
