"""The built-in GPU table, node-label inventory and the --gpus parser."""

from __future__ import annotations

from typing import Any

import pytest

from specdeploy import planning
from specdeploy.planning import gpus
from specdeploy.planning.offline import offline_inventory


def node(
    name: str,
    product: str | None = "NVIDIA-H100-80GB-HBM3",
    allocatable: str | None = "8",
    memory: str | None = "81559",
    ready: str | None = "True",
    unschedulable: bool = False,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """A Node as the API returns it (camelCase JSON), with GFD labels when a product is given."""
    labels = {"kubernetes.io/hostname": name}
    if product is not None:
        labels |= {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": product,
            "nvidia.com/gpu.count": "8",
        }
    if memory is not None:
        labels["nvidia.com/gpu.memory"] = memory
    allocatable_res = {"cpu": "96", "memory": "1Ti", "pods": "110"}
    if allocatable is not None:
        allocatable_res["nvidia.com/gpu"] = allocatable
    status: dict[str, Any] = {"capacity": dict(allocatable_res), "allocatable": allocatable_res}
    if ready is not None:
        status["conditions"] = [
            {"type": "MemoryPressure", "status": "False"},
            {"type": "Ready", "status": ready, "reason": "KubeletReady"},
        ]
    spec: dict[str, Any] = {
        "taints": taints or [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    }
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": status,
    }


@pytest.mark.parametrize(
    ("name", "product"),
    [
        ("h100-80gb", "NVIDIA-H100-80GB-HBM3"),
        ("H100", "NVIDIA-H100-80GB-HBM3"),
        ("NVIDIA-H100-SXM5-80GB", "NVIDIA-H100-80GB-HBM3"),
        ("h200", "NVIDIA-H200"),
        ("a100-40gb", "NVIDIA-A100-SXM4-40GB"),
        ("a100-80gb", "NVIDIA-A100-SXM4-80GB"),
        ("NVIDIA-A100-80GB-PCIe", "NVIDIA-A100-SXM4-80GB"),
        ("l40s", "NVIDIA-L40S"),
        ("l4", "NVIDIA-L4"),
        ("b200", "NVIDIA-B200"),
        ("a10g", "NVIDIA-A10G"),
        ("nvidia-l4", "NVIDIA-L4"),
        ("NVIDIA-A100-SXM4-40GB-SHARED", "NVIDIA-A100-SXM4-40GB"),
        ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
    ],
)
def test_aliases_and_product_strings_normalise(name: str, product: str) -> None:
    gpu = gpus.lookup_gpu(name)
    assert gpu is not None and gpu.product == product


def test_unknown_gpu_is_none() -> None:
    assert gpus.lookup_gpu("tpu-v5e") is None


def test_table_is_consistent() -> None:
    table = gpus.gpu_table()
    names = [n for g in table for n in (g.alias, *g.aliases, *g.products)]
    assert len({n.lower() for n in names}) == len(names), "an alias or product appears twice"
    assert all(g.memory_mib > 10_000 for g in table)
    assert gpus.lookup_gpu("h100-80gb").fp8 and not gpus.lookup_gpu("a100-40gb").fp8  # type: ignore[union-attr]


def test_same_gpu_matches_alias_product_and_variants() -> None:
    assert gpus.same_gpu("NVIDIA-H100-80GB-HBM3", "h100-80gb")
    assert gpus.same_gpu("NVIDIA-H100-SXM5-80GB", "NVIDIA-H100-80GB-HBM3")
    assert not gpus.same_gpu("NVIDIA-A100-SXM4-40GB", "a100-80gb")
    assert gpus.same_gpu("Custom-GPU", "custom-gpu")


def test_inventory_from_real_looking_nodes() -> None:
    nodes = [
        node("h100-1"),
        node("h100-0"),
        node("a100-0", "NVIDIA-A100-SXM4-40GB", "8", "40960"),
        node("l4-0", "NVIDIA-L4", "4", None),  # no memory label: the built-in table fills it
        node("cpu-0", None, None, None, taints=[]),  # no GPUs at all
        node("cordoned", unschedulable=True),
        node("not-ready", ready="False"),
        node("unknown-ready", ready="Unknown"),
        node("no-plugin-yet", allocatable="0"),
    ]
    inventory = planning.inventory_from_nodes(nodes)
    assert [n.name for n in inventory.nodes] == ["a100-0", "h100-0", "h100-1", "l4-0"]
    by_product = {c.product: c for c in inventory.products()}
    assert by_product["NVIDIA-H100-80GB-HBM3"].nodes == 2
    assert by_product["NVIDIA-H100-80GB-HBM3"].max_gpus_per_node == 8
    assert by_product["NVIDIA-L4"].memory_mib == 23034
    assert by_product["NVIDIA-A100-SXM4-40GB"].display == "A100 40GB"


def test_inventory_uses_allocatable_not_label_count() -> None:
    """A GPU the device plugin marks unhealthy leaves allocatable, not the GFD count label."""
    inventory = planning.inventory_from_nodes([node("h100-0", allocatable="6")])
    assert inventory.nodes[0].gpus == 6


def test_node_without_ready_condition_but_not_ready_taint_is_skipped() -> None:
    fresh = node("fresh", ready=None)
    tainted = node(
        "tainted", ready=None, taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]
    )
    assert [n.name for n in planning.inventory_from_nodes([fresh, tainted]).nodes] == ["fresh"]


def test_unknown_product_without_memory_label_keeps_memory_unknown() -> None:
    inventory = planning.inventory_from_nodes([node("x", "Some-New-GPU", "4", None)])
    assert inventory.nodes[0].memory_mib is None


