"""The PodDisruptionBudget of the engine pods, when there is more than one.

It bounds voluntary evictions (``kubectl drain``, node upgrades, the cluster autoscaler) to one
engine pod at a time. ``maxUnavailable: 1`` rather than a ``minAvailable`` count: scaling never
rewrites it, and at one replica it would allow the only eviction there is, so a single-replica
resource gets none (no object, no apiserver work for thousands of such resources). Scaled back
to one replica, a budget made earlier stays as it is: it is the same object and allows that
eviction, so the operator never needs to delete one. A rollout is not an eviction (the
Deployment replaces pods itself, bounded by its own maxUnavailable from ``spec.rollout``), but
the budget counts the pod a rollout took down, so a drain during a rollout waits until the
replacement is ready.
"""

from __future__ import annotations

from typing import Any

from specdeploy import api
from specdeploy.children.labels import child_manifest, selector_labels

MAX_UNAVAILABLE = 1


def build_disruption_budget(
    name: str, namespace: str, spec: api.SpeculativeDeploymentSpec, owner: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """The budget of ``spec``'s engine pods; None at one replica or none (see above)."""
    if spec.replicas <= 1:
        return None
    body = {
        "maxUnavailable": MAX_UNAVAILABLE,
        "selector": {"matchLabels": selector_labels(name)},
        # An engine that is not Ready (still loading, crash-looping) serves nobody: evicting it
        # costs nothing, and without this a broken pod would block the node's drain forever.
        "unhealthyPodEvictionPolicy": "AlwaysAllow",
    }
    return child_manifest("policy/v1", "PodDisruptionBudget", name, namespace, spec.engine.name, owner, body)
