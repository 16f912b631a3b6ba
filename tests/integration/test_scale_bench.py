"""bench/reconcile_scale.py in its small form: the scale benchmark (operator and raw `kubectl
apply` side by side) still runs end to end and reports every figure docs/scale.md quotes.
Not a timed test: the figures are the machine's, so only what holds on any machine is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import REPO

pytestmark = pytest.mark.cluster

RESOURCES = 50
FIGURES = (
    "resources",
    "secondsToAllChildrenCreated",
    "secondsToAllReady",
    "rawSecondsToAllChildrenCreated",
    "rawSecondsToAllReady",
    "operatorRssMiB",
    "operatorIdleRssMiB",
    "writesPerResource",
    "idleWritesPerMinute",
    "idleCpuSecondsPerMinute",
    "restartSecondsToReconcileAll",
    "restartWrites",
    "applyAloneSeconds",
    "eventsPerResource",
    "namespaceEventsPerResource",
    "rawEventsPerResource",
    "restartPeakRssMiB",
    "controlPlaneCpuSecondsToReady",
    "rawControlPlaneCpuSecondsToReady",
    "floorSecondsToAllReady",
    "floorControlPlaneCpuSecondsToReady",
    "floorStatusWriteControlPlaneCpuMs",
    "floorEventControlPlaneCpuMs",
)
# Passed through to the operator (both of its runs): no engine metrics reader.
OPERATOR_ARG = "--acceptance-interval=0"


@pytest.mark.timeout(900)
def test_small_scale_run_reports_both_paths(tmp_path: Path) -> None:
    plot = tmp_path / "scale.svg"
    argv = [
        sys.executable, str(REPO / "bench" / "reconcile_scale.py"),
        "--resources", str(RESOURCES), "--idle-window", "10", "--output", "json", "--plot", str(plot),
        f"--operator-arg={OPERATOR_ARG}",
    ]  # fmt: skip
    run = subprocess.run(argv, capture_output=True, text=True, timeout=840)
    assert run.returncode == 0, run.stderr[-3000:]
    figures = json.loads(run.stdout)
    assert set(FIGURES) <= set(figures), sorted(set(FIGURES) - set(figures))
    assert figures["resources"] == RESOURCES
    for name in FIGURES[1:5]:
        assert figures[name] > 0, name
    # Ready comes after the children exist, on both paths.
    assert figures["secondsToAllReady"] >= figures["secondsToAllChildrenCreated"]
    assert figures["rawSecondsToAllReady"] >= figures["rawSecondsToAllChildrenCreated"]
    assert figures["operatorRssMiB"] >= figures["operatorIdleRssMiB"] > 0
    # A Deployment and a Service each, and at least one status write.
    assert figures["writesPerResource"] >= 3
    # The operator's standing properties: nothing written while idle or on a restart.
    assert figures["idleWritesPerMinute"] == 0
    assert figures["restartWrites"] == 0
    # A healthy start posts Ready, and at most one milestone more (a RolloutComplete in a later
    # pass): at most 2 Events a resource (the reader is off: no verdict). The namespace holds the
    # controllers' and scheduler's Events besides.
    assert 1 <= figures["eventsPerResource"] <= 2
    assert figures["namespaceEventsPerResource"] > figures["eventsPerResource"]
    assert figures["applyAloneSeconds"] > 0
    # Both paths' rollouts cost the sandbox's control plane CPU, measured from its processes.
    assert figures["controlPlaneCpuSecondsToReady"] > 0 and figures["rawControlPlaneCpuSecondsToReady"] > 0
    # The floor path makes the raw path's writes and more, and ends with every resource Ready.
    assert figures["floorControlPlaneCpuSecondsToReady"] > 0
    assert figures["floorSecondsToAllReady"] > 0
    # The operator ran with the argument given: its reader was off, so it read no engine.
    assert figures["operatorArgs"] == [OPERATOR_ARG]
    assert figures["engineReadsPerMinute"] == 0
    assert plot.read_text().lstrip().startswith("<?xml")
