"""GPU planning over the issue's matrix: models x GPUs, explicit and auto tensor parallelism."""

from __future__ import annotations

from typing import Any

import pytest

from planning_models import (
    LLAMA_33_70B,
    QWEN3_30B_A3B,
    QWEN3_32B,
    llama_33_70b,
    qwen3_30b_a3b,
    qwen3_30b_a3b_fp8,
    qwen3_32b,
    redhat_qwen3_30b_speculator,
    sglang_coder_draft,
)
from specdeploy import api, planning
from specdeploy.modelinfo import ModelInfo
from specdeploy.planning import Reason
from specdeploy.planning.offline import offline_inventory

GIB = 1 << 30


def spec(model: str = QWEN3_30B_A3B, **fields: Any) -> api.SpeculativeDeploymentSpec:
    return api.SpeculativeDeploymentSpec.model_validate({"verifier": {"model": model}, **fields})


def run(
    the_spec: api.SpeculativeDeploymentSpec,
    verifier: ModelInfo,
    speculator: ModelInfo | None = None,
    inventory: str | None = None,
) -> planning.PlanOutcome:
    cluster = planning.parse_gpus_flag(inventory) if inventory else offline_inventory()
    return planning.plan(the_spec, verifier, speculator, cluster)


def planned(outcome: planning.PlanOutcome) -> api.Plan:
    assert outcome.fits, outcome.message
    assert outcome.reason is Reason.PLANNED and outcome.plan is not None
    return outcome.plan


# --- the memory model ------------------------------------------------------------------------


def test_parameter_counts_match_published_sizes() -> None:
    for metadata, published in ((qwen3_30b_a3b(), 30.5e9), (qwen3_32b(), 32.8e9), (llama_33_70b(), 70.6e9)):
        count = planning.parameter_count(planning.model_shape(metadata.config))
        assert count == pytest.approx(published, rel=0.01), metadata.model_id


def test_eagle3_draft_parameters() -> None:
    """~350 MB published for the SGLang draft without its embedding; ours counts it (safe side)."""
    count = planning.draft_parameter_count(sglang_coder_draft().config)
    embedding = 151936 * 2048
    assert (count - embedding) * 2 == pytest.approx(350e6, rel=0.1)


def test_kv_cache_per_token_formula() -> None:
    estimate = planning.estimate_memory(spec(), qwen3_30b_a3b(), None, 32768)
    assert estimate.kv_bytes_per_token(1, 1) == 48 * 4 * 128 * 2 * 2 == 96 * 1024
    # 4 KV heads: TP 2 halves them per GPU, TP 8 replicates each head on two GPUs
    assert estimate.kv_bytes_per_token(2, 2) == 48 * 2 * 128 * 2 * 2
    assert estimate.kv_bytes_per_token(8, 8) == 48 * 1 * 128 * 2 * 2
    assert estimate.kv_cache_gib(8, 8) == pytest.approx(2 * estimate.kv_cache_gib(1, 1))


def test_fp8_kv_cache_halves_kv_bytes() -> None:
    fp8 = spec(engine={"name": "vllm", "vllm": {"kvCacheDtype": "fp8"}})
    assert (
        planning.estimate_memory(fp8, qwen3_30b_a3b(), None, 1024).kv_bytes_per_token(1, 1)
        == 48 * 4 * 128 * 2
    )


def test_weights_from_config_when_safetensors_size_unknown() -> None:
    estimate = planning.estimate_memory(spec(QWEN3_32B), qwen3_32b(weights_bytes=None), None, 1024)
    assert estimate.weights_source == "config"
    assert estimate.weights_bytes == pytest.approx(65.5e9, rel=0.01)
    fp8 = planning.estimate_memory(spec(), qwen3_30b_a3b_fp8(), None, 1024)
    assert fp8.weights_bytes == pytest.approx(30.5e9, rel=0.01)


def test_weights_from_safetensors_when_known() -> None:
    estimate = planning.estimate_memory(spec(), qwen3_30b_a3b(weights_bytes=12345), None, 1024)
    assert (estimate.weights_bytes, estimate.weights_source) == (12345, "metadata")


# --- the matrix --------------------------------------------------------------------


