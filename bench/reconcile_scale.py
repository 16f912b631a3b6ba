"""How much the operator costs at N resources, side by side with its limit: the same children
applied by hand with `kubectl apply --server-side`.

For each N (fresh sandbox each, N/8 simulated 8 x H100 nodes): first the raw path, the N
resources' children rendered offline with `specdeploy render` and applied as one file; then the
floor path, the fewest writes any operator keeping the Kubernetes conventions could make (the
resources and their children as one file, a status write each on taking it up and at Ready, a
Ready Event each) made by a client with no logic of its own; then (each earlier namespace
deleted) the operator as a real process, with the N resources applied the same way. The raw and
operator paths are timed to all children created and to all engine pods Ready (every
Deployment's ready replicas), the floor and operator paths to every resource Ready=True. Then
the operator's writes, CPU and memory until settled and while idle, and a restarted operator's
resync. The pods are simulated (Ready, nothing listening), so every read of their /metrics is
refused: the engine metrics reader's full cost at N ready pods.

Prints numbers, asserts nothing; every server is on loopback, every wait bounded.

    python bench/reconcile_scale.py --resources 1000
    python bench/reconcile_scale.py --resources 250 1000 3000 --plot docs/images/scale.png
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
import yaml
from kubernetes import client, config
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from specdeploy import api, children, pipeline, planning
from specdeploy.controller import diffing, status
from specdeploy.controller.kube import KubeClient
from specdeploy.modelinfo import ModelResolver
from specdeploy.sandbox import nodes
from specdeploy.sandbox.binaries import ensure_kubectl
from specdeploy.sandbox.cluster import Sandbox
from specdeploy.sandbox.operator_process import LocalOperator, start_operator

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
MANAGED = f"{children.MANAGED_BY_LABEL}={children.MANAGED_BY}"
# The engine metrics reader's interval (the operator's default).
READ_INTERVAL_S = 30.0
# How long the write counter must stay flat before the operator counts as settled: longer than
# a read interval, so the reader's verdict on the last pods to become Ready is in.
SETTLE_QUIET_S = READ_INTERVAL_S + 10.0
# A restarted operator has re-reconciled everything once its reconcile counter stops moving.
RESYNC_QUIET_S = 5.0
POLL_S = 1.0


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


def ready_resources(namespace: str) -> int:
    items = client.CustomObjectsApi().list_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL
    )["items"]
    return sum(
        1
        for item in items
        for cond in item.get("status", {}).get("conditions", [])
        if cond["type"] == api.READY and cond["status"] == "True"
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
        "children": lambda: count_objects(apps.list_namespaced_deployment, namespace) == count
        and count_objects(core.list_namespaced_service, namespace) == count,
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


def measure_idle(operator: LocalOperator, count: int, window: float, timeout: float) -> dict[str, Any]:
    """What a settled operator still costs: writes, CPU and engine reads over an idle window."""
    pid = operator.process.pid
    results: dict[str, Any] = {}
    # Ready can precede the last rollout transitions and the reader's verdicts: wait until the
    # write counter has been flat before measuring the idle window.
    settle_seconds, settled = flat(lambda: writes(scrape(operator.metrics_url)), SETTLE_QUIET_S, timeout)
    results["settleAfterReadySeconds"] = round(settle_seconds, 1)
    results["writesPerResource"] = round(settled / count, 2)
    results["eventsPerResource"] = events_per_resource(NAMESPACE, count)
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
        results.update(measure_idle(operator, count, idle_window, timeout))
    finally:
        operator.stop()
    results.update(measure_restart(kubeconfig, workdir, count, timeout, operator_args))
    results.update(ratios(results))
    return results


def ratio(part: float | None, whole: float | None) -> float | None:
    """``part / whole``, or None where either could not be measured (a cluster that is no sandbox)."""
    return round(part / whole, 2) if part is not None and whole else None


def ratios(results: dict[str, Any]) -> dict[str, float | None]:
    """The other paths over the raw one: times, and CPU with and without the operator's own (on
    cores the paths share, the time ratio follows the CPU with it)."""
    raw_cpu, plane = results["rawControlPlaneCpuSecondsToReady"], results["controlPlaneCpuSecondsToReady"]
    total = None if plane is None else plane + results["operatorCpuSecondsToReady"]
    return {
        "ratioToAllChildrenCreated": ratio(
            results["secondsToAllChildrenCreated"], results["rawSecondsToAllChildrenCreated"]
        ),
        "ratioToAllReady": ratio(results["secondsToAllReady"], results["rawSecondsToAllReady"]),
        "ratioFloorToAllReady": ratio(results["floorSecondsToAllReady"], results["rawSecondsToAllReady"]),
        "ratioTotalCpuToReady": ratio(total, raw_cpu),
        "ratioControlPlaneCpuToReady": ratio(plane, raw_cpu),
        "ratioFloorCpuToReady": ratio(results["floorControlPlaneCpuSecondsToReady"], raw_cpu),
    }


def run_in_sandbox(
    count: int, workdir: Path, idle_window: float, timeout: float, operator_args: tuple[str, ...] = ()
) -> dict[str, Any]:
    sandbox = Sandbox(f"bench-{os.getpid()}-{count}", workdir / "sandboxes")
    try:
        sandbox.up(owner_pid=os.getpid(), engine_nodes=0)
        return run(sandbox.kubeconfig, count, workdir, idle_window, timeout, operator_args)
    finally:
        sandbox.down()


def table(runs: list[dict[str, Any]]) -> list[str]:
    """One line per measure, one column per run."""
    rows = [
        ("all children created: operator / raw (s)",
         "secondsToAllChildrenCreated", "rawSecondsToAllChildrenCreated"),
        ("all pods Ready: operator / raw apply (s)", "secondsToAllReady", "rawSecondsToAllReady"),
        ("ratio operator / raw: children, Ready", "ratioToAllChildrenCreated", "ratioToAllReady"),
        ("all resources Ready (s)", "secondsToAllResourcesReady", None),
        ("apply the resources: operator running / alone (s)", "applySeconds", "applyAloneSeconds"),
        ("events per resource: operator / raw", "eventsPerResource", "rawEventsPerResource"),
        ("operator resident memory: idle / peak (MiB)", "operatorIdleRssMiB", "operatorRssMiB"),
        ("writes per resource", "writesPerResource", None),
        ("idle: writes / CPU s per minute", "idleWritesPerMinute", "idleCpuSecondsPerMinute"),
        ("engine metrics reads per minute", "engineReadsPerMinute", None),
        ("operator CPU until all Ready (s)", "operatorCpuSecondsToReady", None),
        ("control plane CPU until all Ready: operator path / raw (s)",
         "controlPlaneCpuSecondsToReady", "rawControlPlaneCpuSecondsToReady"),
        ("CPU ratio to raw: + operator / control plane alone",
         "ratioTotalCpuToReady", "ratioControlPlaneCpuToReady"),
        ("control plane CPU applying the resources alone (s)", "applyAloneControlPlaneCpuSeconds", None),
        ("floor path: all resources Ready (s) / ratio to raw",
         "floorSecondsToAllReady", "ratioFloorToAllReady"),
        ("floor path: control plane CPU (s) / ratio to raw",
         "floorControlPlaneCpuSecondsToReady", "ratioFloorCpuToReady"),
        ("floor path: control plane CPU a status write / an Event (ms)",
         "floorStatusWriteControlPlaneCpuMs", "floorEventControlPlaneCpuMs"),
        ("restart: s to reconcile all / writes", "restartSecondsToReconcileAll", "restartWrites"),
        ("restart: resident memory peak (MiB)", "restartPeakRssMiB", None),
    ]  # fmt: skip
    lines = [f"{'resources':<48}" + "".join(f"{r['resources']:>18}" for r in runs)]
    for label, first, second in rows:
        cells = [_cell(r.get(first)) + (f" / {_cell(r.get(second))}" if second else "") for r in runs]
        lines.append(f"{label:<48}" + "".join(f"{c:>18}" for c in cells))
    return lines


def _cell(value: float | None) -> str:
    """A number, or "-" where the run could not measure it (a cluster that is no sandbox)."""
    return "-" if value is None else f"{value:g}"


def plot(runs: list[dict[str, Any]], out: Path) -> None:
    """Growth curves: time (operator and raw), memory and writes against the number of resources."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = [r["resources"] for r in runs]
    figure, (times, memory, calls) = plt.subplots(1, 3, figsize=(13, 4))
    for key, label, style in (
        ("secondsToAllReady", "operator: all pods Ready", "-o"),
        ("rawSecondsToAllReady", "kubectl apply: all pods Ready", "--o"),
        ("secondsToAllChildrenCreated", "operator: all children created", "-s"),
        ("rawSecondsToAllChildrenCreated", "kubectl apply: all children created", "--s"),
        ("floorSecondsToAllReady", "the conventions' fewest writes, no operator: all Ready", "-.d"),
        ("restartSecondsToReconcileAll", "operator restart: all reconciled", ":^"),
    ):
        times.plot(counts, [r[key] for r in runs], style, label=label)
    times.set_ylabel("seconds")
    times.set_title("time")
    for key, label, style in (
        ("operatorRssMiB", "peak", "-o"),
        ("operatorIdleRssMiB", "before any resource", "--o"),
    ):
        memory.plot(counts, [r[key] for r in runs], style, label=label)
    memory.set_ylabel("MiB resident")
    memory.set_title("operator memory")
    settled_writes = [r["writesPerResource"] * r["resources"] for r in runs]
    calls.plot(counts, settled_writes, "-o", label="writes until settled")
    reads = [r["engineReadsPerMinute"] for r in runs]
    calls.plot(counts, reads, "--o", label="engine /metrics reads a minute")
    calls.set_title("API writes and engine reads")
    for axis in (times, memory, calls):
        axis.set_xlabel("resources")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    figure.suptitle("specdeploy at scale (sandbox control plane, simulated GPU nodes, one machine)")
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resources", type=int, nargs="+", default=[500], help="one run (sandbox) each")
    parser.add_argument("--kubeconfig", type=Path, help="use this cluster, not a new sandbox (one count)")
    parser.add_argument("--idle-window", type=float, default=60.0, help="seconds of idle measured")
    parser.add_argument("--timeout", type=float, default=1800.0, help="bound on each wait")
    parser.add_argument("--output", choices=("text", "json"), default="text")
    parser.add_argument("--plot", type=Path, help="write growth curves (PNG or SVG) here")
    parser.add_argument(
        "--operator-arg",
        action="append",
        default=[],
        help="pass to `specdeploy run` (repeat; e.g. --operator-arg=--acceptance-interval=0)",
    )
    args = parser.parse_args()
    if args.kubeconfig and len(args.resources) > 1:
        parser.error("--kubeconfig takes one --resources count")
    runs: list[dict[str, Any]] = []
    extra = tuple(args.operator_arg)
    for count in args.resources:
        with tempfile.TemporaryDirectory(prefix="specdeploy-bench-") as tmp:
            workdir = Path(tmp)
            if args.kubeconfig:
                runs.append(run(args.kubeconfig, count, workdir, args.idle_window, args.timeout, extra))
            else:
                runs.append(run_in_sandbox(count, workdir, args.idle_window, args.timeout, extra))
        print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    if args.plot:
        plot(runs, args.plot)
    if args.output == "json":
        print(json.dumps(runs[0] if len(runs) == 1 else runs, indent=2))
    else:
        print("\n".join(table(runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
