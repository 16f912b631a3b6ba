"""Each pairing rule over fixture configs built from the reference facts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pairing_support import BROKEN_TEMPLATE, PLAIN_TEMPLATE, fixture, write_tokenizer
from specdeploy.modelinfo import ModelResolver, catalog
from specdeploy.pairing import check_pair, tokenizer

QWEN3_30B = "Qwen/Qwen3-30B-A3B-Instruct-2507"
QWEN3_CODER = "Qwen/Qwen3-Coder-30B-A3B-Instruct"
QWEN3_8B = "Qwen/Qwen3-8B"
RH_30B = "RedHatAI/Qwen3-30B-A3B-Instruct-2507-speculator.eagle3"
SGL_CODER = "sgl-project/SGLang-EAGLE3-Qwen3-Coder-30B-A3B-Instruct"


def statuses(report: object) -> dict[str, str]:
    return {c.name: c.status for c in report.checks}  # type: ignore[attr-defined]


def test_seed_000_vllm_pair_passes_from_fixtures() -> None:
    report = check_pair(
        fixture("verifier-qwen3-30b-a3b-instruct-2507", QWEN3_30B),
        fixture("speculator-redhat-qwen3-30b-a3b-instruct-2507", RH_30B),
        engine="vllm",
    )
    assert (report.verified, report.reason) == ("True", "Compatible")
    assert report.check("declaredVerifier").status == "Passed"
    assert report.check("tokenizer").status == "Skipped"
    assert not any(c.status == "Failed" for c in report.checks)


def test_seed_003_sglang_pair_passes_from_fixtures() -> None:
    report = check_pair(
        fixture("verifier-qwen3-coder-30b-a3b-instruct", QWEN3_CODER),
        fixture("speculator-sgl-qwen3-coder-30b-a3b", SGL_CODER),
        engine="sglang",
    )
    assert (report.verified, report.reason) == ("True", "Compatible")
    assert report.check("declaredVerifier").status == "Skipped"
    assert report.check("catalogVerifier").reason == "CatalogMatch"


@pytest.mark.parametrize(
    ("verifier", "speculator", "engine"),
    [(QWEN3_30B, RH_30B, "vllm"), (QWEN3_CODER, SGL_CODER, "sglang")]
    + [
        (v, s, "vllm")
        for v, s in [
            ("Qwen/Qwen3-8B", "RedHatAI/Qwen3-8B-speculator.eagle3"),
            ("Qwen/Qwen3-32B", "RedHatAI/Qwen3-32B-speculator.eagle3"),
            ("meta-llama/Llama-3.1-8B-Instruct", "RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3"),
            ("meta-llama/Llama-3.3-70B-Instruct", "RedHatAI/Llama-3.3-70B-Instruct-speculator.eagle3"),
        ]
    ],
)
def test_catalog_pairs_pass(verifier: str, speculator: str, engine: str) -> None:
    resolver = ModelResolver()
    report = check_pair(resolver.resolve(verifier), resolver.resolve(speculator), engine=engine)
    assert report.verified == "True", report.message


def test_structurally_identical_draft_for_another_verifier_is_a_declared_mismatch() -> None:
    # The Qwen3-30B-A3B-Instruct-2507 draft fits Qwen3-Coder-30B-A3B in every dimension.
    verifier = fixture("verifier-qwen3-coder-30b-a3b-instruct", QWEN3_CODER)
    speculator = fixture("speculator-redhat-qwen3-30b-a3b-instruct-2507", RH_30B)
    report = check_pair(verifier, speculator, engine="vllm")
    assert (report.verified, report.reason) == ("False", "VerifierMismatch")
    assert (
        report.message
        == f"verifier: speculator {RH_30B} was trained for {QWEN3_30B}, verifier is {QWEN3_CODER}"
    )
    assert [c.name for c in report.checks if c.status == "Failed"] == ["declaredVerifier"]


def test_opting_out_of_a_verifier_mismatch_keeps_a_warning() -> None:
    report = check_pair(
        fixture("verifier-qwen3-coder-30b-a3b-instruct", QWEN3_CODER),
        fixture("speculator-redhat-qwen3-30b-a3b-instruct-2507", RH_30B),
        engine="vllm",
        allow_verifier_mismatch=True,
    )
    assert report.verified == "True"
    check = report.check("declaredVerifier")
    assert (check.status, check.reason) == ("Warning", "VerifierMismatch")
    assert report.warnings and "allowVerifierMismatch" in report.warnings[0]
    status = report.to_status()
    assert status.verified == "True" and status.checks[0].status == "Warning"


def test_declared_verifier_architecture_must_match() -> None:
    verifier = fixture("verifier-qwen3-8b", QWEN3_8B)
    verifier = type(verifier)(
        model_id=QWEN3_8B,
        revision=None,
        config={**verifier.config, "architectures": ["Qwen2ForCausalLM"]},
        source="inline",
    )
    report = check_pair(verifier, fixture("speculator-redhat-qwen3-8b", "x/draft"), engine="vllm")
    assert report.check("declaredVerifier").message == (
        f"verifier architecture: speculator expects Qwen3ForCausalLM, verifier {QWEN3_8B} is Qwen2ForCausalLM"
    )


def test_undeclared_verifier_mismatch_comes_from_the_catalog() -> None:
    report = check_pair(
        fixture("verifier-qwen3-30b-a3b-instruct-2507", QWEN3_30B),
        fixture("speculator-sgl-qwen3-coder-30b-a3b", SGL_CODER),
        engine="sglang",
    )
    assert (report.verified, report.reason) == ("False", "VerifierMismatch")
    assert report.check("catalogVerifier").message == (
        f"verifier: catalog says speculator {SGL_CODER} was trained for {QWEN3_CODER}, "
        f"verifier is {QWEN3_30B}"
    )


def test_undeclared_unknown_verifier_is_unverified_not_failed() -> None:
    report = check_pair(
        fixture("verifier-qwen3-8b", QWEN3_8B),
        fixture("draft-unknown-original-eagle3-4096", "someone/eagle3-draft"),
        engine="vllm",
    )
    assert (report.verified, report.reason) == ("Unknown", "Unverified")
    assert report.check("catalogVerifier").reason == "VerifierUnverified"
    assert report.check("auxLayers").status == "Passed"


def test_hidden_size_mismatch_names_both_values() -> None:
    report = check_pair(
        fixture("verifier-qwen3-8b", QWEN3_8B),
        fixture("speculator-redhat-qwen3-32b", "RedHatAI/Qwen3-32B-speculator.eagle3"),
        engine="vllm",
    )
    check = report.check("hiddenSize")
    assert (check.status, check.reason) == ("Failed", "HiddenSizeMismatch")
    assert check.message == "hidden size: speculator expects 5120, verifier Qwen/Qwen3-8B has 4096"
    assert check.message in report.message and "trained for Qwen/Qwen3-32B" in report.message


def test_target_hidden_size_wins_over_the_draft_hidden_size() -> None:
    report = check_pair(
        fixture("verifier-qwen3-8b", QWEN3_8B),
        fixture("draft-qwen3-moe-target-hidden-4096", "someone/draft"),
        engine="vllm",
    )
    assert report.check("hiddenSize").status == "Passed"


def test_hidden_size_matches_but_vocabulary_does_not() -> None:
    llama = "meta-llama/Llama-3.1-8B-Instruct"
    report = check_pair(
        fixture("verifier-llama-3.1-8b-instruct", llama),
        fixture("draft-unknown-original-eagle3-4096", "someone/qwen-vocab-draft"),
        engine="vllm",
    )
    assert report.check("hiddenSize").status == "Passed"
    check = report.check("vocabulary")
    assert (check.status, check.reason) == ("Failed", "VocabSizeMismatch")
    assert check.message == f"vocabulary: speculator expects 151936 tokens, verifier {llama} has 128256"
    assert (report.verified, report.reason) == ("False", "VocabSizeMismatch")


def test_draft_vocabulary_larger_than_the_verifiers() -> None:
    report = check_pair(
        fixture("verifier-qwen3-8b", QWEN3_8B),
        fixture("draft-qwen3-8b-draft-vocab-too-large", "x/draft"),
        engine="vllm",
    )
    check = report.check("vocabulary")
    assert (check.status, check.reason) == ("Failed", "DraftVocabTooLarge")
    assert "160000" in check.message and "151936" in check.message


def test_auxiliary_layers_out_of_range() -> None:
    report = check_pair(
        fixture("verifier-qwen3-8b", QWEN3_8B),
        fixture("draft-qwen3-8b-aux-layers-out-of-range", "x/draft"),
        engine="vllm",
    )
    check = report.check("auxLayers")
    assert (check.status, check.reason) == ("Failed", "AuxLayerOutOfRange")
    assert (
        check.message
        == "auxiliary layers: speculator reads layers [40], verifier Qwen/Qwen3-8B has 36 layers (0-35)"
    )


@pytest.mark.parametrize(
    ("draft", "found"),
    [
        ("draft-qwen3-8b-eagle1", "an eagle checkpoint"),
        ("draft-qwen3-8b-plain-llama", "LlamaForCausalLM (not an EAGLE checkpoint)"),
    ],
)
def test_method_must_match_the_checkpoint_format(draft: str, found: str) -> None:
    report = check_pair(fixture("verifier-qwen3-8b", QWEN3_8B), fixture(draft, "x/draft"), engine="vllm")
    check = report.check("method")
    assert (check.status, check.reason) == ("Failed", "MethodFormatMismatch")
    assert check.message == f"method: eagle3 needs an EAGLE-3 draft, speculator x/draft is {found}"


def test_engine_without_eagle3_support_for_the_architecture() -> None:
    report = check_pair(
        fixture("verifier-gemma2-9b", "google/gemma-2-9b-it"),
        fixture("draft-unknown-original-eagle3-4096", "x/draft"),
        engine="vllm",
    )
    check = report.check("engineSupport")
    assert (check.status, check.reason) == ("Failed", "EngineUnsupportedArchitecture")
    assert "Gemma2ForCausalLM" in check.message and "Qwen3MoeForCausalLM" in check.message


def test_unconfirmed_engine_support_is_a_warning() -> None:
    report = check_pair(
        fixture("verifier-qwen2-7b", "Qwen/Qwen2-7B-Instruct"),
        fixture("draft-unknown-original-eagle3-4096", "x/draft"),
        engine="vllm",
    )
    assert report.check("engineSupport").status == "Warning"
    assert catalog.engine_supports("vllm", "Qwen2ForCausalLM") is None


def test_identical_tokenizers_and_a_chatml_template_pass(tmp_path: Path) -> None:
    pytest.importorskip("jinja2")
    verifier = fixture("verifier-qwen3-8b", QWEN3_8B, write_tokenizer(tmp_path / "v"))
    speculator = fixture("speculator-redhat-qwen3-8b", "x/draft", write_tokenizer(tmp_path / "s"))
    check = check_pair(verifier, speculator, engine="vllm").check("tokenizer")
    assert (check.status, check.reason) == ("Passed", "Match"), check.message


def test_a_different_speculator_tokenizer_fails(tmp_path: Path) -> None:
    pytest.importorskip("jinja2")
    verifier = fixture("verifier-qwen3-8b", QWEN3_8B, write_tokenizer(tmp_path / "v"))
    speculator = fixture(
        "speculator-redhat-qwen3-8b", "x/draft", write_tokenizer(tmp_path / "s", extra_words=5)
    )
    report = check_pair(verifier, speculator, engine="vllm")
    check = report.check("tokenizer")
    assert (check.status, check.reason) == ("Failed", "TokenizerMismatch")
    assert "15 tokens" in check.message and "has 10" in check.message
    assert report.verified == "False"


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        (PLAIN_TEMPLATE, "expected '<|im_start|>user'"),
        (BROKEN_TEMPLATE, "does not render"),
        (None, "has none"),
    ],
)
def test_a_broken_verifier_chat_template_fails(tmp_path: Path, template: str | None, expected: str) -> None:
    pytest.importorskip("jinja2")
    verifier = fixture("verifier-qwen3-8b", QWEN3_8B, write_tokenizer(tmp_path / "v", template=template))
    check = check_pair(verifier, fixture("speculator-redhat-qwen3-8b", "x/d"), engine="vllm").check(
        "tokenizer"
    )
    assert (check.status, check.reason) == ("Failed", "ChatTemplateBroken")
    assert expected in check.message


def test_the_rule_runs_in_one_child_process_per_pair_of_tokenizer_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """transformers never enters the calling process (the operator's memory); the same files
    again are answered from memory, a changed file is a new pair."""
    pytest.importorskip("jinja2")
    children: list[object] = []
    spawn = tokenizer.subprocess.run

    def counted(*args: Any, **kwargs: Any) -> Any:
        children.append(args)
        return spawn(*args, **kwargs)

    monkeypatch.setattr(tokenizer.subprocess, "run", counted)
    verifier = fixture("verifier-qwen3-8b", QWEN3_8B, write_tokenizer(tmp_path / "v"))
    speculator = fixture("speculator-redhat-qwen3-8b", "x/draft", write_tokenizer(tmp_path / "s"))
    first = tokenizer.check_tokenizer(verifier, speculator)
    assert (first.status, first.reason) == ("Passed", "Match")
    assert tokenizer.check_tokenizer(verifier, speculator) == first
    assert len(children) == 1
    write_tokenizer(tmp_path / "s", extra_words=1)
    assert tokenizer.check_tokenizer(verifier, speculator).reason == "TokenizerMismatch"
    assert len(children) == 2

    probe = (
        "import sys; from pathlib import Path; from pairing_support import fixture; "
        "from specdeploy.pairing.tokenizer import check_tokenizer; "
        f"v = fixture('verifier-qwen3-8b', 'Qwen/Qwen3-8B', Path({str(tmp_path / 'v')!r})); "
        "print(check_tokenizer(v, fixture('speculator-redhat-qwen3-8b', 'x/d')).status, "
        "'transformers' in sys.modules)"
    )
    here = str(Path(__file__).parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["Passed", "False"], out.stderr


def test_a_child_that_gives_no_answer_skips_the_rule_and_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    verifier = fixture("verifier-qwen3-8b", QWEN3_8B, write_tokenizer(tmp_path / "v"))
    monkeypatch.setattr(tokenizer, "_CHILD", "import sys; print('boom', file=sys.stderr); sys.exit(3)")
    check = tokenizer.check_tokenizer(verifier, fixture("speculator-redhat-qwen3-8b", "x/d"))
    assert (check.status, check.reason) == ("Skipped", "TokenizerUnavailable")
    assert check.message == "tokenizer: the check's process exited 3: boom"
    monkeypatch.undo()
    assert (
        tokenizer.check_tokenizer(verifier, fixture("speculator-redhat-qwen3-8b", "x/d")).status == "Passed"
    )