def test_qwen3_30b_a3b_on_h100_80gb() -> None:
    plan = planned(run(spec(), qwen3_30b_a3b(), redhat_qwen3_30b_speculator(), "h100-80gb:8"))
    # the seed's TP 1: 2 x 32768-token sequences fit next to 57 GiB of weights on one GPU
    assert (plan.tensor_parallel_size, plan.gpu_product, plan.gpus_per_replica) == (
        1,
        "NVIDIA-H100-80GB-HBM3",
        1,
    )
    assert plan.max_model_len == 32768
    assert plan.weights_gib == pytest.approx(56.9, abs=0.05)
    assert plan.kv_cache_gib == pytest.approx(6.12, abs=0.01)


def test_qwen3_30b_a3b_needs_two_h100_for_more_sequences() -> None:
    more = spec(parallelism={"minConcurrentSequences": 4})
    plan = planned(run(more, qwen3_30b_a3b(), redhat_qwen3_30b_speculator(), "h100-80gb:8"))
    assert plan.tensor_parallel_size == 2


def test_qwen3_30b_a3b_on_a100_40gb() -> None:
    plan = planned(run(spec(), qwen3_30b_a3b(), redhat_qwen3_30b_speculator(), "a100-40gb:8"))
    # TP 2: 28.5 weights + 0.4 speculator + 3.1 KV cache + 2.0 reserve = 33.9 of 36.0 GiB usable
    assert (plan.tensor_parallel_size, plan.gpu_product) == (2, "NVIDIA-A100-SXM4-40GB")


def test_qwen3_30b_a3b_on_l4() -> None:
    plan = planned(run(spec(), qwen3_30b_a3b(), redhat_qwen3_30b_speculator(), "l4:4"))
    assert (plan.tensor_parallel_size, plan.gpu_product, plan.gpu_memory_gib) == (4, "NVIDIA-L4", 22.49)


def test_qwen3_30b_a3b_on_too_few_l4_says_what_would_fit() -> None:
    outcome = run(spec(), qwen3_30b_a3b(), redhat_qwen3_30b_speculator(), "l4:2")
    assert not outcome.fits and outcome.reason is Reason.NO_NODE_FITS and outcome.plan is None
    # TP 2 needs 33.9 GiB per GPU (20.2 usable); TP 4 needs 18.0 GiB / 0.9 = 20.0 GiB of GPU memory,
    # which two such nodes would give (vLLM runs a Qwen3 MoE verifier's EAGLE-3 without stages)
    assert outcome.message == (
        "needs 4 x >= 20 GiB GPUs on one node; largest allocatable: 2 x L4 24GB; or needs 2 nodes "
        "with 2 allocatable L4 24GB GPUs (tensor 4 across the nodes); the cluster has 1"
    )


def test_qwen3_32b_on_default_cluster() -> None:
    plan = planned(run(spec(QWEN3_32B), qwen3_32b()))
    assert (plan.tensor_parallel_size, plan.gpu_product) == (2, "NVIDIA-H100-80GB-HBM3")
    assert plan.kv_cache_gib == pytest.approx(16.0)  # 64 layers x 8 KV heads x 128 x 2 x 2 B x 65536 tokens


def test_llama_33_70b_on_default_cluster() -> None:
    plan = planned(run(spec(LLAMA_33_70B), llama_33_70b()))
    assert (plan.tensor_parallel_size, plan.gpu_product, plan.gpus_per_replica) == (
        4,
        "NVIDIA-H100-80GB-HBM3",
        4,
    )
    assert plan.weights_gib == pytest.approx(131.4, abs=0.05)


def test_llama_33_70b_on_two_a100_40gb_is_no_node_fits() -> None:
    outcome = run(spec(LLAMA_33_70B), llama_33_70b(), None, "a100-40gb:2")
    assert outcome.reason is Reason.NO_NODE_FITS
    # TP 4 needs 39.9 GiB per GPU (44.3 GiB of GPU memory); TP 8: 16.4 + 2.5 KV + 2.0 = 20.9 / 0.9.
    # Across nodes, Llama runs one pipeline stage per node: 2 stages need 32.9 weights + 5.0 KV +
    # 2.0 = 39.9 GiB per GPU (36.0 usable: no); 3 stages fit memory but need 3 such nodes.
    assert outcome.message == (
        "needs 8 x >= 24 GiB GPUs on one node; largest allocatable: 2 x A100 40GB; or needs 3 nodes "
        "with 2 allocatable A100 40GB GPUs (tensor 2 within each node, pipeline 3 across the nodes); "
        "the cluster has 1"
    )


