"""The SpeculativeDeployment v1alpha1 spec: the single source of truth for the CRD schema.

Every field's description, default and bounds live here and in the two sections kept apart
(``engine_spec``: the engine and its options; ``pod_spec``: scheduling, resources, security and
lifecycle of the engine pods), the CEL rules in ``api.rules``;
``api.crd`` turns these models into the OpenAPI schema the apiserver enforces, and the operator
parses each object into them once, so nothing downstream handles raw spec dicts.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from specdeploy.api import rules
from specdeploy.api.base import (
    ENGINE_HOME,
    MAX_BATCH_SIZE,
    MAX_NODES,
    MAX_REPLICAS,
    MAX_SPECULATIVE_TOKENS,
    ApiModel,
    Quantity,
)
from specdeploy.api.engine_spec import Engine
from specdeploy.api.pod_spec import (
    Lifecycle,
    PodMetadata,
    Resources,
    Scheduling,
    Security,
)
from specdeploy.api.pod_template import PodTemplate


class Verifier(ApiModel):
    """The large target model whose output distribution is served unchanged."""

    model: str = Field(
        min_length=1,
        max_length=256,
        description="Hugging Face model id (org/name) of the verifier, e.g. Qwen/Qwen3-8B.",
    )
    revision: str | None = Field(
        default=None, max_length=128, description="Branch, tag or commit of the verifier. Default: main."
    )


class BatchRange(ApiModel):
    """The draft length for one range of batch sizes (sequences decoded in one verifier step)."""

    model_config = ConfigDict(json_schema_extra=rules.schema_extra("spec.speculator.schedule[]"))

    from_batch: int = Field(ge=1, le=MAX_BATCH_SIZE, description="First batch size of the range.")
    to_batch: int | None = Field(
        default=None,
        ge=1,
        le=MAX_BATCH_SIZE,
        description="Last batch size of the range (inclusive). Left out on the last range: and above.",
    )
    tokens: int = Field(
        ge=0,
        le=MAX_SPECULATIVE_TOKENS,
        description="Draft tokens per step at these batch sizes, at most numSpeculativeTokens; 0 turns "
        "speculation off there.",
    )

    @model_validator(mode="after")
    def _ordered(self) -> BatchRange:
        """The CEL rule, for specs that did not come through the apiserver."""
        rules.enforce("spec.speculator.schedule[]", rules.wire(self))
        return self


class Adaptive(ApiModel):
    """How the operator acts on what it measures: the draft length per batch size."""

    policy: Literal["Off", "Recommend", "Apply"] = Field(
        default="Recommend",
        description=(
            "Off: the schedule is what spec.speculator.schedule says, or none. Recommend: the "
            "operator also computes the draft length per batch size that maximises expected "
            "throughput (status.speculation.recommendedSchedule). Apply: it also rolls that out "
            "(status.speculation.appliedSchedule), within the guard rails below. vLLM only."
        ),
    )
    min_interval_seconds: int = Field(
        default=900,
        ge=60,
        le=604_800,
        description="At most one change of the running schedule per this many seconds (a revert excepted).",
    )
    min_gain: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description=(
            "Apply a recommendation only when its predicted output tokens/s beat the running "
            "schedule's by this fraction at one measured concurrency at least."
        ),
    )
    probe_interval_seconds: int = Field(
        default=3600,
        ge=300,
        le=604_800,
        description=(
            "With speculation turned off at every batch size the engines measure no acceptance: "
            "after this many seconds the spec's own schedule runs again until acceptance is measured."
        ),
    )


class Speculator(ApiModel):
    """The small EAGLE-3 draft model trained for the verifier."""

    model_config = ConfigDict(json_schema_extra=rules.schema_extra("spec.speculator"))

    model: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description=(
            "Hugging Face model id of the draft. When omitted, the catalog's recommended "
            "speculator for the verifier and engine is used and shown in status."
        ),
    )
    revision: str | None = Field(
        default=None, max_length=128, description="Branch, tag or commit of the draft."
    )
    method: Literal["eagle3"] = Field(
        default="eagle3", description="Speculative decoding method. Only EAGLE-3 drafts are supported."
    )
    num_speculative_tokens: int | None = Field(
        default=None,
        ge=1,
        le=MAX_SPECULATIVE_TOKENS,
        description=(
            "Tokens the draft proposes per step (vLLM num_speculative_tokens, SGLang "
            "--speculative-num-steps). Default: the catalog's published value for the "
            "speculator, else 3."
        ),
    )
    draft_tensor_parallel_size: int | None = Field(
        default=None,
        ge=1,
        le=16,
        description="Tensor-parallel size of the draft. vLLM accepts 1 or the verifier's size.",
    )
    schedule: list[BatchRange] | None = Field(
        default=None,
        min_length=1,
        max_length=16,
        description=(
            "Draft length by batch size: ranges that cover every batch size once, the first from 1, "
            "the last without toBatch (vLLM num_speculative_tokens_per_batch_size; not in the "
            "pinned SGLang). Unset: numSpeculativeTokens at every batch size."
        ),
    )

    adaptive: Adaptive = Field(default_factory=Adaptive, json_schema_extra={"default": {}})

    @model_validator(mode="after")
    def _schedule(self) -> Speculator:
        """The CEL rules, for specs that did not come through the apiserver; then the order the
        apiserver cannot check, so the last range is the one written last."""
        rules.enforce("spec.speculator", rules.wire(self))
        starts = [entry.from_batch for entry in self.schedule or ()]
        if starts != sorted(starts):
            raise ValueError("schedule: write the ranges in order of fromBatch")
        return self


TensorSize = int | Literal["auto"]
NodeCount = int | Literal["auto"]


class Parallelism(ApiModel):
    """How one replica is spread over GPUs."""

    tensor: TensorSize = Field(
        default="auto",
        description=(
            "Tensor-parallel size: auto (the smallest size in 1, 2, 4, 8 that meets the "
            "engine's divisibility rules and fits in memory on one node; on several nodes, the "
            "GPUs of a node, or of all the replica's nodes when tensor parallelism spans them) "
            "or an explicit 1, 2, 4, 8, 16, 32 or 64."
        ),
        json_schema_extra={
            "x-kubernetes-int-or-string": True,
            **rules.schema_extra("spec.parallelism.tensor"),
        },
    )
    nodes: NodeCount = Field(
        default="auto",
        description=(
            "Nodes per replica: auto (one node when a replica fits on one, else the fewest "
            f"identical nodes, up to {MAX_NODES}, that hold it) or an explicit 1 to {MAX_NODES}. "
            "A replica on several nodes runs as one LeaderWorkerSet group, which needs "
            "LeaderWorkerSet installed in the cluster."
        ),
        json_schema_extra={
            "x-kubernetes-int-or-string": True,
            **rules.schema_extra("spec.parallelism.nodes"),
        },
    )
    pipeline: NodeCount = Field(
        default="auto",
        description=(
            "Pipeline-parallel stages of a replica on several nodes: 1 (tensor parallelism spans "
            "the nodes) or the number of nodes (one stage per node, tensor parallelism within "
            "it). auto: one stage per node where the engine runs EAGLE-3 across pipeline stages "
            "for the verifier (vLLM with Llama, Qwen2 or Qwen3 dense verifiers), else 1."
        ),
        json_schema_extra={
            "x-kubernetes-int-or-string": True,
            **rules.schema_extra("spec.parallelism.pipeline"),
        },
    )
    gpu_product: str | None = Field(
        default=None,
        max_length=128,
        description=(
            "GPU product to run on: a GPU feature discovery product string "
            "(NVIDIA-H100-80GB-HBM3) or an alias (h100-80gb, a100-40gb, l4, ...). "
            "Default: the planner picks among products present in the cluster."
        ),
    )
    min_concurrent_sequences: int = Field(
        default=2,
        ge=1,
        le=4096,
        description="KV cache the plan reserves: this many sequences of maxModelLen tokens per replica.",
    )

    @field_validator("tensor", mode="before")
    @classmethod
    def _tensor_size(cls, value: Any) -> Any:
        """Looser than the apiserver's CEL rule on purpose, for specs that did not come through
        it (``specdeploy plan``, ``render``): any positive size reaches the planner, which
        explains why 3 does not shard; 0, negatives and a JSON true (which pydantic would take
        for 1) do not."""
        if value == "auto" or (type(value) is int and value >= 1):
            return value
        raise ValueError("parallelism.tensor must be auto or a positive integer")

    @field_validator("nodes", "pipeline", mode="before")
    @classmethod
    def _count(cls, value: Any, info: ValidationInfo) -> Any:
        """The apiserver's CEL bounds, for specs that did not come through it."""
        rules.enforce(f"spec.parallelism.{info.field_name}", value)
        return value


