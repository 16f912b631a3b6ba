"""The SpeculativeDeployment status: conditions, what is served, the pairing report and the plan.

Written only by the operator; the condition types and their order are part of the API.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from specdeploy.api.base import ApiModel

READY = "Ready"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
PAIRING_VERIFIED = "PairingVerified"
SCHEDULABLE = "Schedulable"
SPECULATION_EFFECTIVE = "SpeculationEffective"
CONDITION_ORDER = (READY, PROGRESSING, DEGRADED, PAIRING_VERIFIED, SCHEDULABLE, SPECULATION_EFFECTIVE)

ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(ApiModel):
    """A Kubernetes-style condition."""

    type: str = Field(
        description="Ready, Progressing, Degraded, PairingVerified, Schedulable or SpeculationEffective."
    )
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(description="CamelCase reason code (the STATUS column shows Ready's).")
    message: str = Field(default="", description="What happened, naming the field or object at fault.")
    last_transition_time: str | None = Field(
        default=None, description="When status last changed (RFC 3339); a new reason alone does not move it."
    )
    observed_generation: int | None = Field(
        default=None, description="The metadata.generation the condition was computed for."
    )


class CheckResult(ApiModel):
    """One pairing rule's outcome."""

    name: str = Field(description="The check: verifier, hiddenSize, vocabSize, tokenizer, ...")
    status: Literal["Passed", "Failed", "Warning", "Skipped"] = Field(
        description="Passed, Failed (the pair is refused), Warning (served, but worth a look) or Skipped."
    )
    reason: str = Field(description="CamelCase reason code.")
    message: str = Field(default="", description="Both values compared, or why the check was skipped.")


class PairingStatus(ApiModel):
    """What the pairing check found."""

    verified: ConditionStatus = Field(description="The PairingVerified condition's status.")
    reason: str = Field(description="Compatible, or the reason of the first check that did not pass.")
    checks: list[CheckResult] = Field(default_factory=list, description="Every check, in the order run.")


class Plan(ApiModel):
    """The GPU plan for one replica: what was chosen and why."""

    tensor_parallel_size: int = Field(
        description="GPUs each verifier is sharded over (--tensor-parallel-size)."
    )
    pipeline_parallel_size: int = Field(
        default=1,
        description="Pipeline stages of a replica (one per node when several nodes run it that way).",
    )
    nodes_per_replica: int = Field(
        default=1, description="Nodes one replica spans; above 1, a LeaderWorkerSet group per replica."
    )
    gpu_product: str | None = Field(default=None, description="The GPU feature discovery product planned on.")
    node_pool: str | None = Field(
        default=None,
        description=(
            "The node pool (a Karpenter NodePool or a pool declared to the operator) whose nodes "
            "the plan is for, when no other node fits: engine pods carry what makes it create them."
        ),
    )
    gpus_per_replica: int = Field(description="GPUs one replica takes, over all its nodes.")
    gpu_memory_gib: float | None = Field(
        default=None, alias="gpuMemoryGiB", description="Memory of one GPU of that product."
    )
    weights_gib: float | None = Field(default=None, alias="weightsGiB", description="The verifier's weights.")
    speculator_weights_gib: float | None = Field(
        default=None, alias="speculatorWeightsGiB", description="The speculator's weights."
    )
    kv_cache_gib: float | None = Field(
        default=None,
        alias="kvCacheGiB",
        description=(
            "KV cache the plan reserves for the replica: parallelism.minConcurrentSequences "
            "sequences of maxModelLen tokens."
        ),
    )
    max_model_len: int | None = Field(default=None, description="The context length planned for.")
    reason: str = Field(
        default="", description="Why this plan: the choice and the memory per GPU, to check by hand."
    )


class Acceptance(ApiModel):
    """Acceptance from the engines' own counters over a sliding window; rewritten when a figure moves."""

    rate: str = Field(description='Accepted / proposed draft tokens, "0" to "1".')
    mean_length: str = Field(
        description="Tokens per verifier step: 1 + accepted / drafts (the 1 is the verifier's own token)."
    )
    per_position: list[str] = Field(
        default_factory=list,
        description="Acceptance rate of the i-th proposed token, per verifier step (vLLM only).",
    )
    draft_tokens: int = Field(description="Draft tokens proposed in the window (the figures' sample).")
    drafts: int = Field(description="Verifier steps that checked a draft in the window.")
    pods: int = Field(description="Engine pods whose counters the window sums.")
    window_seconds: int = Field(description="Span of the window the figures cover.")
    measured_at: str = Field(description="When the figures were read (RFC 3339).")
    summary: str = Field(description="The ACCEPTANCE column: rate and mean length.")


