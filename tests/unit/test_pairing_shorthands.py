"""The shorthands (speculator only, verifier only), the effective spec and the catalog."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from specdeploy import api
from specdeploy.modelinfo import ModelResolver, ModelUnavailable, catalog
from specdeploy.pairing import PairingError, effective_spec, resolve_pair

RH_30B = "RedHatAI/Qwen3-30B-A3B-Instruct-2507-speculator.eagle3"
SGL_CODER = "sgl-project/SGLang-EAGLE3-Qwen3-Coder-30B-A3B-Instruct"


def spec(**fields: object) -> api.SpeculativeDeploymentSpec:
    return api.SpeculativeDeploymentSpec.model_validate(fields)


def test_speculator_only_fills_the_declared_verifier() -> None:
    s = spec(speculator={"model": RH_30B})
    resolved = resolve_pair(s, ModelResolver())
    assert resolved.verifier_id == "Qwen/Qwen3-30B-A3B-Instruct-2507"
    assert "declared by speculator" in resolved.notes[0]
    effective = effective_spec(s, resolved)
    assert effective.verifier is not None and effective.verifier.model == resolved.verifier_id
    assert effective.speculator is not None
    assert (effective.speculator.model, effective.speculator.num_speculative_tokens) == (RH_30B, 3)


def test_speculator_only_original_format_uses_the_catalog() -> None:
    resolved = resolve_pair(spec(speculator={"model": SGL_CODER}, engine={"name": "sglang"}), ModelResolver())
    assert resolved.verifier_id == "Qwen/Qwen3-Coder-30B-A3B-Instruct"
    assert "the catalog says speculator" in resolved.notes[0]


def test_speculator_only_unknown_original_draft_needs_a_verifier() -> None:
    overrides = {"speculator": {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 4096}}
    with pytest.raises(PairingError) as caught:
        resolve_pair(spec(speculator={"model": "someone/draft"}), ModelResolver(), overrides=overrides)
    assert caught.value.reason == "VerifierNotDeclared"


def test_verifier_only_uses_the_catalog_recommendation() -> None:
    s = spec(verifier={"model": "Qwen/Qwen3-Coder-30B-A3B-Instruct"}, engine={"name": "sglang"})
    resolved = resolve_pair(s, ModelResolver())
    assert resolved.speculator_id == SGL_CODER
    assert "the catalog's recommendation" in resolved.notes[0]
    effective = effective_spec(s, resolved)
    assert effective.engine.sglang == api.SglangOptions(num_steps=5, eagle_topk=8, num_draft_tokens=64)
    assert effective.speculator is not None and effective.speculator.num_speculative_tokens == 5


def test_user_sglang_settings_are_kept() -> None:
    s = spec(
        verifier={"model": "Qwen/Qwen3-Coder-30B-A3B-Instruct"},
        speculator={"model": SGL_CODER},
        engine={"name": "sglang", "sglang": {"numSteps": 3, "eagleTopk": 1, "numDraftTokens": 4}},
    )
    effective = effective_spec(s, resolve_pair(s, ModelResolver()))
    assert effective.engine.sglang == api.SglangOptions(num_steps=3, eagle_topk=1, num_draft_tokens=4)


def test_verifier_only_without_a_known_speculator() -> None:
    s = spec(verifier={"model": "Qwen/Qwen3-Coder-30B-A3B-Instruct"})  # vllm: no recommendation
    with pytest.raises(PairingError) as caught:
        resolve_pair(s, ModelResolver())
    assert caught.value.reason == "NoKnownSpeculator"
    assert "Qwen/Qwen3-Coder-30B-A3B-Instruct" in caught.value.message and "vllm" in caught.value.message


def test_explicit_settings_win_and_unknown_drafts_default_to_3() -> None:
    s = spec(verifier={"model": "Qwen/Qwen3-8B"}, speculator={"model": "x/draft", "numSpeculativeTokens": 5})
    overrides = {"speculator": {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 4096}}
    resolved = resolve_pair(s, ModelResolver(), overrides=overrides)
    assert resolved.speculator.source == "configmap"
    assert effective_spec(s, resolved).speculator.num_speculative_tokens == 5  # type: ignore[union-attr]
    plain = spec(verifier={"model": "Qwen/Qwen3-8B"}, speculator={"model": "x/draft"})
    resolved = resolve_pair(plain, ModelResolver(), overrides=overrides)
    assert effective_spec(plain, resolved).speculator.num_speculative_tokens == 3  # type: ignore[union-attr]


def test_bad_override_is_invalid_config() -> None:
    s = spec(verifier={"model": "Qwen/Qwen3-8B"}, speculator={"model": "x/draft"})
    with pytest.raises(ModelUnavailable) as caught:
        resolve_pair(s, ModelResolver(), overrides={"speculator": {"hidden_size": 1}})
    assert caught.value.reason == "InvalidConfig"


def test_catalog_lookups() -> None:
    assert catalog.trained_for(RH_30B.lower()) == "Qwen/Qwen3-30B-A3B-Instruct-2507"
    assert catalog.speculator_settings(SGL_CODER, "sglang") == {
        "numSteps": 5,
        "eagleTopk": 8,
        "numDraftTokens": 64,
    }
    assert catalog.speculator_settings(RH_30B, "vllm") == {"numSpeculativeTokens": 3}
    assert catalog.recommended_speculator("Qwen/Qwen3-30B-A3B-Instruct-2507", "vllm") == RH_30B
    assert catalog.recommended_speculator("nobody/model", "vllm") is None
    assert catalog.engine_supports("vllm", "GptOssForCausalLM") is True
    assert catalog.engine_supports("vllm", "Gemma2ForCausalLM") is False
    assert catalog.engine_supports("sglang", "Qwen3MoeForCausalLM") is True
    for model in (
        "Qwen/Qwen3-32B",
        "meta-llama/Llama-3.3-70B-Instruct",
        "RedHatAI/Qwen3-8B-speculator.eagle3",
    ):
        meta = catalog.model_info(model)
        assert meta is not None and meta.provenance
    assert catalog.model_info("nobody/model") is None


@pytest.fixture
def extended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    extra = {
        "engines": {"vllm": {"eagle3": {"Qwen2ForCausalLM": "confirmed"}}},
        "verifiers": {
            "qwen/qwen3-8b": {
                "provenance": "site mirror",
                "config": {"architectures": ["Qwen3ForCausalLM"], "hidden_size": 4096},
                "recommendedSpeculators": {"vllm": "site/qwen3-8b-draft"},
            }
        },
        "speculators": {
            "site/qwen3-8b-draft": {"provenance": "site", "config": {}, "trainedFor": "Qwen/Qwen3-8B"}
        },
    }
    path = tmp_path / "catalog.yaml"
    path.write_text(json.dumps(extra))
    monkeypatch.setenv(catalog.CATALOG_ENV, str(path))
    yield
    monkeypatch.delenv(catalog.CATALOG_ENV)


@pytest.mark.usefixtures("extended")
def test_catalog_extension_from_the_environment() -> None:
    assert catalog.engine_supports("vllm", "Qwen2ForCausalLM") is True
    assert catalog.engine_supports("vllm", "LlamaForCausalLM") is True
    assert catalog.recommended_speculator("Qwen/Qwen3-8B", "vllm") == "site/qwen3-8b-draft"
    assert catalog.trained_for("site/qwen3-8b-draft") == "Qwen/Qwen3-8B"
    assert len([k for k in catalog.load().verifiers if k.lower() == "qwen/qwen3-8b"]) == 1
    assert catalog.recommended_speculator("Qwen/Qwen3-32B", "vllm") == "RedHatAI/Qwen3-32B-speculator.eagle3"


def test_offline_resolution_never_touches_the_network() -> None:
    s = spec(
        verifier={"model": "Qwen/Qwen3-8B"}, speculator={"model": "RedHatAI/Qwen3-32B-speculator.eagle3"}
    )
    resolved = resolve_pair(s, ModelResolver(), offline=True)
    assert resolved.verifier.source == resolved.speculator.source == "catalog"
    unknown = spec(verifier={"model": "Qwen/Qwen3-8B"}, speculator={"model": "hub-org/not-in-catalog"})
    with pytest.raises(ModelUnavailable):
        resolve_pair(unknown, ModelResolver(), offline=True)
    pinned = spec(verifier={"model": "Qwen/Qwen3-8B", "revision": "v2"}, speculator={"model": "x/d"})
    with pytest.raises(ModelUnavailable):
        resolve_pair(pinned, ModelResolver(), offline=True, overrides={"speculator": {"model_type": "llama"}})