class SecretKeyRef(ApiModel):
    """A key in a Secret in the resource's namespace."""

    name: str = Field(min_length=1, max_length=253, description="Secret name.")
    key: str = Field(default="token", min_length=1, max_length=253, description="Key holding the value.")


class ModelAccess(ApiModel):
    """How the engine (and the operator's pairing check) reach the model hub."""

    token_secret_ref: SecretKeyRef | None = Field(
        default=None,
        description="Secret key holding a Hugging Face token; given to the engine as HF_TOKEN, never copied.",
    )
    endpoint: str | None = Field(
        default=None,
        max_length=512,
        description="Hub endpoint (HF_ENDPOINT) for a mirror; overrides the operator-wide default "
        "(the chart's hub.endpoint, `specdeploy run --hub-endpoint`) for this resource.",
    )
    offline: bool = Field(
        default=False, description="Set HF_HUB_OFFLINE=1: models must already be in the cache."
    )


class ModelCache(ApiModel):
    """Where model weights are stored: an existing PVC, or an ephemeral volume per pod.

    A claim mounted by several replicas (or by the pods of a surge rollout, which can land on
    other nodes) must be ReadWriteMany."""

    model_config = ConfigDict(json_schema_extra=rules.schema_extra("spec.modelCache"))

    claim_name: str | None = Field(
        default=None,
        max_length=253,
        description=(
            "Existing PersistentVolumeClaim mounted at the hub cache; ReadWriteMany when more than "
            "one pod mounts it (replicas > 1, or a surge rollout)."
        ),
    )
    size_limit: Quantity | None = Field(
        default=None,
        description=(
            "Size limit of the ephemeral cache (emptyDir) when no claim is given, e.g. 200Gi. "
            "Default: the planned weights of verifier and speculator plus a margin."
        ),
    )
    mount_path: str = Field(
        default=ENGINE_HOME + "/.cache/huggingface",
        max_length=512,
        description=(
            "Mount path, and the engine's HF_HOME. Not under /root when security.runAsNonRoot is "
            "true: the images' /root is closed to other users."
        ),
    )


