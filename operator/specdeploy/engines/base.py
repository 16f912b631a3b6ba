"""What every engine renders, and the engine-independent parts of rendering and validation.

An engine turns an *effective* spec (one whose verifier, speculator, token count and tensor-parallel
size earlier stages have already resolved) into an :class:`EngineLaunch`: the exact argv, port,
image, probes and environment of the engine container. Everything here is a pure function of the
spec, so ``specdeploy render`` and the operator produce the same bytes.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from specdeploy import api
from specdeploy.enginefacts import EngineFacts
from specdeploy.planning.parallelism import allowed_draft_tp, explicit_draft_tp

HOST = "0.0.0.0"
# Both servers answer here while the process is up; what proves they serve differs per engine.
LIVENESS_PATH = "/health"

# The startup budget is spec.lifecycle.startupTimeoutSeconds (30 min by default) in periods of
# STARTUP_PERIOD_S: loading a 60 GB verifier means pulling it from the hub (10-20 min at
# 50-100 MB/s on a cold cache), copying it onto the GPUs, then compiling and capturing CUDA
# graphs for verifier and draft. A startup probe only holds liveness off until the first
# success, so a generous budget costs nothing on a warm start.
STARTUP_PERIOD_S = 10

# What LeaderWorkerSet sets in every container of a group: the leader pod's address and the pod's
# index in the group (0 is the leader). Kubernetes expands ``$(NAME)`` in a command from the
# container's environment, so one rendered command serves every pod.
LEADER_ADDRESS = "$(LWS_LEADER_ADDRESS)"
WORKER_INDEX = "$(LWS_WORKER_INDEX)"
LEADER_RANK = "0"


@dataclass(frozen=True)
class FieldError:
    """One rejected field: a spec path the user can find in their YAML, and what to do about it."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass(frozen=True)
class EngineLaunch:
    """Everything ``children.build_deployment`` needs to run one engine container.

    ``command`` is the full argv (it replaces the image entrypoint) with ``spec.engine.args`` last:
    on several nodes, the leader's; ``worker_command`` is then the other pods' of the group.
    ``env`` is the API key from its Secret (when ``spec.engine.apiKeySecretRef`` is set), then
    ``spec.engine.env``, as core/v1 EnvVar dicts; the probes are core/v1 Probe dicts.
    """

    image: str
    command: list[str]
    port: int
    startup_probe: dict[str, Any]
    readiness_probe: dict[str, Any]
    liveness_probe: dict[str, Any]
    env: list[dict[str, Any]]
    worker_command: list[str] | None = None


class Engine(Protocol):
    """One inference server: its pinned image, its port, and how it is launched and checked."""

    @property
    def name(self) -> api.EngineName:
        """The ``spec.engine.name`` value selecting this engine."""
        ...

    @property
    def facts(self) -> EngineFacts:
        """What planning and acceptance know of this engine (``specdeploy.enginefacts``)."""
        ...

    @property
    def version(self) -> str:
        """The engine release of the default image, and of the conformance-tested parser."""
        ...

    @property
    def default_image(self) -> str:
        """The pinned image used when ``spec.engine.image`` is unset."""
        ...

    @property
    def port(self) -> int:
        """The container port the server listens on."""
        ...

    @property
    def api_key_env(self) -> str:
        """The container variable holding ``spec.engine.apiKeySecretRef``'s key: one the engine
        reads itself, or one its command refers to as ``$(NAME)``, so the key is never in argv."""
        ...

    @property
    def startup_pointers(self) -> tuple[str, ...]:
        """Parts of the error lines this engine prints after a failed start that only point back
        at the real error (``engines.failures.root_cause`` passes over them)."""
        ...

    def render(self, spec: api.SpeculativeDeploymentSpec) -> EngineLaunch:
        """The launch of ``spec``, which must be effective (see the module docstring)."""
        ...

    def validate(self, spec: api.SpeculativeDeploymentSpec) -> list[FieldError]:
        """Engine rules the CRD's CEL cannot express; empty when the spec is servable."""
        ...

    def baseline_command(self, command: Sequence[str]) -> list[str]:
        """``command`` (a rendered or running argv) serving the same verifier without a speculator."""
        ...

    def draft_length_command(self, command: Sequence[str], tokens: int) -> list[str]:
        """``command`` drafting ``tokens`` tokens at every batch size (no schedule); ValueError
        when the engine cannot say so in its command."""
        ...

    def idle_draft_command(self, command: Sequence[str]) -> list[str]:
        """``command`` with the draft loaded and drafting nothing at any batch size; ValueError
        when the engine cannot say so in its command."""
        ...


