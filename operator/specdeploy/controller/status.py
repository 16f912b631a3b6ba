"""The status a reconcile writes: the pipeline's fields, the rollout as observed, merged conditions.

Ready, Progressing and Degraded come from the child Deployment's rollout (or from the stage that
blocked) and, while the rollout is incomplete, from its pods' failures (``controller.pods``);
PairingVerified and Schedulable come from the pipeline. Nothing is written when nothing changed
but transition times.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specdeploy import api
from specdeploy.api import Condition
from specdeploy.controller import conditions, diffing
from specdeploy.controller.pods import PodView, first_failure
from specdeploy.pipeline import Desired


def _cond(type_: str, status: api.ConditionStatus, reason: str, message: str) -> Condition:
    return Condition(type=type_, status=status, reason=reason, message=message)


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


def _deployment_matches(result: Desired, deployment: dict[str, Any] | None) -> bool:
    if deployment is None or result.deployment is None:
        return False
    return not diffing.needs_apply(diffing.stamped(result.deployment), deployment)


def lifecycle_conditions(
    result: Desired, deployment: dict[str, Any] | None, spec_replicas: int, pods: Sequence[PodView] = ()
) -> list[Condition]:
    """Ready, Progressing and Degraded from the pipeline result, the Deployment's rollout and,
    while it is incomplete, the first failing engine pod (its reason names what went wrong)."""
    replicas, ready, _, done = _rollout(deployment, spec_replicas)
    if result.blocked:
        serving = ready > 0
        note = f"; the previous Deployment keeps serving ({ready} ready)" if serving else ""
        return [
            _cond(
                api.READY,
                "True" if serving else "False",
                result.reason if not serving else "PreviousVersionServing",
                result.message + note,
            ),
            _cond(api.PROGRESSING, "False", result.reason, result.message),
            _cond(api.DEGRADED, "True", result.reason, result.message + note),
        ]
    done = done and _deployment_matches(result, deployment)
    counts = f"{ready}/{spec_replicas} replicas ready"
    if done:
        return [
            _cond(api.READY, "True", "Ready" if spec_replicas else "ScaledToZero", counts),
            _cond(api.PROGRESSING, "False", "RolloutComplete", counts),
            _cond(api.DEGRADED, "False", "AsExpected", ""),
        ]
    serving = ready >= spec_replicas > 0
    engine = first_failure(pods)
    if engine is not None:
        degraded = _cond(api.DEGRADED, "True", engine.reason, engine.message)
    else:
        failure = _deployment_failure(deployment)
        degraded = _cond(
            api.DEGRADED,
            "True" if failure else "False",
            "RolloutFailed" if failure else "AsExpected",
            failure or "",
        )
    waiting = engine.reason if engine is not None else "WaitingForReplicas"
    return [
        _cond(api.READY, "True" if serving else "False", "Ready" if serving else waiting, counts),
        _cond(api.PROGRESSING, "True", "RollingOut" if replicas else "Starting", counts),
        degraded,
    ]


def _deployment_failure(deployment: dict[str, Any] | None) -> str | None:
    for cond in ((deployment or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Progressing" and cond.get("reason") == "ProgressDeadlineExceeded":
            return str(cond.get("message", "progress deadline exceeded"))
        if cond.get("type") == "ReplicaFailure" and cond.get("status") == "True":
            return str(cond.get("message", "replica failure"))
    return None


def status_for(
    body: dict[str, Any],
    result: Desired,
    deployment: dict[str, Any] | None,
    pods: Sequence[PodView] = (),
) -> tuple[dict[str, Any] | None, list[conditions.Transition]]:
    """The status to write (None when unchanged) and the condition transitions to report."""
    current = body.get("status") or {}
    generation = body.get("metadata", {}).get("generation")
    spec_replicas = int((body.get("spec") or {}).get("replicas", 1))
    replicas, ready, updated, _ = _rollout(deployment, spec_replicas)
    conds = [*lifecycle_conditions(result, deployment, spec_replicas, pods), *result.conditions]
    merged, transitions = conditions.merge(current.get("conditions") or [], conds, generation)
    observed = result.status.model_copy(
        update={
            "observed_generation": generation,
            "replicas": replicas,
            "ready_replicas": ready,
            "updated_replicas": updated,
            "conditions": [Condition.model_validate(c) for c in merged],
        }
    )
    # Only the fields this reconcile decided: an unset one is removed from the stored status.
    desired = observed.model_dump(by_alias=True, exclude_none=True, include=observed.model_fields_set)
    if result.blocked and deployment is not None:
        # Keep what is still running visible; the plan and command of a blocked spec are not.
        for kept in ("command", "endpoint", "selector", "tensorParallelSize"):
            if kept in current and kept not in desired:
                desired[kept] = current[kept]
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


def waiting_for_gpus(body: dict[str, Any]) -> bool:
    for cond in (body.get("status") or {}).get("conditions") or []:
        if cond.get("type") == api.SCHEDULABLE and cond.get("status") == "False":
            return True
    return False