class Rollout(ApiModel):
    """How a spec change replaces running engine pods."""

    strategy: Literal["NoSurge", "Surge"] = Field(
        default="NoSurge",
        description=(
            "NoSurge: stop one old pod, then start its replacement (maxSurge 0, maxUnavailable 1; "
            "no spare GPUs needed, one replica fewer during the rollout, downtime at replicas 1). "
            "Surge: start a new pod on spare GPUs before stopping an old one (maxSurge 1, "
            "maxUnavailable 0; no capacity lost, but the rollout waits until a GPU set is free)."
        ),
    )


class Service(ApiModel):
    """The Service in front of the engine pods."""

    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = Field(
        default="ClusterIP", description="Service type."
    )
    port: int | None = Field(
        default=None, ge=1, le=65535, description="Service port. Default: the engine's port."
    )


class Pairing(ApiModel):
    """Controls for the verifier/speculator compatibility check."""

    allow_verifier_mismatch: bool = Field(
        default=False,
        description=(
            "Serve even when the speculator declares a different verifier. The check still "
            "reports a Warning event and condition."
        ),
    )
    metadata_config_map: str | None = Field(
        default=None,
        max_length=253,
        description=(
            "ConfigMap in the same namespace with verifier.json and/or speculator.json "
            "(each a config.json), for models the operator cannot reach."
        ),
    )


class AcceptancePolicy(ApiModel):
    """When the speculator counts as earning its GPU: the SpeculationEffective condition."""

    min_mean_length: float = Field(
        default=1.5,
        ge=1,
        le=17,
        description=(
            "SpeculationEffective is True at or above this mean acceptance length (tokens per "
            "verifier step, 1 + accepted / drafts), False with reason LowAcceptance below it."
        ),
    )
    min_draft_tokens: int = Field(
        default=1000,
        ge=1,
        le=100_000_000,
        description=(
            "Draft tokens the window must hold before acceptance is judged; until then "
            "SpeculationEffective is Unknown (InsufficientSamples)."
        ),
    )
    window_seconds: int = Field(
        default=300,
        ge=30,
        le=3600,
        description="Sliding window, in seconds, over which the engines' counters are differenced.",
    )


