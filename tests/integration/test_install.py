"""Issue: install paths. The Helm chart and manifests/install.yaml against real apiservers.

The chart's own lifecycle runs on a sandbox of its own, started for the test: the session's
operator (admin identity, all namespaces) is not there, so every write to the test namespace
comes from the operator authenticated as the chart's ServiceAccount, which the apiserver's audit
log confirms. The operator runs locally with the container's arguments (kopf's probe on
loopback, no webhook server); the chart's webhook Service has no reachable endpoint here, and
its failurePolicy Ignore lets writes through, which is also what a stopped operator looks like.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusterlib import Cluster, Kubectl, WaitFor, sandbox_cluster, wait_crd_established
from specdeploy.sandbox.processes import stop_child

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "specdeploy"
INSTALL_YAML = REPO / "manifests" / "install.yaml"
EXAMPLES = sorted((REPO / "manifests" / "examples").glob("*.yaml"))
SEED = REPO / "manifests" / "examples" / "qwen3-30b-a3b-instruct-2507-eagle3.yaml"
CRD_NAME = "speculativedeployments.specdeploy.io"
RELEASE = "sd"
RELEASE_NAMESPACE = "specdeploy-chart"
FULLNAME = "sd-specdeploy"
CLUSTER_NAME = f"{FULLNAME}-{RELEASE_NAMESPACE}"
SERVICE_ACCOUNT = f"system:serviceaccount:{RELEASE_NAMESPACE}:{FULLNAME}"
# Flags of the container that only make sense inside the pod (bind addresses, ports, certs).
POD_ONLY_FLAGS = ("--probe-", "--metrics-port", "--webhook-")
CATALOG_EXTENSION = {"engines": {"vllm": {"eagle3": {"MistralForCausalLM": "unconfirmed"}}}}


class Helm:
    """Runs the pinned helm against one cluster."""

    def __init__(self, binary: str, kubeconfig: Path) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig

    def __call__(self, *args: str, timeout: float = 180.0) -> str:
        proc = subprocess.run(
            [self.binary, f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if proc.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc.stdout


@pytest.fixture
def fresh_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A sandbox of this test's own: nothing installed but the control plane and its nodes."""
    name = f"install-{os.getpid()}-{int(time.monotonic() * 1000) % 100000}"
    with sandbox_cluster(tmp_path_factory.mktemp("install-sandbox"), name) as running:
        yield running


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _json(kubectl: Kubectl, *args: str, namespace: str | None = None) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(kubectl(*args, "-o", "json", namespace=namespace))
    return result


def _token_kubeconfig(kubectl: Kubectl, directory: Path) -> Path:
    """The cluster's kubeconfig with the ServiceAccount's TokenRequest token as the only user."""
    token = kubectl("create", "token", FULLNAME, "--duration=20m", namespace=RELEASE_NAMESPACE).strip()
    config = json.loads(kubectl("config", "view", "--raw", "--minify", "-o", "json"))
    config["users"] = [{"name": "chart-sa", "user": {"token": token}}]
    config["contexts"][0]["context"]["user"] = "chart-sa"
    path = directory / "chart-sa.kubeconfig"
    path.write_text(json.dumps(config))
    return path


# The chart's defaults for the engine metrics reader.
ACCEPTANCE_FLAGS = ["--acceptance-interval=30", "--acceptance-timeout=5", "--acceptance-concurrency=32"]


def _container_args(kubectl: Kubectl) -> list[str]:
    """The operator flags the chart's Deployment passes that matter outside the pod."""
    deployment = _json(kubectl, "get", "deployment", FULLNAME, namespace=RELEASE_NAMESPACE)
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return [arg for arg in args if not arg.startswith(POD_ONLY_FLAGS)]


