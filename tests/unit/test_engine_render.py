"""Rendering of engine launches: golden files for the seed pairs, and engine equivalence.

Regenerate the golden files after an intended change with
``UPDATE_GOLDEN=1 pytest tests/unit/test_engine_render.py`` and review the diff.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest

from specdeploy import api, engines
from specdeploy.engines import sglang, vllm

GOLDEN = Path(__file__).parent / "golden"

SEED_000: dict[str, Any] = {
    "verifier": {"model": "Qwen/Qwen3-30B-A3B-Instruct-2507"},
    "speculator": {
        "model": "RedHatAI/Qwen3-30B-A3B-Instruct-2507-speculator.eagle3",
        "method": "eagle3",
        "numSpeculativeTokens": 3,
    },
    "parallelism": {"tensor": 1},
}
SEED_003: dict[str, Any] = {
    "verifier": {"model": "Qwen/Qwen3-Coder-30B-A3B-Instruct"},
    "speculator": {
        "model": "sgl-project/SGLang-EAGLE3-Qwen3-Coder-30B-A3B-Instruct",
        "numSpeculativeTokens": 5,
    },
    "engine": {"name": "sglang", "sglang": {"numSteps": 5, "eagleTopk": 8, "numDraftTokens": 64}},
    "parallelism": {"tensor": 8},
}


def spec_of(raw: dict[str, Any]) -> api.SpeculativeDeploymentSpec:
    return api.SpeculativeDeploymentSpec.model_validate(raw)


def with_engine(raw: dict[str, Any], **engine: Any) -> dict[str, Any]:
    return {**raw, "engine": {**raw.get("engine", {}), **engine}}


@pytest.mark.parametrize(
    ("name", "raw"), [("vllm-seed-000", SEED_000), ("sglang-seed-003", SEED_003)], ids=["vllm", "sglang"]
)
def test_golden_launch(name: str, raw: dict[str, Any]) -> None:
    rendered = json.dumps(dataclasses.asdict(engines.render(spec_of(raw))), indent=2) + "\n"
    path = GOLDEN / f"{name}.json"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(rendered)
    assert path.is_file(), f"missing {path}; run with UPDATE_GOLDEN=1 to create it"
    assert rendered == path.read_text(), f"{path.name} differs; rerun with UPDATE_GOLDEN=1 if intended"


def test_seed_000_command_is_the_published_recipe() -> None:
    """Seed 000's command, flag for flag: -tp is spelled out, host and port are explicit."""
    command = engines.render(spec_of(SEED_000)).command
    assert command[:3] == ["vllm", "serve", "Qwen/Qwen3-30B-A3B-Instruct-2507"]
    assert command[command.index("--tensor-parallel-size") + 1] == "1"
    config = json.loads(command[command.index("--speculative-config") + 1])
    assert config == {
        "method": "eagle3",
        "model": "RedHatAI/Qwen3-30B-A3B-Instruct-2507-speculator.eagle3",
        "num_speculative_tokens": 3,
    }
    assert "tensor_parallel_size" not in config
    assert command[7:] == ["--port", "8000", "--host", "0.0.0.0", "--gpu-memory-utilization", "0.9"]


def test_seed_003_command_uses_eagle3_and_the_published_tree() -> None:
    command = engines.render(spec_of(SEED_003)).command
    pairs = dict(zip(command[3::2], command[4::2], strict=False))
    assert command[:3] == ["python3", "-m", "sglang.launch_server"]
    assert pairs["--model-path"] == "Qwen/Qwen3-Coder-30B-A3B-Instruct"
    assert pairs["--speculative-algorithm"] == "EAGLE3"
    assert pairs["--speculative-draft-model-path"] == "sgl-project/SGLang-EAGLE3-Qwen3-Coder-30B-A3B-Instruct"
    assert (pairs["--speculative-num-steps"], pairs["--speculative-eagle-topk"]) == ("5", "8")
    assert pairs["--speculative-num-draft-tokens"] == "64"
    assert pairs["--tp-size"] == "8"
    assert "--enable-metrics" in command


def _values(command: list[str], flags: dict[str, str]) -> dict[str, str]:
    return {key: command[command.index(flag) + 1] for key, flag in flags.items()}


