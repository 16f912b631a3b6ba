"""Replicas larger than one node: planning across nodes, the engines' multi-node launch, the
LeaderWorkerSet and Service that run it, and the condition without LeaderWorkerSet (no cluster)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from planning_models import LLAMA_33_70B, llama_33_70b, qwen3_30b_a3b
from specdeploy import api, children, engines, pipeline, planning
from specdeploy.children.labels import selector_labels
from specdeploy.children.leaderworkerset import LEADER_SELECTOR, ROLE_LABEL
from specdeploy.cli import main
from specdeploy.modelinfo import ModelResolver
from specdeploy.planning import Reason
from support.paths import REPO

EXAMPLE_405B = REPO / "manifests" / "examples" / "llama-3.1-405b-instruct-eagle3.yaml"
H100_NODES = "h100-80gb:8x4"


def spec(model: str, **fields: Any) -> api.SpeculativeDeploymentSpec:
    return api.SpeculativeDeploymentSpec.model_validate({"verifier": {"model": model}, **fields})


def plan_of(the_spec: api.SpeculativeDeploymentSpec, verifier: Any, gpus: str = H100_NODES) -> Any:
    return planning.plan(the_spec, verifier, None, planning.parse_gpus_flag(gpus))


def plan_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], gpus: str, **changes: Any
) -> tuple[int, dict[str, Any]]:
    """``.plan`` of ``specdeploy plan -o json`` of the 405B example with ``changes`` merged into its spec."""
    document = yaml.safe_load(EXAMPLE_405B.read_text())
    for key, value in changes.items():
        document["spec"][key] = {**document["spec"].get(key, {}), **value}
    path = tmp_path / "cr.yaml"
    path.write_text(yaml.safe_dump(document))
    code = main(["plan", "-f", str(path), "--gpus", gpus, "-o", "json"])
    out = capsys.readouterr().out
    return code, json.loads(out)["plan"] or {}


# --- the 405B example: 2 nodes in bf16, 1 in FP8, on 8 x H100 80GB nodes ---------------------


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example names its speculator by a path relative to the repository root."""
    monkeypatch.chdir(REPO)


def test_405b_bf16_takes_two_h100_nodes_one_stage_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """811.7 GB of weights: 94.5 GiB per GPU on one 8-GPU node (71.7 usable), 47.2 over two."""
    code, plan = plan_json(tmp_path, capsys, "h100-80gb:8x2")
    assert code == 0
    assert (plan["nodesPerReplica"], plan["tensorParallelSize"], plan["pipelineParallelSize"]) == (2, 8, 2)
    assert plan["gpusPerReplica"] == 16
    assert plan["weightsGiB"] == pytest.approx(755.96)
    assert "47.2 weights + 1.6 speculator + 2.0 KV cache + 2.0 reserve = 52.9 GiB" in plan["reason"]


def test_405b_fp8_fits_one_h100_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, plan = plan_json(
        tmp_path, capsys, "h100-80gb:8x2", verifier={"model": "meta-llama/Llama-3.1-405B-Instruct-FP8"}
    )
    assert code == 0
    assert (plan["nodesPerReplica"], plan["tensorParallelSize"], plan["pipelineParallelSize"]) == (1, 8, 1)
    assert "56.7 weights" in plan["reason"]


def test_405b_on_sglang_spans_nodes_with_tensor_parallelism(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, plan = plan_json(tmp_path, capsys, "h100-80gb:8x2", engine={"name": "sglang"})
    assert code == 0
    assert (plan["nodesPerReplica"], plan["tensorParallelSize"], plan["pipelineParallelSize"]) == (2, 16, 1)


def test_405b_with_one_node_in_the_cluster_says_how_many_it_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "-f", str(EXAMPLE_405B), "--gpus", "h100-80gb:8"]) == 1
    out = capsys.readouterr().out
    assert "NoNodeFits" in out
    assert "or needs 2 nodes with 8 allocatable H100 80GB GPUs" in out
    assert "the cluster has 1" in out


# --- the planner's rules ---------------------------------------------------------------------


