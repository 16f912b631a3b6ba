"""Probe specs and thresholds of engine nodes (the attempts themselves run in the integration test)."""

from __future__ import annotations

import pytest

from specdeploy_sandbox.enginenode.probes import ProbeConfigError, ProbeSpec, ProbeTracker, parse_probe

CONTAINER = {"name": "engine", "ports": [{"name": "http", "containerPort": 8000}]}


def test_http_probe_with_a_named_port_and_kubelets_defaults() -> None:
    spec = parse_probe({"httpGet": {"path": "/health", "port": "http"}}, CONTAINER)
    assert spec == ProbeSpec("httpGet", port=8000, path="/health", period_s=10, timeout_s=1,
                             success_threshold=1, failure_threshold=3)  # fmt: skip


def test_timing_fields_and_other_handlers() -> None:
    probe = {"tcpSocket": {"port": 9000}, "initialDelaySeconds": 2, "periodSeconds": 3, "timeoutSeconds": 4,
             "successThreshold": 2, "failureThreshold": 5, "terminationGracePeriodSeconds": 7}  # fmt: skip
    spec = parse_probe(probe, CONTAINER)
    assert (spec.kind, spec.port) == ("tcpSocket", 9000)
    assert (spec.initial_delay_s, spec.period_s, spec.timeout_s) == (2, 3, 4)
    assert (spec.success_threshold, spec.failure_threshold, spec.termination_grace_s) == (2, 5, 7)
    assert parse_probe({"exec": {"command": ["true"]}}, CONTAINER).command == ("true",)


@pytest.mark.parametrize("probe", [{"httpGet": {"port": "metrics"}}, {"grpc": {"port": 9000}}])
def test_unrunnable_probes_are_config_errors(probe: dict[str, object]) -> None:
    with pytest.raises(ProbeConfigError):
        parse_probe(probe, CONTAINER)


def test_thresholds_decide_the_result_and_attempts_are_a_period_apart() -> None:
    spec = ProbeSpec("httpGet", port=1, initial_delay_s=5, period_s=2,
                     success_threshold=2, failure_threshold=3)  # fmt: skip
    tracker = ProbeTracker.starting(spec, started=100.0)
    assert tracker.next_due == 105.0 and tracker.result is None
    tracker.record(True, 105.0)
    assert tracker.result is None and tracker.next_due == 107.0
    tracker.record(True, 107.0)
    assert tracker.result is True
    tracker.record(False, 109.0, "HTTP probe failed with statuscode: 503")
    tracker.record(False, 111.0)
    assert tracker.result is True, "two failures are below the threshold of three"
    tracker.record(True, 113.0)
    tracker.record(False, 115.0)
    tracker.record(False, 117.0)
    assert tracker.result is True, "a success in between resets the count"
    tracker.record(False, 119.0, "connection refused")
    assert tracker.result is False
    assert tracker.last_failure == "connection refused"
