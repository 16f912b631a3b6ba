"""Sandboxes by profile: every suite that needs a control plane asks for one here.

A profile says which nodes the sandbox has. Suites share a sandbox per profile and isolate their
tests by namespace and name; a test that needs a control plane of its own (one it kills, or one
it installs cluster-wide objects into) says why in its docstring.
"""

from __future__ import annotations

import copy
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from specdeploy_sandbox import nodes
from specdeploy_sandbox.cluster import Sandbox
from support.kube import Cluster


@dataclass(frozen=True)
class Profile:
    """The nodes of a sandbox: the packaged default groups, with the engine group's count replaced
    (``engine_nodes``; 0: phantom pods only) and its fields updated (``engine_group``)."""

    engine_nodes: int | None = 0
    engine_group: dict[str, Any] = field(default_factory=dict)
    timeout: float = 180.0

    def node_file(self) -> dict[str, Any]:
        document: dict[str, Any] = yaml.safe_load(nodes.default_nodes_text())
        for group in document["nodeGroups"]:
            if group.get("engine"):
                group.update(copy.deepcopy(self.engine_group))
        return document


# Every pod a phantom (KWOK): the integration suites.
PLAIN = Profile()
# The default GPU nodes plus one engine node with three slots, for real engines side by side: two
# tiny pairs and a benchmark's baseline (4 CPUs and 8Gi each, as the operator derives them, and a
# load Job of 1 CPU and 2Gi). Each real engine uses about 4.2 GiB of this machine.
ENGINES = Profile(
    engine_nodes=None,
    engine_group={
        "cpu": "16",
        "memory": "64Gi",
        "gpu": {"product": "SANDBOX-CPU", "count": 3, "memoryMiB": 4096},
    },
    timeout=300.0,
)


@contextmanager
def running(profile: Profile, root: Path, name: str) -> Iterator[Sandbox]:
    """A sandbox of ``profile`` under ``root`` for the block's duration: stopped even when the
    block fails, and by its watchdog if this process dies."""
    root.mkdir(parents=True, exist_ok=True)
    node_file = root / "nodes.yaml"
    node_file.write_text(yaml.safe_dump(profile.node_file()))
    sandbox = Sandbox(name, root)
    try:
        sandbox.up(
            nodes_file=node_file,
            owner_pid=os.getpid(),
            engine_nodes=profile.engine_nodes,
            timeout=profile.timeout,
        )
        yield sandbox
    finally:
        sandbox.down()
        shutil.rmtree(root, ignore_errors=True)


def cluster_of(sandbox: Sandbox) -> Cluster:
    return Cluster(sandbox.kubeconfig, sandbox.pod_cidr(), sandbox.audit_log, sandbox.webhook_client_ca())


@contextmanager
def running_cluster(profile: Profile, root: Path, name: str) -> Iterator[Cluster]:
    with running(profile, root, name) as sandbox:
        yield cluster_of(sandbox)