def test_explicit_tp_3_names_the_heads() -> None:
    outcome = run(spec(parallelism={"tensor": 3}), qwen3_30b_a3b())
    assert outcome.reason is Reason.INVALID_TENSOR_PARALLEL_SIZE and outcome.plan is None
    assert "does not divide the 32 attention heads" in outcome.message


def test_tp_larger_than_any_node_is_rejected_on_one_node() -> None:
    outcome = run(spec(parallelism={"tensor": 16, "nodes": 1}), qwen3_30b_a3b())
    assert outcome.reason is Reason.NO_NODE_FITS
    assert outcome.message.startswith("needs 16 x >= ")
    assert outcome.message.endswith("largest allocatable: 8 x H100 80GB")
    assert all("needs 16 GPUs on one node" in a.reason for a in outcome.alternatives)


def test_tp_larger_than_any_node_spans_two_nodes() -> None:
    """With nodes auto, a TP no node has spans two 8-GPU nodes (vLLM runs a Qwen3 MoE verifier's
    EAGLE-3 only without pipeline stages, so tensor parallelism crosses the nodes)."""
    plan = planned(run(spec(parallelism={"tensor": 16}), qwen3_30b_a3b()))
    layout = (plan.tensor_parallel_size, plan.pipeline_parallel_size, plan.nodes_per_replica)
    assert layout == (16, 1, 2)
    assert plan.gpus_per_replica == 16


def test_explicit_tp_is_never_overridden() -> None:
    # 4 sequences: 72.0 GiB per GPU at TP 1 exceeds an H100's 71.7 usable, so auto takes TP 2
    four = {"minConcurrentSequences": 4}
    auto = planned(run(spec(parallelism=four), qwen3_30b_a3b(), redhat_qwen3_30b_speculator()))
    assert auto.tensor_parallel_size == 2
    too_small = run(spec(parallelism={**four, "tensor": 1}), qwen3_30b_a3b(), redhat_qwen3_30b_speculator())
    assert too_small.reason is Reason.NO_NODE_FITS
    assert too_small.message.startswith("needs 1 x >= 81 GiB GPU on one node")
    assert {a.tensor_parallel_size for a in too_small.alternatives} == {1}
    larger = planned(run(spec(QWEN3_32B, parallelism={"tensor": 8}), qwen3_32b()))
    assert larger.tensor_parallel_size == 8 and "as set" in larger.reason


def test_kv_head_rule() -> None:
    config = dict(qwen3_32b().config, num_attention_heads=48, num_key_value_heads=6)
    odd = ModelInfo("org/odd-kv", None, config, "inline", weights_bytes=10 * GIB)
    shape = planning.model_shape(config)
    assert planning.tensor_parallel_violations(shape, 2) == []
    assert "does not divide the 6 KV heads" in planning.tensor_parallel_violations(shape, 4)[0]
    assert "not a multiple of the 6 KV heads" in planning.tensor_parallel_violations(shape, 8)[0]
    outcome = run(spec("org/odd-kv", parallelism={"tensor": 4}), odd)
    assert outcome.reason is Reason.INVALID_TENSOR_PARALLEL_SIZE


def test_fp8_block_moe_rule() -> None:
    fp8 = qwen3_30b_a3b_fp8()
    outcome = run(spec(parallelism={"tensor": 4}), fp8)
    assert outcome.reason is Reason.INVALID_TENSOR_PARALLEL_SIZE
    assert "moe_intermediate_size 768 / 4" in outcome.message and "FP8 block 128" in outcome.message
    # auto keeps to 1 and 2, so eight L4s cannot help: for 4 sequences 2 x L4 is too small
    # (14.2 weights + 6.0 KV cache + 2.0 reserve = 22.2 GiB per GPU, 20.2 usable)
    on_l4 = run(spec(parallelism={"minConcurrentSequences": 4}), fp8, None, "l4:8")
    assert on_l4.reason is Reason.NO_NODE_FITS
    assert on_l4.message == "needs 2 x >= 25 GiB GPUs on one node; largest allocatable: 8 x L4 24GB"
    assert planned(run(spec(), fp8)).tensor_parallel_size == 1