def test_inventory_is_order_independent() -> None:
    nodes = [node("b"), node("a", "NVIDIA-L4", "4", "23034")]
    assert planning.inventory_from_nodes(nodes) == planning.inventory_from_nodes(reversed(nodes))


def test_the_offline_cluster_is_2x8_h100_1x8_a100_2x4_l4() -> None:
    summary = {(c.product, c.nodes, c.max_gpus_per_node) for c in offline_inventory().products()}
    assert summary == {
        ("NVIDIA-H100-80GB-HBM3", 2, 8),
        ("NVIDIA-A100-SXM4-40GB", 1, 8),
        ("NVIDIA-L4", 2, 4),
    }


def test_parse_gpus_flag() -> None:
    inventory = planning.parse_gpus_flag("h100-80gb:8, l4:4x2,NVIDIA-A100-SXM4-40GB:2")
    assert [(n.name, n.product, n.gpus) for n in inventory.nodes] == [
        ("h100-80gb-0", "NVIDIA-H100-80GB-HBM3", 8),
        ("l4-0", "NVIDIA-L4", 4),
        ("l4-1", "NVIDIA-L4", 4),
        ("a100-40gb-0", "NVIDIA-A100-SXM4-40GB", 2),
    ]
    assert inventory.nodes[0].memory_mib == 81559


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        ("h100-80gb", "ALIAS:GPUS"),
        ("h100-80gb:eight", "ALIAS:GPUS"),
        ("h100-80gb:0", "at least 1"),
        ("tpu:4", "unknown GPU 'tpu'"),
    ],
)
def test_parse_gpus_flag_rejects_bad_input(text: str, fragment: str) -> None:
    with pytest.raises(planning.GpuInventoryError, match=fragment):
        planning.parse_gpus_flag(text)


def cloud_node(name: str, labels: dict[str, str], gpus: str | None = "8") -> dict[str, Any]:
    """A GPU node as a managed cloud labels it: no GPU feature discovery labels."""
    manifest = node(name, product=None, allocatable=gpus, memory=None)
    manifest["metadata"]["labels"] |= labels
    return manifest


@pytest.mark.parametrize(
    ("labels", "product", "label"),
    [
        ({"cloud.google.com/gke-accelerator": "nvidia-l4"}, "NVIDIA-L4", "cloud.google.com/gke-accelerator"),
        (
            {"cloud.google.com/gke-accelerator": "nvidia-h100-mega-80gb"},
            "NVIDIA-H100-80GB-HBM3",
            "cloud.google.com/gke-accelerator",
        ),
        ({"k8s.amazonaws.com/accelerator": "nvidia-tesla-t4"}, "Tesla-T4", "k8s.amazonaws.com/accelerator"),
        (
            {"node.kubernetes.io/instance-type": "p5.48xlarge"},
            "NVIDIA-H100-80GB-HBM3",
            "node.kubernetes.io/instance-type",
        ),
        (
            {
                "kubernetes.azure.com/accelerator": "nvidia",
                "node.kubernetes.io/instance-type": "Standard_NC24ads_A100_v4",
            },
            "NVIDIA-A100-SXM4-80GB",
            "node.kubernetes.io/instance-type",
        ),
    ],
)
def test_cloud_labelled_nodes_are_recognised(labels: dict[str, str], product: str, label: str) -> None:
    inventory = planning.inventory_from_nodes([cloud_node("gpu-0", labels)])
    assert [(n.product, n.gpus, n.label) for n in inventory.nodes] == [(product, 8, label)]
    assert inventory.nodes[0].memory_mib == gpus.lookup_gpu(product).memory_mib  # type: ignore[union-attr]
    assert inventory.unlabelled == ()


def test_gfd_label_wins_over_cloud_labels() -> None:
    manifest = node("gpu-0", "NVIDIA-L4", "4", "23034")
    manifest["metadata"]["labels"]["cloud.google.com/gke-accelerator"] = "nvidia-tesla-t4"
    assert [(n.product, n.label) for n in planning.inventory_from_nodes([manifest]).nodes] == [
        ("NVIDIA-L4", "nvidia.com/gpu.product")
    ]


def test_unlabelled_gpu_nodes_are_set_aside_with_the_fix() -> None:
    unnamed = cloud_node("bare-0", {"node.kubernetes.io/instance-type": "m7i.large"})
    aks = cloud_node("aks-0", {"kubernetes.azure.com/accelerator": "nvidia"}, gpus=None)
    inventory = planning.inventory_from_nodes([unnamed, aks, node("cpu-0", None, None, None)])
    assert inventory.nodes == ()
    assert [(n.name, n.gpus) for n in inventory.unlabelled] == [("aks-0", 0), ("bare-0", 8)]
    no_plugin, bare = (n.problem() for n in inventory.unlabelled)
    assert "no allocatable nvidia.com/gpu" in no_plugin and "device plugin" in no_plugin
    assert bare.startswith("node bare-0 has 8 allocatable nvidia.com/gpu but no label naming its GPU")
    assert "node.kubernetes.io/instance-type=m7i.large" in bare
    assert "kubectl label node bare-0 nvidia.com/gpu.product=" in bare


def test_cloud_label_values_are_pinned_in_full() -> None:
    """Every value naming the product, so a node of another size joining leaves the pin alone."""
    assert gpus.label_values("node.kubernetes.io/instance-type", "NVIDIA-H100-80GB-HBM3") == (
        "Standard_ND96isr_H100_v5",
        "p5.48xlarge",
        "p5.4xlarge",
    )
    assert gpus.label_values("nvidia.com/gpu.product", "NVIDIA-L4") == ("NVIDIA-L4",)
