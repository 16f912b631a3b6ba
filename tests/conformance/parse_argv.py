"""Parse an engine argv with the engine's own parser; run by the engine venv's interpreter.

Reads ``{"engine": ..., "argvs": [[...], ...]}`` as JSON on stdin and prints one JSON object on a
line starting with ``RESULT_MARKER`` (the engines log to stdout too): the parser's options and,
per argv, whether it parsed, argparse's error otherwise, and the parsed values the tests check.
Importing an engine takes seconds, so one process parses every argv; with ``--serve`` it answers
one such request per line of stdin until stdin closes, so a test session imports each engine
once. Only the standard library and the engine are importable here.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import sys
import typing
from typing import Any

RESULT_MARKER = "SPECDEPLOY-PARSE-RESULT "


def _option_strings(parser: argparse.ArgumentParser) -> list[list[str]]:
    """Each option's names (a flag and its aliases), so tests can see every spelling of it."""
    return sorted(sorted(action.option_strings) for action in parser._actions if action.option_strings)


def _parse(parser: argparse.ArgumentParser, args: list[str]) -> tuple[argparse.Namespace | None, str]:
    """argparse reports errors by printing and exiting; capture both."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            return parser.parse_args(args), ""
    except SystemExit:
        return None, stderr.getvalue().strip()


def _vllm_parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """``vllm`` with its ``serve`` subcommand, built as the ``vllm`` CLI builds it."""
    from vllm.entrypoints.cli.serve import ServeSubcommand  # type: ignore[import-not-found]
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # type: ignore[import-not-found]

    top = FlexibleArgumentParser(prog="vllm")
    subparsers = top.add_subparsers(dest="subparser")
    return top, ServeSubcommand().subparser_init(subparsers)


def _vllm(top: argparse.ArgumentParser, argv: list[str]) -> dict[str, Any]:
    namespace, error = _parse(top, argv[1:])
    result: dict[str, Any] = {"ok": namespace is not None, "error": error}
    if namespace is not None:
        values = vars(namespace)
        result["values"] = {
            "model": values.get("model_tag"),
            "tensor_parallel_size": values.get("tensor_parallel_size"),
            "speculative_config": values.get("speculative_config"),
            "port": values.get("port"),
            "host": values.get("host"),
            "revision": values.get("revision"),
            "max_model_len": values.get("max_model_len"),
            "gpu_memory_utilization": values.get("gpu_memory_utilization"),
            "served_model_name": values.get("served_model_name"),
            "enable_expert_parallel": values.get("enable_expert_parallel"),
            "kv_cache_dtype": values.get("kv_cache_dtype"),
            "pipeline_parallel_size": values.get("pipeline_parallel_size"),
            "nnodes": values.get("nnodes"),
            "node_rank": values.get("node_rank"),
            "master_addr": values.get("master_addr"),
            "headless": values.get("headless"),
            "api_key": values.get("api_key"),
        }
        schedule = (values.get("speculative_config") or {}).get("num_speculative_tokens_per_batch_size")
        if schedule is not None:
            result["draft_lengths"] = _vllm_draft_lengths(values["speculative_config"])
    return result


# The batch sizes a schedule is expanded over, as vLLM's scheduler does up to its max_num_seqs.
SCHEDULE_MAX_BATCH = 256


def _vllm_draft_lengths(config: dict[str, Any]) -> list[int] | str:
    """The draft length vLLM's scheduler runs at batch sizes 1 to SCHEDULE_MAX_BATCH, from its
    own expansion of ``num_speculative_tokens_per_batch_size``; its error when it refuses it."""
    from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup  # type: ignore[import-not-found]

    try:
        lookup = build_dynamic_sd_schedule_lookup(
            config["num_speculative_tokens_per_batch_size"],
            SCHEDULE_MAX_BATCH,
            config["num_speculative_tokens"],
        )
    except ValueError as exc:
        return f"rejected: {exc}"
    return list(lookup[1:])


def _vllm_bench_parser() -> argparse.ArgumentParser:
    """``vllm bench serve``'s options, as its subcommand adds them."""
    from vllm.benchmarks.serve import add_cli_args  # type: ignore[import-not-found]
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    return parser