def test_no_size_works_lists_each() -> None:
    config = dict(qwen3_30b_a3b_fp8().config, moe_intermediate_size=96)
    outcome = run(spec("org/odd-moe"), ModelInfo("org/odd-moe", None, config, "inline"))
    assert outcome.reason is Reason.INVALID_TENSOR_PARALLEL_SIZE
    assert outcome.message.startswith(
        "no tensor-parallel size in 1, 2, 4, 8 works: 1: moe_intermediate_size 96"
    )
    assert [a.tensor_parallel_size for a in outcome.alternatives] == [1, 2, 4, 8]


# --- speculator TP ---------------------------------------------------------------------------


def test_vllm_draft_tp_1_is_allowed_and_sits_on_rank_0() -> None:
    draft_one = spec(speculator={"draftTensorParallelSize": 1}, parallelism={"tensor": 4})
    outcome = run(draft_one, qwen3_30b_a3b(), redhat_qwen3_30b_speculator(), "h100-80gb:8")
    assert outcome.fits and outcome.estimate is not None
    per_gpu = outcome.estimate.per_gpu(4, 1)
    assert per_gpu.speculator == pytest.approx(outcome.estimate.speculator_bytes / GIB)


def test_vllm_draft_tp_must_be_1_or_the_verifiers() -> None:
    bad = spec(speculator={"draftTensorParallelSize": 2}, parallelism={"tensor": 4})
    outcome = run(bad, qwen3_30b_a3b(), redhat_qwen3_30b_speculator())
    assert outcome.reason is Reason.INVALID_DRAFT_TENSOR_PARALLEL_SIZE
    assert "1 or the verifier's (4), not 2" in outcome.message


def test_auto_respects_an_explicit_draft_tp() -> None:
    pinned = spec(speculator={"draftTensorParallelSize": 4})
    plan = planned(run(pinned, qwen3_30b_a3b(), redhat_qwen3_30b_speculator(), "h100-80gb:8"))
    assert plan.tensor_parallel_size == 4


def test_sglang_draft_runs_at_the_verifiers_tp() -> None:
    bad = spec(
        engine={"name": "sglang"}, speculator={"draftTensorParallelSize": 1}, parallelism={"tensor": 8}
    )
    outcome = run(bad, qwen3_30b_a3b(), sglang_coder_draft())
    assert outcome.reason is Reason.INVALID_DRAFT_TENSOR_PARALLEL_SIZE
    assert "SGLang" in outcome.message


# --- GPU product choice ----------------------------------------------------------------------


def test_preference_fewest_gpus_first() -> None:
    plan = planned(run(spec(LLAMA_33_70B), llama_33_70b(), None, "h100-80gb:8,h200:8"))
    assert (plan.tensor_parallel_size, plan.gpu_product) == (2, "NVIDIA-H200")


def test_preference_then_smallest_gpu_that_fits() -> None:
    two = spec(parallelism={"minConcurrentSequences": 2})
    plan = planned(run(two, qwen3_30b_a3b(), None, "h200:8,h100-80gb:8,b200:8"))
    assert (plan.tensor_parallel_size, plan.gpu_product) == (1, "NVIDIA-H100-80GB-HBM3")
    outcome = run(spec(), qwen3_30b_a3b(), redhat_qwen3_30b_speculator())
    verdicts = {(a.gpu_product, a.tensor_parallel_size): a.reason for a in outcome.alternatives}
    assert verdicts[("NVIDIA-H100-80GB-HBM3", 1)] == "chosen"
    assert verdicts[("NVIDIA-A100-SXM4-40GB", 2)] == "fits; not preferred"
    assert verdicts[("NVIDIA-L4", 4)] == "fits; not preferred"
    assert "needs 65.9 GiB per GPU" in verdicts[("NVIDIA-A100-SXM4-40GB", 1)]
    assert "36.0 GiB usable" in verdicts[("NVIDIA-A100-SXM4-40GB", 1)]


