"""Planning on capacity a provisioner can create: Karpenter NodePools and declared node pools."""

from __future__ import annotations

from typing import Any

import pytest

from planning_models import LLAMA_33_70B, QWEN3_30B_A3B, llama_33_70b, qwen3_30b_a3b
from specdeploy import api, planning
from specdeploy.planning import Reason
from specdeploy.planning.pools import (
    NODEPOOL_LABEL,
    PoolError,
    declared_pools,
    karpenter_pools,
    parse_declared_pools,
)

L4_TEMPLATE_LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-L4",
    "nvidia.com/gpu.count": "4",
    "nvidia.com/gpu.memory": "23034",
}
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
TEAM_TAINT = {"key": "team", "value": "inference", "effect": "NoSchedule"}


def nodepool(
    name: str = "gpu-l4",
    labels: dict[str, str] | None = None,
    requirements: list[dict[str, Any]] | None = None,
    limit: str | None = "16",
    used: str | None = None,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """A karpenter.sh/v1 NodePool as the API returns it."""
    template_spec: dict[str, Any] = {
        "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
        "requirements": requirements or [],
    }
    if taints:
        template_spec["taints"] = taints
    body: dict[str, Any] = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"template": {"metadata": {"labels": dict(labels or {})}, "spec": template_spec}},
    }
    if limit is not None:
        body["spec"]["limits"] = {"cpu": "1000", "nvidia.com/gpu": limit}
    if used is not None:
        body["status"] = {"resources": {"nvidia.com/gpu": used, "nodes": "1"}}
    return body


def gpu_node(name: str, labels: dict[str, str], gpus: str = "4") -> dict[str, Any]:
    allocatable = {"cpu": "48", "memory": "192Gi", "pods": "110", "nvidia.com/gpu": gpus}
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "spec": {},
        "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def spec(**fields: Any) -> api.SpeculativeDeploymentSpec:
    return api.SpeculativeDeploymentSpec.model_validate({"verifier": {"model": QWEN3_30B_A3B}, **fields})


def plan_on(inventory: planning.Inventory, **fields: Any) -> planning.PlanOutcome:
    return planning.plan(spec(**fields), qwen3_30b_a3b(), None, inventory)


def with_karpenter(nodes: list[dict[str, Any]], *pools: dict[str, Any]) -> planning.Inventory:
    found, unusable = karpenter_pools(pools)
    return planning.inventory_from_nodes(nodes).with_pools(found, unusable)


# --- reading NodePools -----------------------------------------------------------------------


def test_a_nodepool_labelled_like_gpu_feature_discovery_gives_its_shape_and_its_bound() -> None:
    (pool,), unusable = karpenter_pools(
        [nodepool(labels=L4_TEMPLATE_LABELS, limit="16", used="4", taints=[TEAM_TAINT])]
    )
    assert unusable == []
    assert (pool.product, pool.gpus, pool.memory_mib) == ("NVIDIA-L4", 4, 23034)
    # 16 GPUs in nodes of 4, those up included: what its nodes use now does not move it.
    assert pool.max_nodes == 4
    assert pool.node_requirements == (
        {"key": NODEPOOL_LABEL, "operator": "In", "values": ["gpu-l4"]},
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-L4"]},
    )
    assert pool.tolerations == (
        {"key": "team", "effect": "NoSchedule", "operator": "Equal", "value": "inference"},
    )


def test_aws_gpu_requirements_name_the_gpu_the_largest_count_and_the_memory() -> None:
    requirements = [
        {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["l4"]},
        {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "In", "values": ["1", "4"]},
        {"key": "karpenter.k8s.aws/instance-gpu-memory", "operator": "In", "values": ["22888"]},
    ]
    (pool,), _ = karpenter_pools([nodepool(requirements=requirements, limit=None)])
    assert (pool.product, pool.gpus, pool.memory_mib, pool.max_nodes) == ("NVIDIA-L4", 4, 22888, None)
    assert pool.node_requirements[1] == {
        "key": "karpenter.k8s.aws/instance-gpu-name",
        "operator": "In",
        "values": ["l4"],
    }


