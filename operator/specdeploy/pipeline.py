"""The reconcile pipeline as one pure function: a resource in, its desired children and status out.

spec -> model info + pairing check -> GPU plan -> engine launch -> child manifests. Any stage can
block: then no child is created or changed (a running Deployment keeps serving) and the reason
lands in status. The operator and ``specdeploy render`` both call :func:`compute`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from specdeploy import api, children, pairing, planning
from specdeploy.api import Condition
from specdeploy.engines import engine_for
from specdeploy.modelinfo import ModelResolver, ModelUnavailable

ConfigMapReader = Callable[[str, str], dict[str, str] | None]
SecretReader = Callable[[str, str, str], str | None]


@dataclass(frozen=True)
class Desired:
    """What one reconcile wants: children to apply (unless blocked) and the status fields it decides.

    ``status`` holds only the fields the pipeline sets (exclude_unset when dumping); the rollout
    counts and conditions are added by the controller from what it observes.
    """

    blocked: bool
    deployment: dict[str, Any] | None = None
    service: dict[str, Any] | None = None
    status: api.SpeculativeDeploymentStatus = field(default_factory=api.SpeculativeDeploymentStatus)
    conditions: list[Condition] = field(default_factory=list)
    reason: str = ""
    message: str = ""
    retry: bool = False


def _blocked(
    reason: str, message: str, conds: list[Condition], fields: dict[str, Any], retry: bool = False
) -> Desired:
    return Desired(
        blocked=True,
        conditions=conds,
        reason=reason,
        message=message,
        status=api.SpeculativeDeploymentStatus(**fields),
        retry=retry,
    )


def _cond(type_: str, status: api.ConditionStatus, reason: str, message: str) -> Condition:
    return Condition(type=type_, status=status, reason=reason, message=message)


def compute(
    body: dict[str, Any],
    resolver: ModelResolver,
    inventory: planning.Inventory,
    read_configmap: ConfigMapReader | None = None,
    read_secret: SecretReader | None = None,
) -> Desired:
    """Desired state of one SpeculativeDeployment given the GPUs the cluster has.

    ``read_secret`` is given only when the operator may read Secrets (opt-in): then the hub
    token the resource names is used for the pairing check's downloads too.
    """
    meta = body.get("metadata", {})
    name, namespace = meta.get("name", ""), meta.get("namespace", "default")
    try:
        spec = api.SpeculativeDeploymentSpec.model_validate(body.get("spec") or {})
    except ValidationError as exc:
        return _blocked("InvalidSpec", api.validation_problems(exc), [], {})
    fields: dict[str, Any] = {"engine": spec.engine.name}
    overrides = _overrides(spec, namespace, read_configmap)
    try:
        resolved = pairing.resolve_pair(
            spec, resolver, overrides=overrides, token=_token(spec, namespace, read_secret)
        )
    except ModelUnavailable as exc:
        cond = _cond(api.PAIRING_VERIFIED, "Unknown", exc.reason, str(exc))
        return _blocked(exc.reason, str(exc), [cond], fields, retry=True)
    except pairing.PairingError as exc:
        cond = _cond(api.PAIRING_VERIFIED, "False", exc.reason, str(exc))
        return _blocked(exc.reason, str(exc), [cond], fields)
    fields.update(verifier=resolved.verifier_id, speculator=resolved.speculator_id)
    report = pairing.check_resolved(spec, resolved)
    fields["pairing"] = report.to_status()
    pairing_cond = _cond(api.PAIRING_VERIFIED, report.verified, report.reason, report.message)
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
        fields["plan"] = outcome.plan
    if not outcome.fits or outcome.plan is None:
        sched = _cond(api.SCHEDULABLE, "False", outcome.reason, outcome.message)
        return _blocked(outcome.reason, outcome.message, [pairing_cond, sched], fields)
    plan = outcome.plan
    sched = _cond(api.SCHEDULABLE, "True", outcome.reason, plan.reason)
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
    deployment = children.build_deployment(
        name, namespace, effective, launch, planning.placement(plan), owner=owner
    )
    service = children.build_service(name, namespace, effective, launch, owner=owner)
    fields.update(
        tensor_parallel_size=plan.tensor_parallel_size,
        command=launch.command,
        endpoint=children.endpoint(name, namespace, effective, launch),
        selector=children.selector_string(name),
    )
    return Desired(
        blocked=False,
        deployment=deployment,
        service=service,
        status=api.SpeculativeDeploymentStatus(**fields),
        conditions=[pairing_cond, sched],
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
