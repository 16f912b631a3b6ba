"""Labels, selectors and owner references every child of a SpeculativeDeployment carries.

The operator's watches select children by ``app.kubernetes.io/managed-by`` and find the owning
resource by ``app.kubernetes.io/instance``; the selector labels never change with the spec, so a
rollout never orphans pods.
"""

from __future__ import annotations

from typing import Any

from specdeploy import api
from specdeploy.api.engine_pod import (
    COMPONENT_LABEL,
    ENGINE_LABEL,
    INSTANCE_LABEL,
    MANAGED_BY_LABEL,
    NAME_LABEL,
)

MANAGED_BY = "specdeploy"


def selector_labels(name: str) -> dict[str, str]:
    """Labels that select one resource's pods; stable across spec changes."""
    return {NAME_LABEL: "specdeploy-server", INSTANCE_LABEL: name}


def selector_string(name: str) -> str:
    return ",".join(f"{k}={v}" for k, v in selector_labels(name).items())


def common_labels(name: str, engine: str) -> dict[str, str]:
    return {
        **selector_labels(name),
        MANAGED_BY_LABEL: MANAGED_BY,
        COMPONENT_LABEL: "inference-server",
        ENGINE_LABEL: engine,
    }


def owner_reference(owner: dict[str, Any]) -> dict[str, Any]:
    """Controller reference so the garbage collector deletes children with the resource."""
    meta = owner["metadata"]
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def object_metadata(
    name: str, namespace: str, labels: dict[str, str], owner: dict[str, Any] | None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if owner is not None:
        meta["ownerReferences"] = [owner_reference(owner)]
    return meta


def child_manifest(
    api_version: str,
    kind: str,
    name: str,
    namespace: str,
    engine: str,
    owner: dict[str, Any] | None,
    spec: dict[str, Any],
) -> dict[str, Any]:
    """One child of the resource: named after it, with the common labels and its owner."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": object_metadata(name, namespace, common_labels(name, engine), owner),
        "spec": spec,
    }
