"""Issue: install paths. The Helm chart and manifests/install.yaml against real apiservers.

The chart's own lifecycle runs on a sandbox of its own, started for the test: the session's
operator (admin identity, all namespaces) is not there, so every write to the test namespace
comes from the operator authenticated as the chart's ServiceAccount, which the apiserver's audit
log confirms. The operator runs locally with the container's arguments (kopf's probe on
loopback, no webhook server); the chart's webhook Service has no reachable endpoint here, and
its failurePolicy Ignore lets writes through, which is also what a stopped operator looks like.

Another sandbox takes a release of the former chart layout (the CRD in crds/, which Helm never
upgrades) through the documented takeover to a chart that templates the CRD, and upgrades the CRD.
A third holds the CRDs of the chart's optional objects (cert-manager's and the Prometheus
Operator's, from their Go modules through the Go module proxy) and validates every manifest the
install paths produce with server-side dry run (strict field validation): the chart with several
value sets, install.yaml, the kustomize output of manifests/ and the GitOps examples' renders.
"""

from __future__ import annotations

import json
import os
import re
import shutil
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

from specdeploy_sandbox.processes import stop_child
from support.kube import Cluster, Kubectl, WaitFor, wait_crd_established
from support.paths import CRD_NAME, EXAMPLES, REPO, SEED_EXAMPLE
from support.sandboxes import PLAIN, running_cluster

CHART = REPO / "charts" / "specdeploy"
INSTALL_YAML = REPO / "manifests" / "install.yaml"
RELEASE = "sd"
RELEASE_NAMESPACE = "specdeploy-chart"
FULLNAME = "sd-specdeploy"
CLUSTER_NAME = f"{FULLNAME}-{RELEASE_NAMESPACE}"
SERVICE_ACCOUNT = f"system:serviceaccount:{RELEASE_NAMESPACE}:{FULLNAME}"
# Flags of the container that only make sense inside the pod (bind addresses, ports, certs).
POD_ONLY_FLAGS = ("--probe-", "--metrics-port", "--webhook-")
CATALOG_EXTENSION = {"engines": {"vllm": {"eagle3": {"MistralForCausalLM": "unconfirmed"}}}}
# No image is published: every render names this placeholder (the sandbox pulls nothing).
IMAGE = ("--set", "image.repository=specdeploy")
CRD_FILE = CHART / "files" / "specdeploy.io_speculativedeployments.yaml"
INSTALL_DOC = REPO / "docs" / "install.md"
KUSTOMIZATION = REPO / "manifests" / "kustomization.yaml"
ARGOCD_APP = REPO / "manifests" / "gitops" / "argocd" / "application.yaml"
ARGOCD_CM = REPO / "manifests" / "gitops" / "argocd" / "argocd-cm.yaml"
FLUX_RELEASE = REPO / "manifests" / "gitops" / "flux" / "helmrelease.yaml"
FLUX_KUSTOMIZATION = REPO / "manifests" / "gitops" / "flux" / "install-yaml-kustomization.yaml"
WEBHOOK_KINDS = ("Secret", "ValidatingWebhookConfiguration", "Certificate", "Issuer")
# CRDs of the chart's optional objects, from the projects' Go modules (the Prometheus Operator at
# the version tests/integration/test_monitoring.py uses).
CERT_MANAGER = "github.com/cert-manager/cert-manager@v1.19.1"
CERT_MANAGER_CRDS = ("certificates", "issuers", "clusterissuers")
PROMETHEUS_OPERATOR = "github.com/prometheus-operator/prometheus-operator@v0.85.0"
MONITORING = ("podmonitors", "servicemonitors", "prometheusrules")


