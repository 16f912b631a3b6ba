"""Child resources of a SpeculativeDeployment: pure functions from the effective spec to manifests."""

from specdeploy.children.deployment import build_deployment
from specdeploy.children.labels import INSTANCE_LABEL, MANAGED_BY, MANAGED_BY_LABEL, selector_string
from specdeploy.children.service import build_service, endpoint

__all__ = [
    "INSTANCE_LABEL",
    "MANAGED_BY",
    "MANAGED_BY_LABEL",
    "build_deployment",
    "build_service",
    "endpoint",
    "selector_string",
]
