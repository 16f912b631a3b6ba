"""A restarted operator's memory, alone: the restart path of bench/reconcile_scale.py, repeated.

One sandbox: N resources applied, an operator brings them Ready and is stopped; then operators
are started over them one after the other, each measured as the scale benchmark measures a
restart (seconds until every resource is reconciled, writes, peak resident memory) plus its
resident memory sampled over time. With ``--trace`` one more restart runs under tracemalloc,
and the largest allocations (grouped by traceback) of the largest snapshot it took are printed:
the restart peak, without the eight minutes of the whole benchmark.

Prints numbers, asserts nothing; every server is on loopback, every wait bounded.

    python bench/restart_memory.py --resources 1000 --restarts 3 --trace
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
from kubernetes import config
from scale_paths import NAMESPACE, RESYNC_QUIET_S, SETTLE_QUIET_S, prepare_cluster, write_resources
from scale_probes import (
    flat,
    kubectl,
    milestones,
    peak_rss_mib,
    ready_resources,
    reconciles,
    rss_mib,
    scrape,
    settle,
    writes,
)

from specdeploy_sandbox.cluster import Sandbox
from specdeploy_sandbox.operator_process import start_operator

SAMPLE_S = 0.1
REPORT_WAIT_S = 60.0
# Run in the traced operator (as sitecustomize, so before specdeploy starts).
TRACER = """
import os, threading, time, tracemalloc

def _report(snapshot, current, at, out, top):
    snapshot = snapshot.filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    lines = [f"traced {current / 2**20:.1f} MiB at {at:.1f} s"]
    for stat in snapshot.statistics("traceback")[:top]:
        lines.append(f"{stat.size / 2**20:8.2f} MiB {stat.count:8d} blocks")
        frames = stat.traceback.format(most_recent_first=True)[::2][:6]
        lines.extend("    " + line.strip() for line in frames)
    with open(out, "w") as stream:
        stream.write("\\n".join(lines) + "\\n")

def _watch(out, top, seconds):
    # A snapshot each time traced memory grew by a tenth past 40 MiB (taking one stops the
    # process for a moment); the largest reported once growth has stopped for 10 s.
    best, taken = 40 * 2**20, None
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.5)
        current, _ = tracemalloc.get_traced_memory()
        if current > best * 1.1:
            best, taken = current, (tracemalloc.take_snapshot(), current, time.monotonic())
        elif taken is not None and time.monotonic() - taken[2] > 10:
            _report(taken[0], taken[1], taken[2] - started, out, top)
            taken = None

