"""The load Job's driver as the Job runs it (``python3 -c SOURCE PLAN``), against an engine stand-in
on loopback and a stand-in ``vllm bench serve`` that writes the result file it is told to."""

from __future__ import annotations

import subprocess
import sys
from http.server import BaseHTTPRequestHandler
from typing import Any

from specdeploy.speedup import command, results
from specdeploy.speedup.driver import MARK
from support.loopback import serve

EXPOSITION = """# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 30.0
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 24.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="m"} 0.0
"""
# Writes the result file named by --result-dir/--result-filename, as vllm bench serve does.
FAKE_BENCH = """
import json, os, sys
argv = sys.argv
out = os.path.join(argv[argv.index("--result-dir") + 1], argv[argv.index("--result-filename") + 1])
concurrency = int(argv[argv.index("--max-concurrency") + 1])
json.dump({"completed": 4, "failed": 0, "output_throughput": 100.0 * concurrency}, open(out, "w"))
"""


class Engine(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = EXPOSITION.encode() if self.path == "/metrics" else b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _plan(url: str, fake: list[str]) -> dict[str, Any]:
    steps = []
    for concurrency in (1, 2):
        for target in ("baseline", "speculative"):
            step: dict[str, Any] = {
                "target": target,
                "concurrency": concurrency,
                "round": 0,
                "healthUrl": f"{url}/health",
                "argv": [*fake, "--max-concurrency", str(concurrency)],
            }
            if target == "speculative":
                step["metricsUrl"] = f"{url}/metrics"
            steps.append(step)
    return {"steps": steps, "metricPrefixes": ["vllm:spec_decode_num_"]}


def _run(plan: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    argv = command(plan)
    argv[0] = sys.executable
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def test_the_driver_prints_one_result_per_run_with_the_counters_around_it() -> None:
    with serve(Engine) as url:
        done = _run(_plan(url, [sys.executable, "-c", FAKE_BENCH]))
    assert done.returncode == 0, done.stderr
    records = results.records(done.stdout)
    assert [(r["target"], r["concurrency"]) for r in records] == [
        ("baseline", 1), ("speculative", 1), ("baseline", 2), ("speculative", 2),
    ]  # fmt: skip
    assert records[2]["result"]["output_throughput"] == 200.0
    assert records[0]["before"] is None and records[0]["after"] is None
    kept = records[1]["before"]
    assert "vllm:spec_decode_num_drafts_total" in kept
    assert "# TYPE vllm:spec_decode_num_drafts counter" in kept
    assert "time_to_first_token" not in kept, "only the families the parser reads are kept"
    comparison = results.compare(done.stdout, "vllm", (1, 2))
    assert [level.speedup for level in comparison.results] == [1.0, 1.0]
    assert comparison.results[0].acceptance is None, "no draft between the two reads"


def test_a_failing_bench_ends_the_driver_with_its_exit_code() -> None:
    with serve(Engine) as url:
        done = _run(_plan(url, [sys.executable, "-c", "raise SystemExit(3)"]))
    assert done.returncode != 0
    assert "exited with 3 (baseline)" in done.stderr
    assert MARK not in done.stdout
