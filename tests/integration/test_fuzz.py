"""Fuzzing the real apiserver and operator with generated resources, ConfigMaps, Secrets and nodes.

Every generated SpeculativeDeployment is either refused by the apiserver (schema, CEL or the
operator's webhook) with a message, or accepted and then given conditions for its generation by
the operator. Throughout: the operator never restarts or logs an error or a traceback, no
resource ends in the pipeline's internal-error boundary, and a pair whose check failed has no
Deployment and no pod. ``SPECDEPLOY_FUZZ_RESOURCES`` sets the count (CI runs the default; the
reliability script runs 1,000) and ``SPECDEPLOY_FUZZ_REPORT`` names a JSON file for the figures.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from specdeploy import api
from specdeploy.controller.kube import refusal_message
from specdeploy_sandbox import nodes
from specdeploy_sandbox.operator_process import LocalOperator
from support.fuzz import any_spec, configmap_data, node_labels, secret_values
from support.kube import Cluster, Kubectl, WaitFor

RESOURCES = int(os.environ.get("SPECDEPLOY_FUZZ_RESOURCES", "200"))
NODES = int(os.environ.get("SPECDEPLOY_FUZZ_NODES", "6"))
REPORT = os.environ.get("SPECDEPLOY_FUZZ_REPORT")
MAX_REPLICAS = 2
# Lines of the operator's log that are a defect whatever the input (kopf's own handler failures
# log "Handler ... failed" with a traceback).
LOG_DEFECTS = ("Traceback", " ERROR ", "Unhandled", "failed with an exception")
FUZZ_TAINT = {"key": "specdeploy.io/fuzz", "value": "true", "effect": "NoSchedule"}


@pytest.fixture
def api_client(cluster: Cluster) -> Iterator[client.ApiClient]:
    with config.new_client_from_config(str(cluster.kubeconfig)) as made:
        yield made


def _resource(namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


class Outcomes:
    """What happened to each generated object, for the assertions and the report."""

    def __init__(self) -> None:
        self.accepted: list[str] = []
        self.refused: Counter[str] = Counter()
        self.refusal_messages: list[str] = []
        self.unexpected: list[str] = []
        self.configmaps = 0
        self.secrets = 0


def _generate(
    custom: client.CustomObjectsApi, core: client.CoreV1Api, namespace: str, outcomes: Outcomes
) -> None:
    """Create RESOURCES generated resources (each with its ConfigMap and Secret when drawn)."""
    names = (f"fuzz-{index:04d}" for index in itertools.count())

    @settings(
        max_examples=RESOURCES,
        database=None,
        phases=[Phase.generate],
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        spec=any_spec(),
        configmap=st.none() | configmap_data(),
        secret=st.none() | secret_values(),
    )
    def create(spec: dict[str, Any], configmap: dict[str, str] | None, secret: bytes | None) -> None:
        name = next(names)
        if type(spec.get("replicas")) is int:
            # The suite's budget, not a rule: hundreds of pending pods per resource would test
            # the simulated scheduler, not the operator.
            spec["replicas"] %= MAX_REPLICAS + 1
        if configmap is not None and isinstance(spec.get("pairing", {}), dict):
            core.create_namespaced_config_map(
                namespace, {"metadata": {"name": f"{name}-meta"}, "data": configmap}
            )
            spec.setdefault("pairing", {})["metadataConfigMap"] = f"{name}-meta"
            outcomes.configmaps += 1
        if secret is not None and isinstance(spec.get("modelAccess", {}), dict):
            data = {"token": base64.b64encode(secret).decode()}
            core.create_namespaced_secret(namespace, {"metadata": {"name": f"{name}-hf"}, "data": data})
            spec.setdefault("modelAccess", {})["tokenSecretRef"] = {"name": f"{name}-hf", "key": "token"}
            outcomes.secrets += 1
        try:
            custom.create_namespaced_custom_object(
                api.GROUP, api.VERSION, namespace, api.PLURAL, _resource(namespace, name, spec)
            )
        except ApiException as exc:
            message = refusal_message(exc)
            if exc.status in (400, 422) and message:
                kind = "webhook" if "admission webhook" in message else "schema"
                outcomes.refused[kind] += 1
                outcomes.refusal_messages.append(message)
            else:
                outcomes.unexpected.append(f"{name}: HTTP {exc.status} {message}")
        else:
            outcomes.accepted.append(name)

    create()


def _wait_settled(
    custom: client.CustomObjectsApi, namespace: str, accepted: set[str], timeout: float
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The resources once every accepted one has conditions for its current generation, and
    (after ``timeout``) the status of each that has none."""
    deadline = time.monotonic() + timeout
    while True:
        found = custom.list_namespaced_custom_object(api.GROUP, api.VERSION, namespace, api.PLURAL)
        items: list[dict[str, Any]] = found["items"]
        unsettled = {
            item["metadata"]["name"]: {"spec": item["spec"], "status": item.get("status")}
            for item in items
            if item["metadata"]["name"] in accepted
            and not (
                item.get("status", {}).get("conditions")
                and item["status"].get("observedGeneration") == item["metadata"]["generation"]
            )
        }
        if not unsettled or time.monotonic() > deadline:
            return items, unsettled
        time.sleep(1.0)


