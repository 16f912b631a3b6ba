"""SpeculativeDeployments on the cluster under test, as a user sees them through kubectl.

Shared by the integration suites (a helper module, so no test module imports another).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from clusterlib import Kubectl

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "manifests" / "examples" / "qwen3-30b-a3b-instruct-2507-eagle3.yaml"


def apply(kubectl: Kubectl, namespace: str, body: dict[str, Any]) -> None:
    kubectl("apply", "-f", "-", input=json.dumps(body), namespace=namespace)


def get(kubectl: Kubectl, namespace: str, *what: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(kubectl("get", *what, "-o", "json", namespace=namespace))
    return result


def condition(body: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for cond in body.get("status", {}).get("conditions", []):
        if cond["type"] == type_:
            return dict(cond)
    return None


def ready(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any] | None:
    """The resource once Ready=True for its current generation, else None (a WaitFor predicate)."""
    body = get(kubectl, namespace, "sdep", name)
    cond = condition(body, "Ready")
    current = body["status"].get("observedGeneration") == body["metadata"]["generation"]
    return body if cond and cond["status"] == "True" and current else None


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return result
