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
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from scale_paths import run
from scale_report import plot, table

from specdeploy_sandbox.cluster import Sandbox


def run_in_sandbox(
    count: int, workdir: Path, idle_window: float, timeout: float, operator_args: tuple[str, ...] = ()
) -> dict[str, Any]:
    sandbox = Sandbox(f"bench-{os.getpid()}-{count}", workdir / "sandboxes")
    try:
        sandbox.up(owner_pid=os.getpid(), engine_nodes=0)
        return run(sandbox.kubeconfig, count, workdir, idle_window, timeout, operator_args)
    finally:
        sandbox.down()


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
