"""The reliability figures: the fuzz and fault suites at full size, their numbers and a plot.

Runs tests/integration/test_fuzz.py and tests/faults with the counts raised (1,000 fuzzed
resources; 200 resources under 20 operator kills; 100 through each control-plane restart), each
in its own sandbox on loopback, collects the JSON each test writes, prints one table and draws
docs/images/reliability.png. Every loop in the suites is bounded in count and time.

    python bench/reliability.py [--quick] [--plot docs/images/reliability.png]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FULL = {
    "SPECDEPLOY_FUZZ_RESOURCES": "1000",
    "SPECDEPLOY_FUZZ_NODES": "20",
    "SPECDEPLOY_FAULT_RESOURCES": "200",
    "SPECDEPLOY_FAULT_KILLS": "20",
    "SPECDEPLOY_FAULT_RESTART_RESOURCES": "100",
    "SPECDEPLOY_FAULT_DELETED": "50",
}
SUITES = {"fuzz": "tests/integration/test_fuzz.py", "faults": "tests/faults"}


def run_suites(env: dict[str, str], report_dir: Path, suites: list[str]) -> int:
    """The suites through pytest (their assertions are the invariants); the exit status."""
    env = {**os.environ, **env, "SPECDEPLOY_FAULT_REPORT": str(report_dir)}
    env["SPECDEPLOY_FUZZ_REPORT"] = str(report_dir / "fuzz.json")
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-s",
        *(SUITES[s] for s in suites),
    ]
    return subprocess.run(argv, cwd=REPO, env=env, timeout=3600, check=False).returncode


def table(figures: dict[str, dict[str, Any]]) -> list[str]:
    lines = []
    fuzz = figures.get("fuzz")
    if fuzz:
        refused = sum(fuzz["refused"].values())
        lines += [
            f"fuzz: {fuzz['resources']} generated resources ({fuzz['configMaps']} ConfigMaps, "
            f"{fuzz['secrets']} Secrets, {fuzz['fuzzNodes']} nodes with generated GPU labels)",
            f"  refused by the apiserver with a message: {refused} {fuzz['refused']}",
            f"  accepted and given conditions: {fuzz['accepted']} in {fuzz['convergeSeconds']} s",
            f"  Ready reasons: {fuzz['readyReasons']}",
            f"  failed pairs with a Deployment or pod: {fuzz['failedPairsStarted']}; operator restarts: 0; "
            "errors in its log: 0",
        ]
    kills = figures.get("operator-kills")
    if kills:
        lines += [
            f"operator SIGKILLed {kills['kills']} times during a rollout of {kills['resources']} "
            f"({kills['updated']} updated mid-way): {kills['duplicateMissingOrOrphanedChildren']} duplicate, "
            f"missing or orphaned children; all Ready {kills['convergedSecondsAfterLastStart']} s after the "
            "last start",
        ]
    for component in ("kube-apiserver", "etcd"):
        restart = figures.get(f"restart-{component}")
        if restart:
            lines.append(
                f"{component} SIGKILLed mid-rollout ({restart['resources']} resources), down "
                f"{restart['downSeconds']} s: all Ready {restart['allReadySecondsAfterBack']} s after it "
                "answered again, operator not restarted"
            )
    drift = figures.get("drift")
    if drift:
        repairs = ", ".join(f"{k} {v} s" for k, v in drift["repairSeconds"].items())
        lines.append(f"drift repaired: {repairs} (limit {drift['limitSeconds']} s); foreign edits kept")
    gone = figures.get("deleted-in-flight")
    if gone:
        lines.append(f"deleted mid-reconcile: {gone['deleted']}, children left after 15 s: 0")
    ha = figures.get("leader-election")
    if ha:
        lines.append(
            f"leader election ({ha['replicas']} replicas, {ha['leaseSeconds']} s Lease): failover "
            f"{ha['failoverAfterSigkillSeconds']} s after SIGKILL, {ha['failoverAfterSigtermSeconds']} s "
            "after SIGTERM; the follower reconciled nothing"
        )
    return lines


def plot(figures: dict[str, dict[str, Any]], out: Path) -> None:
    """Recovery times per fault, one bar each, against the 10 s drift limit."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars: list[tuple[str, float]] = []
    for kind, seconds in (figures.get("drift") or {}).get("repairSeconds", {}).items():
        bars.append((f"drift: {kind}", seconds))
    for component in ("kube-apiserver", "etcd"):
        restart = figures.get(f"restart-{component}")
        if restart:
            bars.append((f"{component} restart", restart["allReadySecondsAfterBack"]))
    kills = figures.get("operator-kills")
    if kills:
        bars.append((f"{kills['kills']} operator kills", kills["convergedSecondsAfterLastStart"]))
    ha = figures.get("leader-election")
    if ha:
        bars.append(("failover, SIGTERM", ha["failoverAfterSigtermSeconds"]))
        bars.append(("failover, SIGKILL", ha["failoverAfterSigkillSeconds"]))
    figure, axis = plt.subplots(figsize=(8, 0.45 * len(bars) + 1.2))
    labels, values = zip(*bars, strict=True)
    axis.barh(labels, values, color="#4c72b0")
    axis.axvline(10, color="#c44e52", linestyle="--", linewidth=1, label="drift limit (10 s)")
    for index, value in enumerate(values):
        axis.text(value, index, f" {value:g} s", va="center", fontsize=8)
    axis.invert_yaxis()
    axis.set_xlabel("seconds until every resource is as specified again")
    axis.set_title("specdeploy: recovery after each fault (sandbox control plane)")
    axis.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="CI's counts instead of the full ones")
    parser.add_argument("--plot", type=Path, default=REPO / "docs" / "images" / "reliability.png")
    parser.add_argument("--suite", choices=sorted(SUITES), action="append", help="run only this suite")
    parser.add_argument(
        "--json",
        type=Path,
        help="write every figure to this file (figures already in it are kept unless rerun)",
    )
    args = parser.parse_args()
    figures: dict[str, dict[str, Any]] = {}
    if args.json and args.json.exists():
        figures = json.loads(args.json.read_text())
    with tempfile.TemporaryDirectory(prefix="specdeploy-reliability-") as scratch:
        report_dir = Path(scratch)
        started = time.monotonic()
        status = run_suites({} if args.quick else FULL, report_dir, args.suite or sorted(SUITES))
        figures.update(
            {path.stem: json.loads(path.read_text()) for path in sorted(report_dir.glob("*.json"))}
        )
    print(f"\n=== reliability figures ({time.monotonic() - started:.0f} s; pytest exit {status}) ===")
    for line in table(figures):
        print(line)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    if figures:
        plot(figures, args.plot)
        print(f"plot: {args.plot}")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
