"""The scale benchmark's measurement paths, in the order one run takes them: raw `kubectl apply`,
the floor (the fewest writes any conventional operator makes), the resources applied alone, the
operator to Ready, idle and restarted (bench/reconcile_scale.py says what each proves)."""

from __future__ import annotations

import copy
import functools
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from scale_probes import (
    by_label,
    control_plane_cpu,
    count_objects,
    cpu_seconds,
    cpu_since,
    engine_reads,
    flat,
    kubectl,
    milestones,
    peak_rss_mib,
    reads_engines,
    ready_resources,
    reconciles,
    rollout_checks,
    rss_mib,
    scrape,
    settle,
    writes,
)
from scale_report import ratios

from specdeploy import api, pipeline, planning
from specdeploy.controller import diffing, status
from specdeploy.controller.kube import FIELD_MANAGER, KubeClient
from specdeploy.modelinfo import ModelResolver
from specdeploy_sandbox import nodes
from specdeploy_sandbox.operator_process import LocalOperator, start_operator

REPO = Path(__file__).resolve().parents[1]
CRD = REPO / "crds" / "specdeploy.io_speculativedeployments.yaml"
NAMESPACE = "bench"
RAW_NAMESPACE = "bench-raw"
ALONE_NAMESPACE = "bench-alone"
FLOOR_NAMESPACE = "bench-floor"
# Concurrent status and Event writers on the floor path (a kopf operator writes from several
# handler tasks at once too).
FLOOR_WRITERS = 4
# Seconds the idle control plane is measured for before the floor path, to take its background
# CPU out of the price of a write.
FLOOR_IDLE_S = 5.0
GPUS_PER_NODE = 8
GPU_INVENTORY = f"h100-80gb:{GPUS_PER_NODE}"
# The engine metrics reader's interval (the operator's default).
READ_INTERVAL_S = 30.0
# How long the write counter must stay flat, once every verdict is in, before the operator
# counts as settled: longer than a read interval, so no round's write is still to come.
SETTLE_QUIET_S = READ_INTERVAL_S + 10.0
# A restarted operator has re-reconciled everything once its reconcile counter stops moving.
RESYNC_QUIET_S = 5.0


def resource(index: int, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "metadata": {"name": f"pair-{index:05d}", "namespace": namespace},
        "spec": {
            "verifier": {"model": "Qwen/Qwen3-30B-A3B-Instruct-2507"},
            "speculator": {"model": "RedHatAI/Qwen3-30B-A3B-Instruct-2507-speculator.eagle3"},
            "parallelism": {"tensor": 1, "gpuProduct": "h100-80gb"},
        },
    }


def write_resources(path: Path, count: int, namespace: str) -> Path:
    path.write_text(yaml.safe_dump_all([resource(i, namespace) for i in range(count)]))
    return path