def test_a_cpu_nodepool_is_no_gpu_pool_and_a_gpu_pool_without_a_count_says_what_to_add() -> None:
    amd64 = {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}
    cpu = nodepool("general", requirements=[amd64])
    del cpu["spec"]["limits"]
    vague = nodepool("gpus", labels={"nvidia.com/gpu.product": "NVIDIA-L4"})
    pools, unusable = karpenter_pools([cpu, vague])
    assert pools == []
    assert [u.name for u in unusable] == ["gpus"]
    assert "nvidia.com/gpu.count" in unusable[0].describe()
    outcome = plan_on(planning.inventory_from_nodes([]).with_pools(pools, unusable))
    assert outcome.reason is Reason.GPU_NODE_NOT_RECOGNIZED
    assert "Karpenter NodePool gpus" in outcome.message


# --- planning on them ------------------------------------------------------------------------


def test_with_no_gpu_node_up_the_pair_is_planned_on_the_pool_and_its_pods_pinned_to_it() -> None:
    inventory = with_karpenter([], nodepool(labels=L4_TEMPLATE_LABELS, taints=[TEAM_TAINT]))
    outcome = plan_on(inventory)
    assert outcome.fits and outcome.plan is not None, outcome.message
    assert outcome.reason is Reason.PLANNED_ON_NODE_POOL
    assert (outcome.plan.node_pool, outcome.plan.gpu_product) == ("gpu-l4", "NVIDIA-L4")
    assert outcome.plan.tensor_parallel_size == 4
    assert "no node up fits" in outcome.message and "Karpenter NodePool gpu-l4" in outcome.message
    placed = planning.placement(outcome.plan, inventory)
    assert placed.node_requirements[0] == {"key": NODEPOOL_LABEL, "operator": "In", "values": ["gpu-l4"]}
    team = {"key": "team", "effect": "NoSchedule", "operator": "Equal", "value": "inference"}
    assert team in placed.tolerations


