"""Adaptive speculation on real engines: each static draft length against the schedule the operator applies.

Starts a sandbox of its own with one engine node (five CPU engine slots: a pair, its baseline and
three copies, all at once) and the operator as a real process. For each tiny pair in turn (the
partial draft on the heavy verifier, the one always right, the one always wrong) it deploys the
pair, runs `specdeploy bench --tokens 0,idle,1,2,3 --interleave --repeats 3 --waves 24` (the
baseline, the pair, the draft loaded but idle, and each draft length at every batch size, taken
in turn three times per concurrency, medians kept, each run at least 24 full batches), waits for
the operator's recommendation, sets `policy: Apply`, waits for the pair to roll out with it, and
runs the benchmark again without the idle draft: the schedule and every static length side by
side in one run. The pair is then deleted before the next. Writes each run's JSON and a plot per
pair into --out, prints the tables; asserts nothing.
Every server is on loopback; every wait is bounded. About 45 minutes for the partial pair and 25
for the accept-none pair on 2 cores.

    python bench/adaptive_ab.py --out docs/images
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from engine_sandbox import EXAMPLE, engine_sandbox, kubectl, run_bench

from specdeploy_sandbox import tiny_models

NAMESPACE = "adaptive"
# Each pair's verifier and draft: the partial draft is built for the heavy verifier, whose step
# costs what it reads, so its best draft length depends on the batch size.
PAIRS = {
    "tiny-partial": (tiny_models.HEAVY, tiny_models.PARTIAL),
    "tiny-accept-all": (tiny_models.VERIFIER, tiny_models.ACCEPT_ALL),
    "tiny-accept-none": (tiny_models.VERIFIER, tiny_models.ACCEPT_NONE),
}
# The draft lengths measured per pair: every one where the choice depends on them, and the idle
# draft a 0 beside drafting ranges runs; for the draft that is always wrong, the baseline and the
# pair's own length (turning it off needs no curve).
TOKENS = {"tiny-partial": "0,idle,1,2,3", "tiny-accept-all": "0,3", "tiny-accept-none": "0,3"}
# Applying K = 3 everywhere changes no command: the static run already holds it side by side.
UNCHANGED = [{"fromBatch": 1, "tokens": 3}]
# Judged within seconds of the benchmark's traffic rather than the default 300 s window.
ACCEPTANCE = {"windowSeconds": 60, "minDraftTokens": 500}
READY_TIMEOUT_S = 900.0
DECISION_TIMEOUT_S = 180.0


def resource(binary: Path, kubeconfig: Path, name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(
        kubectl(binary, kubeconfig, "get", "-n", NAMESPACE, "sdep", name, "-o", "json")
    )
    return body


def until(what: str, timeout: float, check: Any) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(5)
    raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")


def rolled_out(binary: Path, kubeconfig: Path, name: str) -> dict[str, Any] | None:
    """The resource once its current generation has rolled out: Ready, and no rollout under way
    (an old pod keeps a resource Ready while its replacement starts)."""
    body = resource(binary, kubeconfig, name)
    status = body.get("status") or {}
    found = {c["type"]: c for c in status.get("conditions") or []}
    current = status.get("observedGeneration") == body["metadata"]["generation"]
    ready = found.get("Ready", {}).get("status") == "True"
    done = found.get("Progressing", {}).get("reason") == "RolloutComplete"
    return body if current and ready and done else None


def bench(
    binary: Path, kubeconfig: Path, name: str, out: Path, load: list[str], tag: str, tokens: str | None
) -> dict[str, Any]:
    """One ``specdeploy bench`` of the pair against its kept baseline, with the static draft
    lengths ``tokens`` beside it (none for a pair turned off: its command drafts nothing to vary).
    When it fails, the namespace's Events and the pair's ``status.speculation`` are printed first:
    the sandbox, and the operator's log with it, is gone once the script ends."""
    argv = [name, "-n", NAMESPACE, *load, "--keep-baseline", "--timeout", "5000"]
    argv += ["--tokens", tokens, "--interleave"] if tokens else []
    argv += ["--plot", str(out / f"adaptive-{name}-{tag}.png")]
    try:
        return run_bench(kubeconfig, argv, out / f"adaptive-{name}-{tag}.json", 5400)
    except SystemExit:
        print(kubectl(binary, kubeconfig, "get", "events", "-n", NAMESPACE, "--sort-by=.lastTimestamp"))
        speculation = resource(binary, kubeconfig, name).get("status", {}).get("speculation")
        print(json.dumps(speculation, indent=2))
        raise


