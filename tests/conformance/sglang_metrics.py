"""Render SGLang's ``/metrics`` with SGLang's own collectors; run by the SGLang venv's interpreter.

The operator reads SGLang's speculative decoding counters from that text
(``specdeploy.acceptance.counters.per_request_counters``), and no SGLang server runs without a GPU. So
this plays the metrics part of a server's processes as SGLang wires them: the launcher sets up
the prometheus multiprocess directory (``set_prometheus_multiproc_dir``); each spawned scheduler
process publishes its config and logs one ``SchedulerStats`` through ``SchedulerMetricsCollector``;
the tokenizer process records each finished request through ``TokenizerMetricsCollector``; and
SGLang's own FastAPI app, with ``add_prometheus_middleware``, answers ``GET /metrics`` as it does
for the operator (``Accept: */*``, gzip, no redirects). Nothing is re-declared here.

Reads a JSON job on stdin::

    {"requests": [{"generation_tokens": 64, "spec_verify_ct": 17}, ...],
     "num_steps": 3, "num_draft_tokens": 4, "accept_length": 3.76}

optionally with ``"extra_args"`` (more ``launch_server`` flags) and ``"schedulers"`` (their
``[tp_rank, dp_rank]``, default ``[[0, null]]``), and prints ``RESULT_MARKER`` followed by the
exposition text as a JSON string, on one line (SGLang logs to stdout too). Only the standard
library and SGLang are importable here.
"""

from __future__ import annotations

import json
import multiprocessing
import sys
from typing import Any

from metrics_endpoint import scrape

RESULT_MARKER = "SPECDEPLOY-SGLANG-METRICS "


def _server_args(job: dict[str, Any]) -> Any:
    """``launch_server``'s ServerArgs for an EAGLE3 deployment; the dummy model keeps it offline
    (resolution skips the checkpoint), so the served model name is given explicitly."""
    from sglang.srt.server_args import prepare_server_args  # type: ignore[import-not-found]

    return prepare_server_args(
        [
            *("--model-path", "dummy", "--served-model-name", "conformance", "--enable-metrics"),
            *("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "dummy-draft"),
            *("--speculative-num-steps", str(job["num_steps"]), "--speculative-eagle-topk", "1"),
            *("--speculative-num-draft-tokens", str(job["num_draft_tokens"])),
            *job.get("extra_args", []),
        ]
    )


def _scheduler(server_args: Any, job: dict[str, Any], tp_rank: int, dp_rank: int | None) -> None:
    """A scheduler process: publish as ``run_scheduler_process`` does, build the collector as
    ``Scheduler`` does, and log one decode batch's stats if it is a rank that logs them."""
    from sglang.srt.observability.metrics_collector import (  # type: ignore[import-not-found]
        SchedulerMetricsCollector,
        SchedulerStats,
    )
    from sglang.srt.runtime_context import (  # type: ignore[import-not-found]
        SpawnRanks,
        get_lora,
        get_memory,
        get_schedule,
        publish,
        spawn_world_rank,
    )

    world_rank = spawn_world_rank(server_args, tp_rank=tp_rank, pp_rank=0)
    publish(server_args, role="scheduler", ranks=SpawnRanks(world_rank, dp_rank=dp_rank, gpu_id=tp_rank))
    context = SchedulerMetricsCollector.init_new(
        server_args=server_args,
        enable_priority_scheduling=get_schedule().enable_priority_scheduling,
        enable_lora=get_lora().enable_lora,
        enable_hierarchical_cache=get_memory().enable_hierarchical_cache,
    )
    if context.current_scheduler_metrics_enabled:  # as SchedulerMetricsReporter gates log_stats
        context.collector.log_stats(
            SchedulerStats(
                spec_accept_length=float(job["accept_length"]),
                spec_accept_rate=float(job.get("accept_rate", 0.0)),
                spec_num_steps=int(job["num_steps"]),
                spec_num_draft_tokens=int(job["num_draft_tokens"]),
            )
        )


def _finish_requests(server_args: Any, requests: list[dict[str, Any]]) -> None:
    """The tokenizer process: the collector ``TokenizerManager.init_metric_collector_watchdog``
    builds, fed as ``TokenizerManager.collect_metrics`` feeds it for each finished request."""
    from sglang.srt.observability.metrics_collector import (
        TokenizerMetricsCollector,
        tokenizer_metric_labels,
    )
    from sglang.srt.runtime_context import get_observability, publish

    publish(server_args, role="tokenizer")
    collector = TokenizerMetricsCollector(
        server_args=server_args,
        labels=tokenizer_metric_labels(),
        bucket_time_to_first_token=get_observability().bucket_time_to_first_token,
        bucket_e2e_request_latency=get_observability().bucket_e2e_request_latency,
        bucket_inter_token_latency=get_observability().bucket_inter_token_latency,
    )
    for request in requests:
        collector.observe_one_finished_request(
            dict(collector.labels),
            prompt_tokens=int(request.get("prompt_tokens", 16)),
            generation_tokens=int(request["generation_tokens"]),
            cached_tokens=0,
            e2e_latency=1.0,
            has_grammar=False,
            spec_verify_ct=int(request["spec_verify_ct"]),
            is_streaming=bool(request.get("is_streaming", False)),
            time_per_output_token=0.01,
        )


def _scrape() -> str:
    """``GET /metrics`` on SGLang's HTTP app, set up as its lifespan does with metrics enabled."""
    from sglang.srt.entrypoints.http_server import app  # type: ignore[import-not-found]
    from sglang.srt.utils import add_prometheus_middleware  # type: ignore[import-not-found]

    add_prometheus_middleware(app)
    return scrape(app)


def main() -> None:
    job: dict[str, Any] = json.load(sys.stdin)
    from sglang.srt.utils import set_prometheus_multiproc_dir

    # As the launcher does (engine.py), before anything imports prometheus_client.
    assert "prometheus_client" not in sys.modules
    set_prometheus_multiproc_dir()
    server_args = _server_args(job)
    spawn = multiprocessing.get_context("spawn")  # as the launcher starts its schedulers
    schedulers = [
        spawn.Process(target=_scheduler, args=(server_args, job, tp_rank, dp_rank))
        for tp_rank, dp_rank in job.get("schedulers", [[0, None]])
    ]
    for scheduler in schedulers:
        scheduler.start()
    for scheduler in schedulers:
        scheduler.join()
        assert scheduler.exitcode == 0, f"a scheduler process exited with {scheduler.exitcode}"
    _finish_requests(server_args, job["requests"])
    print(RESULT_MARKER + json.dumps(_scrape()), flush=True)


if __name__ == "__main__":
    main()
