"""`specdeploy check`: exit 0 compatible, 1 incompatible, 2 unresolvable or bad usage."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pairing_support import FIXTURES, write_tokenizer
from specdeploy.cli import main

QWEN3_30B = "Qwen/Qwen3-30B-A3B-Instruct-2507"
RH_30B = "RedHatAI/Qwen3-30B-A3B-Instruct-2507-speculator.eagle3"


def test_seed_pair_is_compatible(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", QWEN3_30B, RH_30B]) == 0
    out = capsys.readouterr().out
    assert "PairingVerified=True (Compatible)" in out and "hiddenSize" in out
    # Catalog models: the check says which facts it relied on.
    for model in (QWEN3_30B, RH_30B):
        assert f"note: {model}: the catalog's facts (" in out


def test_sglang_seed_pair_is_compatible_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "check",
            "Qwen/Qwen3-Coder-30B-A3B-Instruct",
            "sgl-project/SGLang-EAGLE3-Qwen3-Coder-30B-A3B-Instruct",
            "--engine",
            "sglang",
            "--output",
            "json",
        ]
    )
    assert code == 0
    document = json.loads(capsys.readouterr().out)
    assert (document["verified"], document["engine"]) == ("True", "sglang")
    assert {c["name"] for c in document["checks"]} >= {"hiddenSize", "vocabulary", "engineSupport"}
    assert len(document["notes"]) == 2 and all("the catalog's facts (" in note for note in document["notes"])


def test_mismatched_pair_exits_1_and_opt_out_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "Qwen/Qwen3-Coder-30B-A3B-Instruct", RH_30B]) == 1
    assert "VerifierMismatch" in capsys.readouterr().out
    assert main(["check", "Qwen/Qwen3-Coder-30B-A3B-Instruct", RH_30B, "--allow-verifier-mismatch"]) == 0


def test_local_directories_with_tokenizers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("jinja2")
    verifier, speculator = tmp_path / "verifier", tmp_path / "speculator"
    for directory, name in (
        (verifier, "verifier-qwen3-8b"),
        (speculator, "draft-unknown-original-eagle3-4096"),
    ):
        write_tokenizer(directory)
        shutil.copy(FIXTURES / f"{name}.json", directory / "config.json")
    assert main(["check", str(verifier), str(speculator), "--output", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["verified"] == "Unknown"
    assert next(c for c in document["checks"] if c["name"] == "tokenizer")["status"] == "Passed"


def test_unresolvable_model_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(tmp_path / "missing"), RH_30B]) == 2
    assert "ModelNotFound" in capsys.readouterr().err
    assert main(["check", "nobody/not-cached", RH_30B, "--offline", "--output", "json"]) == 2
    assert json.loads(capsys.readouterr().out)["error"] == "HubUnreachable"


def test_bad_usage_exits_2() -> None:
    with pytest.raises(SystemExit) as caught:
        main(["check", QWEN3_30B, RH_30B, "--engine", "tgi"])
    assert caught.value.code == 2
    with pytest.raises(SystemExit) as caught:
        main(["check", QWEN3_30B])
    assert caught.value.code == 2
