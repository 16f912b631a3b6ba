"""Child resources of a SpeculativeDeployment: pure functions from the effective spec to manifests."""

from specdeploy.children.deployment import ENGINE_CONTAINER, ENGINE_PORT_NAME, METRICS_PATH, build_deployment
from specdeploy.children.disruption import build_disruption_budget
from specdeploy.children.labels import (
    ENGINE_LABEL,
    INSTANCE_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    selector_string,
)
from specdeploy.children.leaderworkerset import API_VERSION as LWS_API_VERSION
from specdeploy.children.leaderworkerset import INSTALL as LWS_INSTALL
from specdeploy.children.leaderworkerset import build_leader_worker_set
from specdeploy.children.service import build_service, endpoint

__all__ = [
    "ENGINE_CONTAINER",
    "ENGINE_LABEL",
    "ENGINE_PORT_NAME",
    "INSTANCE_LABEL",
    "LWS_API_VERSION",
    "LWS_INSTALL",
    "MANAGED_BY",
    "MANAGED_BY_LABEL",
    "METRICS_PATH",
    "build_deployment",
    "build_disruption_budget",
    "build_leader_worker_set",
    "build_service",
    "endpoint",
    "selector_string",
]
