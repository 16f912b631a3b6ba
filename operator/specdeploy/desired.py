"""The reconcile pipeline as pure functions: resource in, desired children and status out.

spec -> model metadata + pairing check -> GPU plan -> engine launch -> child manifests. Any stage
can block: then no child is created or changed (a running Deployment keeps serving) and the
reason lands in status. The operator and ``specdeploy render`` both call :func:`compute`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from specdeploy import api, builders, conditions, drift, gpus, pairing, planning
from specdeploy.api import Condition
from specdeploy.engines import engine_for
from specdeploy.metadata import MetadataResolver, MetadataUnavailable

ConfigMapReader = Callable[[str, str], dict[str, str] | None]
SecretReader = Callable[[str, str, str], str | None]


@dataclass(frozen=True)
class Result:
    """What one reconcile wants: children to apply (unless blocked) and status fields."""

    blocked: bool
    deployment: dict[str, Any] | None = None
    service: dict[str, Any] | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    conditions: list[Condition] = field(default_factory=list)
    reason: str = ""
    message: str = ""
    retry: bool = False


def _blocked(
    reason: str, message: str, conds: list[Condition], fields: dict[str, Any], retry: bool = False
) -> Result:
    return Result(blocked=True, conditions=conds, reason=reason, message=message, fields=fields, retry=retry)


def _cond(type_: str, status: api.ConditionStatus, reason: str, message: str) -> Condition:
    return Condition(type=type_, status=status, reason=reason, message=message)


def compute(
    body: dict[str, Any],
    resolver: MetadataResolver,
    inventory: gpus.Inventory,
    read_configmap: ConfigMapReader | None = None,
    read_secret: SecretReader | None = None,
) -> Result:
    """Desired state of one SpeculativeDeployment given the GPUs the cluster has.

    ``read_secret`` is given only when the operator may read Secrets (opt-in): then the hub
    token the resource names is used for the pairing check's downloads too.
    """
    meta = body.get("metadata", {})
    name, namespace = meta.get("name", ""), meta.get("namespace", "default")
    try:
        spec = api.SpeculativeDeploymentSpec.model_validate(body.get("spec") or {})
    except ValidationError as exc:
        problems = "; ".join(f"spec.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        return _blocked("InvalidSpec", problems, [], {})
    fields: dict[str, Any] = {"engine": spec.engine.name}
    overrides = _overrides(spec, namespace, read_configmap)
    try:
        resolved = pairing.resolve_pair(
            spec, resolver, overrides=overrides, token=_token(spec, namespace, read_secret)
        )
    except MetadataUnavailable as exc:
        cond = _cond(conditions.PAIRING_VERIFIED, "Unknown", exc.reason, str(exc))
        return _blocked(exc.reason, str(exc), [cond], fields, retry=True)
    except pairing.PairingError as exc:
        cond = _cond(conditions.PAIRING_VERIFIED, "False", exc.reason, str(exc))
        return _blocked(exc.reason, str(exc), [cond], fields)
    fields.update(verifier=resolved.verifier_id, speculator=resolved.speculator_id)
    report = pairing.check_resolved(spec, resolved)
    fields["pairing"] = report.to_status().model_dump(by_alias=True, exclude_none=True)
    pairing_cond = _cond(conditions.PAIRING_VERIFIED, report.verified, report.reason, report.message)
    if report.verified == "False":
        return _blocked("PairingFailed", report.message, [pairing_cond], fields)
    effective = pairing.effective_spec(spec, resolved)
    engine = engine_for(effective.engine.name)
    errors = engine.validate(effective)
    if errors:
        message = "; ".join(map(str, errors))
        return _blocked("InvalidEngineConfig", message, [pairing_cond], fields)
    outcome = planning.plan(effective, resolved.verifier, resolved.speculator, inventory)
    if outcome.plan is not None:
        fields["plan"] = outcome.plan.model_dump(by_alias=True, exclude_none=True)
    if not outcome.fits or outcome.plan is None:
        sched = _cond(conditions.SCHEDULABLE, "False", outcome.reason, outcome.message)
        return _blocked(outcome.reason, outcome.message, [pairing_cond, sched], fields)
    plan = outcome.plan
    sched = _cond(conditions.SCHEDULABLE, "True", outcome.reason, plan.reason)
    # The engine gets the context length the KV cache was planned for, not the model's maximum.
    effective = effective.model_copy(
        update={
            "parallelism": effective.parallelism.model_copy(update={"tensor": plan.tensor_parallel_size}),
            "max_model_len": effective.max_model_len or plan.max_model_len,
        }
    )
    errors = engine.validate(effective)
    if errors:
        return _blocked("InvalidEngineConfig", "; ".join(map(str, errors)), [pairing_cond, sched], fields)
    launch = engine.render(effective)
    owner = body if meta.get("uid") else None
    deployment = builders.build_deployment(
        name, namespace, effective, launch, planning.placement(plan), owner=owner
    )
    service = builders.build_service(name, namespace, effective, launch, owner=owner)
    fields.update(
        tensorParallelSize=plan.tensor_parallel_size,
        command=launch.command,
        endpoint=builders.endpoint(name, namespace, effective, launch),
        selector=builders.selector_string(name),
    )
    return Result(
        blocked=False, deployment=deployment, service=service, fields=fields, conditions=[pairing_cond, sched]
    )


def _token(
    spec: api.SpeculativeDeploymentSpec, namespace: str, read_secret: SecretReader | None
) -> str | None:
    ref = spec.model_access.token_secret_ref
    if ref is None or read_secret is None:
        return None
    return read_secret(namespace, ref.name, ref.key)


def _overrides(
    spec: api.SpeculativeDeploymentSpec, namespace: str, read_configmap: ConfigMapReader | None
) -> dict[str, dict[str, Any]]:
    """verifier.json / speculator.json from the ConfigMap the resource names, parsed."""
    name = spec.pairing.metadata_config_map
    if not name or read_configmap is None:
        return {}
    data = read_configmap(namespace, name) or {}
    parsed: dict[str, dict[str, Any]] = {}
    for role in ("verifier", "speculator"):
        text = data.get(f"{role}.json")
        if text:
            parsed[role] = json.loads(text)
    return parsed


def _rollout(deployment: dict[str, Any] | None, spec_replicas: int) -> tuple[int, int, int, bool]:
    """(replicas, ready, updated, rolled out) of the child Deployment as the cluster reports it."""
    if deployment is None:
        return 0, 0, 0, False
    status = deployment.get("status") or {}
    replicas = int(status.get("replicas") or 0)
    ready = int(status.get("readyReplicas") or 0)
    updated = int(status.get("updatedReplicas") or 0)
    current = (status.get("observedGeneration") or 0) >= (deployment["metadata"].get("generation") or 0)
    done = current and updated == spec_replicas and ready >= spec_replicas and replicas == spec_replicas
    return replicas, ready, updated, done


def _deployment_matches(result: Result, deployment: dict[str, Any] | None) -> bool:
    if deployment is None or result.deployment is None:
        return False
    return not drift.needs_apply(drift.stamped(result.deployment), deployment)


def lifecycle_conditions(
    result: Result, deployment: dict[str, Any] | None, spec_replicas: int
) -> list[Condition]:
    """Ready, Progressing and Degraded from the pipeline result and the Deployment's rollout."""
    replicas, ready, _, done = _rollout(deployment, spec_replicas)
    if result.blocked:
        serving = ready > 0
        note = f"; the previous Deployment keeps serving ({ready} ready)" if serving else ""
        return [
            _cond(
                conditions.READY,
                "True" if serving else "False",
                result.reason if not serving else "PreviousVersionServing",
                result.message + note,
            ),
            _cond(conditions.PROGRESSING, "False", result.reason, result.message),
            _cond(conditions.DEGRADED, "True", result.reason, result.message + note),
        ]
    done = done and _deployment_matches(result, deployment)
    counts = f"{ready}/{spec_replicas} replicas ready"
    if done:
        return [
            _cond(conditions.READY, "True", "Ready" if spec_replicas else "ScaledToZero", counts),
            _cond(conditions.PROGRESSING, "False", "RolloutComplete", counts),
            _cond(conditions.DEGRADED, "False", "AsExpected", ""),
        ]
    failure = _deployment_failure(deployment)
    return [
        _cond(
            conditions.READY,
            "True" if ready >= spec_replicas > 0 else "False",
            "Ready" if ready >= spec_replicas > 0 else "WaitingForReplicas",
            counts,
        ),
        _cond(conditions.PROGRESSING, "True", "RollingOut" if replicas else "Starting", counts),
        _cond(
            conditions.DEGRADED,
            "True" if failure else "False",
            "RolloutFailed" if failure else "AsExpected",
            failure or "",
        ),
    ]


