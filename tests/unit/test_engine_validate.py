"""Engine rules the CRD's CEL cannot express, each shown rejecting with the field named."""

from __future__ import annotations

from typing import Any

import pytest

from specdeploy import api, engines
from specdeploy.engines import FieldError

BASE: dict[str, Any] = {
    "verifier": {"model": "Qwen/Qwen3-30B-A3B-Instruct-2507"},
    "speculator": {
        "model": "RedHatAI/Qwen3-30B-A3B-Instruct-2507-speculator.eagle3",
        "numSpeculativeTokens": 3,
    },
    "parallelism": {"tensor": 4},
}


def check(
    engine: str, sglang: dict[str, Any] | None = None, args: list[str] | None = None, **extra: Any
) -> list[FieldError]:
    section: dict[str, Any] = {"name": engine, "args": args or []}
    if sglang is not None:
        section["sglang"] = sglang
    raw = {**BASE, **extra, "engine": section}
    return engines.validate(api.SpeculativeDeploymentSpec.model_validate(raw))


def fields(errors: list[FieldError]) -> list[str]:
    return [error.field for error in errors]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_plain_spec_is_valid(engine: str) -> None:
    assert check(engine) == []


@pytest.mark.parametrize(("draft_tp", "ok"), [(1, True), (4, True), (2, False)])
def test_vllm_draft_tp_is_one_or_the_verifiers(draft_tp: int, ok: bool) -> None:
    errors = check("vllm", speculator={**BASE["speculator"], "draftTensorParallelSize": draft_tp})
    assert fields(errors) == ([] if ok else ["spec.speculator.draftTensorParallelSize"])
    if not ok:
        assert "1 or 4" in errors[0].message


def test_sglang_draft_tp_must_match_the_verifier() -> None:
    errors = check("sglang", speculator={**BASE["speculator"], "draftTensorParallelSize": 1})
    assert fields(errors) == ["spec.speculator.draftTensorParallelSize"]


def test_draft_tp_waits_for_the_planner() -> None:
    errors = check("vllm", speculator={**BASE["speculator"], "draftTensorParallelSize": 2}, parallelism={})
    assert errors == []


@pytest.mark.parametrize(
    ("sglang", "bad_field"),
    [
        ({"numSteps": 5, "eagleTopk": 8, "numDraftTokens": 64}, None),
        ({"eagleTopk": 8, "numDraftTokens": 64}, None),
        ({}, None),
        ({"numSteps": 5}, "spec.engine.sglang.numSteps"),
        ({"numSteps": 5, "eagleTopk": 8}, "spec.engine.sglang.numDraftTokens"),
        ({"numDraftTokens": 64}, "spec.engine.sglang.eagleTopk"),
    ],
)
def test_sglang_draft_shape_is_all_or_nothing(sglang: dict[str, Any], bad_field: str | None) -> None:
    assert fields(check("sglang", sglang)) == ([] if bad_field is None else [bad_field])


@pytest.mark.parametrize(
    ("sglang", "ok"),
    [
        ({"eagleTopk": 1, "numDraftTokens": 4}, True),  # steps 3 from numSpeculativeTokens
        ({"eagleTopk": 1, "numDraftTokens": 8}, False),
        ({"numSteps": 5, "eagleTopk": 1, "numDraftTokens": 6}, True),
        ({"numSteps": 5, "eagleTopk": 1, "numDraftTokens": 4}, False),
    ],
)
def test_sglang_chain_has_steps_plus_one_draft_tokens(sglang: dict[str, Any], ok: bool) -> None:
    errors = check("sglang", sglang)
    assert fields(errors) == ([] if ok else ["spec.engine.sglang.numDraftTokens"])


def test_sglang_memory_fraction_must_stay_positive() -> None:
    assert fields(check("sglang", gpuMemoryUtilization=0.1)) == ["spec.gpuMemoryUtilization"]
    assert check("sglang", {"memFractionStatic": 0.08}, gpuMemoryUtilization=0.1) == []