def _log_defects(log: Path, since: int) -> list[str]:
    with open(log, "rb") as handle:
        handle.seek(since)
        lines = handle.read().decode(errors="replace").splitlines()
    return [line for line in lines if any(marker in line for marker in LOG_DEFECTS)]


def _fuzz_nodes(core: client.CoreV1Api) -> Iterator[list[str]]:
    """NODES simulated GPU nodes with generated GPU labels, tainted so nothing runs there."""

    @settings(max_examples=1, database=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(st.lists(node_labels(), min_size=NODES, max_size=NODES))
    def draw(drawn: list[dict[str, str]]) -> None:
        labels.extend(drawn)

    labels: list[dict[str, str]] = []
    draw()
    made = []
    try:
        for index, extra in enumerate(labels):
            manifest = nodes.node_manifest(nodes.gpu_node(f"fuzz-node-{index}", "NVIDIA-L4", 4))
            manifest["metadata"]["labels"].update(extra)
            manifest["spec"]["taints"] = [FUZZ_TAINT]
            core.create_node(manifest)
            made.append(manifest["metadata"]["name"])
        yield made
    finally:
        for name in made:
            core.delete_node(name)


def test_generated_resources_are_refused_with_a_message_or_converge_with_conditions(
    api_client: client.ApiClient,
    kubectl: Kubectl,
    namespace: str,
    wait_for: WaitFor,
    operator: LocalOperator,
) -> None:
    custom, core, apps = (
        client.CustomObjectsApi(api_client),
        client.CoreV1Api(api_client),
        client.AppsV1Api(api_client),
    )
    log_mark = operator.log.stat().st_size
    pid = operator.process.pid
    outcomes = Outcomes()
    started = time.monotonic()
    node_fuzz = _fuzz_nodes(core)
    node_names = next(node_fuzz)
    try:
        _generate(custom, core, namespace, outcomes)
        created_s = time.monotonic() - started
        accepted = set(outcomes.accepted)

        items, unsettled = _wait_settled(custom, namespace, accepted, 60 + RESOURCES * 0.5)
        assert unsettled == {}, f"accepted resources without conditions for their generation: {unsettled}"
        converged_s = time.monotonic() - started
    finally:
        next(node_fuzz, None)

    assert outcomes.unexpected == []
    assert len(outcomes.accepted) + sum(outcomes.refused.values()) == RESOURCES
    reasons: Counter[str] = Counter()
    failed_pairs = []
    for item in items:
        by_type = {c["type"]: c for c in item["status"]["conditions"]}
        ready = by_type[api.READY]
        reasons[ready["reason"]] += 1
        assert ready["reason"] != "InternalError", ready["message"]
        assert ready["reason"] and (ready["status"] == "True" or ready["message"]), item["status"]
        if by_type.get(api.PAIRING_VERIFIED, {}).get("status") == "False":
            failed_pairs.append(item["metadata"]["name"])
    deployments = {
        d.metadata.labels.get("app.kubernetes.io/instance")
        for d in apps.list_namespaced_deployment(namespace).items
    }
    pods = {
        p.metadata.labels.get("app.kubernetes.io/instance") for p in core.list_namespaced_pod(namespace).items
    }
    started_anyway = sorted((deployments | pods) & set(failed_pairs))
    assert started_anyway == [], f"a pair that failed its check has a Deployment or pods: {started_anyway}"
    assert operator.process.poll() is None and operator.process.pid == pid
    assert _log_defects(operator.log, log_mark) == []
    report = {
        "resources": RESOURCES,
        "accepted": len(outcomes.accepted),
        "refused": dict(outcomes.refused),
        "configMaps": outcomes.configmaps,
        "secrets": outcomes.secrets,
        "fuzzNodes": len(node_names),
        "readyReasons": dict(reasons.most_common()),
        "pairingFailed": len(failed_pairs),
        "failedPairsStarted": len(started_anyway),
        "createSeconds": round(created_s, 1),
        "convergeSeconds": round(converged_s, 1),
        "operatorRestarts": 0,
        "logDefects": 0,
    }
    print(json.dumps(report, indent=2))
    if REPORT:
        Path(REPORT).write_text(json.dumps(report, indent=2))
