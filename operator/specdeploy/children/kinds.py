"""The child kinds of a SpeculativeDeployment, in one table every layer loops over.

The pipeline builds the children in ``CHILD_KINDS`` order (which is also the order a pass applies
them in), the controller registers a watch and an index per entry, looks the watched copies up by
kind, and writes them through the API route the entry names. Every kind is written the same way:
server-side apply with forced ownership of the fields the operator sets, and only when the watched
copy differs from the manifest; drift is repaired by that same apply, since any change to (or
deletion of) a child reaches its owner's next pass through the child's watch. What differs per
kind is in the flags: whether it runs the engine pods, whether it waits out a move between engine
kinds, and whether a CRD serves it. Adding a kind is one entry here plus its builder, and its
verbs in the chart's RBAC.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specdeploy.children.deployment import build_deployment
from specdeploy.children.disruption import build_disruption_budget
from specdeploy.children.inputs import ChildInputs
from specdeploy.children.leaderworkerset import build_leader_worker_set
from specdeploy.children.service import build_service

# What the operator does with every child: watch it, and create or patch it by server-side apply.
BASE_VERBS = ("list", "watch", "create", "patch")

# The manifest of one kind for these inputs, or None when the resource wants none of that kind.
Builder = Callable[[ChildInputs], dict[str, Any] | None]


@dataclass(frozen=True)
class ChildKind:
    """One kind of child: its API identity, its builder and how the controller treats it.

    ``engine``: its pods run the engine. A pass wants at most one engine kind; when the plan moves
    a resource to another, the old child is deleted once the new one has rolled out (so the
    operator also needs ``delete`` on it).
    ``held_while_switching``: during such a move an existing one is left as it is (the Service
    keeps selecting the old pods until the new ones serve).
    ``crd``: served by a CustomResourceDefinition installed separately, so written through the
    custom objects API (built-in kinds go through their group's typed client).
    """

    kind: str
    group: str
    version: str
    plural: str
    build: Builder
    engine: bool = False
    held_while_switching: bool = False
    crd: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def verbs(self) -> tuple[str, ...]:
        """The RBAC verbs the operator needs on this kind."""
        return (*BASE_VERBS, "delete") if self.engine else BASE_VERBS


def _deployment(inputs: ChildInputs) -> dict[str, Any] | None:
    """Replicas that each fit one node."""
    if inputs.multi_node:
        return None
    return build_deployment(
        inputs.name,
        inputs.namespace,
        inputs.spec,
        inputs.launch,
        inputs.placement,
        inputs.plan,
        inputs.owner,
        inputs.defaults,
    )


def _leader_worker_set(inputs: ChildInputs) -> dict[str, Any] | None:
    """Replicas that span several nodes."""
    if not inputs.multi_node:
        return None
    return build_leader_worker_set(
        inputs.name,
        inputs.namespace,
        inputs.spec,
        inputs.launch,
        inputs.placement,
        inputs.plan,
        inputs.owner,
        inputs.defaults,
    )


def _service(inputs: ChildInputs) -> dict[str, Any] | None:
    """In front of the engine pods (of each group's leader when a replica spans nodes)."""
    return build_service(
        inputs.name,
        inputs.namespace,
        inputs.spec,
        inputs.launch,
        owner=inputs.owner,
        leaders_only=inputs.multi_node,
    )


def _disruption_budget(inputs: ChildInputs) -> dict[str, Any] | None:
    return build_disruption_budget(inputs.name, inputs.namespace, inputs.spec, owner=inputs.owner)


DEPLOYMENT = ChildKind(
    kind="Deployment", group="apps", version="v1", plural="deployments", build=_deployment, engine=True
)
LEADER_WORKER_SET = ChildKind(
    kind="LeaderWorkerSet",
    group="leaderworkerset.x-k8s.io",
    version="v1",
    plural="leaderworkersets",
    build=_leader_worker_set,
    engine=True,
    crd=True,
)
SERVICE = ChildKind(
    kind="Service", group="", version="v1", plural="services", build=_service, held_while_switching=True
)
DISRUPTION_BUDGET = ChildKind(
    kind="PodDisruptionBudget",
    group="policy",
    version="v1",
    plural="poddisruptionbudgets",
    build=_disruption_budget,
)

CHILD_KINDS: tuple[ChildKind, ...] = (DEPLOYMENT, LEADER_WORKER_SET, SERVICE, DISRUPTION_BUDGET)
ENGINE_KINDS = tuple(kind for kind in CHILD_KINDS if kind.engine)
BY_KIND = {kind.kind: kind for kind in CHILD_KINDS}
