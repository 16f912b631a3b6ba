"""How much the operator costs at N resources: time to Ready, writes, CPU, memory, restarts, and
what its engine metrics reader costs.

Starts a sandbox of its own (or uses --kubeconfig), adds enough simulated H100 nodes for N
single-GPU pairs, runs the operator as a real process and creates N SpeculativeDeployments.
The pods are simulated (Ready, nothing listening), so every read of their /metrics is refused:
the reader's full cost at N ready pods, and the one status write each that says so
(MetricsUnavailable). Prints numbers; asserts nothing. Every server is on loopback; every wait
is bounded.

    python bench/reconcile_scale.py --resources 500
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil
from kubernetes import client, config
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from specdeploy import api
from specdeploy.sandbox import nodes
from specdeploy.sandbox.binaries import ensure_kubectl
from specdeploy.sandbox.cluster import Sandbox
from specdeploy.sandbox.operator_process import LocalOperator, start_operator

REPO = Path(__file__).resolve().parents[1]
CRD = REPO / "crds" / "specdeploy.io_speculativedeployments.yaml"
NAMESPACE = "bench"
GPUS_PER_NODE = 8
# The engine metrics reader's interval (the operator's default).
READ_INTERVAL_S = 30.0
# How long the write counter must stay flat before the operator counts as settled: longer than
# a read interval, so the reader's verdict on the last pods to become Ready is in.
SETTLE_QUIET_S = READ_INTERVAL_S + 10.0
RESTART_QUIET_S = READ_INTERVAL_S + 5.0
# A measurement window (idle CPU, writes and reads), not a wait for something to happen.
IDLE_WINDOW_S = 60.0


def resource(index: int) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "metadata": {"name": f"pair-{index:05d}", "namespace": NAMESPACE},
        "spec": {
            "verifier": {"model": "Qwen/Qwen3-30B-A3B-Instruct-2507"},
            "speculator": {"model": "RedHatAI/Qwen3-30B-A3B-Instruct-2507-speculator.eagle3"},
            "parallelism": {"tensor": 1, "gpuProduct": "h100-80gb"},
        },
    }


def scrape(url: str) -> list[Sample]:
    """Every sample of the operator's /metrics, parsed by prometheus_client."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


def by_label(samples: list[Sample], name: str, label: str) -> dict[str, float]:
    """The values of the samples called ``name``, keyed by their ``label``."""
    return {sample.labels[label]: sample.value for sample in samples if sample.name == name}


def value(samples: list[Sample], name: str) -> float:
    """The value of the one unlabelled sample called ``name``."""
    return next(sample.value for sample in samples if sample.name == name)


def writes(samples: list[Sample]) -> float:
    return sum(by_label(samples, "specdeploy_writes_total", "kind").values())


def reconciles(samples: list[Sample]) -> float:
    return sum(by_label(samples, "specdeploy_reconciles_total", "outcome").values())


def engine_reads(samples: list[Sample]) -> float:
    return sum(by_label(samples, "specdeploy_engine_metrics_reads_total", "outcome").values())


def speculation_reasons(custom: client.CustomObjectsApi) -> dict[str, int]:
    """How many resources show each SpeculationEffective reason."""
    items = custom.list_namespaced_custom_object(api.GROUP, api.VERSION, NAMESPACE, api.PLURAL)["items"]
    reasons: dict[str, int] = {}
    for item in items:
        for cond in item.get("status", {}).get("conditions", []):
            if cond["type"] == api.SPECULATION_EFFECTIVE:
                reasons[cond["reason"]] = reasons.get(cond["reason"], 0) + 1
    return reasons


def proc_usage(pid: int) -> tuple[float, float]:
    """(CPU seconds, resident MiB) of a process: psutil reads them portably, without parsing /proc."""
    process = psutil.Process(pid)
    times = process.cpu_times()
    return times.user + times.system, process.memory_info().rss / 2**20


