"""Node file parsing and the Node objects the sandbox creates (no cluster needed)."""

from __future__ import annotations

from collections import Counter

import pytest

from specdeploy import api
from specdeploy.children.sizing import pod_sizing
from specdeploy_sandbox import nodes


def test_default_cluster_has_the_documented_gpu_nodes() -> None:
    specs = nodes.load_node_specs()
    products = Counter(spec.gpu.product if spec.gpu else "cpu" for spec in specs)
    assert products == {
        "NVIDIA-H100-80GB-HBM3": 2, "NVIDIA-A100-SXM4-40GB": 1, "NVIDIA-L4": 2, "SANDBOX-CPU": 1, "cpu": 1,
    }  # fmt: skip
    memory = {spec.gpu.product: (spec.gpu.count, spec.gpu.memory_mib) for spec in specs if spec.gpu}
    assert memory == {
        "NVIDIA-H100-80GB-HBM3": (8, 81559),
        "NVIDIA-A100-SXM4-40GB": (8, 40960),
        "NVIDIA-L4": (4, 23034),
        "SANDBOX-CPU": (3, 4096),
    }
    assert [s.name for s in specs if s.group == "h100"] == ["h100-0", "h100-1"]
    assert [s.name for s in specs if s.engine] == ["engine-0"]


def test_gpu_node_manifest_carries_gfd_labels_capacity_and_taint() -> None:
    spec = nodes.gpu_node("h100-x", "NVIDIA-H100-80GB-HBM3", 8)
    node = nodes.node_manifest(spec)
    labels = node["metadata"]["labels"]
    assert labels["nvidia.com/gpu.present"] == "true"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.memory"] == "81559"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert node["status"]["allocatable"] == node["status"]["capacity"]
    assert node["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]


def test_cpu_node_has_no_gpu_resources_labels_or_taint() -> None:
    [spec] = nodes.parse_node_groups("nodeGroups: [{name: cpu, cpu: 16, memory: 64Gi}]")
    node = nodes.node_manifest(spec)
    assert "nvidia.com/gpu" not in node["status"]["capacity"]
    assert not any(key.startswith("nvidia.com/") for key in node["metadata"]["labels"])
    assert node["spec"]["taints"] == []
    assert node["status"]["capacity"]["cpu"] == "16"


def test_group_options_extra_labels_and_untainted_gpus() -> None:
    text = """
nodeGroups:
  - name: t4
    count: 3
    taint: false
    labels: {zone: a}
    gpu: {product: Tesla-T4, count: 1, memoryMiB: 15360}
"""
    specs = nodes.parse_node_groups(text)
    assert [s.name for s in specs] == ["t4-0", "t4-1", "t4-2"]
    node = nodes.node_manifest(specs[0])
    assert node["spec"]["taints"] == []
    assert node["metadata"]["labels"]["zone"] == "a"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nodes: []", "nodeGroups"),
        ("nodeGroups: [{name: a, gpus: 2}]", "unknown fields"),
        ("nodeGroups: [{name: a, gpu: {product: X, count: 0, memoryMiB: 1}}]", "gpu.count"),
        ("nodeGroups: [{name: a, gpu: {product: X, count: 1}}]", "memoryMiB"),
        ("nodeGroups: [{name: a}, {name: a}]", "duplicate"),
        ("nodeGroups: [{name: a, count: -1}]", "count"),
    ],
)
def test_invalid_node_files_are_rejected_with_the_offending_field(text: str, message: str) -> None:
    with pytest.raises(nodes.NodeFileError, match=message):
        nodes.parse_node_groups(text)


def test_unknown_gpu_product_needs_its_memory() -> None:
    with pytest.raises(nodes.NodeFileError, match="memory"):
        nodes.gpu_node("x", "NVIDIA-Unknown", 2)
    spec = nodes.gpu_node("x", "NVIDIA-Unknown", 2, gpu_memory_mib=1000)
    assert spec.gpu == nodes.GpuSpec("NVIDIA-Unknown", 2, 1000)


def test_every_problem_is_reported_with_its_path_in_the_file() -> None:
    text = """
nodeGroups:
  - {name: ok}
  - {name: bad, taint: "no", labels: {zone: true}, gpu: {product: X, count: 2.0, memoryMiB: 1, mig: 1}}
"""
    with pytest.raises(nodes.NodeFileError) as caught:
        nodes.parse_node_groups(text)
    message = str(caught.value)
    for where in ("nodeGroups[1].taint", "nodeGroups[1].labels.zone", "nodeGroups[1].gpu.count"):
        assert where in message
    assert "nodeGroups[1].gpu: unknown fields ['mig']" in message
    assert "nodeGroups[0]" not in message


def test_numbers_are_accepted_where_the_file_takes_strings() -> None:
    [spec] = nodes.parse_node_groups("nodeGroups: [{name: 7, cpu: 16, memory: 64, labels: {rack: 3}}]")
    assert (spec.name, spec.cpu, spec.memory, spec.labels) == ("7-0", "16", "64", {"rack": "3"})


def test_a_default_gpu_node_takes_one_seed_engine_pod_per_gpu() -> None:
    """add-node's GPU servers have the CPU and memory of real ones: eight pods of the seed pair,
    with the requests the operator derives (4 CPUs, 66Gi), fit on an 8 x H100 node."""
    node = nodes.gpu_node("h", "NVIDIA-H100-80GB-HBM3", 8)
    plan = api.Plan(tensor_parallel_size=1, gpus_per_replica=1, weights_gib=56.9, speculator_weights_gib=1)
    seed = pod_sizing(plan)
    assert (node.cpu, node.memory) == ("192", "2000Gi")
    assert 8 * int(seed.cpu) <= int(node.cpu) and 8 * int(seed.memory.removesuffix("Gi")) <= 2000
