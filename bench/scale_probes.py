"""What the scale benchmark reads: the operator's and the apiserver's metrics, CPU and memory of
processes, object counts, and the waits (milestones in order, counters gone flat) it times."""

from __future__ import annotations

import argparse
import json
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from specdeploy import api, children
from specdeploy_sandbox.binaries import ensure_kubectl
from specdeploy_sandbox.cluster import Sandbox

MANAGED = f"{children.MANAGED_BY_LABEL}={children.MANAGED_BY}"
POLL_S = 1.0


def kubectl(kubeconfig: Path, *args: str, timeout: float) -> None:
    subprocess.run(
        [str(ensure_kubectl()), f"--kubeconfig={kubeconfig}", *args],
        check=True,
        capture_output=True,
        timeout=timeout,
    )


def scrape(url: str) -> list[Sample]:
    """Every sample of the operator's /metrics, parsed by prometheus_client."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


def by_label(samples: list[Sample], name: str, label: str) -> dict[str, float]:
    """The values of the samples called ``name``, keyed by their ``label``."""
    return {sample.labels[label]: sample.value for sample in samples if sample.name == name}


def total(samples: list[Sample], name: str) -> float:
    return sum(sample.value for sample in samples if sample.name == name)


def writes(samples: list[Sample]) -> float:
    return total(samples, "specdeploy_writes_total")


def reconciles(samples: list[Sample]) -> float:
    return total(samples, "specdeploy_reconciles_total")


def engine_reads(samples: list[Sample]) -> float:
    return total(samples, "specdeploy_engine_metrics_reads_total")


def cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def control_plane_cpu(kubeconfig: Path) -> float | None:
    """CPU seconds the sandbox's control plane (apiserver, etcd, controllers, scheduler, KWOK)
    has used, when ``kubeconfig`` is a sandbox's: on a machine the control plane shares with the
    operator, the two paths' times are their CPU work divided by the cores."""
    state = Sandbox(kubeconfig.parent.name, kubeconfig.parent.parent).read_state()
    if state is None:
        return None
    pids = [info["pid"] for info in state.get("processes", {}).values()]
    return sum(cpu_seconds(pid) for pid in pids if psutil.pid_exists(pid))


def cpu_since(before: float | None, kubeconfig: Path) -> float | None:
    after = control_plane_cpu(kubeconfig)
    return None if before is None or after is None else round(after - before, 1)


def rss_mib(pid: int) -> float:
    return float(psutil.Process(pid).memory_info().rss / 2**20)


def peak_rss_mib(pid: int) -> float:
    """The most the process has held resident since it started (the kernel's high-water mark, so
    no short peak between two samples is missed)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return rss_mib(pid)


def count_objects(lister: Callable[..., Any], namespace: str) -> int:
    """How many objects a list would return, from a one-item page (the apiserver's count, which it
    gives only for lists without a selector: the benchmark's namespaces hold nothing else)."""
    page = lister(namespace, limit=1)
    return len(page.items) + (page.metadata.remaining_item_count or 0)


def ready_deployments(namespace: str) -> int:
    """Deployments whose every replica is Ready: the engine pods are up."""
    response = client.AppsV1Api().list_namespaced_deployment(
        namespace, label_selector=MANAGED, _preload_content=False
    )
    items = json.loads(response.data)["items"]
    return sum(
        1
        for item in items
        if item.get("status", {}).get("readyReplicas", 0) >= item["spec"].get("replicas", 1)
    )


def _with_condition(namespace: str, held: Callable[[dict[str, Any]], bool]) -> int:
    """Resources of ``namespace`` holding a condition for which ``held`` is true."""
    items = client.CustomObjectsApi().list_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL
    )["items"]
    return sum(1 for item in items for cond in item.get("status", {}).get("conditions", []) if held(cond))


def ready_resources(namespace: str) -> int:
    return _with_condition(namespace, lambda c: c["type"] == api.READY and c["status"] == "True")


# SpeculationEffective reasons that are not yet a verdict on the pods being read.
NO_VERDICT_YET = ("InsufficientSamples", "NotServing")


def judged_resources(namespace: str) -> int:
    """Resources whose engine metrics reader's verdict is in (on simulated pods, which answer no
    /metrics: MetricsUnavailable, a whole window after their first read)."""
    return _with_condition(
        namespace, lambda c: c["type"] == api.SPECULATION_EFFECTIVE and c["reason"] not in NO_VERDICT_YET
    )


def milestones(checks: dict[str, Callable[[], bool]], started: float, timeout: float) -> dict[str, float]:
    """Seconds from ``started`` until each check first held, in order: a milestone counts only
    once those before it are reached (all pods Ready means nothing while a Service is missing),
    and each check is polled only from then until it holds."""
    reached: dict[str, float] = {}
    while len(reached) < len(checks):
        if time.monotonic() - started > timeout:
            missing = sorted(set(checks) - set(reached))
            raise SystemExit(f"timed out after {timeout:.0f}s waiting for {', '.join(missing)}")
        for name, check in checks.items():
            if name in reached:
                continue
            if not check():
                break
            reached[name] = round(time.monotonic() - started, 1)
        time.sleep(POLL_S)
    return reached


def rollout_checks(namespace: str, count: int) -> dict[str, Callable[[], bool]]:
    apps, core = client.AppsV1Api(), client.CoreV1Api()
    return {
        "children": lambda: (
            count_objects(apps.list_namespaced_deployment, namespace) == count
            and count_objects(core.list_namespaced_service, namespace) == count
        ),
        "ready": lambda: ready_deployments(namespace) == count,
    }


def flat(read: Callable[[], float], quiet: float, timeout: float) -> tuple[float, float]:
    """Wait until ``read()`` has not moved for ``quiet`` s: (seconds until its last move, value)."""
    started = time.monotonic()
    last = read()
    moved = started
    while time.monotonic() - moved < quiet:
        if time.monotonic() - started > timeout:
            raise SystemExit(f"timed out after {timeout:.0f}s waiting for the operator to settle")
        time.sleep(0.5)
        now = read()
        if now != last:
            last, moved = now, time.monotonic()
    return moved - started, last


def settle(
    metrics_url: str, namespace: str, count: int, quiet: float, timeout: float, reader: bool
) -> tuple[float, float]:
    """Wait until the operator is done with a rollout: with its engine metrics reader on, every
    verdict in (which comes a window after Ready), then its write counter flat for ``quiet`` s.
    Returns (seconds until the last write, writes)."""
    started = time.monotonic()
    if reader:
        milestones({"judged": lambda: judged_resources(namespace) == count}, started, timeout)
    _, settled = flat(lambda: writes(scrape(metrics_url)), quiet, timeout)
    return time.monotonic() - started - quiet, settled


def reads_engines(operator_args: tuple[str, ...]) -> bool:
    """Whether an operator started with these arguments runs its engine metrics reader (on
    unless `--acceptance-interval 0`)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--acceptance-interval", type=float)
    known, _ = parser.parse_known_args(operator_args)
    return known.acceptance_interval != 0