@pytest.mark.parametrize(
    ("engine", "args", "use_instead"),
    [
        ("vllm", ["--tensor-parallel-size", "2"], "spec.parallelism.tensor"),
        ("vllm", ["-tp", "2"], "spec.parallelism.tensor"),
        ("vllm", ["--tensor_parallel_size=2"], "spec.parallelism.tensor"),
        ("vllm", ["--tensor-parallel", "2"], "spec.parallelism.tensor"),
        ("vllm", ["--speculative-config", "{}"], "spec.speculator"),
        ("vllm", ["--port=9000"], "spec.service.port"),
        ("vllm", ["--max-model-len", "4096"], "spec.maxModelLen"),
        ("vllm", ["--served-model-name", "x"], "spec.servedModelName"),
        ("vllm", ["--kv-cache-dtype", "fp8"], "spec.engine.vllm.kvCacheDtype"),
        ("sglang", ["--tp", "2"], "spec.parallelism.tensor"),
        ("sglang", ["--tp-size", "2"], "spec.parallelism.tensor"),
        ("sglang", ["--speculative-algorithm", "EAGLE"], "spec.speculator.method"),
        ("sglang", ["--speculative-num-steps", "2"], "spec.engine.sglang.numSteps"),
        ("sglang", ["--mem-fraction-static", "0.9"], "spec.engine.sglang.memFractionStatic"),
        ("sglang", ["--context-length", "4096"], "spec.maxModelLen"),
        ("sglang", ["--port", "1"], "spec.service.port"),
    ],
)
def test_args_may_not_repeat_operator_flags(engine: str, args: list[str], use_instead: str) -> None:
    errors = check(engine, args=["--enable-prefix-caching", *args])
    assert fields(errors) == ["spec.engine.args[1]"]
    assert use_instead in errors[0].message
    assert args[0] in errors[0].message


@pytest.mark.parametrize(
    ("engine", "args"),
    [
        ("vllm", ["--max-num-seqs", "64", "--enable-prefix-caching", "--tokenizer-mode=auto"]),
        ("vllm", ["--port-offset-not-a-flag-prefix"]),
        ("sglang", ["--max-running-requests", "32", "--attention-backend", "fa3"]),
        ("sglang", ["--cuda-graph-max-bs", "-1"]),
    ],
)
def test_other_args_pass(engine: str, args: list[str]) -> None:
    assert check(engine, args=args) == []


def test_validate_accepts_a_spec_before_the_catalog_fills_it() -> None:
    """The webhook validates the raw spec: no speculator model yet, TP still auto."""
    raw = {
        "verifier": BASE["verifier"],
        "speculator": {"numSpeculativeTokens": 3},
        "engine": {"name": "sglang", "sglang": {"eagleTopk": 1, "numDraftTokens": 5}},
    }
    errors = engines.validate(api.SpeculativeDeploymentSpec.model_validate(raw))
    assert fields(errors) == ["spec.engine.sglang.numDraftTokens"]
    bare = {key: value for key, value in raw.items() if key != "speculator"}
    assert engines.validate(api.SpeculativeDeploymentSpec.model_validate(bare)) == []


SCHEDULE = [{"fromBatch": 1, "toBatch": 8, "tokens": 3}, {"fromBatch": 9, "tokens": 0}]


def test_sglang_refuses_a_schedule_naming_its_version() -> None:
    errors = check("sglang", speculator={**BASE["speculator"], "schedule": SCHEDULE})
    assert fields(errors) == ["spec.speculator.schedule"]
    assert "SGLang 0.5.23" in errors[0].message
    assert check("vllm", speculator={**BASE["speculator"], "schedule": SCHEDULE}) == []


def test_schedule_within_the_token_count_the_catalog_resolved() -> None:
    """The schema compares with a numSpeculativeTokens in the spec; the effective spec's count,
    filled from the catalog, is checked here."""
    raw = {**BASE, "speculator": {"model": BASE["speculator"]["model"], "schedule": SCHEDULE}}
    spec = api.SpeculativeDeploymentSpec.model_validate(raw)
    assert engines.validate(spec) == []
    assert spec.speculator is not None
    resolved = spec.model_copy(
        update={"speculator": spec.speculator.model_copy(update={"num_speculative_tokens": 2})}
    )
    errors = engines.validate(resolved)
    assert fields(errors) == ["spec.speculator.schedule"]
    assert "3 tokens" in errors[0].message and "numSpeculativeTokens 2" in errors[0].message
