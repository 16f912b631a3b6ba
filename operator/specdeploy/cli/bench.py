"""``specdeploy bench NAME``: speculation against a baseline without the speculator, on the cluster.

The options and the report; ``speedup.session`` runs it against the cluster.
"""

from __future__ import annotations

import argparse
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from specdeploy import api
from specdeploy.cli.results import add_output_flag, dump
from specdeploy.speedup.load import IDLE, Variant


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(sorted({_positive(part) for part in text.split(",") if part.strip()}))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"a comma-separated list of positive integers, got {text!r}"
        ) from exc
    if not levels:
        raise argparse.ArgumentTypeError("at least one concurrency")
    return levels


def _draft_lengths(text: str) -> tuple[Variant, ...]:
    parts = {part.strip() for part in text.split(",") if part.strip()}
    idle: tuple[Variant, ...] = (IDLE,) if IDLE in parts else ()
    try:
        lengths = sorted({int(part) for part in parts - {IDLE}})
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"a comma-separated list of draft lengths and {IDLE}, got {text!r}"
        ) from exc
    if not lengths or lengths[0] < 0 or lengths[-1] > api.MAX_SPECULATIVE_TOKENS:
        raise argparse.ArgumentTypeError(
            f"draft lengths from 0 to {api.MAX_SPECULATIVE_TOKENS}, got {text!r}"
        )
    return (*lengths, *idle)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="measure a SpeculativeDeployment against a baseline without its speculator",
        description=(
            "Start a baseline beside NAME (same verifier, engine, image, tensor-parallel size and "
            "GPUs, no speculator), send the same vllm bench serve load to one engine of each from a "
            "Job at every concurrency, and report throughput, TTFT, ITL, the speed-up and the "
            "acceptance measured during the run. Exit codes: 0 done, 2 bad input or unknown "
            "resource, 3 not Ready, 4 the baseline cannot run, 5 the load Job failed, 6 timed out, "
            "130 interrupted (the shared codes of every verb); every case removes what the run started."
        ),
    )
    parser.add_argument("name", metavar="NAME", help="the SpeculativeDeployment")
    parser.add_argument("-n", "--namespace", help="its namespace (default: the kubeconfig context's)")
    parser.add_argument(
        "--concurrency", type=_levels, default=(1, 4, 16), metavar="C,C,...",
        help="requests in flight per engine, one run each (default: 1,4,16)",
    )  # fmt: skip
    parser.add_argument(
        "--tokens", type=_draft_lengths, default=(), metavar="K,K,...",
        help="also measure these draft lengths at every batch size (0: the baseline; idle: the "
        "draft loaded and drafting none, what a 0 range beside ranges that draft runs), one engine "
        "copy at a time (all at once with --interleave): the cost curve the operator's adaptive "
        "speculation reads (vLLM; e.g. 0,idle,1,2,3)",
    )  # fmt: skip
    parser.add_argument(
        "--interleave", action="store_true",
        help="with --tokens: run every engine copy at once and measure the baseline, NAME and each "
        "copy in turn at every concurrency in one load Job, so the figures compared are measured in "
        "the same minutes (needs one replica's GPUs per copy besides the baseline's)",
    )  # fmt: skip
    parser.add_argument("--prompts", type=_positive, default=64, help="requests per run (default: 64)")
    parser.add_argument(
        "--waves", type=_positive, default=0, metavar="W",
        help="at least W full batches per run: max(--prompts, W x concurrency) requests, so runs at "
        "high concurrency last long enough to measure (default: --prompts at every concurrency)",
    )  # fmt: skip
    parser.add_argument(
        "--repeats", type=_positive, default=1,
        help="runs of each engine at each concurrency, each round starting with the next engine; "
        "the report keeps the median and every sample (default: 1)",
    )  # fmt: skip
    parser.add_argument(
        "--input-len", type=_positive,
        help="prompt tokens (default: 512, halved with --output-len's until a request fits NAME's context)",
    )  # fmt: skip
    parser.add_argument(
        "--output-len", type=_positive,
        help="tokens generated per request (default: 256, halved with --input-len's likewise)",
    )  # fmt: skip
    parser.add_argument(
        "--dataset", default="random",
        help="a vllm bench serve dataset: random (default, no file), sharegpt, hf, custom, ...",
    )  # fmt: skip
    parser.add_argument("--dataset-path", help="the dataset's file in the load image, or its hub id")
    parser.add_argument(
        "--seed", type=int, default=0, help="the dataset's seed, the same for both (default: 0)"
    )
    parser.add_argument(
        "--temperature", type=float, default=0.0, help="sampling temperature (default: 0, greedy)"
    )
    add_output_flag(parser, human="table")
    parser.add_argument("--plot", type=Path, metavar="FILE", help="write the plot here (.png, .svg, .pdf)")
    parser.add_argument(
        "--keep-baseline", action="store_true",
        help="keep the baseline afterwards (owned by NAME, reused by the next run while NAME is unchanged)",
    )  # fmt: skip
    parser.add_argument(
        "--load-image",
        help="image of the load Job (default: the engine's own vLLM image, else vLLM's pinned)",
    )
    parser.add_argument(
        "--timeout", type=_positive, default=3600,
        help="seconds the whole run may take; the cluster removes what it started after that (default: 3600)",
    )  # fmt: skip
    parser.add_argument(
        "--schedule-timeout", type=_positive, default=120,
        help="seconds a baseline or load pod may wait for a node before the run gives up (default: 120)",
    )  # fmt: skip
    parser.set_defaults(func=run)