def prepare_cluster(kubeconfig: Path, count: int) -> None:
    """The CRD, enough GPU nodes for ``count`` single-GPU pairs and the namespaces."""
    core = client.CoreV1Api()
    kubectl(kubeconfig, "apply", "--server-side", "-f", str(CRD), timeout=60)
    crds = client.ApiextensionsV1Api()

    def established() -> bool:
        # Polled: `kubectl wait` fails outright while the new CRD has no conditions yet.
        conditions = crds.read_custom_resource_definition(f"{api.PLURAL}.{api.GROUP}").status.conditions
        return any(c.type == "Established" and c.status == "True" for c in conditions or [])

    milestones({"established": established}, time.monotonic(), 60)
    for i in range((count + GPUS_PER_NODE - 1) // GPUS_PER_NODE):
        nodes.add_node(
            nodes.gpu_node(f"bench-h100-{i:04d}", "NVIDIA-H100-80GB-HBM3", GPUS_PER_NODE), core_v1=core
        )
    for namespace in (NAMESPACE, RAW_NAMESPACE, ALONE_NAMESPACE, FLOOR_NAMESPACE):
        core.create_namespace({"metadata": {"name": namespace}})


def delete_namespace(kubeconfig: Path, namespace: str, timeout: float) -> None:
    """The namespace and everything in it, gone (waited for)."""
    wait_flag = f"--timeout={timeout:.0f}s"
    kubectl(kubeconfig, "delete", "namespace", namespace, "--wait=true", wait_flag, timeout=timeout + 30)


def render_children(crs: Path, out: Path, timeout: float) -> Path:
    """The children of the resources in ``crs``, rendered offline as one file (``out``)."""
    with out.open("w") as stream:
        subprocess.run(
            [sys.executable, "-m", "specdeploy", "render", "-f", str(crs), "--gpus", GPU_INVENTORY],
            check=True,
            stdout=stream,
            timeout=timeout,
        )
    return out


def measure_raw(kubeconfig: Path, count: int, workdir: Path, timeout: float) -> dict[str, Any]:
    """The limit: the same children rendered offline and applied by hand, as one file."""
    crs = write_resources(workdir / "raw-resources.yaml", count, RAW_NAMESPACE)
    started = time.monotonic()
    rendered = render_children(crs, workdir / "raw-children.yaml", timeout)
    results: dict[str, Any] = {"rawRenderSeconds": round(time.monotonic() - started, 1)}
    cpu = control_plane_cpu(kubeconfig)
    started = time.monotonic()
    kubectl(kubeconfig, "apply", "--server-side", "-f", str(rendered), timeout=timeout)
    results["rawApplySeconds"] = round(time.monotonic() - started, 1)
    reached = milestones(rollout_checks(RAW_NAMESPACE, count), started, timeout)
    results["rawSecondsToAllChildrenCreated"] = reached["children"]
    results["rawSecondsToAllReady"] = reached["ready"]
    results["rawControlPlaneCpuSecondsToReady"] = cpu_since(cpu, kubeconfig)
    results["rawEventsPerResource"] = events_per_resource(RAW_NAMESPACE, count)
    # Free the GPUs for the operator's run: the namespace and everything in it, gone.
    started = time.monotonic()
    delete_namespace(kubeconfig, RAW_NAMESPACE, timeout)
    results["rawCleanupSeconds"] = round(time.monotonic() - started, 1)
    return results


def convention_writes(crs: list[dict[str, Any]]) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """What an operator keeping the conventions writes beyond the raw path's children, at the
    fewest, computed by the operator's own code: per resource the status on taking it up (plan,
    command, conditions, observedGeneration) and the status once its Deployment is rolled out."""
    resolver, inventory = ModelResolver(), planning.parse_gpus_flag(GPU_INVENTORY)
    writes: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for cr in crs:
        body = copy.deepcopy(cr)
        body["metadata"]["generation"] = 1
        desired = pipeline.compute(body, resolver, inventory)
        deployment = desired.child("Deployment")
        assert deployment is not None, desired.message
        first, _ = status.status_for(body, desired, None)
        child = diffing.stamped(deployment)
        rolled_out = {
            **child,
            "metadata": {**child["metadata"], "generation": 1},
            "status": {"observedGeneration": 1, "replicas": 1, "readyReplicas": 1, "updatedReplicas": 1},
        }
        last, _ = status.status_for({**body, "status": first}, desired, rolled_out)
        assert first is not None and last is not None
        writes[body["metadata"]["name"]] = (first, last)
    return writes


def write_all(calls: list[Callable[[], Any]]) -> None:
    with ThreadPoolExecutor(FLOOR_WRITERS) as pool:
        for future in [pool.submit(call) for call in calls]:
            future.result()


def idle_cpu_rate(kubeconfig: Path, seconds: float) -> float | None:
    """Control plane CPU seconds a second while nothing is asked of it (node heartbeats, leases)."""
    before = control_plane_cpu(kubeconfig)
    time.sleep(seconds)
    after = control_plane_cpu(kubeconfig)
    return None if before is None or after is None else (after - before) / seconds


def cpu_ms_per_write(
    kubeconfig: Path, calls: list[Callable[[], Any]], idle_rate: float | None
) -> float | None:
    """Control plane CPU milliseconds per write of a burst, less what it uses idle meanwhile."""
    before, started = control_plane_cpu(kubeconfig), time.monotonic()
    write_all(calls)
    after = control_plane_cpu(kubeconfig)
    if before is None or after is None or idle_rate is None:
        return None
    busy = after - before - idle_rate * (time.monotonic() - started)
    return round(busy * 1000 / len(calls), 1)


def measure_floor(kubeconfig: Path, count: int, workdir: Path, timeout: float) -> dict[str, Any]:
    """The fewest writes any operator keeping the conventions could make, made by a client with no
    logic of its own: the resources and their rendered children applied as one file, one status
    write each on taking it up, and at Ready one status write and one Event each. Timed until
    every resource says Ready=True; its control plane CPU over the raw path's is the floor of the
    operator path's on shared cores, and the last two bursts give the price of a status write
    and of an Event."""
    crs = write_resources(workdir / "floor-resources.yaml", count, FLOOR_NAMESPACE)
    rendered = render_children(crs, workdir / "floor-children.yaml", timeout)
    statuses = convention_writes([resource(i, FLOOR_NAMESPACE) for i in range(count)])
    # The operator's own writer: the same client, patch and Event body as its reconciles use.
    kube = KubeClient(connections=FLOOR_WRITERS)

    def write_status(name: str, body: dict[str, Any]) -> Callable[[], None]:
        return functools.partial(kube.patch_status, (FLOOR_NAMESPACE, name), body)

    def post_ready(cr: dict[str, Any]) -> Callable[[], None]:
        """The one Event every resource's rollout posts: its Ready transition."""
        ready = statuses[cr["metadata"]["name"]][1]
        cond = next(c for c in ready["conditions"] if c["type"] == api.READY)
        message = f"Ready=True: {cond['message']}"
        return functools.partial(kube.post_event, cr, "Normal", cond["reason"], message)

    idle_rate = idle_cpu_rate(kubeconfig, FLOOR_IDLE_S)
    cpu, client_cpu = control_plane_cpu(kubeconfig), time.process_time()
    started = time.monotonic()
    kubectl(kubeconfig, "apply", "--server-side", "-f", str(crs), "-f", str(rendered), timeout=timeout)
    applied = kube.custom.list_namespaced_custom_object(api.GROUP, api.VERSION, FLOOR_NAMESPACE, api.PLURAL)
    write_all([write_status(name, taken) for name, (taken, _) in statuses.items()])
    milestones(rollout_checks(FLOOR_NAMESPACE, count), started, timeout)
    # With the rollout done, each burst's control plane CPU is its own: the price of one write.
    ready_writes = [write_status(name, ready) for name, (_, ready) in statuses.items()]
    events = [post_ready(cr) for cr in applied["items"]]
    results = {
        "floorStatusWriteControlPlaneCpuMs": cpu_ms_per_write(kubeconfig, ready_writes, idle_rate),
        "floorEventControlPlaneCpuMs": cpu_ms_per_write(kubeconfig, events, idle_rate),
    }
    reached = milestones({"ready": lambda: ready_resources(FLOOR_NAMESPACE) == count}, started, timeout)
    results["floorSecondsToAllReady"] = reached["ready"]
    results["floorControlPlaneCpuSecondsToReady"] = cpu_since(cpu, kubeconfig)
    results["floorClientCpuSeconds"] = round(time.process_time() - client_cpu, 1)
    delete_namespace(kubeconfig, FLOOR_NAMESPACE, timeout)
    return results


def events_per_resource(namespace: str, count: int) -> float:
    """Events in the namespace (the operator's transitions, the controllers' and scheduler's),
    per resource: each one an apiserver write too."""
    return round(count_objects(client.CoreV1Api().list_namespaced_event, namespace) / count, 2)


def operator_events_per_resource(namespace: str, count: int) -> float:
    """The Events the operator posted in the namespace per resource, a repeat it aggregated into
    an earlier Event counted too (that Event's ``count``)."""
    core, total, token = client.CoreV1Api(), 0, None
    while True:
        page = core.list_namespaced_event(
            namespace, field_selector=f"source={FIELD_MANAGER}", limit=500, _continue=token
        )
        total += sum(event.count or 1 for event in page.items)
        token = page.metadata._continue
        if not token:
            return round(total / count, 2)


def measure_apply_alone(kubeconfig: Path, count: int, workdir: Path, timeout: float) -> dict[str, Any]:
    """The resources file applied with no operator running (and then deleted): what the apply
    step costs an idle control plane, against which the operator path's apply is compared."""
    crs = write_resources(workdir / "alone-resources.yaml", count, ALONE_NAMESPACE)
    cpu = control_plane_cpu(kubeconfig)
    started = time.monotonic()
    kubectl(kubeconfig, "apply", "--server-side", "-f", str(crs), timeout=timeout)
    results = {
        "applyAloneSeconds": round(time.monotonic() - started, 1),
        "applyAloneControlPlaneCpuSeconds": cpu_since(cpu, kubeconfig),
    }
    delete_namespace(kubeconfig, ALONE_NAMESPACE, timeout)
    return results


def measure_to_ready(
    kubeconfig: Path, operator: LocalOperator, count: int, workdir: Path, timeout: float
) -> dict[str, Any]:
    """The operator's path: the resources applied as one file, timed like the raw path."""
    pid = operator.process.pid
    results: dict[str, Any] = {"operatorIdleRssMiB": round(rss_mib(pid), 1)}
    base_cpu, plane_cpu = cpu_seconds(pid), control_plane_cpu(kubeconfig)
    crs = write_resources(workdir / "resources.yaml", count, NAMESPACE)
    started = time.monotonic()
    kubectl(kubeconfig, "apply", "--server-side", "-f", str(crs), timeout=timeout)
    results["applySeconds"] = round(time.monotonic() - started, 1)
    checks = rollout_checks(NAMESPACE, count)
    checks["resourcesReady"] = lambda: ready_resources(NAMESPACE) == count
    reached = milestones(checks, started, timeout)
    results["secondsToAllChildrenCreated"] = reached["children"]
    results["secondsToAllReady"] = reached["ready"]
    results["secondsToAllResourcesReady"] = reached["resourcesReady"]
    samples = scrape(operator.metrics_url)
    results["operatorCpuSecondsToReady"] = round(cpu_seconds(pid) - base_cpu, 1)
    results["controlPlaneCpuSecondsToReady"] = cpu_since(plane_cpu, kubeconfig)
    results["writesPerResourceToReady"] = round(writes(samples) / count, 2)
    results["reconcilesPerResourceToReady"] = round(reconciles(samples) / count, 2)
    return results


def measure_idle(
    operator: LocalOperator, count: int, window: float, timeout: float, reader: bool
) -> dict[str, Any]:
    """What a settled operator still costs: writes, CPU and engine reads over an idle window."""
    pid = operator.process.pid
    results: dict[str, Any] = {}
    # Ready precedes the reader's verdicts (a window later) and can precede the last rollout
    # transitions: wait for both before measuring the idle window.
    settle_seconds, settled = settle(operator.metrics_url, NAMESPACE, count, SETTLE_QUIET_S, timeout, reader)
    results["settleAfterReadySeconds"] = round(settle_seconds, 1)
    results["writesPerResource"] = round(settled / count, 2)
    results["eventsPerResource"] = operator_events_per_resource(NAMESPACE, count)
    results["namespaceEventsPerResource"] = events_per_resource(NAMESPACE, count)
    before, cpu = scrape(operator.metrics_url), cpu_seconds(pid)
    time.sleep(window)
    after = scrape(operator.metrics_url)
    per_minute = 60.0 / window
    results["idleWindowSeconds"] = window
    results["idleWritesPerMinute"] = round((writes(after) - writes(before)) * per_minute, 2)
    results["idleCpuSecondsPerMinute"] = round((cpu_seconds(pid) - cpu) * per_minute, 2)
    results["operatorSettledRssMiB"] = round(rss_mib(pid), 1)
    results["operatorRssMiB"] = round(peak_rss_mib(pid), 1)
    results["engineReadsPerMinute"] = round((engine_reads(after) - engine_reads(before)) * per_minute)
    results["writesByKind"] = by_label(after, "specdeploy_writes_total", "kind")
    results["statusWritesByCause"] = by_label(after, "specdeploy_status_writes_total", "cause")
    return results


def measure_restart(
    kubeconfig: Path, workdir: Path, count: int, timeout: float, operator_args: tuple[str, ...] = ()
) -> dict[str, Any]:
    """A fresh operator over existing resources: how long until it has reconciled them all (its
    reconcile counter past N and then still), and what it writes."""
    started = time.monotonic()
    restarted = start_operator(kubeconfig, workdir / "operator-restart.log", None, operator_args)
    results: dict[str, Any] = {"restartSecondsToHealthy": round(time.monotonic() - started, 1)}
    try:
        url = restarted.metrics_url
        started = time.monotonic()
        milestones({"resync": lambda: reconciles(scrape(url)) >= count}, started, timeout)
        # Passes still running past N (children's events fold into them): count until the last.
        past_count = time.monotonic() - started
        seconds, _ = flat(lambda: reconciles(scrape(url)), RESYNC_QUIET_S, timeout)
        results["restartSecondsToReconcileAll"] = round(past_count + seconds, 1)
        results["restartWrites"] = writes(scrape(restarted.metrics_url))
        results["restartRssMiB"] = round(rss_mib(restarted.process.pid), 1)
        results["restartPeakRssMiB"] = round(peak_rss_mib(restarted.process.pid), 1)
    finally:
        restarted.stop()
    return results


def run(
    kubeconfig: Path,
    count: int,
    workdir: Path,
    idle_window: float,
    timeout: float,
    operator_args: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Every measurement in order; the first operator is stopped before the restarted one starts."""
    config.load_kube_config(str(kubeconfig))
    prepare_cluster(kubeconfig, count)
    results: dict[str, Any] = {"resources": count, "operatorArgs": list(operator_args)}
    results.update(measure_raw(kubeconfig, count, workdir, timeout))
    results.update(measure_floor(kubeconfig, count, workdir, timeout))
    results.update(measure_apply_alone(kubeconfig, count, workdir, timeout))
    operator = start_operator(kubeconfig, workdir / "operator.log", None, operator_args)
    try:
        results.update(measure_to_ready(kubeconfig, operator, count, workdir, timeout))
        results.update(measure_idle(operator, count, idle_window, timeout, reads_engines(operator_args)))
    finally:
        operator.stop()
    results.update(measure_restart(kubeconfig, workdir, count, timeout, operator_args))
    results.update(ratios(results))
    return results