class SpeculativeDeploymentSpec(ApiModel):
    """Desired state: one verifier/speculator pair served by N replicas."""

    model_config = ConfigDict(json_schema_extra=rules.schema_extra("spec"))

    verifier: Verifier | None = Field(default=None, description="The target model.")
    speculator: Speculator | None = Field(default=None, description="The EAGLE-3 draft model.")
    engine: Engine = Field(default_factory=Engine, json_schema_extra={"default": {}})
    parallelism: Parallelism = Field(default_factory=Parallelism, json_schema_extra={"default": {}})
    replicas: int = Field(
        default=1, ge=0, le=MAX_REPLICAS, description="Number of engine pods (each a full pair)."
    )
    max_model_len: int | None = Field(
        default=None,
        ge=128,
        le=10_485_760,
        description="Maximum context length (tokens). Default: the model's.",
    )
    gpu_memory_utilization: float = Field(
        default=0.9,
        ge=0.01,
        le=1,
        description="Fraction of each GPU's memory the engine may use (at least 0.01).",
    )
    served_model_name: str | None = Field(
        default=None, max_length=256, description="Model name clients send. Default: the verifier id."
    )
    model_access: ModelAccess = Field(default_factory=ModelAccess, json_schema_extra={"default": {}})
    model_cache: ModelCache = Field(default_factory=ModelCache, json_schema_extra={"default": {}})
    scheduling: Scheduling = Field(default_factory=Scheduling, json_schema_extra={"default": {}})
    pod_metadata: PodMetadata = Field(default_factory=PodMetadata, json_schema_extra={"default": {}})
    resources: Resources = Field(default_factory=Resources, json_schema_extra={"default": {}})
    pod_template: PodTemplate | None = Field(
        default=None,
        description=(
            "A patch over the engine pods' template (core/v1 PodTemplateSpec: metadata labels and "
            "annotations, PodSpec fields), merged like a strategic-merge patch after the typed "
            "fields: imagePullSecrets, serviceAccountName, volumes, and the engine container's env "
            "(valueFrom too), envFrom and volumeMounts (containers: [{name: engine, ...}]). The "
            "engine container's command, args, image, resources, ports and probes, the node "
            "affinity and the operator's labels are refused."
        ),
    )
    service: Service = Field(default_factory=Service, json_schema_extra={"default": {}})
    security: Security = Field(default_factory=Security, json_schema_extra={"default": {}})
    lifecycle: Lifecycle = Field(default_factory=Lifecycle, json_schema_extra={"default": {}})
    rollout: Rollout = Field(default_factory=Rollout, json_schema_extra={"default": {}})
    pairing: Pairing = Field(default_factory=Pairing, json_schema_extra={"default": {}})
    acceptance: AcceptancePolicy = Field(default_factory=AcceptancePolicy, json_schema_extra={"default": {}})

    @model_validator(mode="after")
    def _cache_reachable(self) -> SpeculativeDeploymentSpec:
        """The CEL rule, for specs that did not come through the apiserver (``render``, ``plan``)."""
        rules.enforce("spec", rules.wire(self))
        return self


class SpeculativeDeployment(ApiModel):
    """A whole object as read from the apiserver or a file (metadata kept loose)."""

    model_config = ConfigDict(extra="ignore")

    api_version: Literal["specdeploy.io/v1alpha1"] = "specdeploy.io/v1alpha1"
    kind: Literal["SpeculativeDeployment"] = "SpeculativeDeployment"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: SpeculativeDeploymentSpec

    @model_validator(mode="after")
    def _name_fits_children(self) -> SpeculativeDeployment:
        """The apiserver's name rule, for files that did not come through it (``plan``)."""
        check_name(self.metadata)
        return self


def check_name(metadata: dict[str, Any]) -> None:
    """Raise the name rule's message when the children cannot be named after ``metadata.name``."""
    name = metadata.get("name")
    rules.enforce(rules.OBJECT, {"metadata": {"name": name}} if isinstance(name, str) else {})


def validation_problems(exc: ValidationError, prefix: str = "spec") -> str:
    """A pydantic error as one line naming each field by its path from ``prefix`` (camelCase)."""
    return "; ".join(
        f"{'.'.join(str(part) for part in (prefix, *e['loc']) if part != '')}: {e['msg']}"
        for e in exc.errors()
    )