def ready_count(custom: client.CustomObjectsApi) -> int:
    items = custom.list_namespaced_custom_object(api.GROUP, api.VERSION, NAMESPACE, api.PLURAL)["items"]
    count = 0
    for item in items:
        for cond in item.get("status", {}).get("conditions", []):
            if cond["type"] == "Ready" and cond["status"] == "True":
                count += 1
    return count


def wait(what: str, predicate: Any, timeout: float, interval: float = 1.0) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():
            return time.monotonic() - started
        time.sleep(interval)
    raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")


def settle(url: str, quiet: float, timeout: float) -> tuple[float, float]:
    """Wait until the write counter has been flat for ``quiet`` s: (seconds before it went flat, writes)."""
    started = time.monotonic()
    last = writes(scrape(url))
    flat_since = time.monotonic()
    while time.monotonic() - flat_since < quiet:
        if time.monotonic() - started > timeout:
            raise SystemExit(f"timed out after {timeout:.0f}s waiting for the operator's writes to stop")
        time.sleep(1.0)
        now = writes(scrape(url))
        if now != last:
            last, flat_since = now, time.monotonic()
    return flat_since - started, last


def prepare_cluster(kubeconfig: Path, count: int) -> None:
    """The CRD, enough GPU nodes for ``count`` single-GPU pairs and the namespace: all the operator needs."""
    core = client.CoreV1Api()
    subprocess.run(
        [str(ensure_kubectl()), f"--kubeconfig={kubeconfig}", "apply", "--server-side", "-f", str(CRD)],
        check=True,
        capture_output=True,
    )
    extensions = client.ApiextensionsV1Api()
    wait(
        "the CRD to be Established",
        lambda: any(
            c.type == "Established" and c.status == "True"
            for c in extensions.read_custom_resource_definition(f"{api.PLURAL}.{api.GROUP}").status.conditions
            or []
        ),
        60,
    )
    for i in range((count + GPUS_PER_NODE - 1) // GPUS_PER_NODE):
        nodes.add_node(
            nodes.gpu_node(f"bench-h100-{i:04d}", "NVIDIA-H100-80GB-HBM3", GPUS_PER_NODE), core_v1=core
        )
    core.create_namespace({"metadata": {"name": NAMESPACE}})


def measure_to_ready(operator: LocalOperator, count: int, timeout: float) -> dict[str, Any]:
    """Create ``count`` resources and measure the operator's cost until every one is Ready."""
    custom = client.CustomObjectsApi()
    results: dict[str, Any] = {}
    base_cpu, base_rss = proc_usage(operator.process.pid)
    results["operator_idle_rss_mib"] = round(base_rss, 1)
    started = time.monotonic()
    for i in range(count):
        custom.create_namespaced_custom_object(api.GROUP, api.VERSION, NAMESPACE, api.PLURAL, resource(i))
    results["create_seconds"] = round(time.monotonic() - started, 1)
    results["all_ready_seconds"] = round(
        results["create_seconds"]
        + wait("all Ready", lambda: ready_count(custom) == count, timeout, interval=5.0),
        1,
    )
    cpu, rss = proc_usage(operator.process.pid)
    samples = scrape(operator.metrics_url)
    results["operator_cpu_seconds_to_ready"] = round(cpu - base_cpu, 1)
    results["operator_rss_mib_at_ready"] = round(rss, 1)
    results["writes_per_resource_to_ready"] = round(writes(samples) / count, 2)
    results["reconciles_per_resource_to_ready"] = round(reconciles(samples) / count, 2)
    results["mean_reconcile_ms"] = round(
        1000
        * value(samples, "specdeploy_reconcile_duration_seconds_sum")
        / value(samples, "specdeploy_reconcile_duration_seconds_count"),
        2,
    )
    return results


def measure_idle(operator: LocalOperator, count: int, timeout: float) -> dict[str, Any]:
    """What a settled operator still costs: writes and CPU over an idle window of IDLE_WINDOW_S."""
    results: dict[str, Any] = {}
    # Ready can precede the last rollout transitions (Progressing=False) under load: wait
    # until the write counter has been flat before measuring the idle window.
    settle_seconds, settled_writes = settle(operator.metrics_url, SETTLE_QUIET_S, timeout)
    results["settle_after_ready_seconds"] = round(settle_seconds, 1)
    results["writes_per_resource_settled"] = round(settled_writes / count, 2)
    samples = scrape(operator.metrics_url)
    cpu, _ = proc_usage(operator.process.pid)
    time.sleep(IDLE_WINDOW_S)
    idle = scrape(operator.metrics_url)
    cpu_idle, rss = proc_usage(operator.process.pid)
    results["idle_window_seconds"] = IDLE_WINDOW_S
    results["idle_writes"] = writes(idle) - writes(samples)
    results["idle_cpu_seconds"] = round(cpu_idle - cpu, 2)
    results["idle_rss_mib"] = round(rss, 1)
    results["idle_engine_reads_per_minute"] = round(
        (engine_reads(idle) - engine_reads(samples)) * 60 / IDLE_WINDOW_S
    )
    results["engine_reads_by_outcome"] = by_label(idle, "specdeploy_engine_metrics_reads_total", "outcome")
    results["mean_read_round_seconds"] = round(
        value(idle, "specdeploy_engine_metrics_round_duration_seconds_sum")
        / value(idle, "specdeploy_engine_metrics_round_duration_seconds_count"),
        3,
    )
    results["reconciles_by_outcome"] = by_label(idle, "specdeploy_reconciles_total", "outcome")
    results["writes_by_kind"] = by_label(idle, "specdeploy_writes_total", "kind")
    results["speculation_effective_reasons"] = speculation_reasons(client.CustomObjectsApi())
    return results


def measure_restart(kubeconfig: Path, workdir: Path, count: int, timeout: float) -> dict[str, Any]:
    """A fresh operator over existing resources: how long its resync takes and what it writes."""
    results: dict[str, Any] = {}
    restarted = start_operator(kubeconfig, workdir / "operator-restart.log", webhook_dir=None)
    try:
        started = time.monotonic()
        wait(
            "the restarted operator to resync every resource",
            lambda: reconciles(scrape(restarted.metrics_url)) >= count,
            timeout,
        )
        results["restart_resync_seconds"] = round(time.monotonic() - started, 1)
        # Resyncs still in flight may write: count once the write counter has stopped moving.
        _, results["restart_writes"] = settle(restarted.metrics_url, RESTART_QUIET_S, timeout)
    finally:
        restarted.stop()
    return results


def run(kubeconfig: Path, count: int, workdir: Path, timeout: float) -> dict[str, Any]:
    """Every measurement in order; the first operator is stopped before the restarted one starts."""
    config.load_kube_config(str(kubeconfig))
    prepare_cluster(kubeconfig, count)
    results: dict[str, Any] = {"resources": count}
    operator = start_operator(kubeconfig, workdir / "operator.log", webhook_dir=None)
    try:
        results.update(measure_to_ready(operator, count, timeout))
        results.update(measure_idle(operator, count, timeout))
    finally:
        operator.stop()
    results.update(measure_restart(kubeconfig, workdir, count, timeout))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resources", type=int, default=500)
    parser.add_argument("--kubeconfig", type=Path, help="use this cluster instead of a new sandbox")
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="specdeploy-bench-") as tmp:
        workdir = Path(tmp)
        if args.kubeconfig:
            results = run(args.kubeconfig, args.resources, workdir, args.timeout)
        else:
            sandbox = Sandbox(f"bench-{os.getpid()}", workdir / "sandboxes")
            try:
                sandbox.up(owner_pid=os.getpid(), engine_nodes=0)
                results = run(sandbox.kubeconfig, args.resources, workdir, args.timeout)
            finally:
                sandbox.down()
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
