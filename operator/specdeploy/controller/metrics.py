"""Prometheus metrics of the operator itself: how much work and how many writes it does."""

from __future__ import annotations

from prometheus_client import Counter, Histogram, start_http_server

RECONCILES = Counter(
    "specdeploy_reconciles_total",
    "Reconciles run, by outcome: converged, blocked, retry (transient, backing off) or error.",
    ["outcome"],
)
WRITES = Counter("specdeploy_writes_total", "Writes sent to the apiserver, by kind.", ["kind"])
RECONCILE_SECONDS = Histogram(
    "specdeploy_reconcile_duration_seconds",
    "Time to compute and converge one resource.",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30),
)


def serve(address: str, port: int) -> None:
    start_http_server(port, addr=address)