def show(name: str, tag: str, body: dict[str, Any], speculation: dict[str, Any]) -> None:
    print(f"\n{name} ({tag}), {body['seconds']} s; running: {speculation.get('appliedSchedule')}")
    lengths = {str(length["tokens"]): length["results"] for length in body.get("draftLengths") or []}
    lengths.update({"0 idle": body["idleDraft"]} if body.get("idleDraft") else {})
    for index, level in enumerate(body["results"]):
        static = {k: lengths[k][index]["outputTokensPerSecond"] for k in lengths}
        static = static or {"0": level["baseline"]["outputTokensPerSecond"]}
        cells = "  ".join(f"K={k}: {static[k]:7.1f}" for k in sorted(static))
        best = max(static.values())
        running = level["speculative"]["outputTokensPerSecond"]
        print(
            f"  concurrency {level['concurrency']:>3}: {cells}  running: {running:7.1f} "
            f"({running / best:.2f}x the best of them, {level['speedup']:.2f}x the baseline)"
        )


def run_pair(binary: Path, kubeconfig: Path, name: str, out: Path, load: list[str]) -> None:
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"]["name"] = name
    body["spec"]["verifier"]["model"], body["spec"]["speculator"]["model"] = PAIRS[name]
    body["spec"]["acceptance"] = ACCEPTANCE
    kubectl(binary, kubeconfig, "apply", "-n", NAMESPACE, "-f", "-", stdin=yaml.safe_dump(body))
    until(f"{name} to be Ready", READY_TIMEOUT_S, lambda: rolled_out(binary, kubeconfig, name))
    static = bench(binary, kubeconfig, name, out, load, "static", TOKENS[name])

    def decided() -> dict[str, Any] | None:
        found = resource(binary, kubeconfig, name)["status"].get("speculation") or {}
        return found if found.get("reason") in ("Recommended", "SpeculationIneffective") else None

    recommendation = until(f"the recommendation for {name}", DECISION_TIMEOUT_S, decided)
    show(name, "static", static, recommendation)
    print(f"  recommended: {recommendation['recommendedSchedule']} ({recommendation['reason']})")
    patch = {"spec": {"speculator": {"adaptive": {"policy": "Apply"}}}}
    kubectl(
        binary, kubeconfig, "patch", "-n", NAMESPACE, "sdep", name, "--type=merge", "-p", json.dumps(patch)
    )

    def applied() -> dict[str, Any] | None:
        found = rolled_out(binary, kubeconfig, name)
        speculation = (found or {}).get("status", {}).get("speculation") or {}
        return found if speculation.get("appliedSchedule") else None

    until(f"{name} to roll out the applied schedule", READY_TIMEOUT_S, applied)
    speculation = resource(binary, kubeconfig, name)["status"]["speculation"]
    if [
        {k: v for k, v in r.items() if k != "expectedSpeedup"} for r in speculation["appliedSchedule"]
    ] != UNCHANGED:
        time.sleep(10)  # the rolled-out Deployment's pods settle before the measured run
        off = all(r["tokens"] == 0 for r in speculation["appliedSchedule"])
        lengths = None if off else TOKENS[name].replace(",idle", "")
        side_by_side = bench(binary, kubeconfig, name, out, load, "applied", lengths)
        speculation = resource(binary, kubeconfig, name)["status"]["speculation"]
        show(name, "applied", side_by_side, speculation)
    else:
        print(f"  applied {UNCHANGED}: the command is unchanged, measured above as K=3")
    (out / f"adaptive-{name}-status.json").write_text(json.dumps(speculation, indent=2) + "\n")
    kubectl(binary, kubeconfig, "delete", "-n", NAMESPACE, "sdep", name, "--wait=true", "--timeout=300s")
    kubectl(
        binary, kubeconfig, "delete", "-n", NAMESPACE, "deployment", "--all", "--wait=true", "--timeout=300s"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("bench-out"), help="where plots and JSON go")
    parser.add_argument("--pairs", default=",".join(PAIRS), help="which pairs, in order")
    parser.add_argument("--concurrency", default="1,2,4,8,16")
    parser.add_argument("--prompts", default="48", help="requests per run")
    parser.add_argument("--repeats", default="3", help="runs of each engine per concurrency, interleaved")
    parser.add_argument("--waves", default="24", help="at least this many full batches per run")
    parser.add_argument("--input-len", default="32")
    parser.add_argument("--output-len", default="64")
    args = parser.parse_args()
    load = ["--concurrency", args.concurrency, "--prompts", args.prompts, "--repeats", args.repeats]
    load += ["--waves", args.waves]
    load += ["--input-len", args.input_len, "--output-len", args.output_len]
    args.out.mkdir(parents=True, exist_ok=True)
    # Five engine slots: a pair, its baseline and three copies at once (the other two draft lengths
    # and the idle draft; then, beside a schedule, each static length). A sixth would not fit in
    # 23 GiB (about 4 GiB per engine), so the run beside a schedule leaves the idle draft out.
    with engine_sandbox("bench-adaptive", 5, ("--acceptance-interval", "10")) as (binary, kubeconfig):
        kubectl(binary, kubeconfig, "create", "namespace", NAMESPACE)
        for name in args.pairs.split(","):
            run_pair(binary, kubeconfig, name, args.out, load)
    return 0


if __name__ == "__main__":
    sys.exit(main())
