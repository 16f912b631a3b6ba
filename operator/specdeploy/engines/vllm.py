"""vLLM: ``vllm serve <verifier> --speculative-config '<JSON>'``, the long form of seed 000.

The long form (verifier positional, draft in the speculative config) is used rather than
``vllm serve <speculator>`` because it names both models and the method explicitly: nothing is
guessed from the draft's name or its embedded ``speculators_config``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, ClassVar

from specdeploy import api
from specdeploy.enginefacts import VLLM, EngineFacts
from specdeploy.engines.base import (
    HOST,
    LEADER_ADDRESS,
    LEADER_RANK,
    WORKER_INDEX,
    EngineLaunch,
    FieldError,
    OwnedFlag,
    draft_tp_errors,
    launch,
    node_count,
    owned_flag_errors,
    pipeline_parallel_size,
    schedule_errors,
    speculator,
    tensor_parallel_size,
    verifier_model,
    without_options,
)

VERSION = "0.33.0"
DEFAULT_IMAGE = f"vllm/vllm-openai:v{VERSION}"
PORT = 8000
# vLLM reads its API key from this variable when --api-key is not given; it guards /v1/... only.
API_KEY_ENV = "VLLM_API_KEY"

OWNED_FLAGS: tuple[OwnedFlag, ...] = (
    OwnedFlag(("--model",), "spec.verifier.model"),
    OwnedFlag(("--tensor-parallel-size", "-tp"), "spec.parallelism.tensor"),
    OwnedFlag(
        ("--speculative-config", "-sc", "--spec-model", "--spec-tokens", "--spec-method"),
        "spec.speculator (model, revision, numSpeculativeTokens, draftTensorParallelSize)",
    ),
    OwnedFlag(("--port",), "spec.service.port (the container always listens on 8000)"),
    OwnedFlag(("--host",), "nothing: the operator binds 0.0.0.0 for the Service and probes"),
    OwnedFlag(("--revision",), "spec.verifier.revision"),
    OwnedFlag(("--max-model-len",), "spec.maxModelLen"),
    OwnedFlag(("--gpu-memory-utilization", "--device-memory-utilization"), "spec.gpuMemoryUtilization"),
    OwnedFlag(("--served-model-name",), "spec.servedModelName"),
    OwnedFlag(
        ("--enable-expert-parallel", "--disable-expert-parallel", "-ep"),
        "spec.engine.vllm.enableExpertParallel",
    ),
    OwnedFlag(("--kv-cache-dtype",), "spec.engine.vllm.kvCacheDtype"),
    OwnedFlag(("--api-key",), "spec.engine.apiKeySecretRef (a key in argv would show in status)"),
    OwnedFlag(("--pipeline-parallel-size", "-pp"), "spec.parallelism.pipeline"),
    OwnedFlag(
        ("--nnodes", "-n", "--node-rank", "-r", "--master-addr", "--headless"),
        "spec.parallelism.nodes (the operator renders the multi-node launch)",
    ),
)
SPECULATIVE_CONFIG = "--speculative-config"
SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
# Every option that configures speculation: the rendered one and its aliases.
SPECULATIVE_OPTIONS = ("--speculative-", "-sc", "--spec-")


def speculative_config(spec: api.SpeculativeDeploymentSpec) -> dict[str, Any]:
    """The ``--speculative-config`` object; ``method`` is always explicit so vLLM never guesses it.

    ``tensor_parallel_size`` must never appear here (vLLM rejects it); the draft's TP goes in
    ``draft_tensor_parallel_size``.
    """
    spec_, model, tokens = speculator(spec)
    config: dict[str, Any] = {"method": spec_.method, "model": model, "num_speculative_tokens": tokens}
    if spec_.revision is not None:
        config["revision"] = spec_.revision
    if spec_.draft_tensor_parallel_size is not None:
        config["draft_tensor_parallel_size"] = spec_.draft_tensor_parallel_size
    if spec_.schedule is not None:
        # The open-ended last range ends at the API's largest batch size; vLLM carries its
        # draft length on past that, to its own max_num_seqs.
        config[SCHEDULE_KEY] = [
            [entry.from_batch, entry.to_batch or api.MAX_BATCH_SIZE, entry.tokens] for entry in spec_.schedule
        ]
    return config


def drafts_nothing(spec: api.SpeculativeDeploymentSpec) -> bool:
    """A schedule of no draft at any batch size: served without ``--speculative-config`` at all.
    With the draft loaded, vLLM keeps the draft's cache current on every token even when it drafts
    nothing (measured on CPU: 0.83x the baseline at concurrency 1); without, it is the baseline."""
    schedule = spec.speculator.schedule if spec.speculator is not None else None
    return bool(schedule) and all(entry.tokens == 0 for entry in schedule or ())


def running_config(command: Sequence[str]) -> dict[str, Any] | None:
    """The ``--speculative-config`` object of a command the operator rendered; None without one."""
    argv = list(command)
    if SPECULATIVE_CONFIG not in argv[:-1]:
        return None
    config: dict[str, Any] = json.loads(argv[argv.index(SPECULATIVE_CONFIG) + 1])
    return config


class VllmEngine:
    """The vLLM OpenAI-compatible server."""

    name: ClassVar[api.EngineName] = "vllm"
    facts: ClassVar[EngineFacts] = VLLM
    version: ClassVar[str] = VERSION
    default_image: ClassVar[str] = DEFAULT_IMAGE
    port: ClassVar[int] = PORT
    api_key_env: ClassVar[str] = API_KEY_ENV
    # The errors the engine core raises after a worker failed (v1/executor/multiproc_executor.py)
    # and the API server after the engine core failed (v1/engine/utils.py).
    startup_pointers: ClassVar[tuple[str, ...]] = ("See stack trace for root cause", "See root cause above")

    def command(self, spec: api.SpeculativeDeploymentSpec, node_rank: str = LEADER_RANK) -> list[str]:
        """The argv: seed 000's flags (``-tp`` spelled out), then the optional ones, ``engine.args`` last.

        On several nodes every pod runs the same engine arguments plus vLLM's multi-node launch
        (``--nnodes``, its ``--node-rank``, the leader as ``--master-addr``); pods other than the
        leader run ``--headless``: engine workers without an API server.
        """
        cmd = [
            "vllm",
            "serve",
            verifier_model(spec),
            "--tensor-parallel-size",
            str(tensor_parallel_size(spec)),
        ]
        if not drafts_nothing(spec):
            cmd += [SPECULATIVE_CONFIG, json.dumps(speculative_config(spec), separators=(",", ":"))]
        cmd += ["--port", str(PORT), "--host", HOST]
        if pipeline_parallel_size(spec) > 1:
            cmd += ["--pipeline-parallel-size", str(pipeline_parallel_size(spec))]
        if spec.verifier is not None and spec.verifier.revision is not None:
            cmd += ["--revision", spec.verifier.revision]
        if spec.max_model_len is not None:
            cmd += ["--max-model-len", str(spec.max_model_len)]
        # Always explicit: vLLM's own default moves between releases (0.9, then 0.92 in 0.33).
        cmd += ["--gpu-memory-utilization", str(spec.gpu_memory_utilization)]
        if spec.served_model_name is not None:
            cmd += ["--served-model-name", spec.served_model_name]
        options = spec.engine.vllm
        if options is not None and options.enable_expert_parallel:
            cmd.append("--enable-expert-parallel")
        if options is not None and options.kv_cache_dtype is not None:
            cmd += ["--kv-cache-dtype", options.kv_cache_dtype]
        if node_count(spec) > 1:
            cmd += [
                "--nnodes",
                str(node_count(spec)),
                "--node-rank",
                node_rank,
                "--master-addr",
                LEADER_ADDRESS,
            ]
            cmd += ["--headless"] if node_rank != LEADER_RANK else []
        return cmd + list(spec.engine.args)

    def render(self, spec: api.SpeculativeDeploymentSpec) -> EngineLaunch:
        """vLLM's ``/health`` answers 200 once the engine serves and 503 when it is dead or draining."""
        worker = self.command(spec, WORKER_INDEX) if node_count(spec) > 1 else None
        return launch(self, spec, self.command(spec), "/health", 5, worker)

    def validate(self, spec: api.SpeculativeDeploymentSpec) -> list[FieldError]:
        """vLLM runs the draft at TP 1 or the verifier's TP; operator-owned flags stay out of args."""
        return draft_tp_errors(spec) + schedule_errors(spec) + owned_flag_errors(spec, OWNED_FLAGS)

    def baseline_command(self, command: Sequence[str]) -> list[str]:
        """Everything but ``--speculative-config``: the verifier alone, every other flag as is."""
        return without_options(command, SPECULATIVE_OPTIONS)

    def draft_length_command(self, command: Sequence[str], tokens: int) -> list[str]:
        """The rendered ``--speculative-config`` with ``num_speculative_tokens`` set and no schedule."""
        argv = list(command)
        config = running_config(argv)
        if config is None:
            raise ValueError(f"the command has no {SPECULATIVE_CONFIG} to set the draft length in")
        config["num_speculative_tokens"] = tokens
        config.pop(SCHEDULE_KEY, None)
        return _with_config(argv, config)

    def idle_draft_command(self, command: Sequence[str]) -> list[str]:
        """The rendered ``--speculative-config`` with the draft loaded and 0 tokens at every batch
        size: what a 0 range beside ranges that draft runs (the draft's first pass on every step)."""
        argv = list(command)
        config = running_config(argv)
        if config is None:
            raise ValueError(f"the command has no {SPECULATIVE_CONFIG} to load the draft from")
        config[SCHEDULE_KEY] = [[1, api.MAX_BATCH_SIZE, 0]]
        return _with_config(argv, config)


def _with_config(argv: list[str], config: dict[str, Any]) -> list[str]:
    """``argv`` with ``config`` as its ``--speculative-config``."""
    argv[argv.index(SPECULATIVE_CONFIG) + 1] = json.dumps(config, separators=(",", ":"))
    return argv
