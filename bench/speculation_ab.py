"""Speculation against the baseline on real engines: `specdeploy bench` on both tiny sandbox pairs.

Starts a sandbox of its own with one engine node (three CPU engine slots: both pairs and one
baseline), runs the operator as a real process, deploys the tiny pair whose draft is always right
and the one whose draft is always wrong, and runs `specdeploy bench` on each in turn (one
baseline at a time), writing each plot and JSON into --out. Prints both tables and the speed-ups;
asserts nothing. Every server is on loopback; every wait is bounded. About 10 minutes on 2 cores.

    python bench/speculation_ab.py --out docs/images
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from engine_sandbox import EXAMPLE, engine_sandbox, kubectl, run_bench

from specdeploy_sandbox import tiny_models

NAMESPACE = "bench"
PAIRS = {"tiny-accept-all": tiny_models.ACCEPT_ALL, "tiny-accept-none": tiny_models.ACCEPT_NONE}
READY_TIMEOUT_S = 900.0


def ready(binary: Path, kubeconfig: Path, name: str) -> bool:
    jsonpath = "jsonpath={.status.conditions[?(@.type=='Ready')].status}"
    return kubectl(binary, kubeconfig, "get", "-n", NAMESPACE, "sdep", name, "-o", jsonpath).strip() == "True"


def deploy(binary: Path, kubeconfig: Path) -> None:
    kubectl(binary, kubeconfig, "create", "namespace", NAMESPACE)
    for name, draft in PAIRS.items():
        body = yaml.safe_load(EXAMPLE.read_text())
        body["metadata"]["name"] = name
        body["spec"]["speculator"]["model"] = draft
        kubectl(binary, kubeconfig, "apply", "-n", NAMESPACE, "-f", "-", stdin=yaml.safe_dump(body))
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not all(ready(binary, kubeconfig, name) for name in PAIRS):
        if time.monotonic() > deadline:
            raise SystemExit(f"the pairs were not Ready within {READY_TIMEOUT_S:.0f}s")
        time.sleep(5)


def bench(kubeconfig: Path, name: str, out: Path, load: list[str]) -> dict[str, Any]:
    argv = [name, "-n", NAMESPACE, *load, "--plot", str(out / f"bench-{name}.png")]
    return run_bench(kubeconfig, argv, out / f"bench-{name}.json", 3600)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("bench-out"), help="where plots and JSON go")
    parser.add_argument("--concurrency", default="1,2,4,8,16")
    parser.add_argument("--prompts", default="32")
    parser.add_argument("--input-len", default="32")
    parser.add_argument("--output-len", default="128")
    args = parser.parse_args()
    load = ["--concurrency", args.concurrency, "--prompts", args.prompts]
    load += ["--input-len", args.input_len, "--output-len", args.output_len]
    args.out.mkdir(parents=True, exist_ok=True)
    # Three engine slots: both pairs and one baseline.
    with engine_sandbox("bench-ab", 3) as (binary, kubeconfig):
        deploy(binary, kubeconfig)
        for name in PAIRS:
            body = bench(kubeconfig, name, args.out, load)
            print(f"\n{name} ({body['speculator']}), {body['seconds']} s:")
            for level in body["results"]:
                spec, base = level["speculative"], level["baseline"]
                acceptance = level["acceptance"] or {}
                print(
                    f"  concurrency {level['concurrency']:>3}: {spec['outputTokensPerSecond']:8.1f} vs "
                    f"{base['outputTokensPerSecond']:8.1f} tok/s, speed-up {level['speedup']:.2f}x, "
                    f"TPOT p50 {spec['tpotMs']['p50']:.2f} vs {base['tpotMs']['p50']:.2f} ms, "
                    f"acceptance {acceptance.get('rate')} ({acceptance.get('meanLength')} tokens/step)"
                )
            print(f"  stops paying above: {body['stopsPayingAbove']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