BENCH_VALUES = (
    "backend", "base_url", "endpoint", "model", "tokenizer", "dataset_name", "input_len", "output_len",
    "ignore_eos", "num_prompts", "max_concurrency", "num_warmups", "seed", "temperature",
    "percentile_metrics", "metric_percentiles", "save_result", "result_dir", "result_filename",
)  # fmt: skip


def _vllm_bench(parser: argparse.ArgumentParser, argv: list[str]) -> dict[str, Any]:
    """Parse ``vllm bench serve ARGS`` (the load Job's command)."""
    namespace, error = _parse(parser, argv[3:])
    result: dict[str, Any] = {"ok": namespace is not None, "error": error}
    if namespace is not None:
        result["values"] = {name: vars(namespace).get(name) for name in BENCH_VALUES}
    return result


def _literal_values(annotation: Any) -> list[str]:
    """The strings a ``Literal`` (possibly inside ``Optional``) allows."""
    if typing.get_origin(annotation) is typing.Literal:
        return [str(value) for value in typing.get_args(annotation)]
    return [value for arg in typing.get_args(annotation) for value in _literal_values(arg)]


def _vllm_speculative_schema() -> dict[str, list[str]]:
    """Field names of vLLM's SpeculativeConfig and the methods it accepts, to catch JSON typos."""
    from vllm.config import SpeculativeConfig  # type: ignore[import-not-found]

    hints = typing.get_type_hints(SpeculativeConfig)
    return {
        "fields": sorted(field.name for field in dataclasses.fields(SpeculativeConfig)),
        "methods": _literal_values(hints["method"]),
    }


def _sglang_parser() -> argparse.ArgumentParser:
    """The parser ``prepare_server_args`` builds, for its option strings and errors."""
    from sglang.srt.server_args import ServerArgs  # type: ignore[import-not-found]

    parser = argparse.ArgumentParser(prog="sglang")
    ServerArgs.add_cli_args(parser)
    return parser


def _sglang(parser: argparse.ArgumentParser, argv: list[str]) -> dict[str, Any]:
    """Parse ``python3 -m sglang.launch_server ARGS``, then build ServerArgs as the server does."""
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # type: ignore[import-not-found]

    args = argv[3:]
    namespace, error = _parse(parser, args)
    result: dict[str, Any] = {"ok": namespace is not None, "error": error}
    if namespace is None:
        return result
    try:
        server_args = prepare_server_args(args)
    except Exception as exc:  # the test reports SGLang's own complaint
        result.update(ok=False, error=f"prepare_server_args: {exc!r}")
        return result
    algorithm = server_args.speculative_algorithm
    result["values"] = {
        name: getattr(server_args, name)
        for name in (
            "model_path",
            "revision",
            "speculative_algorithm",
            "speculative_draft_model_path",
            "speculative_draft_model_revision",
            "speculative_num_steps",
            "speculative_eagle_topk",
            "speculative_num_draft_tokens",
            "tp_size",
            "host",
            "port",
            "mem_fraction_static",
            "context_length",
            "served_model_name",
            "enable_metrics",
            "pp_size",
            "nnodes",
            "node_rank",
            "dist_init_addr",
            "api_key",
        )
    }
    try:
        result["algorithm"] = SpeculativeAlgorithm.from_string(algorithm).name if algorithm else None
    except ValueError as exc:
        result["algorithm"] = f"rejected: {exc}"
    result["builtin_algorithms"] = [member.name for member in SpeculativeAlgorithm]
    return result


def respond(request: dict[str, Any]) -> dict[str, Any]:
    argvs: list[list[str]] = request["argvs"]
    if request["engine"] == "vllm-bench":
        bench = _vllm_bench_parser()
        results = [_vllm_bench(bench, argv) for argv in argvs]
        response = {"options": _option_strings(bench), "results": results}
    elif request["engine"] == "vllm":
        top, serve = _vllm_parser()
        response = {
            "options": _option_strings(serve),
            "results": [_vllm(top, argv) for argv in argvs],
            "speculative_config": _vllm_speculative_schema(),
        }
    else:
        parser = _sglang_parser()
        response = {"options": _option_strings(parser), "results": [_sglang(parser, argv) for argv in argvs]}
    return response


def main() -> None:
    requests = (json.loads(line) for line in sys.stdin) if "--serve" in sys.argv else [json.load(sys.stdin)]
    for request in requests:
        print(RESULT_MARKER + json.dumps(respond(request), default=str), flush=True)


if __name__ == "__main__":
    main()