@contextmanager
def _operator_as_service_account(kubeconfig: Path, args: list[str], log: Path) -> Iterator[None]:
    """``specdeploy run`` with the chart's flags and identity, its probe on loopback."""
    probe = _free_port()
    argv = [sys.executable, "-m", "specdeploy", "run", *args]
    argv += ["--probe-address", "127.0.0.1", "--probe-port", str(probe), "--metrics-port", "0"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env["KUBECONFIG"] = str(kubeconfig)
    with open(log, "wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                pytest.fail(f"operator exited with {process.returncode}:\n{log.read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{probe}/healthz", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"operator not healthy within 60s:\n{log.read_text()[-4000:]}")
                time.sleep(0.3)
        yield
    finally:
        stop_child(process, 20)
        forbidden = [line for line in log.read_text(errors="replace").splitlines() if "Forbidden" in line]
        assert not forbidden, "the ServiceAccount was denied something it needs:\n" + "\n".join(forbidden[:5])


def _ready(kubectl: Kubectl, namespace: str, name: str) -> bool:
    body = _json(kubectl, "get", "sdep", name, namespace=namespace)
    status = body.get("status") or {}
    conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
    return (
        conditions.get("Ready") == "True"
        and status.get("observedGeneration") == body["metadata"]["generation"]
    )


def _writes_by(audit_log: Path, user: str, namespace: str) -> set[tuple[str, str, str]]:
    """(verb, resource, subresource) of successful writes ``user`` made in ``namespace``."""
    writes = set()
    for line in audit_log.read_text(errors="replace").splitlines():
        event = json.loads(line)
        ref = event.get("objectRef") or {}
        if (
            event.get("stage") == "ResponseComplete"
            and event["user"]["username"] == user
            and ref.get("namespace") == namespace
            and event["verb"] in ("create", "patch", "update")
            and event.get("responseStatus", {}).get("code", 500) < 300
        ):
            writes.add((event["verb"], ref.get("resource", ""), ref.get("subresource", "")))
    return writes


def _seed(name: str) -> str:
    body = yaml.safe_load(SEED.read_text())
    body["metadata"]["name"] = name
    return json.dumps(body)


def _can_i(kubectl: Kubectl, *args: str) -> bool:
    proc = kubectl.run("auth", "can-i", *args, f"--as={SERVICE_ACCOUNT}")
    return proc.stdout.strip() == "yes"


def test_helm_install_upgrade_uninstall_as_the_charts_service_account(
    fresh_cluster: Cluster, kubectl_binary: str, helm_binary: str, tmp_path: Path
) -> None:
    kubectl = Kubectl(kubectl_binary, fresh_cluster.kubeconfig)
    helm = Helm(helm_binary, fresh_cluster.kubeconfig)
    audit_log = fresh_cluster.audit_log
    assert audit_log is not None
    namespace, other = "models", "elsewhere"
    for name in (namespace, other):
        kubectl("create", "namespace", name)

    # Install watching one namespace: Roles there, a small ClusterRole for nodes/CRDs/namespaces.
    started = time.monotonic()
    helm(
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        RELEASE_NAMESPACE,
        "--create-namespace",
        "--set",
        f"watchNamespaces={{{namespace}}}",
        "--wait",
        "--timeout",
        "120s",
    )
    install_seconds = time.monotonic() - started
    kubectl("get", "crd", CRD_NAME)
    kubectl("get", "role,rolebinding", FULLNAME, namespace=namespace)
    assert _can_i(kubectl, "patch", "deployments", "-n", namespace)
    assert not _can_i(kubectl, "list", "deployments", "-n", other)
    secret = _json(kubectl, "get", "secret", f"{FULLNAME}-webhook-tls", namespace=RELEASE_NAMESPACE)
    vwc = _json(kubectl, "get", "validatingwebhookconfiguration", CLUSTER_NAME)
    assert vwc["webhooks"][0]["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    assert vwc["webhooks"][0]["failurePolicy"] == "Ignore"

    # The operator as the ServiceAccount reconciles the seed example to Ready.
    sa_kubeconfig = _token_kubeconfig(kubectl, tmp_path)
    args = _container_args(kubectl)
    assert args == [*ACCEPTANCE_FLAGS, f"--namespace={namespace}"]
    wait_for = WaitFor(kubectl, namespace)
    with _operator_as_service_account(sa_kubeconfig, args, tmp_path / "namespaced.log"):
        kubectl("apply", "-f", "-", input=_seed("seed"), namespace=namespace)
        wait_for(lambda: _ready(kubectl, namespace, "seed"), 90, "the seed to be Ready (namespaced RBAC)")
    writes = _writes_by(audit_log, SERVICE_ACCOUNT, namespace)
    assert {("patch", "deployments", ""), ("patch", "services", "")} <= writes
    assert ("patch", "speculativedeployments", "status") in writes

    # ... and is denied what it must not have.
    sa = Kubectl(kubectl_binary, sa_kubeconfig)
    for target in (RELEASE_NAMESPACE, namespace, "kube-system"):
        denied = sa.run("get", "secrets", namespace=target)
        assert denied.returncode != 0 and "Forbidden" in denied.stderr, target
    denied = sa.run("delete", "deployment", "seed", namespace=namespace)
    assert "Forbidden" in denied.stderr
    assert not _can_i(kubectl, "create", "validatingwebhookconfigurations")
    assert not _can_i(kubectl, "update", "speculativedeployments", "-n", namespace)

    # Upgrade to every namespace, with a catalog extension: cluster-wide rules, Roles gone,
    # the webhook CA kept (looked up from the existing Secret).
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"watchNamespaces": [], "catalog": CATALOG_EXTENSION}))
    helm("upgrade", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE, "-f", str(values), "--wait")
    assert kubectl.run("get", "role", FULLNAME, namespace=namespace).returncode != 0
    assert _can_i(kubectl, "list", "deployments", "-n", other)
    assert not _can_i(kubectl, "get", "secrets", "-n", other)
    after = _json(kubectl, "get", "secret", f"{FULLNAME}-webhook-tls", namespace=RELEASE_NAMESPACE)
    assert after["data"] == secret["data"]
    catalog = _json(kubectl, "get", "configmap", f"{FULLNAME}-catalog", namespace=RELEASE_NAMESPACE)
    assert yaml.safe_load(catalog["data"]["catalog.yaml"]) == CATALOG_EXTENSION
    deployment = _json(kubectl, "get", "deployment", FULLNAME, namespace=RELEASE_NAMESPACE)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "SPECDEPLOY_CATALOG", "value": "/etc/specdeploy/catalog/catalog.yaml"} in container["env"]

    args = _container_args(kubectl)
    assert args == ACCEPTANCE_FLAGS
    with _operator_as_service_account(sa_kubeconfig, args, tmp_path / "clusterwide.log"):
        kubectl("apply", "-f", "-", input=_seed("seed-b"), namespace=other)
        WaitFor(kubectl, other)(
            lambda: _ready(kubectl, other, "seed-b"), 90, "a seed in another namespace (cluster-wide RBAC)"
        )
    assert ("patch", "deployments", "") in _writes_by(audit_log, SERVICE_ACCOUNT, other)

    # Uninstall removes everything the chart templated; the CRD (crds/) and its objects stay.
    helm("uninstall", RELEASE, "--namespace", RELEASE_NAMESPACE, "--wait")
    leftovers = kubectl(
        "get",
        "deployment,serviceaccount,service,secret,configmap",
        "-l",
        f"app.kubernetes.io/instance={RELEASE}",
        "-o",
        "name",
        namespace=RELEASE_NAMESPACE,
    )
    assert leftovers.strip() == ""
    for kind in ("clusterrole", "clusterrolebinding", "validatingwebhookconfiguration"):
        assert kubectl.run("get", kind, CLUSTER_NAME).returncode != 0, kind
    kubectl("get", "crd", CRD_NAME)
    kubectl("get", "sdep", "seed", namespace=namespace)
    print(f"\nhelm install --wait took {install_seconds:.1f}s")


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def test_install_yaml_applies_on_a_fresh_sandbox(fresh_cluster: Cluster, kubectl_binary: str) -> None:
    kubectl = Kubectl(kubectl_binary, fresh_cluster.kubeconfig)
    docs = _documents(INSTALL_YAML)
    kubectl("apply", "--server-side", "-f", str(INSTALL_YAML), timeout=120)
    wait_crd_established(kubectl, CRD_NAME)
    # Every object of the file exists (kubectl get fails on the first missing one).
    listed = kubectl("get", "-f", str(INSTALL_YAML), "-o", "name").split()
    assert len(listed) == len(docs)
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    kubectl(
        "rollout",
        "status",
        f"deployment/{deployment['metadata']['name']}",
        "--timeout=90s",
        namespace=deployment["metadata"]["namespace"],
        timeout=100,
    )


def test_every_example_passes_server_side_dry_run(kubectl: Kubectl, crd: None, namespace: str) -> None:
    assert EXAMPLES
    for example in EXAMPLES:
        out = kubectl("apply", "--dry-run=server", "-f", str(example), namespace=namespace)
        assert "(server dry run)" in out, example.name
