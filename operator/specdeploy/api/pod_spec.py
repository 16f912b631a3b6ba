"""The spec's pod-level sections: scheduling (tolerations, node selector, affinity), pod metadata,
resources, the security context and the lifecycle of the engine pods."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator

from specdeploy.api import rules
from specdeploy.api.base import ApiModel, Quantity


class Toleration(ApiModel):
    """A pod toleration (core/v1 Toleration)."""

    key: str | None = Field(
        default=None, description="Taint key to tolerate; empty with Exists: every taint."
    )
    operator: Literal["Exists", "Equal"] | None = Field(
        default=None, description="Exists (any value) or Equal (the value below). Default: Equal."
    )
    value: str | None = Field(default=None, description="Taint value matched by Equal.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect to tolerate. Default: every effect."
    )
    toleration_seconds: int | None = Field(
        default=None,
        description="With NoExecute: how long the pod stays once the taint appears. Default: forever.",
    )


class Scheduling(ApiModel):
    """Placement of the engine pods, on top of what the GPU plan requires."""

    node_selector: dict[str, str] = Field(default_factory=dict, description="Extra node selector labels.")
    tolerations: list[Toleration] = Field(
        default_factory=list,
        max_length=32,
        description="Extra tolerations (the GPU taint is tolerated already).",
    )
    affinity: dict[str, Any] | None = Field(
        default=None, description="core/v1 Affinity merged with the plan's GPU product node affinity."
    )
    priority_class_name: str | None = Field(
        default=None, max_length=253, description="PriorityClass of the pods."
    )
    runtime_class_name: str | None = Field(
        default=None, max_length=253, description="RuntimeClass of the pods (e.g. nvidia)."
    )


class PodMetadata(ApiModel):
    """Labels and annotations added to engine pods."""

    labels: dict[str, str] = Field(default_factory=dict, description="Extra pod labels.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Extra pod annotations.")


class Resources(ApiModel):
    """CPU and memory for the engine container; GPUs come from the plan and cannot be set here."""

    model_config = ConfigDict(json_schema_extra=rules.schema_extra("spec.resources"))

    requests: dict[str, Quantity] = Field(
        default_factory=dict,
        description=(
            "Requests, e.g. cpu: 8, memory: 64Gi (an integer or a quantity string; a fraction as a "
            'string, "0.5" or 500m). Default for cpu and memory: sized from the plan '
            "(2 CPUs + 2 per GPU; weights + /dev/shm + 4 GiB + 2 GiB per GPU)."
        ),
    )
    limits: dict[str, Quantity] = Field(
        default_factory=dict,
        description="Limits, e.g. memory: 128Gi. Default: memory limited to its request, cpu unlimited.",
    )


UID_MAX = 2_147_483_647
# A high UID (and group) of no user on the node or in the images, so a container escape lands
# on an unprivileged, unshared identity (the convention of distroless "nonroot", as the operator).
ENGINE_UID = 65532


class Security(ApiModel):
    """Who the engine runs as: by default a non-root user, so the pods meet the restricted Pod
    Security Standard; ``runAsNonRoot: false`` for an image that must run as root."""

    run_as_non_root: bool = Field(
        default=True,
        description=(
            "Run the engine as runAsUser/runAsGroup (restricted Pod Security Standard). false: as "
            "the image's user (root for the vLLM and SGLang images); the pods then meet baseline only."
        ),
    )
    run_as_user: int = Field(default=ENGINE_UID, ge=1, le=UID_MAX, description="UID of the engine (not 0).")
    run_as_group: int = Field(default=ENGINE_UID, ge=0, le=UID_MAX, description="Primary GID of the engine.")
    fs_group: int = Field(
        default=ENGINE_UID,
        ge=0,
        le=UID_MAX,
        description="Group owning the volumes, so a model cache claim written before stays writable.",
    )


class Lifecycle(ApiModel):
    """How long an engine pod may take to start, and how it stops."""

    model_config = ConfigDict(json_schema_extra=rules.schema_extra("spec.lifecycle"))

    startup_timeout_seconds: int = Field(
        default=1800,
        ge=60,
        le=86_400,
        description=(
            "Time an engine has to download, load and start serving before it is restarted (the "
            "startup probe's budget, in 10 s periods). Raise it for models over ~60 GB or slow hubs."
        ),
    )
    pre_stop_sleep_seconds: int = Field(
        default=10,
        ge=0,
        le=600,
        description=(
            "Seconds a stopping pod keeps serving before the engine gets SIGTERM, so Services and "
            "load balancers stop sending it requests first (0: no preStop hook)."
        ),
    )
    termination_grace_period_seconds: int = Field(
        default=90,
        ge=1,
        le=3600,
        description="Grace period of a stopping pod, the preStop sleep included; then it is killed.",
    )

    @model_validator(mode="after")
    def _sleep_within_grace(self) -> Lifecycle:
        """The CEL rule, for specs that did not come through the apiserver (``render``, ``plan``)."""
        rules.enforce("spec.lifecycle", rules.wire(self))
        return self