class ScheduleRange(ApiModel):
    """A draft length for a range of batch sizes, and what it is expected to gain."""

    from_batch: int = Field(description="First batch size of the range.")
    to_batch: int | None = Field(default=None, description="Last batch size (inclusive); absent: and above.")
    tokens: int = Field(description="Draft tokens per step; 0: no speculation.")
    expected_speedup: str | None = Field(
        default=None,
        description="Expected output tokens/s over the baseline without speculation, at fromBatch.",
    )


class SpeculationBasis(ApiModel):
    """What a recommendation was computed from."""

    per_position: list[str] = Field(
        description="Acceptance per draft position, measured with every batch size drafting `tokens`."
    )
    mean_length: str = Field(description="Tokens per verifier step measured then.")
    tokens: int = Field(description="Draft length the acceptance was measured at.")
    draft_tokens: int = Field(description="Draft tokens the acceptance window held.")
    measured_at: str = Field(description="When the acceptance was read (RFC 3339).")
    benchmark_measured_at: str | None = Field(
        default=None,
        description="The `specdeploy bench --tokens` run whose cost per draft length was used (RFC 3339).",
    )


class Speculation(ApiModel):
    """Adaptive speculation: the draft length per batch size recommended, and what runs."""

    policy: str = Field(description="spec.speculator.adaptive.policy.")
    reason: str = Field(description="CamelCase: why the recommendation is what it is, or why there is none.")
    message: str = Field(default="", description="The recommendation and its basis, or what it waits for.")
    recommended_schedule: list[ScheduleRange] = Field(
        default_factory=list,
        description="The draft length per batch size expected to serve the most tokens/s.",
    )
    basis: SpeculationBasis | None = None
    applied_schedule: list[ScheduleRange] | None = Field(
        default=None, description="Apply: the schedule the engines run now."
    )
    applied_at: str | None = Field(
        default=None, description="When the running schedule was applied (RFC 3339)."
    )
    previous_schedule: list[ScheduleRange] | None = Field(
        default=None, description="The schedule before the last change: what a revert goes back to."
    )
    rejected_schedule: list[ScheduleRange] | None = Field(
        default=None,
        description="A schedule reverted because it measured worse; not applied again until a new benchmark.",
    )
    turned_off: int | None = Field(
        default=None,
        description=(
            "Times speculation was turned off since a recommendation last turned it on: each doubles "
            "the wait before the next probe (spec.speculator.adaptive.probeIntervalSeconds), up to 32 times."
        ),
    )


class SpeculativeDeploymentStatus(ApiModel):
    """Observed state, written only by the operator."""

    observed_generation: int | None = Field(
        default=None, description="The metadata.generation this status describes."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready, Progressing, Degraded, PairingVerified, Schedulable, SpeculationEffective.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    verifier: str | None = Field(default=None, description="The verifier actually served.")
    speculator: str | None = Field(default=None, description="The speculator actually served.")
    engine: str | None = Field(default=None, description="The engine serving the pair: vllm or sglang.")
    tensor_parallel_size: int | None = Field(default=None, description="The planned tensor-parallel size.")
    replicas: int = Field(default=0, description="Replicas that exist (scale subresource).")
    ready_replicas: int = Field(
        default=0, description="Replicas serving; a multi-node replica counts when all its pods are ready."
    )
    updated_replicas: int = Field(default=0, description="Replicas running the current engine pod template.")
    selector: str | None = Field(default=None, description="Label selector of the pods (scale subresource).")
    endpoint: str | None = Field(default=None, description="In-cluster URL of the OpenAI-compatible API.")
    command: list[str] = Field(default_factory=list, description="The exact engine command line.")
    pairing: PairingStatus | None = None
    plan: Plan | None = None
    acceptance: Acceptance | None = None
    speculation: Speculation | None = None
