"""The provisioner's NodePools and instance types, derived from the node file's GPU groups, read
back by the operator as the planner will see them."""

from __future__ import annotations

import asyncio
from pathlib import Path

from specdeploy.planning.pools import karpenter_pools
from specdeploy_sandbox import loopback_bridge, provisioner
from specdeploy_sandbox.nodes import load_node_specs


def test_each_gpu_group_becomes_a_nodepool_the_planner_reads_with_the_groups_shape_and_count() -> None:
    shapes = provisioner.shapes(load_node_specs(engine_nodes=0))
    assert [(s.name, s.gpus, s.max_nodes) for s in shapes] == [("h100", 8, 2), ("a100", 8, 1), ("l4", 4, 2)]
    pools, unusable = karpenter_pools([provisioner.node_pool(shape) for shape in shapes])
    assert unusable == []
    assert [(p.name, p.product, p.gpus, p.max_nodes) for p in pools] == [
        ("gpu-h100", "NVIDIA-H100-80GB-HBM3", 8, 2),
        ("gpu-a100", "NVIDIA-A100-SXM4-40GB", 8, 1),
        ("gpu-l4", "NVIDIA-L4", 4, 2),
    ]
    types = {t["name"]: t for t in provisioner.instance_types(shapes)}
    assert types["h100-x8"]["resources"]["nvidia.com/gpu"] == "8"
    requirement = provisioner.node_pool(shapes[0])["spec"]["template"]["spec"]["requirements"][0]
    assert requirement["values"] == ["h100-x8"]


def test_the_bridge_relays_bytes_between_loopback_and_a_unix_socket(tmp_path: Path) -> None:
    """Both halves in one loop: a TCP echo server stands for the apiserver."""

    async def scenario() -> bytes:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(await reader.read(100))
            await writer.drain()
            writer.close()

        upstream = await asyncio.start_server(echo, loopback_bridge.LOOPBACK, 0)
        port = upstream.sockets[0].getsockname()[1]
        socket_path = tmp_path / "bridge.sock"
        outside = asyncio.create_task(loopback_bridge.outside(socket_path, port))
        while not socket_path.exists():
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_unix_connection(str(socket_path))
        writer.write(b"hello")
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(100), 5)
        writer.close()
        outside.cancel()
        upstream.close()
        return answer

    assert asyncio.run(scenario()) == b"hello"
