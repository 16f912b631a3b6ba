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

    type: str
    status: ConditionStatus
    reason: str
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None


class CheckResult(ApiModel):
    """One pairing rule's outcome."""

    name: str
    status: Literal["Passed", "Failed", "Warning", "Skipped"]
    reason: str
    message: str = ""


class PairingStatus(ApiModel):
    """What the pairing check found."""

    verified: ConditionStatus
    reason: str
    checks: list[CheckResult] = Field(default_factory=list)


class Plan(ApiModel):
    """The GPU plan for one replica: what was chosen and why."""

    tensor_parallel_size: int
    pipeline_parallel_size: int = 1
    nodes_per_replica: int = 1
    gpu_product: str | None = None
    gpus_per_replica: int
    gpu_memory_gib: float | None = Field(default=None, alias="gpuMemoryGiB")
    weights_gib: float | None = Field(default=None, alias="weightsGiB")
    speculator_weights_gib: float | None = Field(default=None, alias="speculatorWeightsGiB")
    kv_cache_gib: float | None = Field(default=None, alias="kvCacheGiB")
    max_model_len: int | None = None
    reason: str = ""


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


class SpeculativeDeploymentStatus(ApiModel):
    """Observed state, written only by the operator."""

    observed_generation: int | None = None
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    verifier: str | None = Field(default=None, description="The verifier actually served.")
    speculator: str | None = Field(default=None, description="The speculator actually served.")
    engine: str | None = None
    tensor_parallel_size: int | None = None
    replicas: int = 0
    ready_replicas: int = 0
    updated_replicas: int = 0
    selector: str | None = Field(default=None, description="Label selector of the pods (scale subresource).")
    endpoint: str | None = Field(default=None, description="In-cluster URL of the OpenAI-compatible API.")
    command: list[str] = Field(default_factory=list, description="The exact engine command line.")
    pairing: PairingStatus | None = None
    plan: Plan | None = None
    acceptance: Acceptance | None = None
