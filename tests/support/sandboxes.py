"""Sandboxes by profile: every suite that needs a control plane asks for one here.

A profile says which nodes the sandbox has. Suites share a sandbox per profile and isolate their
tests by namespace and name; a test that needs a control plane of its own (one it kills, or one
it installs cluster-wide objects into) says why in its docstring.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from specdeploy_sandbox.cluster import Sandbox
from support.kube import Cluster


@dataclass(frozen=True)
class Profile:
    """The nodes of a sandbox: the packaged default node file, as ``specdeploy sandbox up`` and
    ``specdeploy demo`` use it, with the engine group's count replaced (``engine_nodes``; 0:
    phantom pods only; None: as packaged)."""

    engine_nodes: int | None = 0
    timeout: float = 180.0
    # No GPU node at start: Karpenter creates them (``specdeploy sandbox up --provisioner``).
    provisioner: bool = False


# Every pod a phantom (KWOK): the integration suites.
PLAIN = Profile()
# Phantom pods on GPU nodes Karpenter creates on demand: the node provisioning test.
PROVISIONED = Profile(provisioner=True)
# Exactly the sandbox ``specdeploy demo`` (``make demo``) starts: the default GPU nodes and the
# packaged engine node, whose three slots hold the two tiny pairs side by side and a benchmark's
# baseline, with room for the load Job (sandbox-nodes.yaml). Each real engine uses about 4.2 GiB
# of this machine.
DEMO = Profile(engine_nodes=None, timeout=300.0)


@contextmanager
def running(profile: Profile, root: Path, name: str) -> Iterator[Sandbox]:
    """A sandbox of ``profile`` under ``root`` for the block's duration: stopped even when the
    block fails, and by its watchdog if this process dies."""
    root.mkdir(parents=True, exist_ok=True)
    sandbox = Sandbox(name, root)
    try:
        sandbox.up(
            owner_pid=os.getpid(),
            engine_nodes=profile.engine_nodes,
            timeout=profile.timeout,
            provisioner=profile.provisioner,
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
