"""The reconcile pipeline as one pure function: a resource in, its desired children and status out.

spec -> model info + pairing check (+ the draft-length schedule adaptive speculation applied) ->
GPU plan -> engine launch -> child manifests. Any stage can
block: then no child is created or changed (a running Deployment keeps serving) and the reason
lands in status. The operator and ``specdeploy render`` both call :func:`compute`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from pydantic import ValidationError

from specdeploy import adaptive, api, children, engines, pairing, planning
from specdeploy.api import Condition
from specdeploy.modelinfo import ModelResolver, ModelUnavailable, config_problem
from specdeploy.modelinfo.hub import HubEndpointError, check_endpoint

ConfigMapReader = Callable[[str, str], dict[str, str] | None]
# The raw bytes of one key of a Secret (None when the Secret or the key is missing).
SecretReader = Callable[[str, str, str], bytes | None]
CONFIG_MAP_FIELD = "spec.pairing.metadataConfigMap"
# The Schedulable reason of a multi-node plan in a cluster without LeaderWorkerSet.
LWS_MISSING = "LeaderWorkerSetNotInstalled"
# The blocking reason of a pair that failed a check.
PAIRING_FAILED = "PairingFailed"
TOKEN_FIELD = "spec.modelAccess.tokenSecretRef"
DEFAULT_TOKEN_FIELD = "the operator's default hub token Secret (--default-token-secret)"
ENDPOINT_FIELD = "spec.modelAccess.endpoint"

log = logging.getLogger(__name__)


class ReadFailed(Exception):
    """A reader could not read an object the resource names (the apiserver refused or failed);
    the message says how, in one line, for a condition."""


class Unreachable(Exception):
    """A reader could not reach the apiserver at all: the whole pass fails and is retried (no
    status can be written either)."""


@dataclass(frozen=True)
class Desired:
    """What one reconcile wants: children to apply (unless blocked) and the status fields it decides.

    ``status`` holds only the fields the pipeline sets (exclude_unset when dumping);
    ``controller.status`` adds the rollout counts and lifecycle conditions it observes.
    """

    blocked: bool
    # Kind -> manifest of every child the resource wants, in ``children.CHILD_KINDS`` order.
    children: dict[str, dict[str, Any]] = field(default_factory=dict)
    status: api.SpeculativeDeploymentStatus = field(default_factory=api.SpeculativeDeploymentStatus)
    conditions: list[Condition] = field(default_factory=list)
    reason: str = ""
    message: str = ""
    retry: bool = False
    # The effective spec the children were built from (None when blocked).
    spec: api.SpeculativeDeploymentSpec | None = None

    def child(self, kind: str) -> dict[str, Any] | None:
        """The wanted child of ``kind`` (None: the resource wants none, or the pass is blocked)."""
        return self.children.get(kind)

    @property
    def engine_set(self) -> dict[str, Any] | None:
        """The wanted child whose pods run the engine (a Deployment or a LeaderWorkerSet)."""
        return next((self.children[k.kind] for k in children.ENGINE_KINDS if k.kind in self.children), None)


class _Blocked(Exception):
    """A stage stopped the pipeline; ``desired`` is what the resource gets instead of children."""

    def __init__(self, desired: Desired) -> None:
        super().__init__(desired.message)
        self.desired = desired


@dataclass
class _Progress:
    """The status fields and conditions the stages have decided so far."""

    fields: dict[str, Any] = field(default_factory=dict)
    conditions: list[Condition] = field(default_factory=list)

    def condition(self, type_: str, status: api.ConditionStatus, reason: str, message: str) -> None:
        self.conditions.append(Condition(type=type_, status=status, reason=reason, message=message))

    def block(self, reason: str, message: str, *, retry: bool = False) -> NoReturn:
        """Stop here: no child is created or changed, and the reason lands in status."""
        raise _Blocked(
            Desired(
                blocked=True,
                conditions=list(self.conditions),
                reason=reason,
                message=message,
                status=api.SpeculativeDeploymentStatus(**self.fields),
                retry=retry,
            )
        )


def compute(
    body: dict[str, Any],
    resolver: ModelResolver,
    inventory: planning.Inventory,
    read_configmap: ConfigMapReader | None = None,
    read_secret: SecretReader | None = None,
    leader_worker_sets: bool = True,
    defaults: children.PodDefaults = children.NO_DEFAULTS,
    tokenizers: bool = False,
) -> Desired:
    """Desired state of one SpeculativeDeployment given the GPUs the cluster has.

    ``read_secret`` is given only when the operator may read Secrets (opt-in): then the hub
    token the resource names is used for the pairing check's downloads too.
    ``leader_worker_sets`` says whether the cluster serves LeaderWorkerSet, which a replica on
    several nodes needs. ``defaults`` are the operator-wide ones for engine pods
    (``children.defaults``), the hub token Secret among them. ``tokenizers`` fetches both models'
    tokenizer files from the hub, so the pairing check's tokenizer rule runs (the operator does;
    ``render``, whose output is the children alone, does not).
    """
    meta = body.get("metadata", {})
    namespace = meta.get("namespace", "default")
    progress = _Progress()
    try:
        spec = _parsed(body, progress)
        _check_endpoint(spec, progress)
        resolved = _verified_pair(
            spec,
            resolver,
            _overrides(spec, namespace, read_configmap, progress),
            _token(spec, namespace, read_secret, defaults, progress),
            progress,
            tokenizers,
        )
        effective = adaptive.running_schedule(pairing.effective_spec(spec, resolved), body)
        _check_engine_rules(effective, progress)
        on_pool = ((body.get("status") or {}).get("plan") or {}).get("nodePool")
        plan = _planned(effective, resolved, inventory, progress, leader_worker_sets, on_pool)
        effective = _with_plan(effective, plan)
        _check_engine_rules(effective, progress)
        return _with_children(body, effective, plan, inventory, defaults, progress)
    except _Blocked as blocked:
        return blocked.desired
    except Unreachable:
        raise
    except Exception as exc:
        # The pipeline's boundary: whatever input got past the stages' own checks blocks this
        # resource with a condition (and a retry) instead of failing every pass without one.
        log.exception("the pipeline failed on %s/%s", namespace, meta.get("name"))
        message = f"internal error ({type(exc).__name__}: {exc}); the operator log has the traceback"
        return Desired(
            blocked=True,
            conditions=progress.conditions,
            reason="InternalError",
            message=message,
            status=api.SpeculativeDeploymentStatus(**progress.fields),
            retry=True,
        )


def _parsed(body: dict[str, Any], progress: _Progress) -> api.SpeculativeDeploymentSpec:
    try:
        api.check_name(body.get("metadata") or {})
        spec = api.SpeculativeDeploymentSpec.model_validate(body.get("spec") or {})
    except ValidationError as exc:
        progress.block("InvalidSpec", api.validation_problems(exc))
    except ValueError as exc:
        progress.block("InvalidSpec", str(exc))
    progress.fields["engine"] = spec.engine.name
    return spec


def _check_endpoint(spec: api.SpeculativeDeploymentSpec, progress: _Progress) -> None:
    """The resource's hub endpoint must be an http(s) URL before the hub client or an engine's
    HF_ENDPOINT sees it: the same rule as the operator-wide default."""
    endpoint = spec.model_access.endpoint
    if endpoint is None:
        return
    try:
        check_endpoint(endpoint, ENDPOINT_FIELD)
    except HubEndpointError as exc:
        progress.block("InvalidSpec", str(exc))


def _verified_pair(
    spec: api.SpeculativeDeploymentSpec,
    resolver: ModelResolver,
    overrides: dict[str, dict[str, Any]],
    token: str | None,
    progress: _Progress,
    tokenizers: bool,
) -> pairing.ResolvedPair:
    """The pair the spec means, checked; an unreachable model is retried, a mismatch is not."""
    try:
        resolved = pairing.resolve_pair(
            spec, resolver, overrides=overrides, token=token, want_tokenizer=tokenizers
        )
    except ModelUnavailable as exc:
        progress.condition(api.PAIRING_VERIFIED, "Unknown", exc.reason, str(exc))
        progress.block(exc.reason, str(exc), retry=True)
    except pairing.PairingError as exc:
        progress.condition(api.PAIRING_VERIFIED, "False", exc.reason, str(exc))
        progress.block(exc.reason, str(exc))
    progress.fields.update(verifier=resolved.verifier_id, speculator=resolved.speculator_id)
    report = pairing.check_resolved(spec, resolved)
    progress.fields["pairing"] = report.to_status()
    progress.condition(api.PAIRING_VERIFIED, report.verified, report.reason, report.message)
    if report.verified == "False":
        progress.block(PAIRING_FAILED, report.message)
    return resolved


def _check_engine_rules(spec: api.SpeculativeDeploymentSpec, progress: _Progress) -> None:
    errors = engines.validate(spec)
    if errors:
        progress.block("InvalidEngineConfig", "; ".join(map(str, errors)))


def _planned(
    spec: api.SpeculativeDeploymentSpec,
    resolved: pairing.ResolvedPair,
    inventory: planning.Inventory,
    progress: _Progress,
    leader_worker_sets: bool,
    on_pool: str | None,
) -> api.Plan:
    """The plan, kept on the node pool the stored status names while that pool still fits."""
    outcome = planning.plan(spec, resolved.verifier, resolved.speculator, inventory, on_pool)
    if outcome.plan is not None:
        progress.fields["plan"] = outcome.plan
    if not outcome.fits or outcome.plan is None:
        progress.condition(api.SCHEDULABLE, "False", outcome.reason, outcome.message)
        progress.block(outcome.reason, outcome.message)
    if outcome.plan.nodes_per_replica > 1 and not leader_worker_sets:
        message = (
            f"{outcome.plan.reason}; a replica on {outcome.plan.nodes_per_replica} nodes runs as a "
            f"LeaderWorkerSet group and the cluster does not serve {children.LEADER_WORKER_SET.api_version}: "
            f"install LeaderWorkerSet ({children.LWS_INSTALL}) or set spec.parallelism.nodes to 1"
        )
        progress.condition(api.SCHEDULABLE, "False", LWS_MISSING, message)
        progress.block(LWS_MISSING, message)
    progress.condition(api.SCHEDULABLE, "True", outcome.reason, outcome.plan.reason)
    return outcome.plan


def _with_plan(spec: api.SpeculativeDeploymentSpec, plan: api.Plan) -> api.SpeculativeDeploymentSpec:
    """The planned layout (tensor, pipeline, nodes), and the context length the KV cache was
    planned for (not the model's maximum)."""
    layout = {
        "tensor": plan.tensor_parallel_size,
        "pipeline": plan.pipeline_parallel_size,
        "nodes": plan.nodes_per_replica,
    }
    return spec.model_copy(
        update={
            "parallelism": spec.parallelism.model_copy(update=layout),
            "max_model_len": spec.max_model_len or plan.max_model_len,
        }
    )


def _with_children(
    body: dict[str, Any],
    spec: api.SpeculativeDeploymentSpec,
    plan: api.Plan,
    inventory: planning.Inventory,
    defaults: children.PodDefaults,
    progress: _Progress,
) -> Desired:
    """Every child kind's manifest for the effective spec (``children.CHILD_KINDS``: the
    Deployment or LeaderWorkerSet, Service, PodDisruptionBudget), and the status fields they settle."""
    meta = body.get("metadata", {})
    name, namespace = meta.get("name", ""), meta.get("namespace", "default")
    launch = engines.render(spec)
    owner = body if meta.get("uid") else None
    progress.fields.update(
        tensor_parallel_size=plan.tensor_parallel_size,
        command=launch.command,
        endpoint=children.endpoint(name, namespace, spec, launch),
        selector=children.selector_string(name),
    )
    placement = planning.placement(plan, inventory)
    inputs = children.ChildInputs(name, namespace, spec, launch, placement, plan, owner, defaults)
    built = ((kind.kind, kind.build(inputs)) for kind in children.CHILD_KINDS)
    return Desired(
        blocked=False,
        children={kind: manifest for kind, manifest in built if manifest is not None},
        status=api.SpeculativeDeploymentStatus(**progress.fields),
        conditions=progress.conditions,
        spec=spec,
    )


def _token(
    spec: api.SpeculativeDeploymentSpec,
    namespace: str,
    read_secret: SecretReader | None,
    defaults: children.PodDefaults,
    progress: _Progress,
) -> str | None:
    """The hub token the resource names (else the operator-wide default), stripped; a Secret that
    cannot give one blocks the pass.

    The pods read the same key (a missing one keeps them from starting), so the check waits for
    it too; a missing default Secret is optional for both. No message carries any part of the
    value."""
    ref = defaults.token(spec)
    if ref is None or read_secret is None:
        return None
    where = TOKEN_FIELD if not ref.optional else DEFAULT_TOKEN_FIELD
    field_ = f"{where} ({namespace}/{ref.name}, key {ref.key})"
    try:
        raw = read_secret(namespace, ref.name, ref.key)
    except ReadFailed as exc:
        _unknown(progress, "TokenSecretUnreadable", f"{field_}: cannot read the Secret: {exc}")
    if raw is None and ref.optional:
        return None
    if raw is None:
        _unknown(progress, "TokenSecretNotFound", f"{field_}: the Secret or its key does not exist")
    try:
        token = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        token = ""
    if not token or not token.isprintable():
        _unknown(progress, "InvalidTokenSecret", f"{field_}: the value is not a printable text token")
    return token


def _overrides(
    spec: api.SpeculativeDeploymentSpec,
    namespace: str,
    read_configmap: ConfigMapReader | None,
    progress: _Progress,
) -> dict[str, dict[str, Any]]:
    """verifier.json / speculator.json from the ConfigMap the resource names, parsed and checked.

    The operator does not watch ConfigMaps: a missing or broken one blocks with a retry, so the
    fixed ConfigMap is read on a later pass."""
    name = spec.pairing.metadata_config_map
    if not name or read_configmap is None:
        return {}
    field_ = f"{CONFIG_MAP_FIELD} ({namespace}/{name})"
    try:
        data = read_configmap(namespace, name)
    except ReadFailed as exc:
        _unknown(progress, "MetadataConfigMapUnreadable", f"{field_}: cannot read the ConfigMap: {exc}")
    if data is None:
        _unknown(progress, "MetadataConfigMapNotFound", f"{field_}: the ConfigMap does not exist")
    parsed: dict[str, dict[str, Any]] = {}
    for role in ("verifier", "speculator"):
        key = f"{role}.json"
        if key not in data:
            continue
        try:
            config: Any = json.loads(data[key])
        except ValueError as exc:
            problem: str | None = f"is not valid JSON ({exc})"
        else:
            problem = config_problem(config)
        if problem is not None:
            message = f"{field_}, key {key}: {problem}"
            progress.condition(api.PAIRING_VERIFIED, "False", "InvalidMetadataConfigMap", message)
            progress.block("InvalidMetadataConfigMap", message, retry=True)
        parsed[role] = config
    if not parsed:
        message = f"{field_}: has neither verifier.json nor speculator.json"
        progress.condition(api.PAIRING_VERIFIED, "False", "InvalidMetadataConfigMap", message)
        progress.block("InvalidMetadataConfigMap", message, retry=True)
    return parsed


def _unknown(progress: _Progress, reason: str, message: str) -> NoReturn:
    """An input the pairing check needs is not there (yet): PairingVerified Unknown, retried."""
    progress.condition(api.PAIRING_VERIFIED, "Unknown", reason, message)
    progress.block(reason, message, retry=True)