def _context_namespace() -> str:
    from kubernetes import config

    try:
        _, context = config.list_kube_config_contexts()  # type: ignore[no-untyped-call]
    except (config.ConfigException, OSError):
        return "default"
    return str((context or {}).get("context", {}).get("namespace") or "default")


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    from specdeploy.controller.kube import KubeClient, load_config
    from specdeploy.speedup import Load, ResultsError, compare, report, with_draft_lengths
    from specdeploy.speedup.session import EXIT_INTERRUPTED, EXIT_LOAD, BenchError, Options, Session, say

    load_config()
    load = Load(
        concurrencies=args.concurrency, prompts=args.prompts, input_len=args.input_len,
        output_len=args.output_len, dataset=args.dataset, dataset_path=args.dataset_path, seed=args.seed,
        temperature=args.temperature, repeats=args.repeats, waves=args.waves,
    )  # fmt: skip
    options = Options(
        name=args.name, load=load, keep_baseline=args.keep_baseline, load_image=args.load_image,
        timeout=args.timeout, schedule_timeout=args.schedule_timeout, tokens=args.tokens,
        interleave=args.interleave,
    )  # fmt: skip
    session = Session(
        KubeClient(field_manager="specdeploy-bench"), args.namespace or _context_namespace(), options
    )
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        speculative_pod = session.start()
        baseline_pod = session.start_baseline()
        logs: dict[Variant, str | None] = {}
        if args.tokens and args.interleave:
            log, logs = session.measure_together(speculative_pod, baseline_pod)
        else:
            log = session.measure(speculative_pod, baseline_pod)
        engine = (session.resource.get("status") or {}).get("engine", "vllm")
        try:
            comparison = compare(log, engine, args.concurrency)
            if args.tokens:
                logs = logs or session.measure_draft_lengths()
                comparison = with_draft_lengths(comparison, logs, engine)
        except ResultsError as exc:
            raise BenchError(EXIT_LOAD, str(exc)) from exc
        body = session.report(comparison)
        text = report.table(comparison) + "\n" if args.output == "table" else dump(body, args.output)
        print(text, end="", flush=True)
        if args.plot is not None:
            from specdeploy.speedup.plot import plot

            title = (
                f"{args.name}: {body['verifier']} + {body['speculator']} "
                f"({body['engine']}, TP {body['tensorParallelSize']})"
            )
            plot(comparison, title, args.plot)
            say(f"plot written to {args.plot}")
        summary = report.summary(
            comparison, datetime.now(UTC), session.load.describe(), session.command_digest()
        )
        session.record(summary, report.event(comparison))
        return 0
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous)
        session.cleanup()
