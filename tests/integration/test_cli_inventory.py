"""``specdeploy plan`` and ``render`` plan against the cluster the kubeconfig names, by default.

A B200 node joins the suite's sandbox for the test: the offline cluster has no B200, so a
resource pinned to B200 fits only when the command really read this cluster's nodes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from specdeploy.exitcodes import ExitCode
from support.kube import Cluster, Kubectl, WaitFor
from support.paths import REPO

SEED = REPO / "manifests/examples/qwen3-30b-a3b-instruct-2507-eagle3.yaml"
B200 = "NVIDIA-B200"
HOME = tempfile.mkdtemp(prefix="specdeploy-cli-home-")


def specdeploy(*argv: str, kubeconfig: Path | None) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it, with KUBECONFIG set (or unset) and no Hub access."""
    env = {key: value for key, value in os.environ.items() if key != "KUBECONFIG"}
    env["HF_HUB_OFFLINE"] = "1"
    env["HOME"] = HOME  # no ~/.kube/config of the machine's user either
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    return subprocess.run(
        [sys.executable, "-m", "specdeploy", *argv], capture_output=True, text=True, env=env, timeout=120
    )


def _ready(kubectl: Kubectl, node: str) -> bool:
    conditions = json.loads(kubectl("get", "node", node, "-o", "json"))["status"].get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


@pytest.fixture
def b200_node(cluster: Cluster, kubectl: Kubectl, namespace: str, wait_for: WaitFor) -> Iterator[str]:
    from specdeploy_sandbox import nodes

    name = f"b200-cli-{namespace[-6:]}"
    nodes.add_node(nodes.gpu_node(name, B200, 8, 183359), kubeconfig=cluster.kubeconfig)
    try:
        wait_for(lambda: _ready(kubectl, name), 60, f"node {name} Ready")
        yield name
    finally:
        kubectl("delete", "node", name, "--wait=false")


@pytest.fixture
def pinned_to_b200(tmp_path: Path) -> Path:
    body: dict[str, Any] = yaml.safe_load(SEED.read_text())
    body["spec"]["parallelism"] = {"gpuProduct": "b200"}
    path = tmp_path / "b200.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def test_plan_uses_the_kubeconfigs_cluster_by_default(
    cluster: Cluster, b200_node: str, pinned_to_b200: Path
) -> None:
    done = specdeploy("plan", "-f", str(pinned_to_b200), "-o", "json", kubeconfig=cluster.kubeconfig)
    assert done.returncode == ExitCode.OK, done.stderr
    result = json.loads(done.stdout)
    assert result["plan"]["gpuProduct"] == B200
    inventory = result["inventory"]
    assert (inventory["source"], inventory["kubeconfig"]) == ("kubeconfig", str(cluster.kubeconfig))
    server = yaml.safe_load(cluster.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    assert inventory["server"] == server
    assert f"planning against kubeconfig context {inventory['context']} ({server})" in done.stderr

    text = specdeploy("plan", "-f", str(pinned_to_b200), kubeconfig=cluster.kubeconfig)
    assert (
        text.returncode == ExitCode.OK
        and f"GPU inventory (kubeconfig context {inventory['context']}" in text.stdout
    )

    # The offline cluster, asked for or by having no kubeconfig, has no B200.
    for argv, kubeconfig in ((["--offline"], cluster.kubeconfig), ([], None)):
        offline = specdeploy("plan", "-f", str(pinned_to_b200), "-o", "json", *argv, kubeconfig=kubeconfig)
        assert offline.returncode == ExitCode.REFUSED, offline.stderr
        assert json.loads(offline.stdout)["inventory"] == {"source": "offline"}
        assert "planning against the offline cluster" in offline.stderr


def test_render_uses_the_kubeconfigs_cluster_by_default_and_takes_kubeconfig(
    cluster: Cluster, b200_node: str, pinned_to_b200: Path
) -> None:
    for argv, kubeconfig in (([], cluster.kubeconfig), (["--kubeconfig", str(cluster.kubeconfig)], None)):
        done = specdeploy("render", "-f", str(pinned_to_b200), *argv, kubeconfig=kubeconfig)
        assert done.returncode == ExitCode.OK, done.stderr
        deployment = next(d for d in yaml.safe_load_all(done.stdout) if d["kind"] == "Deployment")
        affinity = deployment["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
        terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert B200 in terms[0]["matchExpressions"][0]["values"]
        assert "planning against kubeconfig context" in done.stderr
    offline = specdeploy("render", "-f", str(pinned_to_b200), "--offline", kubeconfig=cluster.kubeconfig)
    assert (offline.returncode, offline.stdout) == (ExitCode.REFUSED, "")
    assert "NoNodeFits" in offline.stderr
