"""The status a reconcile writes: the pipeline's fields, the rollout as observed, merged conditions.

Ready, Progressing and Degraded come from the child Deployment's rollout (or from the stage that
blocked) and, while the rollout is incomplete, from its pods' failures (``controller.pods``);
PairingVerified and Schedulable come from the pipeline; acceptance and SpeculationEffective from
the engine metrics reader's window (``acceptance.judge``). Nothing is written when nothing
changed but transition times.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from specdeploy import acceptance, api, engines
from specdeploy.api import Acceptance, Condition
from specdeploy.controller import conditions, diffing
from specdeploy.controller.pods import PodView, command_digest, first_failure, serving, waiting_for_node
from specdeploy.pipeline import LWS_MISSING, Desired

# Counts that change several times in every rollout and that no person or controller acts on
# (the Deployment holds them live): they never cause a status write of their own, and ride along
# with the next one (readyReplicas, a condition, the plan). docs/api.md lists every status write.
RIDE_ALONG = frozenset({"replicas", "updatedReplicas"})
SPECULATION_OFF = "SpeculationOff"
# Ready's reason while an engine pod planned on a node pool waits for its node, and Degraded's
# once it has waited ``--node-wait``.
WAITING_FOR_NODE = "WaitingForNode"
NODE_NOT_PROVISIONED = "NodeNotProvisioned"


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
    """Whether the watched engine child (Deployment or LeaderWorkerSet) is the one the pass wants."""
    wanted = result.engine_set
    if deployment is None or wanted is None or wanted["kind"] != deployment.get("kind"):
        return False
    return not diffing.needs_apply(diffing.stamped(wanted), deployment)


def rolled_out(result: Desired, engine_set: dict[str, Any] | None, spec_replicas: int) -> bool:
    """Whether the watched engine child is the wanted one with every replica updated and ready."""
    return _rollout(engine_set, spec_replicas)[3] and _deployment_matches(result, engine_set)


@dataclass(frozen=True)
class NodeWait:
    """How long an engine pod planned on a node pool may wait for its node (``--node-wait``),
    and the time now (epoch seconds)."""

    now: float
    limit: float

    def left(self, pod: PodView) -> float:
        """Seconds until the pod has waited ``limit`` (0 once it has)."""
        since = pod.unschedulable_since if pod.unschedulable_since is not None else self.now
        return max(since + self.limit - self.now, 0.0)


def waiting_for_pool_node(result: Desired, pods: Sequence[PodView]) -> PodView | None:
    """The engine pod waiting for the node a node pool is to create (None: the plan is on no
    pool, or no pod waits): what Ready reports and the deadline timer watches."""
    plan = result.status.plan
    return waiting_for_node(pods) if plan is not None and plan.node_pool else None


def lifecycle_conditions(
    result: Desired,
    deployment: dict[str, Any] | None,
    spec_replicas: int,
    pods: Sequence[PodView] = (),
    reachable: bool = True,
    node_wait: NodeWait | None = None,
) -> list[Condition]:
    """Ready, Progressing and Degraded from the pipeline result, the Deployment's rollout and,
    while it is incomplete, the first failing engine pod (its reason names what went wrong) or,
    for a plan on a node pool, the pod waiting for the pool's node.
    ``reachable`` says whether a Service exists: a blocked resource whose pods run but that no
    Service reaches (its creation refused) is not serving anyone."""
    _, ready, _, done = _rollout(deployment, spec_replicas)
    if result.blocked:
        serving = ready > 0 and reachable
        if serving:
            note = f"; the previous Deployment keeps serving ({ready} ready)"
        elif ready:
            note = f"; {ready} engine pods are ready but no Service reaches them"
        else:
            note = ""
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
    ready_message = counts
    pending = waiting_for_pool_node(result, pods) if engine is None and not serving else None
    if pending is not None:
        pool = result.status.plan.node_pool if result.status.plan is not None else None
        waiting = WAITING_FOR_NODE
        ready_message = (
            f"{counts}; pod {pending.name} waits for node pool {pool} to create a node: "
            f"{pending.unschedulable}"
        )
        if node_wait is not None and not node_wait.left(pending):
            degraded = _cond(
                api.DEGRADED,
                "True",
                NODE_NOT_PROVISIONED,
                f"no node for pod {pending.name} within {node_wait.limit:g} s from node pool {pool}; "
                f"the scheduler: {pending.unschedulable}",
            )
    return [
        _cond(api.READY, "True" if serving else "False", "Ready" if serving else waiting, ready_message),
        _cond(api.PROGRESSING, "True", "RollingOut", counts),
        degraded,
    ]


def _deployment_failure(deployment: dict[str, Any] | None) -> str | None:
    for cond in ((deployment or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Progressing" and cond.get("reason") == "ProgressDeadlineExceeded":
            return str(cond.get("message", "progress deadline exceeded"))
        if cond.get("type") == "ReplicaFailure" and cond.get("status") == "True":
            return str(cond.get("message", "replica failure"))
    return None


def acceptance_policy(body: dict[str, Any]) -> api.AcceptancePolicy:
    """``spec.acceptance`` (the defaults where it does not validate: the schema admits none such)."""
    try:
        return api.AcceptancePolicy.model_validate((body.get("spec") or {}).get("acceptance") or {})
    except ValidationError:
        return api.AcceptancePolicy()


def speculation(
    body: dict[str, Any], command: Sequence[str], reading: acceptance.Reading | None, serving_pods: int
) -> tuple[Acceptance | None, Condition]:
    """The acceptance figures and SpeculationEffective for ``command``: stored figures count only
    when they were measured on that command (a new pair or new flags start over)."""
    current = body.get("status") or {}
    same_command = list(current.get("command") or []) == list(command)
    stored = None
    if current.get("acceptance") and same_command:
        try:
            stored = Acceptance.model_validate(current["acceptance"])
        except ValidationError:
            stored = None
    previous = _stored_condition(current) if same_command else None
    if reading is not None and reading.command != command_digest(command):
        reading = None  # read from the pods of another command: nothing about this one
    engine = ((body.get("spec") or {}).get("engine") or {}).get("name") or "vllm"
    if (
        command
        and engine in engines.ENGINES
        and engines.engine_for(engine).baseline_command(command) == list(command)
    ):
        return None, Condition(
            type=api.SPECULATION_EFFECTIVE,
            status="Unknown",
            reason=SPECULATION_OFF,
            message="the engines run without a speculator: adaptive speculation turned it off at every "
            "batch size (status.speculation)",
        )
    return acceptance.judge(stored, reading, serving_pods, acceptance_policy(body), previous)


def _stored_condition(current: dict[str, Any]) -> Condition | None:
    for stored in current.get("conditions") or []:
        if stored.get("type") == api.SPECULATION_EFFECTIVE:
            try:
                return Condition.model_validate(stored)
            except ValidationError:
                return None
    return None


def counted(serving_pods: Sequence[PodView], ready_replicas: int) -> int:
    """The serving pods SpeculationEffective counts: none until the engine child (Deployment or
    LeaderWorkerSet) counts a ready replica. A pod's own watch event runs ahead of its
    Deployment's status, and SpeculationEffective leaving NotServing before Ready turns True
    would be a status write of its own in a rollout."""
    return len(serving_pods) if ready_replicas > 0 else 0


def acceptance_outdated(
    body: dict[str, Any], reading: acceptance.Reading, serving_pods: Sequence[PodView]
) -> bool:
    """True when a reconcile would now write other acceptance figures or another condition (the
    engine child's ready count as status last recorded it)."""
    current = body.get("status") or {}
    counted_pods = counted(serving_pods, int(current.get("readyReplicas") or 0))
    figures, condition = speculation(body, current.get("command") or [], reading, counted_pods)
    stored = _stored_condition(current)
    dumped = None if figures is None else figures.model_dump(by_alias=True, exclude_none=True)
    return (
        dumped != current.get("acceptance")
        or stored is None
        or (
            stored.status,
            stored.reason,
            stored.message,
        )
        != (condition.status, condition.reason, condition.message)
    )


def status_for(
    body: dict[str, Any],
    result: Desired,
    deployment: dict[str, Any] | None,
    pods: Sequence[PodView] = (),
    reading: acceptance.Reading | None = None,
    reachable: bool = True,
    speculation_: api.Speculation | None = None,
    node_wait: NodeWait | None = None,
) -> tuple[dict[str, Any] | None, list[conditions.Transition]]:
    """The status to write (None when unchanged) and the condition transitions to report;
    ``speculation_`` is adaptive speculation's decision (``adaptive.decide``)."""
    current = body.get("status") or {}
    generation = body.get("metadata", {}).get("generation")
    spec_replicas = int((body.get("spec") or {}).get("replicas", 1))
    replicas, ready, updated, _ = _rollout(deployment, spec_replicas)
    observed = result.status.model_copy(
        update={
            "observed_generation": generation,
            "replicas": replicas,
            "ready_replicas": ready,
            "updated_replicas": updated,
        }
    )
    # Only the fields this reconcile decided: an unset one is removed from the stored status.
    desired = observed.model_dump(by_alias=True, exclude_none=True, include=observed.model_fields_set)
    if result.blocked and deployment is not None:
        # Keep what is still running visible; the plan and command of a blocked spec are not.
        for kept in ("command", "endpoint", "selector", "tensorParallelSize", "speculation"):
            if kept in current and kept not in desired:
                desired[kept] = current[kept]
    command = desired.get("command") or []
    figures, effective = speculation(body, command, reading, counted(serving(pods, command), ready))
    if figures is not None:
        desired["acceptance"] = figures.model_dump(by_alias=True, exclude_none=True)
    if speculation_ is not None:
        desired["speculation"] = speculation_.model_dump(by_alias=True, exclude_none=True)
    conds = [
        *lifecycle_conditions(result, deployment, spec_replicas, pods, reachable, node_wait),
        *result.conditions,
        effective,
    ]
    merged, transitions = conditions.merge(current.get("conditions") or [], conds, generation)
    unchanged = (
        conditions.same(current.get("conditions") or [], merged)
        and all(current.get(k) == v for k, v in desired.items() if k not in RIDE_ALONG)
        and not (set(current) - set(desired) - {"conditions"})
    )
    if unchanged:
        return None, []
    patch: dict[str, Any] = merge_patch({k: v for k, v in current.items() if k != "conditions"}, desired)
    patch["conditions"] = merged
    return patch, transitions


def merge_patch(current: Any, desired: Any) -> Any:
    """The JSON merge patch that turns ``current`` into ``desired``: a merge patch keeps every
    key it does not name, inside nested objects too, so each key ``desired`` no longer has is
    named with None (a reverted schedule leaves no stale ``previousSchedule`` behind)."""
    if not (isinstance(current, dict) and isinstance(desired, dict)):
        return desired
    patch: dict[str, Any] = {k: None for k in current if k not in desired}
    patch.update({k: merge_patch(current.get(k), v) for k, v in desired.items()})
    return patch


def write_cause(current: dict[str, Any], patch: dict[str, Any]) -> str:
    """Why a status write is made, for the metric that says where writes come from: ``first`` (no
    status yet), the type of the first condition whose status, reason or message changed, else
    the first field that did."""
    stored = {c.get("type"): c for c in current.get("conditions") or []}
    if not stored:
        return "first"
    for cond in patch.get("conditions") or []:
        before = stored.get(cond["type"]) or {}
        if any(before.get(k) != cond.get(k) for k in ("status", "reason", "message")):
            return str(cond["type"])
    return next((k for k, v in patch.items() if k != "conditions" and current.get(k) != v), "conditions")


def multi_node(body: dict[str, Any]) -> bool:
    """Whether the resource's stored plan spans several nodes (or waits for LeaderWorkerSet)."""
    stored = body.get("status") or {}
    if int((stored.get("plan") or {}).get("nodesPerReplica") or 1) > 1:
        return True
    return any(c.get("reason") == LWS_MISSING for c in stored.get("conditions") or [])


def on_node_pool(body: dict[str, Any]) -> bool:
    """Whether the resource's stored plan is for the nodes of a node pool."""
    return bool(((body.get("status") or {}).get("plan") or {}).get("nodePool"))


def waiting_for_gpus(body: dict[str, Any]) -> bool:
    for cond in (body.get("status") or {}).get("conditions") or []:
        if cond.get("type") == api.SCHEDULABLE and cond.get("status") == "False":
            return True
    return False