class Helm:
    """Runs the pinned helm against one cluster."""

    def __init__(self, binary: str, kubeconfig: Path) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig

    def run(self, *args: str, timeout: float = 180.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.binary, f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def __call__(self, *args: str, timeout: float = 180.0) -> str:
        proc = self.run(*args, timeout=timeout)
        if proc.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc.stdout


@pytest.fixture
def fresh_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A sandbox of this test's own: nothing installed but the control plane and its nodes. Its own
    because an install owns cluster-wide objects (the CRD, the webhook configuration, cluster
    roles) that the session's operator also uses, and the test checks an uninstall leaves the
    cluster as it found it."""
    name = f"install-{os.getpid()}-{int(time.monotonic() * 1000) % 100000}"
    with running_cluster(PLAIN, tmp_path_factory.mktemp("install-sandbox"), name) as running:
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


def _seed(name: str, replicas: int = 1) -> str:
    body = yaml.safe_load(SEED_EXAMPLE.read_text())
    body["metadata"]["name"] = name
    body["spec"]["replicas"] = replicas
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
    installed = helm(
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        RELEASE_NAMESPACE,
        "--create-namespace",
        *IMAGE,
        "--set",
        f"watchNamespaces={{{namespace}}}",
        "--wait",
        "--timeout",
        "120s",
    )
    install_seconds = time.monotonic() - started
    # The install notes end with README's quickstart from the token Secret on.
    assert (CHART / "files" / "quickstart.sh").read_text() in installed
    kubectl("get", "crd", CRD_NAME)
    kubectl("get", "role,rolebinding", FULLNAME, namespace=namespace)
    assert _can_i(kubectl, "patch", "deployments", "-n", namespace)
    assert _can_i(kubectl, "patch", "poddisruptionbudgets.policy", "-n", namespace)
    assert not _can_i(kubectl, "list", "deployments", "-n", other)
    secret = _json(kubectl, "get", "secret", f"{FULLNAME}-webhook-tls", namespace=RELEASE_NAMESPACE)
    vwc = _json(kubectl, "get", "validatingwebhookconfiguration", CLUSTER_NAME)
    assert vwc["webhooks"][0]["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    assert vwc["webhooks"][0]["failurePolicy"] == "Ignore"

    # The operator as the ServiceAccount reconciles the seed example, at two replicas (so with a
    # PodDisruptionBudget), to Ready.
    sa_kubeconfig = _token_kubeconfig(kubectl, tmp_path)
    args = _container_args(kubectl)
    assert args == [*ACCEPTANCE_FLAGS, f"--namespace={namespace}"]
    wait_for = WaitFor(kubectl, namespace)
    with _operator_as_service_account(sa_kubeconfig, args, tmp_path / "namespaced.log"):
        kubectl("apply", "-f", "-", input=_seed("seed", replicas=2), namespace=namespace)
        wait_for(lambda: _ready(kubectl, namespace, "seed"), 90, "the seed to be Ready (namespaced RBAC)")
    writes = _writes_by(audit_log, SERVICE_ACCOUNT, namespace)
    assert {
        ("patch", "deployments", ""),
        ("patch", "services", ""),
        ("patch", "poddisruptionbudgets", ""),
    } <= writes
    assert ("patch", "speculativedeployments", "status") in writes

    # ... and is denied what it must not have.
    sa = Kubectl(kubectl_binary, sa_kubeconfig)
    for target in (RELEASE_NAMESPACE, namespace, "kube-system"):
        denied = sa.run("get", "secrets", namespace=target)
        assert denied.returncode != 0 and "Forbidden" in denied.stderr, target
    # Delete is granted only on the engine children a resource moves between (multi-node).
    denied = sa.run("delete", "service", "seed", namespace=namespace)
    assert "Forbidden" in denied.stderr
    assert not _can_i(kubectl, "create", "validatingwebhookconfigurations")
    assert not _can_i(kubectl, "update", "speculativedeployments", "-n", namespace)

    # Upgrade to every namespace, with a catalog extension: cluster-wide rules, Roles gone,
    # the webhook CA kept (looked up from the existing Secret).
    values = tmp_path / "values.yaml"
    upgraded = {"image": {"repository": "specdeploy"}, "watchNamespaces": [], "catalog": CATALOG_EXTENSION}
    values.write_text(yaml.safe_dump(upgraded))
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

    # Uninstall removes everything the chart templated but the CRD (resource-policy keep): the
    # CRD and its objects stay.
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
    assert sorted(EXAMPLES.glob("*.yaml"))
    for example in sorted(EXAMPLES.glob("*.yaml")):
        out = kubectl("apply", "--dry-run=server", "-f", str(example), namespace=namespace)
        assert "(server dry run)" in out, example.name


def _chart_copy(directory: Path) -> Path:
    chart = directory / "specdeploy"
    shutil.copytree(CHART, chart)
    return chart


def _documented_takeover() -> str:
    """The kubectl lines of the first sh block of docs/install.md's section on the crds/ upgrade."""
    section = INSTALL_DOC.read_text().split("### Upgrading from a chart with `crds/`", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    lines = block.replace("\\\n", " ").splitlines()
    commands = [line for line in lines if line.startswith("kubectl ")]
    assert len(commands) == 2, block
    return "\n".join(commands)


def test_helm_upgrade_takes_over_and_upgrades_the_crd_and_uninstall_keeps_it(
    fresh_cluster: Cluster, kubectl_binary: str, helm_binary: str, tmp_path: Path
) -> None:
    kubectl = Kubectl(kubectl_binary, fresh_cluster.kubeconfig)
    helm = Helm(helm_binary, fresh_cluster.kubeconfig)
    namespace = "models"
    at = ("--namespace", RELEASE_NAMESPACE)

    # A release of the former layout: the CRD in crds/, installed once and not part of the release.
    former = _chart_copy(tmp_path / "former")
    (former / "crds").mkdir()
    (former / "files" / CRD_FILE.name).rename(former / "crds" / CRD_FILE.name)
    (former / "templates" / "crd.yaml").unlink()
    helm("install", RELEASE, str(former), *at, "--create-namespace", *IMAGE, "--set", "webhook.enabled=false")
    crd = _json(kubectl, "get", "crd", CRD_NAME)
    assert "app.kubernetes.io/managed-by" not in (crd["metadata"].get("labels") or {})
    kubectl("create", "namespace", namespace)
    kubectl("apply", "-f", "-", input=_seed("seed"), namespace=namespace)

    # Helm refuses to adopt a CRD it did not create ...
    refused = helm.run("upgrade", RELEASE, str(CHART), *at, "--reset-then-reuse-values")
    assert refused.returncode != 0 and "invalid ownership metadata" in refused.stderr, refused.stderr
    # ... until the one-time commands the upgrade notes give mark it as the release's.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "kubectl").symlink_to(kubectl_binary)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "KUBECONFIG": str(fresh_cluster.kubeconfig),
        "RELEASE": RELEASE,
        "NAMESPACE": RELEASE_NAMESPACE,
    }
    script = _documented_takeover()
    proc = subprocess.run(["bash", "-euc", script], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"{script}\n{proc.stderr}"
    helm("upgrade", RELEASE, str(CHART), *at, "--reset-then-reuse-values")
    crd = _json(kubectl, "get", "crd", CRD_NAME)
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert crd["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
    assert f"name: {CRD_NAME}" in helm("get", "manifest", RELEASE, *at)

    # A chart whose CRD differs (one more printer column): `helm upgrade` changes the CRD.
    column = {"name": "Upgraded", "type": "string", "jsonPath": ".spec.engine.name", "priority": 1}
    changed = _chart_copy(tmp_path / "changed")
    body = yaml.safe_load((changed / "files" / CRD_FILE.name).read_text())
    for version in body["spec"]["versions"]:
        version.setdefault("additionalPrinterColumns", []).append(column)
    (changed / "files" / CRD_FILE.name).write_text(yaml.safe_dump(body, sort_keys=False))
    helm("upgrade", RELEASE, str(changed), *at, "--reset-then-reuse-values")
    crd = _json(kubectl, "get", "crd", CRD_NAME)
    assert all(column in version["additionalPrinterColumns"] for version in crd["spec"]["versions"])
    wait_crd_established(kubectl, CRD_NAME)
    header = kubectl("get", "sdep", "seed", "-o", "wide", namespace=namespace).splitlines()[0]
    assert "UPGRADED" in header.split()

    # Uninstall keeps the CRD (and so every resource); reinstalling the release adopts it again.
    out = helm("uninstall", RELEASE, *at, "--wait")
    assert "kept due to the resource policy" in out, out
    assert column in _json(kubectl, "get", "crd", CRD_NAME)["spec"]["versions"][0]["additionalPrinterColumns"]
    kubectl("get", "sdep", "seed", namespace=namespace)
    helm("install", RELEASE, str(CHART), *at, *IMAGE, "--set", "webhook.enabled=false")
    crd = _json(kubectl, "get", "crd", CRD_NAME)
    assert column not in (crd["spec"]["versions"][0].get("additionalPrinterColumns") or [])
    kubectl("get", "sdep", "seed", namespace=namespace)


# --- every rendered manifest, validated by a real apiserver -------------------------------------


def _go_module(module: str, workdir: Path) -> Path:
    """The module's source directory, downloaded once through the Go module proxy into the cache."""
    go = shutil.which("go")
    if go is None:
        pytest.fail(f"the Go toolchain is needed to fetch {module}")
    proc = subprocess.run(
        [go, "mod", "download", "-json", module],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return Path(json.loads(proc.stdout)["Dir"])


# Namespaces the manifests below put objects in (a dry run does not create a Namespace object).
VALIDATION_NAMESPACES = ("specdeploy-system", "team-a", "team-b", "ops", "argocd")


@pytest.fixture(scope="module")
def validating_kubectl(tmp_path_factory: pytest.TempPathFactory, kubectl_binary: str) -> Iterator[Kubectl]:
    """A sandbox of its own with cert-manager's and the Prometheus Operator's CRDs installed: its
    own because those CRDs and the install's namespaces are cluster-wide, and server-side dry runs
    of our CRD under another field manager would conflict with the session's installed copy."""
    name = f"validate-{os.getpid()}-{int(time.monotonic() * 1000) % 100000}"
    with running_cluster(PLAIN, tmp_path_factory.mktemp("validate-sandbox"), name) as running:
        kubectl = Kubectl(kubectl_binary, running.kubeconfig)
        workdir = tmp_path_factory.mktemp("gomod")
        cert_manager = _go_module(CERT_MANAGER, workdir) / "deploy" / "crds"
        prometheus = _go_module(PROMETHEUS_OPERATOR, workdir) / "example" / "prometheus-operator-crd"
        sources = [(cert_manager, "cert-manager.io", CERT_MANAGER_CRDS)]
        sources.append((prometheus, "monitoring.coreos.com", MONITORING))
        for directory, group, plurals in sources:
            for plural in plurals:
                kubectl("apply", "--server-side", "-f", str(directory / f"{group}_{plural}.yaml"))
                wait_crd_established(kubectl, f"{plural}.{group}")
        for namespace in VALIDATION_NAMESPACES:
            kubectl("create", "namespace", namespace)
        yield kubectl


def _dry_run(kubectl: Kubectl, what: str, manifest: str | None = None, *source: str) -> None:
    """Server-side apply, dry run, strict field validation: every object accepted, none skipped."""
    args = source or ("-f", "-")
    proc = kubectl.run(
        "apply", "--server-side", "--dry-run=server", "--validate=strict", "--field-manager=install-check",
        *args, input=manifest, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, f"{what} refused:\n{proc.stderr}"
    accepted = [line for line in proc.stdout.splitlines() if line.endswith("(server dry run)")]
    assert accepted and len(accepted) == len(proc.stdout.splitlines()), f"{what}:\n{proc.stdout}"
    if manifest is not None:
        objects = [doc for doc in yaml.safe_load_all(manifest) if doc]
        assert len(accepted) == len(objects), f"{what}: {len(objects)} objects, accepted:\n{proc.stdout}"


def _template(helm_binary: str, release: str, namespace: str, *args: str) -> str:
    argv = [helm_binary, "template", release, str(CHART), "--namespace", namespace, *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


PRODUCTION_VALUES: dict[str, Any] = {
    "replicaCount": 2,
    "imagePullSecrets": [{"name": "regcred"}, "legacy-name"],
    "topologySpreadConstraints": [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "specdeploy"}},
        }
    ],
    "extraVolumes": [{"name": "client-ca", "configMap": {"name": "client-ca"}}],
    "extraVolumeMounts": [{"name": "client-ca", "mountPath": "/etc/client-ca", "readOnly": True}],
    "podSecurityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000},
    "securityContext": {"runAsUser": 1000},
    "priorityClassName": "system-cluster-critical",
    "serviceAccount": {"annotations": {"example.com/role": "specdeploy"}},
    "rbac": {"readTokenSecrets": True},
    "operator": {
        "verbose": True,
        "extraArgs": ["--webhook-client-ca=/etc/client-ca/ca.crt"],
        "extraEnv": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hub", "key": "token"}}}],
    },
    "engineImages": {"vllm": "mirror.example.com/vllm/vllm-openai:v0.33.0"},
    "hub": {"endpoint": "https://hf-mirror.example.internal"},
    "catalog": CATALOG_EXTENSION,
    "podAnnotations": {"example.com/team": "ml"},
    "podLabels": {"example.com/tier": "platform"},
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "platform", "effect": "NoSchedule"}],
    "resources": {"requests": {"cpu": "200m", "memory": "300Mi"}, "limits": {"memory": "1Gi"}},
    "metrics": {"service": {"annotations": {"prometheus.io/scrape": "true"}}},
}


def _set(*assignments: str) -> list[str]:
    return [arg for assignment in assignments for arg in ("--set", assignment)]


CHART_VALUE_SETS: dict[str, list[str]] = {
    "defaults": [],
    "namespaces": _set("watchNamespaces={team-a,team-b}"),
    "cert-manager": _set("webhook.certManager.enabled=true"),
    "cert-manager-issuer": _set(
        "webhook.certManager.enabled=true",
        "webhook.certManager.issuerRef.kind=ClusterIssuer",
        "webhook.certManager.issuerRef.name=company-ca",
    ),
    "minimal": _set("webhook.enabled=false", "metrics.enabled=false", "crds.install=false"),
    "high-availability": _set("replicaCount=3", "leaderElection.leaseSeconds=30"),
    "former-replicas-key": _set("replicas=2", "webhook.failurePolicy=Fail"),
    "monitoring": _set(
        "engineMetrics.podMonitor.enabled=true",
        "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.labels.release=prometheus",
        "metrics.prometheusRule.enabled=true",
    ),
    "production": [
        arg
        for key, value in PRODUCTION_VALUES.items()
        for arg in ("--set-json", f"{key}={json.dumps(value)}")
    ],
}


@pytest.mark.parametrize("values", list(CHART_VALUE_SETS.values()), ids=list(CHART_VALUE_SETS))
def test_the_chart_passes_server_side_dry_run(
    validating_kubectl: Kubectl, helm_binary: str, values: list[str]
) -> None:
    manifest = _template(helm_binary, "specdeploy", "specdeploy-system", *IMAGE, *values)
    _dry_run(validating_kubectl, f"helm template {' '.join(values)}", manifest)


def _kustomize_build(kustomize_binary: str, directory: Path) -> str:
    argv = [kustomize_binary, "build", str(directory)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _manifests_copy(directory: Path) -> Path:
    """install.yaml and its kustomization.yaml, as a checkout of manifests/ has them."""
    directory.mkdir()
    for source in (INSTALL_YAML, KUSTOMIZATION):
        (directory / source.name).write_bytes(source.read_bytes())
    return directory


def test_install_yaml_and_the_kustomization_pass_server_side_dry_run(
    validating_kubectl: Kubectl, kustomize_binary: str, tmp_path: Path
) -> None:
    _dry_run(validating_kubectl, "install.yaml", INSTALL_YAML.read_text())

    def build(directory: Path) -> str:
        return _kustomize_build(kustomize_binary, directory)

    _dry_run(validating_kubectl, "kustomize build manifests/", build(REPO / "manifests"))
    base = _manifests_copy(tmp_path / "manifests")
    for edit in (["image", "specdeploy=registry.example.com/ml/specdeploy:1.2.3"], ["namespace", "ops"]):
        argv = [kustomize_binary, "edit", "set", *edit]
        proc = subprocess.run(argv, cwd=base, capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 0, proc.stderr
    edited = build(base)
    assert "image: registry.example.com/ml/specdeploy:1.2.3" in edited
    _dry_run(validating_kubectl, "kustomize build (image and namespace set)", edited)
    # kubectl's own kustomize (`kubectl apply -k`) reads the same kustomization.
    _dry_run(validating_kubectl, "kubectl apply -k (image and namespace set)", None, "-k", str(base))


def test_the_gitops_examples_renders_pass_server_side_dry_run(
    validating_kubectl: Kubectl, helm_binary: str, kustomize_binary: str, tmp_path: Path
) -> None:
    app = yaml.safe_load(ARGOCD_APP.read_text())
    argocd_values = tmp_path / "argocd-values.yaml"
    argocd_values.write_text(yaml.safe_dump(app["spec"]["source"]["helm"]["valuesObject"]))
    argocd = _template(
        helm_binary, app["spec"]["source"]["helm"]["releaseName"], app["spec"]["destination"]["namespace"],
        "-f", str(argocd_values),
    )  # fmt: skip
    _dry_run(validating_kubectl, "the Argo CD Application's chart render", argocd)
    _dry_run(validating_kubectl, "argocd-cm.yaml", ARGOCD_CM.read_text())

    flux = [d for d in yaml.safe_load_all(FLUX_RELEASE.read_text()) if d]
    release = next(d["spec"] for d in flux if d["kind"] == "HelmRelease")
    flux_values = tmp_path / "flux-values.yaml"
    flux_values.write_text(yaml.safe_dump(release["values"]))
    rendered = _template(
        helm_binary, release["releaseName"], release["targetNamespace"], "-f", str(flux_values)
    )
    _dry_run(validating_kubectl, "the Flux HelmRelease's chart render", rendered)

    # The Flux Kustomization's images, merged into manifests/kustomization.yaml as kustomize-controller
    # does, retarget the placeholder image.
    flux_sync = [d for d in yaml.safe_load_all(FLUX_KUSTOMIZATION.read_text()) if d]
    kustomization = next(d for d in flux_sync if d["kind"] == "Kustomization")
    overlay = _manifests_copy(tmp_path / "flux-manifests")
    body = yaml.safe_load((overlay / KUSTOMIZATION.name).read_text())
    body["images"] = kustomization["spec"]["images"]
    (overlay / KUSTOMIZATION.name).write_text(yaml.safe_dump(body))
    applied = _kustomize_build(kustomize_binary, overlay)
    deployment = next(d for d in yaml.safe_load_all(applied) if d and d["kind"] == "Deployment")
    (image,) = kustomization["spec"]["images"]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"].startswith(f"{image['newName']}:")
    _dry_run(validating_kubectl, "the Flux Kustomization's manifests/ with its images", applied)


def _webhook_documents(rendered: str) -> list[str]:
    """The webhook objects of a `helm template` output, as the text of each document."""
    documents = [doc.strip() for doc in re.split(r"^---$", rendered, flags=re.MULTILINE)]
    return [doc for doc in documents if doc and (yaml.safe_load(doc) or {}).get("kind") in WEBHOOK_KINDS]


def test_the_argocd_example_syncs_the_same_webhook_objects_every_time(
    validating_kubectl: Kubectl, helm_binary: str, tmp_path: Path
) -> None:
    """Argo CD renders with `helm template` (no lookup) on every sync: the example uses cert-manager,
    so two renders give the same webhook objects, and applying the second changes nothing."""
    kubectl = validating_kubectl
    app = yaml.safe_load(ARGOCD_APP.read_text())
    helm_source, namespace = app["spec"]["source"]["helm"], app["spec"]["destination"]["namespace"]
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(helm_source["valuesObject"]))

    def render(*args: str) -> list[str]:
        return _webhook_documents(
            _template(helm_binary, helm_source["releaseName"], namespace, "-f", str(values), *args)
        )

    first, second = render(), render()
    assert first == second
    kinds = sorted(yaml.safe_load(doc)["kind"] for doc in first)
    assert kinds == ["Certificate", "Issuer", "ValidatingWebhookConfiguration"]

    # Server-side apply, as the example's ServerSideApply=true sync does: the second is a no-op.
    def apply(documents: list[str]) -> dict[str, str]:
        out = kubectl(
            "apply", "--server-side", "--field-manager=argocd-controller", "-o", "json", "-f", "-",
            input="\n---\n".join(documents),
        )  # fmt: skip
        applied = json.loads(out)
        items = applied["items"] if applied.get("kind") == "List" else [applied]
        return {f"{i['kind']}/{i['metadata']['name']}": i["metadata"]["resourceVersion"] for i in items}

    def delete(documents: list[str]) -> None:
        for doc in documents:
            body = yaml.safe_load(doc)
            kind, name = body["kind"].lower(), body["metadata"]["name"]
            kubectl.run("delete", kind, name, "--wait=false", namespace=body["metadata"].get("namespace"))

    try:
        synced = apply(first)
        assert apply(second) == synced
    finally:
        delete(first)

    # What the example avoids: with Helm-made certificates every render has a new CA and key, and
    # every sync rewrites the Secret and the caBundle: the webhook certificate rotates on every sync.
    helm_made = [render("--set", "webhook.certManager.enabled=false") for _ in range(2)]
    assert helm_made[0] != helm_made[1]
    try:
        synced = apply(helm_made[0])
        rotated = apply(helm_made[1])
        assert sorted(synced) == [
            "Secret/specdeploy-webhook-tls",
            "ValidatingWebhookConfiguration/specdeploy-specdeploy-system",
        ]
        assert all(rotated[key] != synced[key] for key in synced), (synced, rotated)
    finally:
        delete(helm_made[0])