def test_a_replica_that_fits_one_node_stays_on_one() -> None:
    plan = plan_of(spec(LLAMA_33_70B), llama_33_70b()).plan
    assert (plan.nodes_per_replica, plan.pipeline_parallel_size) == (1, 1)


def test_explicit_nodes_split_a_replica_that_would_fit_one() -> None:
    outcome = plan_of(spec(LLAMA_33_70B, parallelism={"nodes": 2}), llama_33_70b())
    plan = outcome.plan
    assert (plan.nodes_per_replica, plan.tensor_parallel_size, plan.pipeline_parallel_size) == (2, 8, 2)
    assert plan.reason.startswith("nodes 2 as set (8 GPUs each, tensor 8 within each node, pipeline 2")


def test_explicit_pipeline_one_spans_nodes_with_tensor_parallelism() -> None:
    plan = plan_of(spec(LLAMA_33_70B, parallelism={"nodes": 2, "pipeline": 1}), llama_33_70b()).plan
    assert (plan.nodes_per_replica, plan.tensor_parallel_size, plan.pipeline_parallel_size) == (2, 16, 1)


def test_pipeline_stages_are_refused_where_vllm_cannot_relay_eagle3_states() -> None:
    outcome = plan_of(spec("Qwen/Qwen3-30B-A3B-Instruct-2507", parallelism={"pipeline": 2}), qwen3_30b_a3b())
    assert outcome.reason is Reason.NO_NODE_FITS and outcome.plan is None
    assert "vLLM runs EAGLE-3 across pipeline stages only for Llama, Qwen2 and Qwen3 dense" in outcome.message
    assert "Qwen3MoeForCausalLM" in outcome.message


def test_sglang_pipeline_stages_are_refused() -> None:
    the_spec = spec(LLAMA_33_70B, parallelism={"pipeline": 2}, engine={"name": "sglang"})
    outcome = plan_of(the_spec, llama_33_70b())
    assert not outcome.fits
    assert "SGLang spans nodes with tensor parallelism: set parallelism.pipeline to 1" in outcome.message


def test_pipeline_must_match_the_nodes() -> None:
    outcome = plan_of(spec(LLAMA_33_70B, parallelism={"nodes": 4, "pipeline": 2}), llama_33_70b())
    assert "pipeline size 2 must be 1 or the replica's 4 nodes" in outcome.message


def test_a_stage_holds_its_share_of_layers_and_the_last_holds_the_draft() -> None:
    estimate = planning.estimate_memory(spec(LLAMA_33_70B), llama_33_70b(), None, 32768)
    one, two = estimate.per_gpu(8, 8, 1), estimate.per_gpu(8, 8, 2)
    assert two.weights == pytest.approx(one.weights / 2)
    assert two.kv_cache == pytest.approx(one.kv_cache / 2)  # 80 layers: 40 per stage


@pytest.mark.parametrize("count", ["0", "9", "true"])
def test_node_counts_outside_one_to_eight_are_refused(count: str) -> None:
    with pytest.raises(ValueError, match=r"parallelism\.nodes must be auto or 1 to 8"):
        spec(LLAMA_33_70B, parallelism={"nodes": yaml.safe_load(count)})


# --- the children of a multi-node resource ---------------------------------------------------


def desired(the_spec: dict[str, Any], leader_worker_sets: bool = True) -> pipeline.Desired:
    body = {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "metadata": {"name": "llama", "namespace": "ai"},
        "spec": the_spec,
    }
    inventory = planning.parse_gpus_flag(H100_NODES)
    return pipeline.compute(body, ModelResolver(), inventory, leader_worker_sets=leader_worker_sets)


LLAMA_ON_TWO_NODES = {"verifier": {"model": LLAMA_33_70B}, "parallelism": {"nodes": 2}, "replicas": 2}