def test_same_spec_on_either_engine_serves_the_same_pair() -> None:
    """Only engine.name differs; verifier, draft, steps, TP, length and name carry over."""
    raw = {
        **SEED_000,
        "parallelism": {"tensor": 4},
        "maxModelLen": 32768,
        "servedModelName": "qwen3",
        "verifier": {"model": "Qwen/Qwen3-30B-A3B-Instruct-2507", "revision": "abc123"},
    }
    on_vllm = engines.render(spec_of(raw)).command
    on_sglang = engines.render(spec_of(with_engine(raw, name="sglang"))).command
    config = json.loads(on_vllm[on_vllm.index("--speculative-config") + 1])
    expected = {
        "verifier": "Qwen/Qwen3-30B-A3B-Instruct-2507",
        "revision": "abc123",
        "speculator": "RedHatAI/Qwen3-30B-A3B-Instruct-2507-speculator.eagle3",
        "steps": "3",
        "tp": "4",
        "length": "32768",
        "name": "qwen3",
    }
    got_vllm = {
        "verifier": on_vllm[2],
        "speculator": config["model"],
        "steps": str(config["num_speculative_tokens"]),
        **_values(
            on_vllm,
            {
                "revision": "--revision",
                "tp": "--tensor-parallel-size",
                "length": "--max-model-len",
                "name": "--served-model-name",
            },
        ),
    }
    got_sglang = _values(
        on_sglang,
        {
            "verifier": "--model-path",
            "revision": "--revision",
            "speculator": "--speculative-draft-model-path",
            "steps": "--speculative-num-steps",
            "tp": "--tp-size",
            "length": "--context-length",
            "name": "--served-model-name",
        },
    )
    assert got_vllm == expected
    assert got_sglang == expected
    # vLLM's EAGLE drafts a chain; SGLang gets the same chain when no tree is given.
    assert _values(on_sglang, {"k": "--speculative-eagle-topk", "d": "--speculative-num-draft-tokens"}) == {
        "k": "1",
        "d": "4",
    }


def test_vllm_optional_flags_follow_the_spec() -> None:
    raw = {
        **SEED_000,
        "speculator": {**SEED_000["speculator"], "revision": "r1", "draftTensorParallelSize": 1},
        "gpuMemoryUtilization": 0.85,
        "engine": {
            "name": "vllm",
            "vllm": {"enableExpertParallel": True, "kvCacheDtype": "fp8"},
            "args": ["--max-num-seqs", "64"],
        },
    }
    command = engines.render(spec_of(raw)).command
    config = json.loads(command[command.index("--speculative-config") + 1])
    assert config["revision"] == "r1"
    assert config["draft_tensor_parallel_size"] == 1
    assert command[command.index("--gpu-memory-utilization") + 1] == "0.85"
    assert "--enable-expert-parallel" in command
    assert command[command.index("--kv-cache-dtype") + 1] == "fp8"
    assert command[-2:] == ["--max-num-seqs", "64"]


def test_vllm_omits_unset_optional_flags() -> None:
    command = engines.render(spec_of(SEED_000)).command
    for flag in ("--max-model-len", "--served-model-name", "--revision", "--kv-cache-dtype"):
        assert flag not in command


def test_sglang_memory_fraction_leaves_room_for_the_draft() -> None:
    assert sglang.mem_fraction_static(spec_of(SEED_003)) == pytest.approx(0.8)
    higher = spec_of({**SEED_003, "gpuMemoryUtilization": 0.95})
    assert sglang.mem_fraction_static(higher) == pytest.approx(0.85)
    explicit = with_engine(SEED_003, sglang={**SEED_003["engine"]["sglang"], "memFractionStatic": 0.7})
    command = engines.render(spec_of(explicit)).command
    assert command[command.index("--mem-fraction-static") + 1] == "0.7"


def test_sglang_steps_default_to_speculative_tokens_and_revisions_are_passed() -> None:
    raw = {
        **SEED_000,
        "verifier": {"model": "Qwen/Qwen3-30B-A3B-Instruct-2507", "revision": "v"},
        "speculator": {**SEED_000["speculator"], "revision": "d", "numSpeculativeTokens": 6},
        "engine": {"name": "sglang", "args": ["--max-running-requests", "32"]},
    }
    command = engines.render(spec_of(raw)).command
    values = _values(
        command,
        {
            "steps": "--speculative-num-steps",
            "draft_rev": "--speculative-draft-model-revision",
            "rev": "--revision",
        },
    )
    assert values == {"steps": "6", "draft_rev": "d", "rev": "v"}
    assert command[-2:] == ["--max-running-requests", "32"]


