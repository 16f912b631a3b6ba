"""Child resources of a SpeculativeDeployment: pure functions from the effective spec to manifests."""

from specdeploy.api.engine_pod import ENGINE_CONTAINER, ENGINE_LABEL, INSTANCE_LABEL, MANAGED_BY_LABEL
from specdeploy.children.defaults import NO_DEFAULTS, PodDefaults, TokenRef
from specdeploy.children.deployment import ENGINE_PORT_NAME, METRICS_PATH, build_deployment
from specdeploy.children.disruption import build_disruption_budget
from specdeploy.children.inputs import ChildInputs
from specdeploy.children.kinds import (
    BY_KIND,
    CHILD_KINDS,
    DEPLOYMENT,
    DISRUPTION_BUDGET,
    ENGINE_KINDS,
    LEADER_WORKER_SET,
    SERVICE,
    ChildKind,
)
from specdeploy.children.labels import MANAGED_BY, selector_string
from specdeploy.children.leaderworkerset import INSTALL as LWS_INSTALL
from specdeploy.children.leaderworkerset import build_leader_worker_set
from specdeploy.children.service import build_service, endpoint

__all__ = [
    "BY_KIND",
    "CHILD_KINDS",
    "DEPLOYMENT",
    "DISRUPTION_BUDGET",
    "ENGINE_CONTAINER",
    "ENGINE_KINDS",
    "ENGINE_LABEL",
    "ENGINE_PORT_NAME",
    "INSTANCE_LABEL",
    "LEADER_WORKER_SET",
    "LWS_INSTALL",
    "MANAGED_BY",
    "MANAGED_BY_LABEL",
    "METRICS_PATH",
    "NO_DEFAULTS",
    "SERVICE",
    "ChildInputs",
    "ChildKind",
    "PodDefaults",
    "TokenRef",
    "build_deployment",
    "build_disruption_budget",
    "build_leader_worker_set",
    "build_service",
    "endpoint",
    "selector_string",
]