def test_preference_native_fp8_for_fp8_checkpoints() -> None:
    # 4 sequences, so that both products fit at the same TP (2 for the FP8 MoE, 4 for Qwen3-32B)
    # and only the FP8 rule separates them: the smaller A100 40GB would win otherwise
    four = {"minConcurrentSequences": 4}
    outcome = run(spec(parallelism=four), qwen3_30b_a3b_fp8(), None, "a100-40gb:8,l40s:8")
    fp8 = planned(outcome)
    assert (fp8.tensor_parallel_size, fp8.gpu_product) == (2, "NVIDIA-L40S")
    verdicts = {(a.gpu_product, a.tensor_parallel_size): a.reason for a in outcome.alternatives}
    assert verdicts[("NVIDIA-A100-SXM4-40GB", 2)] == "fits; not preferred"
    bf16 = planned(run(spec(QWEN3_32B, parallelism=four), qwen3_32b(), None, "a100-40gb:8,l40s:8"))
    assert bf16.gpu_product == "NVIDIA-A100-SXM4-40GB"


@pytest.mark.parametrize("name", ["a100-40gb", "NVIDIA-A100-SXM4-40GB", "A100"])
def test_named_product(name: str) -> None:
    plan = planned(
        run(spec(parallelism={"gpuProduct": name}), qwen3_30b_a3b(), redhat_qwen3_30b_speculator())
    )
    # H100 at TP 1 would be preferred; the named A100 40GB needs TP 2
    assert (plan.tensor_parallel_size, plan.gpu_product) == (2, "NVIDIA-A100-SXM4-40GB")
    assert "A100 40GB as set" in plan.reason


def test_named_product_absent_from_cluster() -> None:
    outcome = run(spec(parallelism={"gpuProduct": "h200"}), qwen3_30b_a3b())
    assert outcome.reason is Reason.NO_NODE_FITS
    assert "no schedulable node has H200 141GB GPUs" in outcome.message


def test_unknown_product() -> None:
    outcome = run(spec(parallelism={"gpuProduct": "tpu-v5e"}), qwen3_30b_a3b())
    assert outcome.reason is Reason.UNKNOWN_GPU_PRODUCT
    assert "h100-80gb" in outcome.message and "NVIDIA-L4" in outcome.message


def test_product_with_unknown_memory_is_rejected_with_reason() -> None:
    mystery = planning.Inventory((planning.inventory.GpuNode("n", "Mystery-GPU", 8, None),))
    outcome = planning.plan(spec(), qwen3_30b_a3b(), None, mystery)
    assert outcome.reason is Reason.NO_NODE_FITS
    assert "GPU memory unknown" in outcome.alternatives[0].reason


def test_empty_inventory() -> None:
    outcome = planning.plan(spec(), qwen3_30b_a3b(), None, planning.Inventory())
    assert outcome.reason is Reason.NO_NODE_FITS
    assert outcome.message.endswith("no schedulable node has allocatable nvidia.com/gpu")


# --- context length ---------------------------------------------------------------------------


def test_max_model_len_default_is_capped_and_reported() -> None:
    assert planned(run(spec(), qwen3_30b_a3b())).max_model_len == planning.DEFAULT_MAX_MODEL_LEN
    short = dict(qwen3_32b().config, max_position_embeddings=4096)
    assert planned(run(spec(QWEN3_32B), ModelInfo(QWEN3_32B, None, short, "inline"))).max_model_len == 4096


def test_user_max_model_len_is_used() -> None:
    plan = planned(run(spec(maxModelLen=8192), qwen3_30b_a3b(), redhat_qwen3_30b_speculator(), "h100-80gb:8"))
    assert (plan.max_model_len, plan.tensor_parallel_size) == (8192, 1)


def test_max_model_len_beyond_the_model_is_rejected() -> None:
    outcome = run(spec(LLAMA_33_70B, maxModelLen=262144), llama_33_70b())
    assert outcome.reason is Reason.INVALID_MAX_MODEL_LEN
    assert "131072" in outcome.message


def test_yarn_rope_scaling_extends_the_limit() -> None:
    config = dict(qwen3_32b().config, rope_scaling={"rope_type": "yarn", "factor": 4.0})
    assert planning.model_context_limit(config) == 163840