def _deployment_failure(deployment: dict[str, Any] | None) -> str | None:
    for cond in ((deployment or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Progressing" and cond.get("reason") == "ProgressDeadlineExceeded":
            return str(cond.get("message", "progress deadline exceeded"))
        if cond.get("type") == "ReplicaFailure" and cond.get("status") == "True":
            return str(cond.get("message", "replica failure"))
    return None


def status_for(
    body: dict[str, Any], result: Result, deployment: dict[str, Any] | None
) -> tuple[dict[str, Any] | None, list[conditions.Transition]]:
    """The status to write (None when unchanged) and the condition transitions to report."""
    current = body.get("status") or {}
    generation = body.get("metadata", {}).get("generation")
    spec_replicas = int((body.get("spec") or {}).get("replicas", 1))
    replicas, ready, updated, _ = _rollout(deployment, spec_replicas)
    conds = [*lifecycle_conditions(result, deployment, spec_replicas), *result.conditions]
    merged, transitions = conditions.merge(current.get("conditions") or [], conds, generation)
    fields = dict(result.fields)
    if result.blocked:
        # Keep what is still running visible; the plan and command of a blocked spec are not.
        for kept in ("command", "endpoint", "selector", "tensorParallelSize"):
            if kept in current and kept not in fields and deployment is not None:
                fields[kept] = current[kept]
    desired = {
        **fields,
        "observedGeneration": generation,
        "replicas": replicas,
        "readyReplicas": ready,
        "updatedReplicas": updated,
        "conditions": merged,
    }
    unchanged = (
        conditions.same(current.get("conditions") or [], merged)
        and all(current.get(k) == v for k, v in desired.items() if k != "conditions")
        and not (set(current) - set(desired) - {"acceptance"})
    )
    if unchanged:
        return None, []
    patch: dict[str, Any] = {k: None for k in current if k not in desired and k != "acceptance"}
    patch.update(desired)
    return patch, transitions


def inventory_signature(inventory: gpus.Inventory) -> str:
    """Changes only when the GPU capacity the planner sees changes (not on heartbeats)."""
    return hashlib.sha256(repr(inventory).encode()).hexdigest()


def waiting_for_gpus(body: dict[str, Any]) -> bool:
    for cond in (body.get("status") or {}).get("conditions") or []:
        if cond.get("type") == conditions.SCHEDULABLE and cond.get("status") == "False":
            return True
    return False
