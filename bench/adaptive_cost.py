"""What adaptive speculation costs the operator at N resources: CPU per reader round and per pass.

Builds N resources as the watch cache holds them (policy Apply, a schedule applied, a benchmark
annotation with four draft lengths at five concurrencies), then times ``adaptive.due`` over all
of them (what the engine metrics reader adds to each round) and ``adaptive.decide`` on each (what a
reconcile pass adds), and prints the figures with the size of ``status.speculation``. Pure
Python, no cluster; a few seconds.

    python bench/adaptive_cost.py --resources 1000
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from specdeploy import adaptive, api

CONCURRENCIES = (1, 2, 4, 8, 16)
THROUGHPUT = {0: (30, 55, 100, 150, 200), 1: (40, 70, 115, 150, 180), 2: (45, 72, 110, 140, 160),
              3: (48, 75, 100, 125, 140)}  # fmt: skip
LENGTHS = {0: 1.0, 1: 1.45, 2: 1.7, 3: 1.86}
SPEC = {
    "verifier": {"model": "sandbox/tiny-qwen3-heavy"},
    "speculator": {"model": "sandbox/tiny-qwen3-heavy-eagle3-partial", "numSpeculativeTokens": 3,
                   "adaptive": {"policy": "Apply"}},
}  # fmt: skip


def annotation() -> str:
    def by(values: Any) -> dict[str, Any]:
        return {str(c): v for c, v in zip(CONCURRENCIES, values, strict=True)}

    return json.dumps(
        {
            "measuredAt": "2026-12-07T11:00:00Z", "command": "c0", "speedup": by([1.0] * 5),
            "outputTokensPerSecond": {
                str(c): {"speculative": t, "baseline": b}
                for c, t, b in zip(CONCURRENCIES, THROUGHPUT[3], THROUGHPUT[0], strict=True)
            },
            "draftLengths": {str(k): {"outputTokensPerSecond": by(t), "meanLength": by([LENGTHS[k]] * 5)}
                             for k, t in THROUGHPUT.items()},
        }
    )  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--resources", type=int, default=1000)
    args = parser.parse_args()
    now = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
    spec = api.SpeculativeDeploymentSpec.model_validate(SPEC)
    figures = api.Acceptance(
        rate="0.29", mean_length="1.86", per_position=["0.45", "0.25", "0.16"], draft_tokens=12000,
        drafts=4000, pods=1, window_seconds=300, measured_at="2026-12-07T11:30:00Z", summary="-",
    )  # fmt: skip
    first = adaptive.decide(
        spec, {"metadata": {}, "status": {}}, figures, adaptive.parse(annotation()), "c0", now
    )
    assert first.speculation is not None
    stored = first.speculation.model_dump(by_alias=True, exclude_none=True)
    bodies = [
        {"metadata": {"name": f"r{i}", "annotations": {api.BENCHMARK_ANNOTATION: annotation()}},
         "spec": SPEC, "status": {"speculation": stored}}
        for i in range(args.resources)
    ]  # fmt: skip
    later = now + timedelta(minutes=5)
    started = time.process_time()
    due = sum(adaptive.due(body, later) for body in bodies)
    round_s = time.process_time() - started
    started = time.process_time()
    for body in bodies:
        curve = adaptive.parse(body["metadata"]["annotations"][api.BENCHMARK_ANNOTATION])
        decision = adaptive.decide(spec, body, figures, curve, "c1", later)
        assert decision.speculation is not None and not decision.reschedule
    pass_s = time.process_time() - started
    print(f"resources: {args.resources}, due now: {due}")
    print(f"reader round (adaptive.due on every resource): {round_s * 1000:.1f} ms CPU")
    print(f"one pass each (parse the curve + decide): {pass_s * 1000:.1f} ms CPU, "
          f"{pass_s / args.resources * 1e6:.0f} us a pass")  # fmt: skip
    print(f"status.speculation: {len(json.dumps(stored))} bytes as JSON")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