def test_incomplete_config() -> None:
    config = {k: v for k, v in qwen3_32b().config.items() if k != "num_attention_heads"}
    outcome = run(spec(QWEN3_32B), ModelInfo(QWEN3_32B, None, config, "inline"))
    assert outcome.reason is Reason.INCOMPLETE_MODEL_CONFIG
    assert "num_attention_heads" in outcome.message


# --- what the plan gives the pod and the status ------------------------------------------


def test_plan_serialises_like_status_plan() -> None:
    plan = planned(run(spec(), qwen3_30b_a3b(), redhat_qwen3_30b_speculator()))
    dumped = plan.model_dump(by_alias=True, exclude_none=True)
    assert set(dumped) == {
        "tensorParallelSize",
        "pipelineParallelSize",
        "nodesPerReplica",
        "gpuProduct",
        "gpusPerReplica",
        "gpuMemoryGiB",
        "weightsGiB",
        "speculatorWeightsGiB",
        "kvCacheGiB",
        "maxModelLen",
        "reason",
    }
    status = api.SpeculativeDeploymentStatus.model_validate({"plan": dumped})
    assert status.plan == plan


def test_placement() -> None:
    plan = planned(run(spec(), qwen3_30b_a3b(), redhat_qwen3_30b_speculator(), "a100-40gb:8"))
    assert planning.placement(plan) == planning.Placement(
        gpus=2,
        node_requirements=(
            {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A100-SXM4-40GB"]},
        ),
        tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},),
    )


def test_placement_pins_with_the_label_that_named_the_product() -> None:
    gke = {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"}
    nodes = [
        {"metadata": {"name": f"gke-{i}", "labels": gke}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}
        for i in range(2)
    ]
    inventory = planning.inventory_from_nodes(nodes)
    plan = planned(planning.plan(spec(), qwen3_30b_a3b(), redhat_qwen3_30b_speculator(), inventory))
    assert plan.gpu_product == "NVIDIA-A100-SXM4-40GB"
    assert planning.placement(plan, inventory).node_requirements == (
        {
            "key": "cloud.google.com/gke-accelerator",
            "operator": "In",
            "values": ["nvidia-a100", "nvidia-tesla-a100"],
        },
    )


def test_unlabelled_gpu_node_names_the_node_and_the_fix() -> None:
    bare = {
        "metadata": {"name": "gpu-7", "labels": {"kubernetes.io/hostname": "gpu-7"}},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}},
    }
    inventory = planning.inventory_from_nodes([bare])
    outcome = planning.plan(spec(parallelism={"gpuProduct": "h100-80gb"}), qwen3_30b_a3b(), None, inventory)
    assert outcome.reason is Reason.GPU_NODE_NOT_RECOGNIZED
    assert "node gpu-7 has 8 allocatable nvidia.com/gpu but no label naming its GPU" in outcome.message
    assert "kubernetes.io/hostname=gpu-7" in outcome.message
    assert "kubectl label node gpu-7 nvidia.com/gpu.product=" in outcome.message


def test_a_pinned_product_is_matched_per_product_not_per_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every pass plans against the same inventory: matching ``gpuProduct`` node by node made a
    rollout's planning grow with resources times nodes."""
    cluster = planning.parse_gpus_flag("h100-80gb:8x400,a100-40gb:8x400")
    matched: list[str] = []
    same_gpu = planning.planner.same_gpu

    def counting(product: str, wanted: str) -> bool:
        matched.append(product)
        return same_gpu(product, wanted)

    monkeypatch.setattr(planning.planner, "same_gpu", counting)
    pinned = spec(parallelism={"gpuProduct": "a100-40gb"})
    for _ in range(3):
        plan = planned(planning.plan(pinned, qwen3_30b_a3b(), redhat_qwen3_30b_speculator(), cluster))
        assert (plan.tensor_parallel_size, plan.gpu_product) == (2, "NVIDIA-A100-SXM4-40GB")
    assert len(matched) == 3 * 2  # two products per pass, whatever the node count
    assert cluster.label_counts("NVIDIA-A100-SXM4-40GB") == {planning.gpus.PRODUCT_LABEL: 400}
    assert len(cluster.nodes_of("NVIDIA-H100-80GB-HBM3")) == 400
