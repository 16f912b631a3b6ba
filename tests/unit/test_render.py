"""Golden manifests: ``specdeploy render`` of each example, the operator's exact output.

Regenerate with ``UPDATE_GOLDEN=1 pytest tests/unit/test_render.py`` and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from specdeploy.cli import main
from support.paths import REPO

# The sandbox examples name models only the sandbox's hub serves; tests/e2e renders those.
EXAMPLES = sorted(
    e for e in (REPO / "manifests" / "examples").glob("*.yaml") if not e.name.startswith("sandbox-")
)
GOLDEN = Path(__file__).parent / "golden" / "manifests"


def render(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["render", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.stem for e in EXAMPLES])
def test_examples_render_to_their_golden_manifests(example: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = render(capsys, "-f", str(example))
    assert code == 0, err
    golden = GOLDEN / f"{example.stem}.yaml"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.write_text(out)
    assert golden.is_file(), f"missing {golden}; run with UPDATE_GOLDEN=1"
    assert out == golden.read_text()


def _docs(text: str) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in yaml.safe_load_all(text)}


def test_seed_000_pod(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = render(
        capsys, "-f", str(REPO / "manifests/examples/qwen3-30b-a3b-instruct-2507-eagle3.yaml")
    )
    assert code == 0
    pod = _docs(out)["Deployment"]["spec"]["template"]["spec"]
    engine = pod["containers"][0]
    assert engine["resources"]["limits"]["nvidia.com/gpu"] == "1"
    # Sized from the plan (children.sizing): 1 GPU, 57.9 GiB of verifier and speculator weights.
    assert engine["resources"]["requests"] == {"cpu": "4", "memory": "66Gi", "nvidia.com/gpu": "1"}
    assert engine["resources"]["limits"] == {"memory": "66Gi", "nvidia.com/gpu": "1"}
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}} in pod["volumes"]
    assert {"name": "model-cache", "emptyDir": {"sizeLimit": "75Gi"}} in pod["volumes"]
    # Non-root, with HOME and the hub cache on the pod's own volumes.
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 65532
    env = {e["name"]: e.get("value") for e in engine["env"]}
    assert env["HOME"] == "/home/engine" and env["HF_HOME"] == "/home/engine/.cache/huggingface"
    assert engine["lifecycle"] == {"preStop": {"sleep": {"seconds": 10}}}
    assert pod["terminationGracePeriodSeconds"] == 90
    assert "topologySpreadConstraints" not in pod  # one replica
    assert "PodDisruptionBudget" not in _docs(out)  # one replica: nothing to budget
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][0]
    assert term["matchExpressions"] == [
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H100-80GB-HBM3"]}
    ]
    startup = engine["startupProbe"]
    assert startup["httpGet"]["path"] == "/health"
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 1800


def test_seed_003_pod(capsys: pytest.CaptureFixture[str]) -> None:
    path = REPO / "manifests/examples/qwen3-coder-30b-a3b-instruct-sglang-eagle3.yaml"
    code, out, _ = render(capsys, "-f", str(path))
    assert code == 0
    docs = _docs(out)
    engine = docs["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert engine["resources"]["requests"]["nvidia.com/gpu"] == "8"
    assert engine["readinessProbe"]["httpGet"]["path"] == "/health_generate"
    assert docs["Service"]["spec"]["ports"][0]["port"] == 30000


def test_token_secret_is_referenced_never_copied(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = yaml.safe_load((REPO / "manifests/examples/qwen3-30b-a3b-instruct-2507-eagle3.yaml").read_text())
    body["spec"]["modelAccess"] = {"tokenSecretRef": {"name": "hf", "key": "token"}}
    body["spec"]["modelCache"] = {"claimName": "models"}
    path = tmp_path / "cr.yaml"
    path.write_text(yaml.safe_dump(body))
    code, out, _ = render(capsys, "-f", str(path))
    assert code == 0
    pod = _docs(out)["Deployment"]["spec"]["template"]["spec"]
    env = pod["containers"][0]["env"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}} in env
    assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": "models"}} in pod["volumes"]


def test_a_pair_that_fails_its_check_renders_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = yaml.safe_load((REPO / "manifests/examples/qwen3-30b-a3b-instruct-2507-eagle3.yaml").read_text())
    body["spec"]["verifier"]["model"] = "Qwen/Qwen3-8B"
    path = tmp_path / "cr.yaml"
    path.write_text(yaml.safe_dump(body))
    code, out, err = render(capsys, "-f", str(path))
    assert (code, out) == (1, "")
    assert "PairingFailed" in err and "hidden size" in err


def test_no_node_fits_renders_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    path = REPO / "manifests/examples/qwen3-coder-30b-a3b-instruct-sglang-eagle3.yaml"
    code, out, err = render(capsys, "-f", str(path), "--gpus", "l4:4")
    assert (code, out) == (1, "")
    assert "NoNodeFits" in err and "8 x" in err


def test_cluster_wide_engine_image_default(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The chart's engineImages values reach the pods; a resource's own image still wins."""
    monkeypatch.setenv("SPECDEPLOY_VLLM_IMAGE", "mirror.example/vllm-openai:v0.33.0")
    path = REPO / "manifests/examples/qwen3-30b-a3b-instruct-2507-eagle3.yaml"
    code, out, _ = render(capsys, "-f", str(path))
    assert code == 0
    assert _docs(out)["Deployment"]["spec"]["template"]["spec"]["containers"][0]["image"] == (
        "mirror.example/vllm-openai:v0.33.0"
    )
    sglang = REPO / "manifests/examples/qwen3-coder-30b-a3b-instruct-sglang-eagle3.yaml"
    code, out, _ = render(capsys, "-f", str(sglang))
    assert _docs(out)["Deployment"]["spec"]["template"]["spec"]["containers"][0]["image"].startswith(
        "lmsysorg/"
    )


def test_engine_pods_follow_the_restricted_rules_they_can(capsys: pytest.CaptureFixture[str]) -> None:
    """Everything of the restricted Pod Security Standard but runAsNonRoot (the images run as root)."""
    pods = []
    for example in EXAMPLES:
        assert main(["render", "-f", str(example)]) == 0
        for child in yaml.safe_load_all(capsys.readouterr().out):
            if child["kind"] == "Deployment":
                pods.append(child["spec"]["template"]["spec"])
            if child["kind"] == "LeaderWorkerSet":
                group = child["spec"]["leaderWorkerTemplate"]
                pods += [group["leaderTemplate"]["spec"], group["workerTemplate"]["spec"]]
    assert len(pods) == len(EXAMPLES) + 1  # one example spans two nodes: leader and worker
    for pod in pods:
        assert pod["automountServiceAccountToken"] is False
        for container in pod["containers"]:
            assert container["securityContext"] == {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
                "seccompProfile": {"type": "RuntimeDefault"},
            }
        assert not any("hostPath" in volume for volume in pod["volumes"])