@dataclass(frozen=True)
class OwnedFlag:
    """A flag the operator renders itself, so ``engine.args`` may not repeat it."""

    names: tuple[str, ...]
    use_instead: str


def tensor_parallel_size(spec: api.SpeculativeDeploymentSpec) -> int:
    """The resolved TP size; ``auto`` here means the planner stage was skipped (a bug)."""
    tensor = spec.parallelism.tensor
    if not isinstance(tensor, int):
        raise ValueError("parallelism.tensor must be resolved to an integer before rendering")
    return tensor


def pipeline_parallel_size(spec: api.SpeculativeDeploymentSpec) -> int:
    """The resolved pipeline size (1 until the planner splits a replica into stages)."""
    pipeline = spec.parallelism.pipeline
    return pipeline if isinstance(pipeline, int) else 1


def node_count(spec: api.SpeculativeDeploymentSpec) -> int:
    """The nodes one replica spans (1 until the planner spreads it over several)."""
    nodes = spec.parallelism.nodes
    return nodes if isinstance(nodes, int) else 1


def verifier_model(spec: api.SpeculativeDeploymentSpec) -> str:
    """The verifier id, which the catalog stage fills when only a speculator was named."""
    if spec.verifier is None:
        raise ValueError("spec.verifier must be resolved before rendering")
    return spec.verifier.model


def speculator(spec: api.SpeculativeDeploymentSpec) -> tuple[api.Speculator, str, int]:
    """The speculator with its resolved model id and token count."""
    spec_ = spec.speculator
    if spec_ is None or spec_.model is None or spec_.num_speculative_tokens is None:
        raise ValueError("spec.speculator.model and numSpeculativeTokens must be resolved before rendering")
    return spec_, spec_.model, spec_.num_speculative_tokens


def _image(spec: api.SpeculativeDeploymentSpec, default: str) -> str:
    """The resource's image, else the cluster-wide default (SPECDEPLOY_<ENGINE>_IMAGE, set by the
    Helm chart to pull through a mirror), else the image pinned in this release."""
    override = os.environ.get(f"SPECDEPLOY_{spec.engine.name.upper()}_IMAGE")
    return spec.engine.image or override or default


def _http_probe(
    path: str, port: int, period_s: int, failure_threshold: int, timeout_s: int
) -> dict[str, Any]:
    """A core/v1 Probe doing ``GET path`` on the container port."""
    return {
        "httpGet": {"path": path, "port": port},
        "periodSeconds": period_s,
        "failureThreshold": failure_threshold,
        "timeoutSeconds": timeout_s,
    }


def _user_env(spec: api.SpeculativeDeploymentSpec) -> list[dict[str, str]]:
    """``engine.env`` as EnvVar dicts; a name given twice keeps its last value, in the last place."""
    merged: dict[str, str] = {}
    for var in spec.engine.env:
        merged.pop(var.name, None)
        merged[var.name] = var.value
    return [{"name": name, "value": value} for name, value in merged.items()]


def api_key_env(engine: Engine, spec: api.SpeculativeDeploymentSpec) -> list[dict[str, Any]]:
    """The API key as ``engine.api_key_env`` from its Secret; nothing when none is set."""
    ref = spec.engine.api_key_secret_ref
    if ref is None:
        return []
    return [{"name": engine.api_key_env, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}]


def startup_failure_threshold(spec: api.SpeculativeDeploymentSpec) -> int:
    """Startup probe failures that fill ``lifecycle.startupTimeoutSeconds`` (rounded up, so the
    engine never gets less time than the spec grants)."""
    return math.ceil(spec.lifecycle.startup_timeout_seconds / STARTUP_PERIOD_S)


