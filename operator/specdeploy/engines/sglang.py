"""SGLang: ``python3 -m sglang.launch_server`` with an EAGLE-3 draft, as seed 003 launches it.

The algorithm is always ``EAGLE3``. Seed 003's model card writes ``EAGLE``, which SGLang treats
as EAGLE-2 (and MTP); its own documentation uses ``EAGLE3`` for EAGLE-3 drafts, whose draft head
consumes several verifier hidden-state layers instead of one.

Draft shape. SGLang needs steps, top-k and draft tokens together: a partial set fails at startup
(an assertion, or a comparison with the missing top-k), and with none it picks its own. Steps are
``engine.sglang.numSteps``, else ``speculator.numSpeculativeTokens``. Top-k and draft tokens are
``engine.sglang.eagleTopk``/``numDraftTokens`` (filled from the catalog for known pairs, e.g. seed
003's 5/8/64 tree); when both are unset the draft runs as a chain (top-k 1, steps + 1 draft
tokens), which is what vLLM runs for the same token count and what SGLang's own auto-choice picks
for every architecture except Llama and Grok.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from specdeploy import api
from specdeploy.api import rules
from specdeploy.enginefacts import SGLANG, EngineFacts
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
    speculator,
    tensor_parallel_size,
    verifier_model,
    without_options,
)

VERSION = "0.5.23"
DEFAULT_IMAGE = f"lmsysorg/sglang:v{VERSION}"
PORT = 30000
# SGLang takes its API key only as --api-key: the command passes this variable, which Kubernetes
# expands from the container's environment, so status shows the reference and never the key.
# It guards every route but /health*, /ready* and /metrics*.
API_KEY_ENV = "SGLANG_API_KEY"
ALGORITHM = "EAGLE3"
# Share of each GPU kept outside SGLang's static pool (weights + KV cache) for activations and the
# CUDA graphs and tree-verify buffers of verifier *and* draft. Setting --mem-fraction-static to the
# whole budget (0.9, as people carry over from vLLM's --gpu-memory-utilization) is the reported
# OOM with EAGLE drafts; SGLang's own automatic value keeps >= 10 GB free on 80 GB GPUs.
DRAFT_HEADROOM = 0.1

OWNED_FLAGS: tuple[OwnedFlag, ...] = (
    OwnedFlag(("--model-path", "--model"), "spec.verifier.model"),
    OwnedFlag(("--revision",), "spec.verifier.revision"),
    OwnedFlag(("--speculative-algorithm",), "spec.speculator.method"),
    OwnedFlag(("--speculative-draft-model-path", "--speculative-draft-model"), "spec.speculator.model"),
    OwnedFlag(("--speculative-draft-model-revision",), "spec.speculator.revision"),
    OwnedFlag(
        ("--speculative-num-steps",),
        "spec.engine.sglang.numSteps or spec.speculator.numSpeculativeTokens",
    ),
    OwnedFlag(("--speculative-eagle-topk",), "spec.engine.sglang.eagleTopk"),
    OwnedFlag(("--speculative-num-draft-tokens",), "spec.engine.sglang.numDraftTokens"),
    OwnedFlag(("--tp-size", "--tensor-parallel-size", "--tp"), "spec.parallelism.tensor"),
    OwnedFlag(("--port",), "spec.service.port (the container always listens on 30000)"),
    OwnedFlag(("--api-key",), "spec.engine.apiKeySecretRef (a key in argv would show in status)"),
    OwnedFlag(("--host",), "nothing: the operator binds 0.0.0.0 for the Service and probes"),
    OwnedFlag(
        ("--mem-fraction-static",), "spec.engine.sglang.memFractionStatic or spec.gpuMemoryUtilization"
    ),
    OwnedFlag(("--context-length",), "spec.maxModelLen"),
    OwnedFlag(("--served-model-name",), "spec.servedModelName"),
    OwnedFlag(("--enable-metrics",), "nothing: metrics are always on"),
    OwnedFlag(("--pp-size", "--pipeline-parallel-size"), "spec.parallelism.pipeline"),
    OwnedFlag(
        ("--nnodes", "--node-rank", "--dist-init-addr", "--nccl-init-addr"),
        "spec.parallelism.nodes (the operator renders the multi-node launch)",
    ),
)
# Where the leader's process group listens for the other nodes of a multi-node replica.
DIST_INIT_PORT = 20000
# Every option that configures speculation starts so (algorithm, draft, steps, tree, thresholds).
SPECULATIVE_OPTIONS = ("--speculative-",)


def _options(spec: api.SpeculativeDeploymentSpec) -> api.SglangOptions:
    return spec.engine.sglang or api.SglangOptions()


def _steps(spec: api.SpeculativeDeploymentSpec) -> int | None:
    """``engine.sglang.numSteps``, else ``speculator.numSpeculativeTokens`` (None before the catalog)."""
    options = _options(spec)
    if options.num_steps is not None:
        return options.num_steps
    return spec.speculator.num_speculative_tokens if spec.speculator is not None else None


def draft_shape(spec: api.SpeculativeDeploymentSpec) -> tuple[int, int, int]:
    """(steps, top-k, draft tokens) as rendered; see the module docstring for the rule."""
    options = _options(spec)
    steps = _steps(spec)
    if steps is None:
        raise ValueError("spec.speculator.numSpeculativeTokens must be resolved before rendering")
    if options.eagle_topk is None or options.num_draft_tokens is None:
        return steps, 1, steps + 1
    return steps, options.eagle_topk, options.num_draft_tokens


def mem_fraction_static(spec: api.SpeculativeDeploymentSpec) -> float:
    """``engine.sglang.memFractionStatic``, else ``gpuMemoryUtilization - DRAFT_HEADROOM``."""
    options = _options(spec)
    if options.mem_fraction_static is not None:
        return options.mem_fraction_static
    return round(spec.gpu_memory_utilization - DRAFT_HEADROOM, 2)


def _schedule_errors(spec: api.SpeculativeDeploymentSpec) -> list[FieldError]:
    """SGLang 0.5.23 has no fixed draft length per batch size: refused, not silently ignored."""
    if spec.speculator is None or spec.speculator.schedule is None:
        return []
    return [
        FieldError(
            "spec.speculator.schedule",
            f"SGLang {VERSION} takes no draft length per batch size: its --speculative-adaptive "
            "moves the steps itself, from the acceptance it sees and candidates read from a file. "
            "Leave the schedule out, or serve the pair with engine.name vllm",
        )
    ]


def _draft_shape_errors(spec: api.SpeculativeDeploymentSpec) -> list[FieldError]:
    """The CRD's draft-shape rules on the effective options (steps from numSpeculativeTokens
    count too), and numSteps only with the rest of the set."""
    errors: list[FieldError] = []
    options = rules.wire(_options(spec))
    together = rules.SGLANG_TOPK_WITH_DRAFT_TOKENS
    if not together.holds(options):
        missing = "numDraftTokens" if "numDraftTokens" not in options else "eagleTopk"
        errors.append(FieldError(f"spec.engine.sglang.{missing}", together.message))
    elif "numSteps" in options and "eagleTopk" not in options:
        errors.append(
            FieldError(
                "spec.engine.sglang.numSteps",
                "numSteps, eagleTopk and numDraftTokens are set together; for a chain draft "
                "leave all three unset and set spec.speculator.numSpeculativeTokens",
            )
        )
    steps = _steps(spec)
    if steps is not None and not rules.SGLANG_CHAIN.holds({**options, "numSteps": steps}):
        errors.append(
            FieldError(
                "spec.engine.sglang.numDraftTokens",
                f"{rules.SGLANG_CHAIN.message} = {steps + 1} "
                f"(SGLang would silently override {options['numDraftTokens']})",
            )
        )
    return errors


def _memory_errors(spec: api.SpeculativeDeploymentSpec) -> list[FieldError]:
    """The derived --mem-fraction-static must leave SGLang a positive static pool."""
    if _options(spec).mem_fraction_static is not None or mem_fraction_static(spec) > 0:
        return []
    return [
        FieldError(
            "spec.gpuMemoryUtilization",
            f"SGLang keeps {DRAFT_HEADROOM} of each GPU outside its static pool for "
            "activations and the draft; raise gpuMemoryUtilization above that or set "
            "spec.engine.sglang.memFractionStatic",
        )
    ]


class SglangEngine:
    """The SGLang server (``sglang.launch_server``)."""

    name: ClassVar[api.EngineName] = "sglang"
    facts: ClassVar[EngineFacts] = SGLANG
    version: ClassVar[str] = VERSION
    default_image: ClassVar[str] = DEFAULT_IMAGE
    port: ClassVar[int] = PORT
    api_key_env: ClassVar[str] = API_KEY_ENV
    # The launcher's errors after a scheduler process failed (sglang/srt/entrypoints/engine.py).
    startup_pointers: ClassVar[tuple[str, ...]] = (
        "Please see the error messages above",
        "It usually means the child failed",
        "scheduler died during initialization",
    )

    def command(self, spec: api.SpeculativeDeploymentSpec, node_rank: str = LEADER_RANK) -> list[str]:
        """The argv, in seed 003's order, with ``spec.engine.args`` last.

        ``--tp-size`` is spelled out: the seed's ``--tp`` only works through argparse's prefix
        matching and would break as soon as SGLang adds another ``--tp...`` flag. On several
        nodes every pod runs the same arguments plus SGLang's multi-node launch (``--nnodes``,
        its ``--node-rank``, the leader's ``--dist-init-addr``); only rank 0 serves HTTP.
        """
        spec_, draft, _ = speculator(spec)
        steps, topk, draft_tokens = draft_shape(spec)
        cmd = [
            "python3", "-m", "sglang.launch_server",
            "--model-path", verifier_model(spec),
            "--speculative-algorithm", ALGORITHM,
            "--speculative-draft-model-path", draft,
        ]  # fmt: skip
        if spec_.revision is not None:
            cmd += ["--speculative-draft-model-revision", spec_.revision]
        cmd += [
            "--speculative-num-steps", str(steps),
            "--speculative-eagle-topk", str(topk),
            "--speculative-num-draft-tokens", str(draft_tokens),
            "--tp-size", str(tensor_parallel_size(spec)),
            "--host", HOST,
            "--port", str(PORT),
            "--mem-fraction-static", str(mem_fraction_static(spec)),
        ]  # fmt: skip
        if spec.max_model_len is not None:
            cmd += ["--context-length", str(spec.max_model_len)]
        if spec.served_model_name is not None:
            cmd += ["--served-model-name", spec.served_model_name]
        cmd.append("--enable-metrics")
        if spec.engine.api_key_secret_ref is not None:
            cmd += ["--api-key", f"$({API_KEY_ENV})"]
        if spec.verifier is not None and spec.verifier.revision is not None:
            cmd += ["--revision", spec.verifier.revision]
        if node_count(spec) > 1:
            cmd += [
                "--dist-init-addr", f"{LEADER_ADDRESS}:{DIST_INIT_PORT}",
                "--nnodes", str(node_count(spec)),
                "--node-rank", node_rank,
            ]  # fmt: skip
        return cmd + list(spec.engine.args)

    def render(self, spec: api.SpeculativeDeploymentSpec) -> EngineLaunch:
        """``/health`` for liveness; ``/health_generate`` (a one-token generation) gates traffic.

        ``/health`` only says the HTTP server is up; ``/health_generate`` proves verifier and draft
        produce a token. Its timeout exceeds SGLang's own 20 s health-check timeout so the engine,
        not the kubelet, reports a stuck scheduler.
        """
        worker = self.command(spec, WORKER_INDEX) if node_count(spec) > 1 else None
        return launch(self, spec, self.command(spec), "/health_generate", 30, worker)

    def validate(self, spec: api.SpeculativeDeploymentSpec) -> list[FieldError]:
        """Draft shape and memory rules SGLang enforces late (or not at all), plus owned flags."""
        return (
            draft_tp_errors(spec)
            + _draft_shape_errors(spec)
            + _memory_errors(spec)
            + _schedule_errors(spec)
            + owned_flag_errors(spec, OWNED_FLAGS)
        )

    def draft_length_command(self, command: Sequence[str], tokens: int) -> list[str]:
        """Refused: the draft's steps, top-k and tree size move together in SGLang, so a length
        alone does not say which draft to run."""
        raise ValueError(
            f"measuring draft lengths needs vLLM: SGLang {VERSION} sets steps, top-k and draft "
            "tokens together"
        )

    def idle_draft_command(self, command: Sequence[str]) -> list[str]:
        """Refused: SGLang has no draft length per batch size, so it never loads a draft it does
        not run."""
        raise ValueError(f"measuring an idle draft needs vLLM: SGLang {VERSION} has no per-batch-size length")

    def baseline_command(self, command: Sequence[str]) -> list[str]:
        """Every ``--speculative-*`` option dropped; ``--mem-fraction-static`` stays as rendered, so
        the baseline keeps the same static pool (the draft's share becomes spare memory)."""
        return without_options(command, SPECULATIVE_OPTIONS)
