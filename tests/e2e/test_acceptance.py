"""Acceptance measured from real engines: the tiny pair whose draft is always right and the one
whose draft is always wrong, both served by vLLM (CPU build) on the sandbox's engine node.

The tests run in file order on one pair of engines: idle first (no verdict, no writes), then
under traffic (a verdict each way), then an engine restart (its counters start again from 0).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from clusterlib import Kubectl, WaitFor, metric_samples, operator_writes
from enginelib import (
    ENGINE_READY_S,
    NS,
    complete,
    condition,
    engine_counters,
    get,
    pod_ready,
    pods,
    ready_pairs,
    sdep_when,
)
from specdeploy.sandbox import tiny_models
from specdeploy.sandbox.cluster import Sandbox
from specdeploy.sandbox.operator_process import LocalOperator

ALL, NONE = "accept-all", "accept-none"
MODEL = "sandbox/tiny-qwen3"
WINDOW_S = 30
POLICY = {"minDraftTokens": 150, "windowSeconds": WINDOW_S}
TOKENS = 64
REQUESTS = 4
VERDICT_S = 60.0
EFFECTIVE = "SpeculationEffective"


def _reads(operator: LocalOperator) -> float:
    """Reads of engine /metrics that answered, so far."""
    samples = metric_samples(operator.metrics_url, "specdeploy_engine_metrics_reads_total")
    return sum(value for labels, value in samples if labels["outcome"] == "ok")


def _gauge(operator: LocalOperator, name: str, resource_name: str) -> float | None:
    found = [
        value
        for labels, value in metric_samples(operator.metrics_url, name)
        if labels == {"namespace": NS, "name": resource_name}
    ]
    return found[0] if found else None


def _events(k: Kubectl, name: str, reason: str) -> list[dict[str, Any]]:
    selector = f"involvedObject.name={name},reason={reason}"
    items: list[dict[str, Any]] = get(k, "events", "--field-selector", selector)["items"]
    return items


@pytest.fixture(scope="module")
def engines(engine_operator: LocalOperator, k: Kubectl, wait: WaitFor) -> Iterator[dict[str, str]]:
    """Both pairs Ready; their pod IPs by resource name."""
    with ready_pairs(
        k, wait, {ALL: tiny_models.ACCEPT_ALL, NONE: tiny_models.ACCEPT_NONE}, acceptance=POLICY
    ) as ips:
        yield ips


def test_idle_engines_stay_unknown_and_cost_no_writes(
    engines: dict[str, str],
    engine_sandbox: Sandbox,
    engine_operator: LocalOperator,
    k: Kubectl,
    wait: WaitFor,
) -> None:
    for name in (ALL, NONE):
        body = wait(lambda name=name: sdep_when(k, name, EFFECTIVE, "Unknown"), 60, f"{name}'s verdict")
        assert condition(body, EFFECTIVE)["reason"] in ("InsufficientSamples", "NotServing")
        wait(
            lambda name=name: _events(k, name, "InsufficientSamples"),
            60,
            f"{name} waiting for samples, its Event posted",
        )
        assert "acceptance" not in get(k, "sdep", name)["status"]
    audit_log = engine_sandbox.audit_log
    mark = audit_log.stat().st_size
    start = _reads(engine_operator)
    # Three rounds over both engines: each read answers, nothing changed, nothing is written.
    wait(lambda: _reads(engine_operator) >= start + 6, 60, "three rounds of reads")
    writes = operator_writes(audit_log, NS, mark)
    assert writes == [], [(w["verb"], w["objectRef"]) for w in writes]
    for name in (ALL, NONE):
        assert condition(get(k, "sdep", name), EFFECTIVE)["reason"] == "InsufficientSamples"
        assert _gauge(engine_operator, "specdeploy_acceptance_window_draft_tokens", name) == 0


def test_traffic_gives_each_pair_its_verdict(
    engines: dict[str, str], engine_operator: LocalOperator, k: Kubectl, wait: WaitFor
) -> None:
    for ip in engines.values():
        for _ in range(REQUESTS):
            assert complete(ip, MODEL, TOKENS) == TOKENS

    body = wait(lambda: sdep_when(k, ALL, EFFECTIVE, "True"), VERDICT_S, "accept-all to be effective")
    figures = body["status"]["acceptance"]
    assert float(figures["rate"]) >= 0.9
    # The draft is always right: 3 proposed tokens kept per step, plus the verifier's own.
    assert (figures["rate"], figures["meanLength"], figures["perPosition"]) == ("1", "4", ["1", "1", "1"])
    assert figures["draftTokens"] >= POLICY["minDraftTokens"] and figures["pods"] == 1
    assert condition(body, EFFECTIVE)["reason"] == "AcceptanceAboveThreshold"

    body = wait(lambda: sdep_when(k, NONE, EFFECTIVE, "False"), VERDICT_S, "accept-none to be ineffective")
    figures = body["status"]["acceptance"]
    assert (figures["rate"], figures["meanLength"]) == ("0", "1")
    low = condition(body, EFFECTIVE)
    assert low["reason"] == "LowAcceptance"
    assert "mean acceptance length 1 tokens per verifier step" in low["message"]
    assert "check the pairing" in low["message"]

    warnings = wait(lambda: _events(k, NONE, "LowAcceptance"), 30, "the LowAcceptance Event")
    assert warnings[0]["type"] == "Warning"
    assert _events(k, ALL, "AcceptanceAboveThreshold")
    assert _gauge(engine_operator, "specdeploy_acceptance_rate", ALL) == 1.0
    assert _gauge(engine_operator, "specdeploy_acceptance_mean_length", ALL) == 4.0
    assert _gauge(engine_operator, "specdeploy_speculation_effective", ALL) == 1.0
    assert _gauge(engine_operator, "specdeploy_speculation_effective", NONE) == 0.0
    table = k("get", "-n", NS, "sdep", ALL)
    assert "1 (4 tokens/step)" in table, table


def test_a_restarted_engine_counts_from_zero(
    engines: dict[str, str], engine_operator: LocalOperator, k: Kubectl, wait: WaitFor
) -> None:
    """After a restart the window holds exactly what the new engine process counted: its
    counters went back to 0, and nothing is negative, doubled or left over from before."""
    pod = pods(k, ALL)[0]
    pid = int(pod["status"]["containerStatuses"][0]["containerID"].rsplit("/", 1)[-1])
    killed = time.monotonic()
    os.kill(pid, signal.SIGKILL)

    def back() -> dict[str, Any] | None:
        current = pods(k, ALL)[0]
        restarted = current["status"]["containerStatuses"][0]["restartCount"] >= 1
        return current if restarted and pod_ready(current) else None

    current = wait(back, ENGINE_READY_S, "the engine to restart and be Ready again")
    ip = str(current["status"]["podIP"])
    # What the old process counted has left the window by now.
    time.sleep(max(0.0, WINDOW_S - (time.monotonic() - killed)))
    assert engine_counters(ip)["vllm:spec_decode_num_draft_tokens_total"] == 0
    for _ in range(2):
        complete(ip, MODEL, TOKENS)
    counted = engine_counters(ip)["vllm:spec_decode_num_draft_tokens_total"]
    assert counted > 0
    wait(
        lambda: _gauge(engine_operator, "specdeploy_acceptance_window_draft_tokens", ALL) == counted,
        VERDICT_S,
        f"the window to hold the {counted:.0f} draft tokens the restarted engine counted",
    )
    figures = get(k, "sdep", ALL)["status"]["acceptance"]
    assert (figures["rate"], figures["meanLength"]) == ("1", "4")
    assert _gauge(engine_operator, "specdeploy_acceptance_rate", ALL) == 1.0
