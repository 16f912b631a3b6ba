"""SpeculativeDeployments on the cluster under test, as a user sees them through kubectl.

Shared by the integration suites (a helper module, so no test module imports another).
"""

from __future__ import annotations

import json
from typing import Any

from support.kube import Kubectl, condition, get


def apply(kubectl: Kubectl, namespace: str, body: dict[str, Any]) -> None:
    kubectl("apply", "-f", "-", input=json.dumps(body), namespace=namespace)


def ready(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any] | None:
    """The resource once Ready=True for its current generation, else None (a WaitFor predicate)."""
    body = get(kubectl, namespace, "sdep", name)
    current = body["status"].get("observedGeneration") == body["metadata"]["generation"]
    return body if condition(body, "Ready").get("status") == "True" and current else None


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return result
