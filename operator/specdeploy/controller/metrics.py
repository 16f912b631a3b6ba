"""Prometheus metrics of the operator itself: how much work and how many writes it does, what the
engine reader costs, and each resource's acceptance (so alerts need no scrape of engine pods)."""

from __future__ import annotations

import contextlib
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from specdeploy import api

RECONCILES = Counter(
    "specdeploy_reconciles_total",
    "Reconciles run, by outcome: converged, blocked, retry (transient, backing off) or error.",
    ["outcome"],
)
LEADER = Gauge(
    "specdeploy_leader",
    "1 while this replica reconciles (holds the Lease, or runs without leader election), else 0.",
)
WRITES = Counter("specdeploy_writes_total", "Writes sent to the apiserver, by kind.", ["kind"])
STATUS_WRITES = Counter(
    "specdeploy_status_writes_total",
    "Status writes, by cause: first (taking the resource up), the type of the first condition "
    "whose status, reason or message changed, else the first status field that did.",
    ["cause"],
)
ECHOES = Counter(
    "specdeploy_status_echoes_total",
    "Watch events of a SpeculativeDeployment that only showed back the status the operator "
    "wrote, so no pass was run.",
)
EVENTS = Counter(
    "specdeploy_events_total",
    "Kubernetes Events on SpeculativeDeployments, by type and outcome: posted (a new Event), "
    "aggregated (a repeat raised an Event's count) or failed.",
    ["type", "outcome"],
)
RECONCILE_SECONDS = Histogram(
    "specdeploy_reconcile_duration_seconds",
    "Time to compute and converge one resource.",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30),
)
ENGINE_READS = Counter(
    "specdeploy_engine_metrics_reads_total",
    "Reads of engine pods' /metrics, by outcome: "
    "ok, unreachable, no_speculation, unparsable or unknown_engine.",
    ["outcome"],
)
ENGINE_LOG_READS = Counter(
    "specdeploy_engine_log_reads_total",
    "Reads of a crashed engine run's log for its root cause (one per run), by outcome: "
    "cause (found), none (read, nothing found) or unreadable.",
    ["outcome"],
)
ENGINE_READ_ROUND_SECONDS = Histogram(
    "specdeploy_engine_metrics_round_duration_seconds",
    "Time one round of engine metrics reads took (all resources).",
    buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60),
)
ACCEPTANCE_RATE = Gauge(
    "specdeploy_acceptance_rate",
    "Accepted / proposed draft tokens of a SpeculativeDeployment, as in its status.",
    ["namespace", "name"],
)
ACCEPTANCE_MEAN_LENGTH = Gauge(
    "specdeploy_acceptance_mean_length",
    "Tokens per verifier step (1 + accepted / drafts) of a SpeculativeDeployment, as in its status.",
    ["namespace", "name"],
)
WINDOW_DRAFT_TOKENS = Gauge(
    "specdeploy_acceptance_window_draft_tokens",
    "Draft tokens the engines proposed in a SpeculativeDeployment's window, as of the last read "
    "(the sample acceptance is judged on; absent while no engine pod is read).",
    ["namespace", "name"],
)
SPECULATION_EFFECTIVE = Gauge(
    "specdeploy_speculation_effective",
    "The SpeculationEffective condition: 1 True, 0 False (LowAcceptance); absent while Unknown.",
    ["namespace", "name"],
)


def publish_acceptance(key: tuple[str | None, str], status: dict[str, Any]) -> None:
    """Set (or remove) one resource's acceptance series from the status it now has."""
    labels = (key[0] or "", key[1])
    figures = status.get("acceptance") or {}
    found = [c for c in status.get("conditions") or [] if c.get("type") == api.SPECULATION_EFFECTIVE]
    effective = found[0].get("status") if found else None
    for gauge, value in (
        (ACCEPTANCE_RATE, figures.get("rate")),
        (ACCEPTANCE_MEAN_LENGTH, figures.get("meanLength")),
        (SPECULATION_EFFECTIVE, {"True": 1, "False": 0}.get(effective or "")),
    ):
        if value is None:
            _remove(gauge, labels)
        else:
            gauge.labels(*labels).set(float(value))


def publish_window(key: tuple[str | None, str], draft_tokens: int | None) -> None:
    """The live sample of one resource's window (None: it holds no window)."""
    labels = (key[0] or "", key[1])
    if draft_tokens is None:
        _remove(WINDOW_DRAFT_TOKENS, labels)
    else:
        WINDOW_DRAFT_TOKENS.labels(*labels).set(draft_tokens)


def forget_acceptance(key: tuple[str | None, str]) -> None:
    for gauge in (ACCEPTANCE_RATE, ACCEPTANCE_MEAN_LENGTH, SPECULATION_EFFECTIVE, WINDOW_DRAFT_TOKENS):
        _remove(gauge, (key[0] or "", key[1]))


def _remove(gauge: Gauge, labels: tuple[str, str]) -> None:
    with contextlib.suppress(KeyError):
        gauge.remove(*labels)


def serve(address: str, port: int) -> None:
    start_http_server(port, addr=address)
