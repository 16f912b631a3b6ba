"""Issue: a real-cluster quickstart. README's quickstart steps 3 to 5 (the token Secret, the
resource, ``kubectl wait``) run verbatim through bash against the sandbox, whose simulated H100
nodes stand in for the GPU cluster. Steps 1 and 2 (image build, ``helm install``) need a
container engine and are covered by the install suites; step 6 needs a real GPU engine.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from support.kube import Cluster, Kubectl, get
from support.paths import REPO

pytestmark = pytest.mark.usefixtures("operator")

STEP = re.compile(r"^# (\d)\. ", re.MULTILINE)


def quickstart_steps() -> dict[int, str]:
    """The numbered steps of README's quickstart shell block, each as the text bash runs."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Quickstart on a GPU cluster", 1)[1]
    block = section.split("```sh\n", 1)[1].split("\n```", 1)[0]
    starts = [(int(m.group(1)), m.start()) for m in STEP.finditer(block)]
    ends = [start for _, start in starts[1:]] + [len(block)]
    return {number: block[start:end] for (number, start), end in zip(starts, ends, strict=True)}


def test_the_quickstart_has_six_steps_in_order() -> None:
    steps = quickstart_steps()
    assert list(steps) == [1, 2, 3, 4, 5, 6]
    assert "helm install specdeploy charts/specdeploy" in steps[2]
    assert "--set image.repository=" in steps[2]
    assert "kubectl port-forward svc/qwen3-30b-a3b-eagle3 8000:8000" in steps[6]


def test_steps_3_to_5_reach_ready_as_written(
    kubectl: Kubectl, cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    # kubectl with the sandbox's kubeconfig and the test's namespace as the current context's.
    kubeconfig = tmp_path / "kubeconfig"
    shutil.copyfile(cluster.kubeconfig, kubeconfig)
    set_namespace = [kubectl.binary, f"--kubeconfig={kubeconfig}", "config", "set-context", "--current"]
    subprocess.run([*set_namespace, f"--namespace={namespace}"], check=True, capture_output=True, timeout=30)
    bin_dir = Path(kubectl.binary).parent
    assert Path(kubectl.binary).name == "kubectl"
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    steps = quickstart_steps()
    script = "set -euo pipefail\n" + steps[3] + steps[4] + steps[5].replace("--timeout=60m", "--timeout=120s")
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "condition met" in done.stdout

    body = get(kubectl, namespace, "sdep", "qwen3-30b-a3b-eagle3")
    assert body["status"]["plan"]["gpuProduct"] == "NVIDIA-H100-80GB-HBM3"
    pod = get(kubectl, namespace, "pods", "-l", "app.kubernetes.io/instance=qwen3-30b-a3b-eagle3")["items"][0]
    engine = pod["spec"]["containers"][0]
    token = next(e for e in engine["env"] if e["name"] == "HF_TOKEN")
    assert token["valueFrom"]["secretKeyRef"] == {"name": "hf-token", "key": "token"}
    assert set(engine["resources"]["requests"]) == {"cpu", "memory", "nvidia.com/gpu"}