started = time.monotonic()
tracemalloc.start(int(os.environ["RESTART_TRACE_FRAMES"]))
threading.Thread(
    target=_watch,
    args=(os.environ["RESTART_TRACE_OUT"], int(os.environ["RESTART_TRACE_TOP"]), 120.0),
    daemon=True,
).start()
"""


def sample_rss(pid: int, stop: threading.Event, out: list[tuple[float, float]]) -> None:
    """Resident MiB every SAMPLE_S until ``stop`` (or the process is gone)."""
    started = time.monotonic()
    while not stop.wait(SAMPLE_S):
        try:
            out.append((time.monotonic() - started, rss_mib(pid)))
        except psutil.Error:
            return


def bring_ready(kubeconfig: Path, count: int, workdir: Path, timeout: float) -> None:
    """N resources applied and Ready under a first operator, which is then stopped."""
    crs = write_resources(workdir / "resources.yaml", count, NAMESPACE)
    kubectl(kubeconfig, "apply", "--server-side", "-f", str(crs), timeout=timeout)
    operator = start_operator(kubeconfig, workdir / "operator.log", None)
    try:
        milestones({"ready": lambda: ready_resources(NAMESPACE) == count}, time.monotonic(), timeout)
        settle(operator.metrics_url, NAMESPACE, count, SETTLE_QUIET_S, timeout, reader=True)
    finally:
        operator.stop()


def restart(
    kubeconfig: Path, count: int, workdir: Path, timeout: float, label: str, report: Path | None = None
) -> dict[str, Any]:
    """One restarted operator until it has reconciled all ``count`` (as reconcile_scale counts),
    and, given ``report``, until it has written that file (bounded by REPORT_WAIT_S)."""
    operator = start_operator(kubeconfig, workdir / f"operator-{label}.log", None)
    started = time.monotonic()
    pid = operator.process.pid
    samples: list[tuple[float, float]] = []
    stop = threading.Event()
    sampler = threading.Thread(target=sample_rss, args=(pid, stop, samples), daemon=True)
    sampler.start()
    try:
        url = operator.metrics_url
        milestones({"resync": lambda: reconciles(scrape(url)) >= count}, time.monotonic(), timeout)
        flat(lambda: reconciles(scrape(url)), RESYNC_QUIET_S, timeout)
        result = {
            "run": label,
            "secondsToReconcileAll": round(time.monotonic() - started - RESYNC_QUIET_S, 1),
            "writes": writes(scrape(url)),
            "peakRssMiB": round(peak_rss_mib(pid), 1),
        }
        deadline = time.monotonic() + REPORT_WAIT_S
        while report is not None and not report.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        stop.set()
        sampler.join()
        operator.stop()
    peak_at = max(samples, key=lambda sample: sample[1]) if samples else (0.0, 0.0)
    result["sampledPeakAtSeconds"] = round(peak_at[0], 1)
    result["rssMiBEverySecond"] = [round(mib) for at, mib in samples if at % 1.0 < SAMPLE_S]
    return result


def traced_restart(
    kubeconfig: Path, count: int, workdir: Path, timeout: float, top: int, frames: int
) -> tuple[dict[str, Any], str]:
    """A restart under tracemalloc (slower, and its resident numbers include tracemalloc's own)."""
    hook = workdir / "tracer"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(TRACER)
    out = workdir / "trace.txt"
    saved = dict(os.environ)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hook), saved.get("PYTHONPATH")]))
    os.environ.update(
        RESTART_TRACE_OUT=str(out), RESTART_TRACE_TOP=str(top), RESTART_TRACE_FRAMES=str(frames)
    )
    try:
        result = restart(kubeconfig, count, workdir, timeout, "traced", out)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return result, out.read_text() if out.exists() else "(no snapshot)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resources", type=int, default=1000)
    parser.add_argument("--restarts", type=int, default=3, help="untraced restarts measured")
    parser.add_argument("--trace", action="store_true", help="then one restart under tracemalloc")
    parser.add_argument("--top", type=int, default=15, help="allocation groups printed")
    parser.add_argument("--frames", type=int, default=8, help="frames per traceback traced")
    parser.add_argument("--kubeconfig", type=Path, help="a cluster already holding the Ready resources")
    parser.add_argument("--timeout", type=float, default=900.0, help="bound on each wait")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="specdeploy-restart-") as tmp:
        workdir = Path(tmp)
        sandbox = None
        kubeconfig = args.kubeconfig
        if kubeconfig is None:
            sandbox = Sandbox(f"restart-{os.getpid()}", workdir / "sandboxes")
            sandbox.up(owner_pid=os.getpid(), engine_nodes=0)
            kubeconfig = sandbox.kubeconfig
        try:
            config.load_kube_config(str(kubeconfig))  # type: ignore[no-untyped-call]
            if sandbox is not None:
                prepare_cluster(kubeconfig, args.resources)
                bring_ready(kubeconfig, args.resources, workdir, args.timeout)
            for run in range(args.restarts):
                result = restart(kubeconfig, args.resources, workdir, args.timeout, str(run))
                print(json.dumps(result), flush=True)
            if args.trace:
                result, report = traced_restart(
                    kubeconfig, args.resources, workdir, args.timeout, args.top, args.frames
                )
                print(json.dumps(result), report, sep="\n", flush=True)
        finally:
            if sandbox is not None:
                sandbox.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
