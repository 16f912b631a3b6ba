"""Issue: install paths. The Argo CD health check for SpeculativeDeployment, run as Lua.

Argo CD runs health scripts with gopher-lua (Lua 5.1), so the script runs here under lupa's Lua
5.1 against statuses captured from the live operator on the sandbox (fixtures/argocd/live-*,
recorded with the seed example, a NoNodeFits pair, a PairingFailed pair, a fresh resource and a
scaled one) and against synthetic combinations of the operator's conditions.

argocd-cm.yaml embeds the same script; regenerate it with
``UPDATE_GOLDEN=1 pytest tests/unit/test_argocd_health.py`` after editing health.lua.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.paths import REPO

lua51 = pytest.importorskip("lupa.lua51")

ARGOCD = REPO / "manifests" / "gitops" / "argocd"
HEALTH_LUA = ARGOCD / "health.lua"
ARGOCD_CM = ARGOCD / "argocd-cm.yaml"
FIXTURES = Path(__file__).parent / "fixtures" / "argocd"
HEALTH_KEY = "resource.customizations.health.specdeploy.io_SpeculativeDeployment"


def health(body: dict[str, Any]) -> tuple[str, str]:
    """(status, message) the script returns for ``body``, as Argo CD would call it."""
    runtime = lua51.LuaRuntime(unpack_returned_tuples=True)
    # Nested dicts and lists become Lua tables (1-based arrays), like Argo CD's unstructured objects.
    runtime.globals().obj = runtime.table_from(body, recursive=True)
    script = runtime.eval(f"function() {HEALTH_LUA.read_text()} end")
    result = script()
    return str(result["status"]), str(result["message"])


def sdep(generation: int, observed: int | None, *conditions: tuple[str, str, str, str]) -> dict[str, Any]:
    status: dict[str, Any] = {
        "conditions": [{"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conditions]
    }
    if observed is not None:
        status["observedGeneration"] = observed
    return {
        "apiVersion": "specdeploy.io/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": "x", "namespace": "models", "generation": generation},
        "status": status,
    }


def live(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((FIXTURES / f"live-{name}.json").read_text())
    return body


@pytest.mark.parametrize(
    ("fixture", "expected", "message_part"),
    [
        ("ready", "Healthy", "2/2 replicas ready"),
        ("rolling-out", "Progressing", "0/1 replicas ready"),
        ("no-status", "Progressing", "report status"),
        ("generation-behind", "Progressing", "generation 2"),
        ("no-node-fits", "Degraded", "GPU"),
        ("pairing-failed", "Degraded", "was trained for Qwen/Qwen3-Coder-30B-A3B-Instruct"),
    ],
)
def test_live_statuses(fixture: str, expected: str, message_part: str) -> None:
    body = live(fixture)
    status, message = health(body)
    assert status == expected, message
    assert message_part in message
    if expected == "Degraded":
        degraded = next(c for c in body["status"]["conditions"] if c["type"] == "Degraded")
        assert message == degraded["message"]


READY = ("Ready", "True", "Ready", "1/1 replicas ready")
DONE = ("Progressing", "False", "RolloutComplete", "1/1 replicas ready")
FINE = ("Degraded", "False", "AsExpected", "")
SERVING = "; the previous Deployment keeps serving"


@pytest.mark.parametrize(
    ("body", "expected", "message"),
    [
        (sdep(1, 1, READY, DONE, FINE), "Healthy", "1/1 replicas ready"),
        (sdep(2, 1, READY, DONE, FINE), "Progressing", "Waiting for the operator to observe generation 2"),
        (sdep(1, None), "Progressing", "Waiting for the operator to observe generation 1"),
        (
            sdep(
                1, 1,
                ("Ready", "False", "WaitingForReplicas", "0/1 replicas ready"),
                ("Progressing", "True", "Starting", "0/1 replicas ready"),
                FINE,
            ),
            "Progressing",
            "0/1 replicas ready",
        ),
        (
            sdep(
                3, 3,
                ("Ready", "True", "Ready", "2/2 replicas ready"),
                ("Progressing", "True", "RollingOut", "2/2 replicas ready"),
                FINE,
            ),
            "Progressing",
            "2/2 replicas ready",
        ),
        (
            sdep(
                1, 1,
                ("Ready", "False", "WaitingForReplicas", "0/1 replicas ready"),
                ("Progressing", "True", "RollingOut", "0/1 replicas ready"),
                ("Degraded", "True", "RolloutFailed", "progress deadline exceeded"),
            ),
            "Degraded",
            "progress deadline exceeded",
        ),
        (
            sdep(
                2, 2,
                ("Ready", "True", "PreviousVersionServing", f"no node fits{SERVING}"),
                ("Progressing", "False", "NoNodeFits", "no node fits"),
                ("Degraded", "True", "NoNodeFits", f"no node fits{SERVING}"),
            ),
            "Degraded",
            f"no node fits{SERVING}",
        ),
        (
            sdep(
                1, 1,
                ("Ready", "False", "InvalidEngineConfig", "tensor parallel size 3 does not divide 32 heads"),
                ("Progressing", "False", "InvalidEngineConfig", ""),
            ),
            "Degraded",
            "tensor parallel size 3 does not divide 32 heads",
        ),
        (
            sdep(1, 1, ("Ready", "False", "PairingFailed", ""), ("Degraded", "True", "PairingFailed", "")),
            "Degraded",
            "PairingFailed",
        ),
        (
            sdep(1, 1, ("Ready", "True", "ScaledToZero", "0/0 replicas ready"), DONE, FINE),
            "Healthy",
            "0/0 replicas ready",
        ),
        (
            sdep(1, 1, ("PairingVerified", "True", "Compatible", "")),
            "Progressing",
            "Waiting for the Ready condition",
        ),
    ],
    ids=[
        "ready", "generation-behind", "no-observed-generation", "starting", "rolling-update",
        "rollout-failed", "blocked-previous-serving", "ready-false-failure-reason", "empty-message",
        "scaled-to-zero", "no-ready-condition",
    ],
)  # fmt: skip
def test_condition_combinations(body: dict[str, Any], expected: str, message: str) -> None:
    assert health(body) == (expected, message)


def render_argocd_cm() -> str:
    header = (
        "# Argo CD: register the SpeculativeDeployment health check. Merge into the argocd-cm\n"
        "# ConfigMap (or the Helm value configs.cm of the argo-cd chart). Generated from health.lua;\n"
        "# regenerate with UPDATE_GOLDEN=1 pytest tests/unit/test_argocd_health.py\n"
    )
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "argocd-cm",
            "namespace": "argocd",
            "labels": {"app.kubernetes.io/name": "argocd-cm", "app.kubernetes.io/part-of": "argocd"},
        },
        "data": {HEALTH_KEY: HEALTH_LUA.read_text()},
    }

    class Literal(yaml.SafeDumper):
        pass

    def literal(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Literal.add_representer(str, literal)
    return header + yaml.dump(body, Dumper=Literal, sort_keys=False, width=200)


def test_argocd_cm_embeds_the_same_script() -> None:
    if os.environ.get("UPDATE_GOLDEN") == "1":
        ARGOCD_CM.write_text(render_argocd_cm())
    data = yaml.safe_load(ARGOCD_CM.read_text())["data"]
    assert data[HEALTH_KEY] == HEALTH_LUA.read_text(), (
        "argocd-cm.yaml is stale: UPDATE_GOLDEN=1 pytest tests/unit/test_argocd_health.py"
    )