def launch(
    engine: Engine,
    spec: api.SpeculativeDeploymentSpec,
    command: list[str],
    ready_path: str,
    ready_timeout_s: int,
    worker_command: list[str] | None = None,
) -> EngineLaunch:
    """The launch of ``command``: ``ready_path`` gates startup and traffic, ``/health`` liveness.

    The startup probe has the long budget of :func:`startup_failure_threshold`; once it passes,
    readiness takes a replica out of the Service within 30 s and liveness restarts it after a minute.
    """
    return EngineLaunch(
        image=_image(spec, engine.default_image),
        command=command,
        port=engine.port,
        startup_probe=_http_probe(
            ready_path, engine.port, STARTUP_PERIOD_S, startup_failure_threshold(spec), ready_timeout_s
        ),
        readiness_probe=_http_probe(
            ready_path, engine.port, period_s=10, failure_threshold=3, timeout_s=ready_timeout_s
        ),
        liveness_probe=_http_probe(
            LIVENESS_PATH, engine.port, period_s=15, failure_threshold=4, timeout_s=10
        ),
        env=[*api_key_env(engine, spec), *_user_env(spec)],
        worker_command=worker_command,
    )


def _flag_name(arg: str) -> str | None:
    """The option name an argv token sets (``--a_b=1`` -> ``--a-b``), or None for a value."""
    if not arg.startswith("-") or arg == "-" or arg[1:2].isdigit():
        return None
    name = arg.split("=", 1)[0]
    return name if not name.startswith("--") else "--" + name[2:].replace("_", "-")


def without_options(command: Sequence[str], names: Sequence[str]) -> list[str]:
    """``command`` without the options named in ``names`` (a name ending in ``-`` is a prefix),
    each with its value: the next token unless the option is written ``--name=value``."""
    kept: list[str] = []
    skip_value = False
    for arg in command:
        if skip_value:
            skip_value = False
            if _flag_name(arg) is None:
                continue
        name = _flag_name(arg)
        if name is not None and any(name == n or (n.endswith("-") and name.startswith(n)) for n in names):
            skip_value = "=" not in arg
            continue
        kept.append(arg)
    return kept


def owned_flag_errors(spec: api.SpeculativeDeploymentSpec, owned: Sequence[OwnedFlag]) -> list[FieldError]:
    """Reject ``engine.args`` that repeat a flag the operator renders, naming the field to use.

    Long names are also matched by prefix because argparse expands unambiguous abbreviations
    (``--tensor-parallel`` would silently become ``--tensor-parallel-size``).
    """
    errors: list[FieldError] = []
    for index, arg in enumerate(spec.engine.args):
        name = _flag_name(arg)
        if name is None:
            continue
        for flag in owned:
            hit = any(
                name == known or (name.startswith("--") and len(name) > 3 and known.startswith(name))
                for known in flag.names
            )
            if hit:
                errors.append(
                    FieldError(
                        f"spec.engine.args[{index}]",
                        f"{arg!r} duplicates {flag.names[0]}, which the operator renders; "
                        f"use {flag.use_instead} instead",
                    )
                )
                break
    return errors


def draft_tp_errors(spec: api.SpeculativeDeploymentSpec) -> list[FieldError]:
    """Reject a draft TP the engine cannot run beside the verifier (``planning.parallelism``).

    Skipped while ``parallelism.tensor`` is still ``auto``: the rule is checked again on the
    effective spec once the planner has chosen.
    """
    tensor = spec.parallelism.tensor
    draft = explicit_draft_tp(spec)
    if draft is None or not isinstance(tensor, int):
        return []
    allowed = allowed_draft_tp(spec.engine.name, tensor)
    if draft in allowed:
        return []
    sizes = " or ".join(map(str, allowed))
    return [
        FieldError(
            "spec.speculator.draftTensorParallelSize",
            f"{spec.engine.name} runs the draft with tensor-parallel size {sizes} "
            f"(the verifier's parallelism.tensor is {tensor}); got {draft}",
        )
    ]


def schedule_errors(spec: api.SpeculativeDeploymentSpec) -> list[FieldError]:
    """A schedule's draft lengths within the token count the catalog resolved (the schema checks
    them only against a numSpeculativeTokens written in the spec)."""
    spec_ = spec.speculator
    if spec_ is None or spec_.schedule is None or spec_.num_speculative_tokens is None:
        return []
    longest = max(entry.tokens for entry in spec_.schedule)
    if longest <= spec_.num_speculative_tokens:
        return []
    return [
        FieldError(
            "spec.speculator.schedule",
            f"a range drafts {longest} tokens, more than the speculator's numSpeculativeTokens "
            f"{spec_.num_speculative_tokens} (the catalog's value when the spec leaves it out)",
        )
    ]