def test_a_node_up_that_fits_is_preferred_to_the_pool() -> None:
    h100 = gpu_node(
        "h100-0",
        {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559"},
        gpus="8",
    )
    outcome = plan_on(with_karpenter([h100], nodepool(labels=L4_TEMPLATE_LABELS)))
    assert outcome.reason is Reason.PLANNED and outcome.plan is not None
    assert outcome.plan.node_pool is None and outcome.plan.gpu_product == "NVIDIA-H100-80GB-HBM3"


def test_the_plan_and_the_pod_template_stay_the_same_once_the_pool_created_its_node() -> None:
    pool = nodepool(labels=L4_TEMPLATE_LABELS)
    before = with_karpenter([], pool)
    created = gpu_node("gpu-l4-abcde", {**L4_TEMPLATE_LABELS, NODEPOOL_LABEL: "gpu-l4"})
    after = with_karpenter([created], {**pool, "status": {"resources": {"nvidia.com/gpu": "4"}}})
    first = plan_on(before)
    assert first.plan is not None and first.plan.node_pool == "gpu-l4"
    second = planning.plan(spec(), qwen3_30b_a3b(), None, after, on_pool=first.plan.node_pool)
    assert second.plan == first.plan and second.message == first.message
    assert planning.placement(first.plan, before) == planning.placement(second.plan, after)
    # A resource never planned on the pool (one running before the operator read pools) takes
    # the pool's node as any node up: its plan, and pods, stay what they were.
    assert plan_on(after).reason is Reason.PLANNED


def test_several_values_naming_one_gpu_are_one_pool_entry_pinned_with_all_of_them() -> None:
    requirements = [
        {
            "key": "node.kubernetes.io/instance-type",
            "operator": "In",
            "values": ["p5.4xlarge", "p5.48xlarge"],
        },
        {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "In", "values": ["1", "8"]},
    ]
    (pool,), _ = karpenter_pools([nodepool(requirements=requirements)])
    assert (pool.product, pool.gpus) == ("NVIDIA-H100-80GB-HBM3", 8)
    assert pool.node_requirements[1]["values"] == ["p5.4xlarge", "p5.48xlarge"]


def test_a_paused_pool_is_not_planned_on() -> None:
    """A limit of 0 GPUs (how a NodePool is paused) allows no node, rather than no limit."""
    outcome = plan_on(with_karpenter([], nodepool(labels=L4_TEMPLATE_LABELS, limit="0")))
    assert not outcome.fits and outcome.reason is Reason.NO_NODE_FITS
    assert outcome.message.endswith(
        "no node pool can create one (Karpenter NodePool gpu-l4 (nodes of 4 x NVIDIA-L4, at most 0 nodes)): "
        "their limits allow no more nodes"
    )


def test_a_gpu_product_no_node_has_is_planned_on_the_pool_that_has_it() -> None:
    inventory = with_karpenter([], nodepool(labels=L4_TEMPLATE_LABELS))
    outcome = plan_on(inventory, parallelism={"gpuProduct": "l4"})
    assert outcome.reason is Reason.PLANNED_ON_NODE_POOL


# --- declared pools ----------------------------------------------------------------------------


GKE_POOL = {
    "name": "l4-pool",
    "gpuProduct": "l4",
    "gpusPerNode": 4,
    "maxNodes": 2,
    "nodeSelector": {"cloud.google.com/gke-nodepool": "l4-pool"},
}


def test_a_declared_pool_pins_pods_with_its_node_selector_and_keeps_them_there() -> None:
    (pool,) = declared_pools(parse_declared_pools([GKE_POOL]))
    assert (pool.product, pool.gpus, pool.memory_mib, pool.max_nodes) == ("NVIDIA-L4", 4, 23034, 2)
    first = plan_on(planning.inventory_from_nodes([]).with_pools([pool]))
    assert first.reason is Reason.PLANNED_ON_NODE_POOL and first.plan is not None
    selector = ({"key": "cloud.google.com/gke-nodepool", "operator": "In", "values": ["l4-pool"]},)
    up = gpu_node(
        "gke-l4-1",
        {"cloud.google.com/gke-nodepool": "l4-pool", "cloud.google.com/gke-accelerator": "nvidia-l4"},
    )
    inventory = planning.inventory_from_nodes([up]).with_pools([pool])
    kept = planning.plan(spec(), qwen3_30b_a3b(), None, inventory, on_pool="l4-pool")
    assert kept.plan == first.plan
    assert planning.placement(kept.plan, inventory).node_requirements == selector  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("entry", "names"),
    [
        ({**GKE_POOL, "gpusPerNode": 0}, "node pool 0.gpusPerNode"),
        ({k: v for k, v in GKE_POOL.items() if k != "nodeSelector"}, "node pool 0.nodeSelector"),
        ({**GKE_POOL, "gpuProduct": "NVIDIA-X9"}, "gpuProduct 'NVIDIA-X9' is not in the built-in table"),
    ],
)
def test_a_bad_declared_pool_is_refused_naming_the_field(entry: dict[str, Any], names: str) -> None:
    with pytest.raises(PoolError, match=names):
        parse_declared_pools([entry])


def test_a_replica_larger_than_one_node_takes_as_many_pool_nodes_as_the_limit_allows() -> None:
    """Llama-3.3-70B needs three 4 x L4 nodes: a limit of 12 GPUs allows them, 8 does not."""
    wanted = api.SpeculativeDeploymentSpec.model_validate(
        {"verifier": {"model": LLAMA_33_70B}, "parallelism": {"nodes": "auto"}}
    )
    roomy = with_karpenter([], nodepool(labels=L4_TEMPLATE_LABELS, limit="12"))
    outcome = planning.plan(wanted, llama_33_70b(), None, roomy)
    assert outcome.reason is Reason.PLANNED_ON_NODE_POOL and outcome.plan is not None
    assert (outcome.plan.nodes_per_replica, outcome.plan.node_pool) == (3, "gpu-l4")
    tight = with_karpenter([], nodepool(labels=L4_TEMPLATE_LABELS, limit="8"))
    assert planning.plan(wanted, llama_33_70b(), None, tight).reason is Reason.NO_NODE_FITS
