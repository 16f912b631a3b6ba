"""The operator's acceptance parsers against /metrics text the engines' own code renders.

``sglang_metrics.py`` and ``vllm_metrics.py`` run in each engine's cached venv and record known
requests (SGLang) or drafts (vLLM) through the engine's own metrics collectors, then answer
``GET /metrics`` as the engine's HTTP server does. A renamed family, a changed label, a counter
whose sample only appears later, or an exposition format the parser misreads fails here rather
than as an acceptance figure that silently never appears on a cluster.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine_venvs import install_timeout, run_helper
from specdeploy.acceptance.counters import NoSpeculationMetrics, SpecCounters, counters
from specdeploy.enginefacts import SGLANG_METRICS, VLLM_METRICS

Render = Callable[[str, dict[str, Any]], str]

HELPERS = {
    "sglang": (Path(__file__).with_name("sglang_metrics.py"), "SPECDEPLOY-SGLANG-METRICS "),
    "vllm": (Path(__file__).with_name("vllm_metrics.py"), "SPECDEPLOY-VLLM-METRICS "),
}
RENDER_TIMEOUT_S = 300

# The first run may install the engines (minutes each); later runs reuse the venvs.
pytestmark = pytest.mark.timeout(2 * install_timeout() + 600)

# Three finished EAGLE3 requests: (generation tokens, verify calls), 4 draft tokens per round.
FINISHED = [(64, 17), (32, 9), (100, 30)]
SGLANG_JOB: dict[str, Any] = {
    "requests": [{"generation_tokens": t, "spec_verify_ct": c} for t, c in FINISHED],
    "num_steps": 3,
    "num_draft_tokens": 4,
    "accept_length": 3.76,
}
# Two scheduler steps of [proposed, accepted] drafts, 3 speculative tokens.
VLLM_JOB: dict[str, Any] = {"num_speculative_tokens": 3, "steps": [[[3, 2], [3, 0], [3, 3]], [[3, 1]]]}


def _render(engine: str, job: dict[str, Any]) -> str:
    """The exposition the helper renders in the engine venv, in a fresh multiprocess dir."""
    helper, marker = HELPERS[engine]
    text: str = run_helper(engine, helper, job, marker, RENDER_TIMEOUT_S)
    return text


@pytest.fixture(scope="session")
def render() -> Render:
    """``render(engine, job)``: the engine's /metrics text after the job (memoized)."""
    memo: dict[str, str] = {}

    def run(engine: str, job: dict[str, Any]) -> str:
        key = json.dumps([engine, job], sort_keys=True)
        if key not in memo:
            memo[key] = _render(engine, job)
        return memo[key]

    return run


def _types(text: str) -> dict[str, str]:
    """Each sample name of the exposition and its family's type, as Prometheus reads them."""
    return {s.name: f.type for f in text_string_to_metric_families(text) for s in f.samples}


def test_sglang_counters_from_its_own_collectors(render: Render) -> None:
    text = render("sglang", SGLANG_JOB)
    tokens = sum(t for t, _ in FINISHED)
    calls = sum(c for _, c in FINISHED)
    assert (tokens, calls) == (196, 56)
    # Each request's first token comes from prefill, not from a verify step; each verify step
    # yields the kept drafts plus the verifier's own token: kept = tokens - requests - calls.
    kept = tokens - len(FINISHED) - calls
    assert counters("sglang", text) == SpecCounters(drafts=56, draft_tokens=56 * 3, accepted=kept)


def test_sglang_exposes_the_names_the_parser_reads(render: Render) -> None:
    text = render("sglang", SGLANG_JOB)
    types = _types(text)
    for name, kind in [
        ("sglang:spec_verify_calls_total", "counter"),
        ("sglang:generation_tokens_total", "counter"),
        ("sglang:num_requests_total", "counter"),
        ("sglang:spec_num_draft_tokens", "gauge"),
        ("sglang:spec_num_steps", "gauge"),
    ]:
        assert f"\n{name}{{" in text, f"{name} not in SGLang's exposition"
        assert types.get(name) == kind, f"{name} is a {types.get(name)}, not a {kind}"
    assert {
        SGLANG_METRICS.verify_calls,
        SGLANG_METRICS.generation_tokens,
        SGLANG_METRICS.requests,
        SGLANG_METRICS.draft_tokens_per_round,
        SGLANG_METRICS.steps_per_round,
    } <= types.keys()


@pytest.mark.parametrize(
    "requests",
    [
        pytest.param([], id="no-request-finished"),
        pytest.param([{"generation_tokens": 1, "spec_verify_ct": 0}], id="only-a-one-token-request"),
    ],
)
def test_sglang_before_a_speculative_request_finished(render: Render, requests: list[dict[str, Any]]) -> None:
    """SGLang's verify-call counter has no sample until a request with verify calls finishes, but
    the scheduler's gauges are there already: a ready engine without traffic reads as zero."""
    text = render("sglang", {**SGLANG_JOB, "requests": requests})
    assert "\nsglang:spec_num_draft_tokens{" in text
    assert "sglang:spec_verify_calls" not in text
    assert ("\nsglang:generation_tokens_total{" in text) == bool(requests)
    assert counters("sglang", text) == SpecCounters()


def test_sglang_without_speculation_says_so(render: Render) -> None:
    text = render("sglang", {**SGLANG_JOB, "requests": []})
    without = "\n".join(line for line in text.splitlines() if "sglang:spec_" not in line)
    with pytest.raises(NoSpeculationMetrics):
        counters("sglang", without)


def test_sglang_counters_under_dp_attention(render: Render) -> None:
    """``--tp-size 2 --attn-dp-size 2``: both schedulers are attention-TP rank 0, so both export
    the drafts-per-round gauge; it is read once, not summed (4, not 4 + 4)."""
    job = {
        **SGLANG_JOB,
        "extra_args": ["--tp-size", "2", "--attn-dp-size", "2"],
        "schedulers": [[0, 0], [1, 1]],
    }
    text = render("sglang", job)
    assert text.count("\nsglang:spec_num_draft_tokens{") == 2
    kept = 196 - len(FINISHED) - 56
    assert counters("sglang", text) == SpecCounters(drafts=56, draft_tokens=56 * 3, accepted=kept)


def test_vllm_counters_from_its_own_logger(render: Render) -> None:
    text = render("vllm", VLLM_JOB)
    for name in (
        VLLM_METRICS.drafts,
        VLLM_METRICS.draft_tokens,
        VLLM_METRICS.accepted,
        VLLM_METRICS.accepted_per_position,
    ):
        assert f"\n{name}{{" in text, f"{name} not in vLLM's exposition"
    assert counters("vllm", text) == SpecCounters(
        drafts=4, draft_tokens=12, accepted=6, per_position=(3, 2, 1)
    )


def test_vllm_before_any_draft(render: Render) -> None:
    """vLLM creates its labelled counters with the logger, so it reads as zero, not as absent."""
    text = render("vllm", {**VLLM_JOB, "steps": []})
    assert counters("vllm", text) == SpecCounters(per_position=(0, 0, 0))
