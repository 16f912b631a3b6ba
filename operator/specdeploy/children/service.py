"""The Service in front of the engine pods, and the endpoint it gives clients."""

from __future__ import annotations

from typing import Any

from specdeploy import api
from specdeploy.children.deployment import ENGINE_PORT_NAME
from specdeploy.children.labels import child_manifest, selector_labels
from specdeploy.children.leaderworkerset import LEADER_SELECTOR
from specdeploy.engines import EngineLaunch


def build_service(
    name: str,
    namespace: str,
    spec: api.SpeculativeDeploymentSpec,
    launch: EngineLaunch,
    owner: dict[str, Any] | None = None,
    leaders_only: bool = False,
) -> dict[str, Any]:
    """The Service in front of the engine pods (OpenAI-compatible API and /metrics); on a
    multi-node resource, in front of each group's leader, the one pod that serves HTTP."""
    port = {
        "name": ENGINE_PORT_NAME,
        "port": spec.service.port or launch.port,
        "targetPort": launch.port,
        "protocol": "TCP",
    }
    selector = {**selector_labels(name), **(LEADER_SELECTOR if leaders_only else {})}
    body = {"type": spec.service.type, "selector": selector, "ports": [port]}
    return child_manifest("v1", "Service", name, namespace, spec.engine.name, owner, body)


def endpoint(name: str, namespace: str, spec: api.SpeculativeDeploymentSpec, launch: EngineLaunch) -> str:
    return f"http://{name}.{namespace}.svc:{spec.service.port or launch.port}/v1"