def test_a_multi_node_plan_renders_a_leader_worker_set_and_no_deployment() -> None:
    result = desired(LLAMA_ON_TWO_NODES)
    assert not result.blocked and result.child("Deployment") is None
    assert result.child("LeaderWorkerSet") is not None
    lws = result.child("LeaderWorkerSet")
    assert (lws["apiVersion"], lws["kind"]) == ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
    group = lws["spec"]["leaderWorkerTemplate"]
    assert lws["spec"]["replicas"] == 2 and group["size"] == 2
    assert group["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert lws["spec"]["startupPolicy"] == "LeaderCreated"  # the leader waits for its workers
    leader = group["leaderTemplate"]["spec"]["containers"][0]
    worker = group["workerTemplate"]["spec"]["containers"][0]
    assert leader["command"][leader["command"].index("--node-rank") + 1] == "0"
    assert worker["command"][worker["command"].index("--node-rank") + 1] == "$(LWS_WORKER_INDEX)"
    assert "--headless" in worker["command"] and "--headless" not in leader["command"]
    assert {"startupProbe", "readinessProbe", "livenessProbe", "ports"} <= set(leader)
    assert not {"startupProbe", "readinessProbe", "livenessProbe", "ports"} & set(worker)
    for pod in (leader, worker):
        assert pod["resources"]["limits"][api.GPU_RESOURCE] == "8"  # one node's GPUs per pod
        assert pod["command"][pod["command"].index("--master-addr") + 1] == "$(LWS_LEADER_ADDRESS)"
    assert group["leaderTemplate"]["metadata"]["labels"][ROLE_LABEL] == "leader"
    assert group["workerTemplate"]["metadata"]["labels"][ROLE_LABEL] == "worker"
    assert "prometheus.io/scrape" not in group["workerTemplate"]["metadata"].get("annotations", {})


def test_the_service_selects_leaders_and_the_budget_every_pod() -> None:
    result = desired(LLAMA_ON_TWO_NODES)
    assert result.child("Service") is not None and result.child("PodDisruptionBudget") is not None
    pods = selector_labels("llama")
    assert result.child("Service")["spec"]["selector"] == {**pods, **LEADER_SELECTOR}
    assert result.child("PodDisruptionBudget")["spec"]["selector"]["matchLabels"] == pods


def test_a_pod_of_a_group_holds_its_share_of_the_weights_in_memory() -> None:
    result = desired(LLAMA_ON_TWO_NODES)
    one_node = desired({**LLAMA_ON_TWO_NODES, "parallelism": {"nodes": 1, "tensor": 8}})
    assert result.child("LeaderWorkerSet") is not None and one_node.child("Deployment") is not None
    group = result.child("LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]
    split = group["leaderTemplate"]["spec"]["containers"][0]["resources"]["requests"]["memory"]
    whole = one_node.child("Deployment")["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
    # 131.4 + 4.6 GiB of weights: 68 per pod over 2 nodes, 136 on one; both + 16 shm + 4 + 2 x 8
    assert (split, whole["memory"]) == ("104Gi", "172Gi")


def test_without_leader_worker_set_a_multi_node_plan_is_a_condition_with_the_install_command() -> None:
    result = desired(LLAMA_ON_TWO_NODES, leader_worker_sets=False)
    assert result.blocked and result.child("Deployment") is None and result.child("LeaderWorkerSet") is None
    assert result.reason == "LeaderWorkerSetNotInstalled"
    schedulable = next(c for c in result.conditions if c.type == api.SCHEDULABLE)
    assert (schedulable.status, schedulable.reason) == ("False", "LeaderWorkerSetNotInstalled")
    assert children.LWS_INSTALL in schedulable.message
    assert "set spec.parallelism.nodes to 1" in schedulable.message
    assert result.status.plan is not None and result.status.plan.nodes_per_replica == 2


def test_without_leader_worker_set_a_one_node_plan_is_unaffected() -> None:
    result = desired({**LLAMA_ON_TWO_NODES, "parallelism": {}}, leader_worker_sets=False)
    assert not result.blocked and result.child("Deployment") is not None


@pytest.mark.parametrize("flag", ["--nnodes", "--headless", "-pp", "--master-addr"])
def test_engine_args_may_not_repeat_the_multi_node_launch(flag: str) -> None:
    the_spec = spec(LLAMA_33_70B, engine={"name": "vllm", "args": [flag, "2"]})
    errors = engines.validate(the_spec)
    assert any("spec.parallelism" in e.message for e in errors), errors
