"""The scale benchmark's results as ratios to the raw path, a table (one column per run) and
growth curves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# The operator's resident memory target at 1,000 resources, rolling out and restarted.
TARGET_MIB = 200
# The floor path's writes per resource: a Deployment, a Service, a status on taking it up, one at Ready.
FLOOR_WRITES_PER_RESOURCE = 4


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
        "ratioToFloorAllResourcesReady": ratio(
            results["secondsToAllResourcesReady"], results["floorSecondsToAllReady"]
        ),
        "ratioToFloorControlPlaneCpu": ratio(plane, results["floorControlPlaneCpuSecondsToReady"]),
    }


def table(runs: list[dict[str, Any]]) -> list[str]:
    """One line per measure, one column per run."""
    rows = [
        ("all children created: operator / raw (s)",
         "secondsToAllChildrenCreated", "rawSecondsToAllChildrenCreated"),
        ("all pods Ready: operator / raw apply (s)", "secondsToAllReady", "rawSecondsToAllReady"),
        ("ratio operator / raw: children, Ready", "ratioToAllChildrenCreated", "ratioToAllReady"),
        ("all resources Ready (s)", "secondsToAllResourcesReady", None),
        ("apply the resources: operator running / alone (s)", "applySeconds", "applyAloneSeconds"),
        ("the operator's Events per resource", "eventsPerResource", None),
        ("all Events in the namespace per resource: operator path / raw",
         "namespaceEventsPerResource", "rawEventsPerResource"),
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
        ("operator over the floor: every resource Ready, control plane CPU",
         "ratioToFloorAllResourcesReady", "ratioToFloorControlPlaneCpu"),
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
        ("secondsToAllResourcesReady", "operator: every resource Ready=True", "-o"),
        ("floorSecondsToAllReady", "floor (fewest conventional writes): every resource Ready=True", "-.d"),
        ("rawSecondsToAllReady", "kubectl apply: all pods Ready", "--o"),
        ("secondsToAllChildrenCreated", "operator: all children created", "-s"),
        ("restartSecondsToReconcileAll", "operator restart: all reconciled", ":^"),
    ):
        times.plot(counts, [r[key] for r in runs], style, label=label)
    times.set_ylabel("seconds")
    times.set_title("time")
    for key, label, style in (
        ("operatorRssMiB", "peak, rolling out", "-o"),
        ("restartPeakRssMiB", "peak, restarted over them", ":^"),
        ("operatorIdleRssMiB", "before any resource", "--o"),
    ):
        memory.plot(counts, [r[key] for r in runs], style, label=label)
    memory.axhline(TARGET_MIB, color="grey", linewidth=0.8, label=f"{TARGET_MIB} MiB target")
    memory.set_ylabel("MiB resident")
    memory.set_title("operator memory")
    settled_writes = [r["writesPerResource"] * r["resources"] for r in runs]
    calls.plot(counts, settled_writes, "-o", label="writes until settled")
    floor_writes = [FLOOR_WRITES_PER_RESOURCE * r["resources"] for r in runs]
    calls.plot(counts, floor_writes, "-.d", label="floor writes (2 children, 2 statuses)")
    posted = [r["eventsPerResource"] * r["resources"] for r in runs]
    calls.plot(counts, posted, "-s", label="Events the operator posted")
    reads = [r["engineReadsPerMinute"] for r in runs]
    calls.plot(counts, reads, "--o", label="engine /metrics reads a minute")
    calls.set_title("API writes and engine reads")
    for axis in (times, memory, calls):
        axis.set_xlabel("resources")
        axis.grid(alpha=0.3)
        axis.legend(loc="upper left", fontsize=7)
    figure.suptitle("specdeploy at scale (sandbox control plane, simulated GPU nodes, one machine)")
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)
