"""The load Job's program: run each ``vllm bench serve`` of the plan, print each result on one line.

It runs inside the load image (the engine's own), with that image's Python and nothing of
specdeploy installed, so it uses the standard library only and decides nothing: the plan (built
by ``speedup.load``) holds every argv, and the CLI reads the marked lines from the pod log. For
the speculative runs it also keeps the engine's speculative decoding lines of ``/metrics`` from
before and after, which the CLI turns into acceptance with the operator's own parser.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any

MARK = "specdeploy-bench-result "
RESULT_FILE = "result.json"
READY_TIMEOUT_S = 300.0


def exposition(url: str, prefixes: list[str]) -> str:
    """The lines of the families ``prefixes`` name (with HELP and TYPE) from the /metrics at ``url``:
    the same cut the operator's parser makes, so an engine's histograms never fill the pod log."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    wanted = tuple(prefixes)
    return "\n".join(
        line for line in text.splitlines() if line.startswith(wanted) or line[7:].startswith(wanted)
    )


def wait_healthy(url: str) -> None:
    """Until ``url`` answers 200: a pod that was Ready a moment ago may be restarting."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    answer = "no answer yet"
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
                answer = f"HTTP {response.status}"
        except OSError as exc:
            answer = str(exc)
        time.sleep(2)
    raise SystemExit(f"{url} did not answer within {READY_TIMEOUT_S:.0f}s: {answer}")


def run(step: dict[str, Any], prefixes: list[str]) -> dict[str, Any]:
    """One ``vllm bench serve`` with the engine's counters around it."""
    metrics = step.get("metricsUrl")
    wait_healthy(step["healthUrl"])
    before = exposition(metrics, prefixes) if metrics else None
    with tempfile.TemporaryDirectory() as out:
        argv = [*step["argv"], "--save-result", "--result-dir", out, "--result-filename", RESULT_FILE]
        print(f"specdeploy-bench: {step['target']} at concurrency {step['concurrency']}", flush=True)
        done = subprocess.run(argv, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv[:3])} exited with {done.returncode} ({step['target']})")
        with open(os.path.join(out, RESULT_FILE)) as file:
            result = json.load(file)
    after = exposition(metrics, prefixes) if metrics else None
    return {
        **{k: step[k] for k in ("target", "concurrency", "round")},
        "result": result,
        "before": before,
        "after": after,
    }


def main(plan: dict[str, Any]) -> int:
    for step in plan["steps"]:
        print(MARK + json.dumps(run(step, plan["metricPrefixes"]), separators=(",", ":")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