def test_launch_metadata_per_engine() -> None:
    on_vllm = engines.render(spec_of(SEED_000))
    on_sglang = engines.render(spec_of(SEED_003))
    assert (on_vllm.image, on_vllm.port) == (f"vllm/vllm-openai:v{vllm.VERSION}", 8000)
    assert (on_sglang.image, on_sglang.port) == (f"lmsysorg/sglang:v{sglang.VERSION}", 30000)
    # SGLang serves Prometheus metrics only when launched with --enable-metrics (vLLM always does).
    assert "--enable-metrics" in on_sglang.command
    for launch, ready, live in ((on_vllm, "/health", "/health"), (on_sglang, "/health_generate", "/health")):
        assert launch.startup_probe["httpGet"] == {"path": ready, "port": launch.port}
        assert launch.readiness_probe["httpGet"]["path"] == ready
        assert launch.liveness_probe["httpGet"]["path"] == live
        budget = launch.startup_probe["failureThreshold"] * launch.startup_probe["periodSeconds"]
        assert budget >= 30 * 60, "a 60 GB verifier must have at least 30 min to download and load"


def test_image_and_env_overrides() -> None:
    raw = with_engine(
        SEED_000, image="registry.local/vllm:custom", env=[{"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}]
    )
    launch = engines.render(spec_of(raw))
    assert launch.image == "registry.local/vllm:custom"
    assert launch.env == [{"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}]


def test_rendering_needs_an_effective_spec() -> None:
    with pytest.raises(ValueError, match=r"parallelism\.tensor"):
        engines.render(spec_of({**SEED_000, "parallelism": {}}))
    with pytest.raises(ValueError, match="speculator"):
        engines.render(spec_of({**SEED_000, "speculator": {"model": "x/y"}}))


def test_engine_registry() -> None:
    for name, raw in (("vllm", SEED_000), ("sglang", SEED_003)):
        engine = engines.engine_for(name)
        assert engine.name == name
        # The default image is what a spec without engine.image runs.
        assert engines.render(spec_of(raw)).image == engine.default_image
    with pytest.raises(ValueError, match="unknown engine 'trt'"):
        engines.engine_for("trt")


KEY_REF = {"name": "engine-key", "key": "k"}


@pytest.mark.parametrize(("raw", "variable"), [(SEED_000, "VLLM_API_KEY"), (SEED_003, "SGLANG_API_KEY")])
def test_api_key_comes_from_its_secret_and_never_into_the_command(raw: dict[str, Any], variable: str) -> None:
    """vLLM reads VLLM_API_KEY itself; SGLang takes only --api-key, which refers to the variable
    for Kubernetes to expand, so the command status shows carries no key."""
    spec = spec_of(with_engine(raw, apiKeySecretRef=KEY_REF, env=[{"name": "X", "value": "1"}]))
    launch = engines.render(spec)
    assert launch.env == [
        {"name": variable, "valueFrom": {"secretKeyRef": KEY_REF}},
        {"name": "X", "value": "1"},
    ]
    if variable == "SGLANG_API_KEY":
        assert launch.command[launch.command.index("--api-key") + 1] == "$(SGLANG_API_KEY)"
    else:
        assert "--api-key" not in launch.command
    # The baseline a benchmark starts keeps the key: the same variable, the same reference.
    engine = engines.engine_for(spec.engine.name)
    assert engine.api_key_env == variable
    assert ("--api-key" in engine.baseline_command(launch.command)) == (variable == "SGLANG_API_KEY")
    assert engines.render(spec_of(raw)).env == []
    assert spec_of(with_engine(raw, apiKeySecretRef={"name": "s"})).engine.api_key_secret_ref.key == "apiKey"  # type: ignore[union-attr]


@pytest.mark.parametrize("raw", [SEED_000, SEED_003])
def test_api_key_in_engine_args_is_refused_naming_the_field(raw: dict[str, Any]) -> None:
    errors = engines.validate(spec_of(with_engine(raw, args=["--api-key", "sk-plain"])))
    assert [str(e) for e in errors if "--api-key" in str(e)], errors
    assert any("spec.engine.apiKeySecretRef" in str(e) for e in errors), errors


def test_vllm_renders_the_schedule_as_its_per_batch_size_draft_lengths() -> None:
    """Ranges in order, the open last one ending at the API's largest batch size."""
    schedule = [{"fromBatch": 1, "toBatch": 4, "tokens": 3}, {"fromBatch": 5, "tokens": 0}]
    raw = {**SEED_000, "speculator": {**SEED_000["speculator"], "schedule": schedule}}
    command = engines.render(spec_of(raw)).command
    config = json.loads(command[command.index("--speculative-config") + 1])
    assert config["num_speculative_tokens_per_batch_size"] == [[1, 4, 3], [5, api.MAX_BATCH_SIZE, 0]]
    assert config["num_speculative_tokens"] == 3
    plain = json.loads(engines.render(spec_of(SEED_000)).command[command.index("--speculative-config") + 1])
    assert "num_speculative_tokens_per_batch_size" not in plain
