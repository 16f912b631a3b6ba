"""The chart's Prometheus Operator objects are valid ones, and they select what they should.

The Prometheus Operator's own CRDs (from its Go module, fetched once through the Go module proxy
into the Go module cache) are installed in the sandbox, and the apiserver validates the chart's
PodMonitor, ServiceMonitor and PrometheusRule against them: a wrong field is refused there as it
would be in a production cluster. The selectors are then checked against what the operator
renders for engine pods and what the chart renders for the operator's metrics Service.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.kube import Kubectl, wait_crd_established
from support.paths import REPO

CHART = REPO / "charts" / "specdeploy"
GOLDEN_ENGINE = REPO / "tests" / "unit" / "golden" / "manifests" / "qwen3-30b-a3b-instruct-2507-eagle3.yaml"
PROMETHEUS_OPERATOR = "github.com/prometheus-operator/prometheus-operator@v0.85.0"
MONITORING = ("podmonitors", "servicemonitors", "prometheusrules")
NAMESPACE = "monitoring-check"
RELEASE = "specdeploy"


@pytest.fixture(scope="module")
def monitoring_crds(kubectl: Kubectl, tmp_path_factory: pytest.TempPathFactory) -> None:
    go = shutil.which("go")
    if go is None:
        pytest.fail("the Go toolchain is needed to fetch the Prometheus Operator's CRDs")
    proc = subprocess.run(
        [go, "mod", "download", "-json", PROMETHEUS_OPERATOR],
        cwd=tmp_path_factory.mktemp("gomod"),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    crds = Path(json.loads(proc.stdout)["Dir"]) / "example" / "prometheus-operator-crd"
    for plural in MONITORING:
        kubectl("apply", "--server-side", "-f", str(crds / f"monitoring.coreos.com_{plural}.yaml"))
        wait_crd_established(kubectl, f"{plural}.monitoring.coreos.com")


def _rendered(helm_binary: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [
            helm_binary,
            "template",
            RELEASE,
            str(CHART),
            "--namespace",
            NAMESPACE,
            "--set",
            "image.repository=specdeploy",
            "--set",
            "engineMetrics.podMonitor.enabled=true",
            "--set",
            "metrics.serviceMonitor.enabled=true",
            "--set",
            "metrics.prometheusRule.enabled=true",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def test_the_charts_monitoring_objects_are_accepted_and_select_their_targets(
    monitoring_crds: None, kubectl: Kubectl, helm_binary: str
) -> None:
    documents = _rendered(helm_binary)
    monitoring = [d for d in documents if d["apiVersion"] == "monitoring.coreos.com/v1"]
    assert sorted(d["kind"] for d in monitoring) == ["PodMonitor", "PrometheusRule", "ServiceMonitor"]

    kubectl("create", "namespace", NAMESPACE)
    for document in monitoring:
        kubectl("apply", "--server-side", "-n", NAMESPACE, "-f", "-", input=yaml.safe_dump(document))
    kinds = ",".join(MONITORING)
    stored = json.loads(kubectl("get", kinds, "-n", NAMESPACE, "-o", "json"))
    assert len(stored["items"]) == 3

    by_kind = {d["kind"]: d for d in monitoring}
    engine = next(d for d in yaml.safe_load_all(GOLDEN_ENGINE.read_text()) if d["kind"] == "Deployment")
    template = engine["spec"]["template"]
    pod_monitor = by_kind["PodMonitor"]["spec"]
    assert _matches(pod_monitor["selector"]["matchLabels"], template["metadata"]["labels"])
    (endpoint,) = pod_monitor["podMetricsEndpoints"]
    ports = {p["name"]: p["containerPort"] for p in template["spec"]["containers"][0]["ports"]}
    assert endpoint["port"] in ports and endpoint["path"] == "/metrics"
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(ports[endpoint["port"]])

    metrics_service = next(
        d for d in documents if d["kind"] == "Service" and d["spec"]["ports"][0]["name"] == "metrics"
    )
    service_monitor = by_kind["ServiceMonitor"]["spec"]
    assert _matches(service_monitor["selector"]["matchLabels"], metrics_service["metadata"]["labels"])
    selector = service_monitor["selector"]["matchLabels"]
    others = [d for d in documents if d["kind"] == "Service" and d is not metrics_service]
    assert not any(_matches(selector, d["metadata"]["labels"]) for d in others)
    assert service_monitor["endpoints"][0]["honorLabels"] is True

    (rule,) = by_kind["PrometheusRule"]["spec"]["groups"][0]["rules"]
    assert rule["expr"] == "specdeploy_speculation_effective == 0"
