"""Acceptance measured from real engines: the tiny pair whose draft is always right and the one
whose draft is always wrong, both served by vLLM (CPU build) on the sandbox's engine node.

The tests run in file order on the session's shared pairs, given an acceptance policy of their
own (a change that leaves the engines running, which the first test checks): idle first (no
verdict, no writes), then under traffic (a verdict each way), then an engine restart (its
counters start again from 0).
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

import pytest

from enginelib import (
    ALL,
    ENGINE_READY_S,
    KEYS,
    NONE,
    NS,
    PAIRS,
    complete,
    engine_counters,
    pod_ready,
    pods,
    sdep_when,
)
from specdeploy_sandbox.cluster import Sandbox
from specdeploy_sandbox.operator_process import LocalOperator
from support.kube import Kubectl, WaitFor, condition, events, get, metric_samples, operator_writes

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


def _engine_pods(k: Kubectl) -> dict[str, tuple[str, int]]:
    """Each pair's engine pod: (uid, restarts)."""
    found = {name: pods(k, name)[0] for name in PAIRS}
    return {
        name: (pod["metadata"]["uid"], pod["status"]["containerStatuses"][0]["restartCount"])
        for name, pod in found.items()
    }


@pytest.fixture(scope="module")
def engines(pairs: dict[str, str], k: Kubectl, wait: WaitFor) -> dict[str, Any]:
    """The shared pairs under this module's acceptance policy, once the operator has taken it up;
    their pod IPs, and their engine pods from before the change."""
    before = _engine_pods(k)
    for name in PAIRS:
        k("patch", "-n", NS, "sdep", name, "--type=merge", "-p", json.dumps({"spec": {"acceptance": POLICY}}))
    for name in PAIRS:

        def taken_up(name: str = name) -> bool:
            body = get(k, NS, "sdep", name)
            return bool(body["status"].get("observedGeneration") == body["metadata"]["generation"])

        wait(taken_up, 60, f"the operator to take up {name}'s acceptance policy")
    return {"ips": pairs, "before": before}


def test_a_new_acceptance_policy_leaves_the_engines_running(engines: dict[str, Any], k: Kubectl) -> None:
    """``spec.acceptance`` is the operator's reading of the engines, not part of their pods."""
    assert _engine_pods(k) == engines["before"]
    for name in PAIRS:
        stored = get(k, NS, "sdep", name)["spec"]["acceptance"]
        assert {key: stored[key] for key in POLICY} == POLICY, stored


def test_idle_engines_stay_unknown_and_cost_no_writes(
    engines: dict[str, Any],
    engine_sandbox: Sandbox,
    engine_operator: LocalOperator,
    k: Kubectl,
    wait: WaitFor,
) -> None:
    for name in (ALL, NONE):
        # What earlier tests sent (a chat with the example) leaves the window first.
        wait(
            lambda name=name: _gauge(engine_operator, "specdeploy_acceptance_window_draft_tokens", name) == 0,
            WINDOW_S + 30,
            f"{name}'s window to empty",
        )
        body = wait(lambda name=name: sdep_when(k, name, EFFECTIVE, "Unknown"), 60, f"{name}'s verdict")
        assert condition(body, EFFECTIVE)["reason"] in ("InsufficientSamples", "NotServing")
        assert "acceptance" not in get(k, NS, "sdep", name)["status"]
    audit_log = engine_sandbox.audit_log
    mark = audit_log.stat().st_size
    start = _reads(engine_operator)
    # Three rounds over both engines: each read answers, nothing changed, nothing is written.
    wait(lambda: _reads(engine_operator) >= start + 6, 60, "three rounds of reads")
    writes = operator_writes(audit_log, NS, mark)
    assert writes == [], [(w["verb"], w["objectRef"]) for w in writes]
    for name in (ALL, NONE):
        assert condition(get(k, NS, "sdep", name), EFFECTIVE)["reason"] == "InsufficientSamples"
        assert _gauge(engine_operator, "specdeploy_acceptance_window_draft_tokens", name) == 0


def test_traffic_gives_each_pair_its_verdict(
    engines: dict[str, Any], engine_operator: LocalOperator, k: Kubectl, wait: WaitFor
) -> None:
    # The accept-none engine requires its API key; the operator reads its /metrics without one.
    for name, ip in engines["ips"].items():
        for _ in range(REQUESTS):
            assert complete(ip, MODEL, TOKENS, api_key=KEYS.get(name)) == TOKENS

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

    warnings = wait(lambda: events(k, NS, NONE, "LowAcceptance"), 30, "the LowAcceptance Event")
    assert warnings[0]["type"] == "Warning"
    assert events(k, NS, ALL, "AcceptanceAboveThreshold")
    assert _gauge(engine_operator, "specdeploy_acceptance_rate", ALL) == 1.0
    assert _gauge(engine_operator, "specdeploy_acceptance_mean_length", ALL) == 4.0
    assert _gauge(engine_operator, "specdeploy_speculation_effective", ALL) == 1.0
    assert _gauge(engine_operator, "specdeploy_speculation_effective", NONE) == 0.0
    table = k("get", "-n", NS, "sdep", ALL)
    assert "1 (4 tokens/step)" in table, table


def test_a_restarted_engine_counts_from_zero(
    engines: dict[str, Any], engine_operator: LocalOperator, k: Kubectl, wait: WaitFor
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
    figures = get(k, NS, "sdep", ALL)["status"]["acceptance"]
    assert (figures["rate"], figures["meanLength"]) == ("1", "4")
    assert _gauge(engine_operator, "specdeploy_acceptance_rate", ALL) == 1.0
