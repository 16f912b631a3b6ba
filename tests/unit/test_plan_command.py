"""`specdeploy plan`: output, exit codes and the same JSON as status.plan (models from the catalog)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from planning_models import qwen3_30b_a3b, redhat_qwen3_30b_speculator
from specdeploy import api
from specdeploy.cli import main


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def write_cr(tmp_path: Path, spec: dict[str, Any], name: str = "pair") -> Path:
    path = tmp_path / "cr.yaml"
    document = {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": name}, "spec": spec}
    path.write_text(yaml.safe_dump(document))
    return path


QWEN_MOE = {"verifier": {"model": "Qwen/Qwen3-30B-A3B-Instruct-2507"}}


def test_plan_text_shows_plan_and_alternatives(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "-f", str(write_cr(tmp_path, QWEN_MOE))]) == 0
    out = capsys.readouterr().out
    assert "pair: Planned" in out
    assert "tensorParallelSize    1" in out
    assert "NVIDIA-H100-80GB-HBM3" in out
    assert "KV cache for 32768 tokens x 2 sequences" in out
    assert "Alternatives considered:" in out
    assert "NODES  TP  PP  GPU" in out
    assert "1      1   1   H100 80GB  chosen" in out
    assert "1      2   1   A100 40GB  fits; not preferred" in out
    # Only the verifier was named: the plan says where the speculator came from.
    speculator = "RedHatAI/Qwen3-30B-A3B-Instruct-2507-speculator.eagle3"
    assert f"Pair:\n  speculator {speculator} is the catalog's recommendation" in out


def test_plan_json_is_status_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "-f", str(write_cr(tmp_path, QWEN_MOE)), "--output", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["name"], result["reason"], result["inventory"]) == (
        "pair",
        "Planned",
        {"source": "offline"},
    )
    plan = result["plan"]
    assert plan["tensorParallelSize"] == 1 and plan["gpuProduct"] == "NVIDIA-H100-80GB-HBM3"
    assert plan["speculatorWeightsGiB"] > 0  # the catalog's recommended vLLM speculator was planned in
    assert api.Plan.model_validate(plan).model_dump(by_alias=True, exclude_none=True) == plan


def test_plan_with_hypothetical_gpus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "-f", str(write_cr(tmp_path, QWEN_MOE)), "--gpus", "l4:4", "-o", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["inventory"] == {"source": "gpus", "gpus": "l4:4"}
    plan = result["plan"]
    assert (plan["tensorParallelSize"], plan["gpuProduct"]) == (4, "NVIDIA-L4")


def test_sglang_seed_at_tp_8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = {
        "verifier": {"model": "Qwen/Qwen3-Coder-30B-A3B-Instruct"},
        "speculator": {"model": "sgl-project/SGLang-EAGLE3-Qwen3-Coder-30B-A3B-Instruct"},
        "engine": {"name": "sglang"},
        "parallelism": {"tensor": 8},
    }
    assert main(["plan", "-f", str(write_cr(tmp_path, spec)), "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["plan"]["tensorParallelSize"] == 8


def test_nothing_fits_exits_1_and_says_what_would(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # TP 1 needs 65.9 GiB per GPU (36.0 usable); TP 2 (33.9 GiB / 0.9) needs a second A100
    assert main(["plan", "-f", str(write_cr(tmp_path, QWEN_MOE)), "--gpus", "a100-40gb:1"]) == 1
    out = capsys.readouterr().out
    assert "NoNodeFits" in out
    assert "needs 2 x >= 38 GiB GPUs on one node; largest allocatable: 1 x A100 40GB" in out


def test_nothing_fits_json_has_no_plan_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cr = write_cr(tmp_path, QWEN_MOE)
    assert main(["plan", "-f", str(cr), "--gpus", "a100-40gb:1", "-o", "json"]) == 1
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert (result["reason"], result["plan"]) == ("NoNodeFits", None)
    assert "largest allocatable: 1 x A100 40GB" in result["message"]
    assert "NoNodeFits" in captured.err


def test_local_model_directories(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directories = {}
    for role, metadata in (("verifier", qwen3_30b_a3b()), ("speculator", redhat_qwen3_30b_speculator())):
        directories[role] = tmp_path / role
        directories[role].mkdir()
        (directories[role] / "config.json").write_text(json.dumps(metadata.config))
    spec = {role: {"model": str(path)} for role, path in directories.items()}
    assert main(["plan", "-f", str(write_cr(tmp_path, spec)), "-o", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    # no safetensors next to the configs: weights are estimated from config.json
    assert plan["tensorParallelSize"] == 1 and plan["weightsGiB"] == pytest.approx(56.87, abs=0.01)


def test_unknown_model_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cr = write_cr(tmp_path, {"verifier": {"model": "org/not-in-the-catalog"}})
    assert main(["plan", "-f", str(cr)]) == 2
    assert "org/not-in-the-catalog" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("spec", "argv", "fragment"),
    [
        ({**QWEN_MOE, "parallelism": {"tensor": 3}}, [], "32 attention heads"),
        ({**QWEN_MOE, "parallelism": {"gpuProduct": "tpu-v5e"}}, [], "UnknownGpuProduct"),
        (QWEN_MOE, ["--gpus", "h100:eight"], "ALIAS:GPUS"),
        (QWEN_MOE, ["--gpus", "tpu:4"], "unknown GPU"),
        ({**QWEN_MOE, "replicas": -1}, [], "replicas"),
    ],
)
def test_bad_input_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: dict[str, Any], argv: list[str], fragment: str
) -> None:
    assert main(["plan", "-f", str(write_cr(tmp_path, spec)), *argv]) == 2
    captured = capsys.readouterr()
    assert fragment in captured.out + captured.err


def test_unreadable_or_empty_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "-f", str(tmp_path / "missing.yaml")]) == 2
    other = tmp_path / "other.yaml"
    other.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    assert main(["plan", "-f", str(other)]) == 2
    assert "no SpeculativeDeployment" in capsys.readouterr().err
