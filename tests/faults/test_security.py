"""Security, shown on the real control plane: the operator as the chart's ServiceAccount with
exactly the documented RBAC, a hub token that appears nowhere it should not, the webhook's
mutual TLS, and the Pod Security Standards of the operator's and the engines' pods.

In the fault suite's sandbox because it runs operators of its own (one as the ServiceAccount).
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from faultlib import Apis, OperatorUnderFault, resource, review, wait_fleet
from specdeploy_sandbox.cluster import Sandbox
from support.kube import Kubectl
from support.paths import REPO

CHART = REPO / "charts" / "specdeploy"
INSTALL_DOC = REPO / "docs" / "install.md"
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
# What every authenticated identity may do (the system:basic-user and discovery roles).
EVERYONE = re.compile(r"^self\w+reviews\.(authorization|authentication)\.k8s\.io$")


def _helm(helm: str, namespace: str, *values: str) -> list[dict[str, Any]]:
    argv = [helm, "template", "specdeploy", str(CHART), "--namespace", namespace]
    argv += ["--set", "image.repository=specdeploy", *values]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


@pytest.fixture
def installed_rbac(fk: Kubectl, fault_ns: str, helm_binary: str) -> Iterator[list[dict[str, Any]]]:
    """The chart's ServiceAccount and RBAC (token Secrets and leader election on) in ``fault_ns``."""
    docs = _helm(helm_binary, fault_ns, "--set", "rbac.readTokenSecrets=true", "--set", "replicas=2")
    rbac = [doc for doc in docs if doc["kind"] in RBAC_KINDS]
    fk("apply", "-f", "-", input="\n---\n".join(yaml.safe_dump(doc) for doc in rbac))
    try:
        yield docs
    finally:
        for doc in rbac:
            if doc["kind"].startswith("Cluster"):
                fk.run("delete", doc["kind"].lower(), doc["metadata"]["name"], "--wait=false")


def _documented() -> set[tuple[str, str]]:
    """(resource, verb) of every row of docs/install.md's RBAC table but the watchNamespaces one."""
    section = INSTALL_DOC.read_text().split("## RBAC", 1)[1].split("\n## ", 1)[0]
    found = set()
    for row in re.findall(r"^\| `([^`]+)`([^|]*)\| ([^|]+) \|", section, re.MULTILINE):
        name, qualifier, verbs = row
        if "watchNamespaces" in qualifier:
            continue
        for verb in verbs.split(","):
            found.add((name, verb.strip()))
    return found


def _granted(fk: Kubectl, subject: str, namespace: str) -> set[tuple[str, str]]:
    """What ``kubectl auth can-i --list`` says ``subject`` may do in ``namespace``."""
    out = fk("auth", "can-i", "--list", f"--as={subject}", namespace=namespace)
    found = set()
    for line in out.splitlines()[1:]:
        columns = re.split(r"\s{2,}", line.strip())
        name, verbs = columns[0], columns[-1]
        if not name or name.startswith("[") or EVERYONE.match(name):
            continue
        for verb in verbs.strip("[]").split():
            found.add((name, verb))
    return found


# The table names core resources bare and groups as resource.group, as can-i prints them; the
# subresource row reads as can-i's resource/subresource.group.
CAN_I_NAMES = {
    "speculativedeployments/status": "speculativedeployments.specdeploy.io/status",
    "customresourcedefinitions": "customresourcedefinitions.apiextensions.k8s.io",
}


def test_the_service_account_may_do_exactly_what_the_docs_list_and_that_is_enough(
    fk: Kubectl,
    fault_ns: str,
    fault_sandbox: Sandbox,
    installed_rbac: list[dict[str, Any]],
    apis: Apis,
    tmp_path: Path,
) -> None:
    subject = f"system:serviceaccount:{fault_ns}:specdeploy"
    granted = _granted(fk, subject, fault_ns)
    documented = {(CAN_I_NAMES.get(name, name), verb) for name, verb in _documented()}
    assert granted == documented, (sorted(granted - documented), sorted(documented - granted))

    # The operator as that ServiceAccount (a token of its own, nothing else): a resource with a
    # hub token Secret converges, and the token shows up nowhere.
    token = fk("create", "token", "specdeploy", "--duration=1h", namespace=fault_ns).strip()
    admin = yaml.safe_load(fault_sandbox.kubeconfig.read_text())
    cluster = admin["clusters"][0]
    kubeconfig = tmp_path / "specdeploy-sa.kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": "specdeploy", "user": {"token": token}}],
                "contexts": [{"name": "sa", "context": {"cluster": cluster["name"], "user": "specdeploy"}}],
                "current-context": "sa",
            }
        )
    )
    hub_token = f"hf_{secrets.token_hex(16)}"
    fk(
        "create", "secret", "generic", "hub-token", f"--from-literal=token={hub_token}", namespace=fault_ns
    )  # fmt: skip
    operator = OperatorUnderFault(
        kubeconfig,
        tmp_path / "as-service-account",
        extra_args=("--read-token-secrets", "--leader-elect", "--leader-election-namespace", fault_ns,
                    "--leader-election-id", "specdeploy"),
        webhook=False,
    )  # fmt: skip
    operator.start()
    try:
        body = resource(fault_ns, "with-token")
        body["spec"]["modelAccess"] = {"tokenSecretRef": {"name": "hub-token", "key": "token"}}
        apis.create(fault_ns, body)
        check, _ = wait_fleet(apis, fault_ns, timeout=90)
        assert check.problems == [], check.problems
        metrics_text = urllib.request.urlopen(operator.running.metrics_url, timeout=10).read().decode()  # type: ignore[union-attr]
    finally:
        operator.stop()
    log = "\n".join(operator.log_lines())
    assert "Forbidden" not in log and " 403" not in log, log[-3000:]

    deployment = apis.apps.read_namespaced_deployment("with-token", fault_ns)
    env = {e.name: e for e in deployment.spec.template.spec.containers[0].env}
    assert env["HF_TOKEN"].value is None
    assert env["HF_TOKEN"].value_from.secret_key_ref.name == "hub-token"
    everything = fk("get", "speculativedeployments,deployments,replicasets,pods,services,events,configmaps",
                    "-o", "json", namespace=fault_ns)  # fmt: skip
    encoded = base64.b64encode(hub_token.encode()).decode()
    for where, text in (("objects", everything), ("operator log", log), ("metrics", metrics_text)):
        assert hub_token not in text and encoded not in text, f"the hub token is in the {where}"


def _webhook_context(ca: Path, cert: tuple[Path, Path] | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        context.load_cert_chain(str(cert[0]), str(cert[1]))
    return context


def _post(url: str, context: ssl.SSLContext | None) -> int:
    request = urllib.request.Request(url, data=b"{}", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, context=context, timeout=10) as answer:
        return int(answer.status)


def test_the_webhook_answers_only_the_apiserver(
    fk: Kubectl,
    fault_ns: str,
    fault_sandbox: Sandbox,
    operator_under_fault: OperatorUnderFault,
    tmp_path: Path,
) -> None:
    running = operator_under_fault.running
    assert running is not None and fault_sandbox.webhook_client_ca() is not None
    port = running.ports[2]
    serving_ca = operator_under_fault.tls / "ca.crt"
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        _post(f"http://127.0.0.1:{port}/validate", None)
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        _post(f"https://127.0.0.1:{port}/validate", _webhook_context(serving_ca, None))
    # A client certificate from another CA (the operator's own serving CA signs no clients).
    stranger = (operator_under_fault.tls / "tls.crt", operator_under_fault.tls / "tls.key")
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        _post(f"https://127.0.0.1:{port}/validate", _webhook_context(serving_ca, stranger))
    apiserver = (fault_sandbox.pki.webhook_client_cert, fault_sandbox.pki.webhook_client_key)
    mismatch = resource(fault_ns, "mismatch")
    mismatch["spec"]["speculator"]["model"] = "RedHatAI/Qwen3-8B-speculator.eagle3"
    assert review(operator_under_fault, fault_ns, mismatch["spec"], apiserver)["allowed"] is False

    refused = fk.run("apply", "-f", "-", input=json.dumps(mismatch), namespace=fault_ns)
    assert refused.returncode != 0 and "admission webhook" in refused.stderr, refused.stderr


def _pod_from_template(deployment: dict[str, Any], name: str) -> dict[str, Any]:
    template = deployment["spec"]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **template["metadata"]},
        "spec": template["spec"],
    }


def _dry_run(fk: Kubectl, namespace: str, pod: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """Create ``pod`` with a server-side dry run: what Pod Security admission says of it."""
    return fk.run("create", "--dry-run=server", "-f", "-", input=json.dumps(pod), namespace=namespace)


def test_pod_security_standards_of_the_operator_and_the_engines(
    fk: Kubectl, fault_ns: str, helm_binary: str, apis: Apis, operator_under_fault: OperatorUnderFault
) -> None:
    """The operator pod and the engine pods are admitted under restricted: the namespace
    enforces it while the operator creates the engine Deployment, its ReplicaSet creates the pods
    (a refused pod would leave the ReplicaSet short, with a FailedCreate event), and a server-side
    dry run of the pod gives no warning either. Opting out (runAsNonRoot: false) is baseline."""
    fk("label", "namespace", fault_ns, "pod-security.kubernetes.io/enforce=restricted")
    chart = _helm(helm_binary, fault_ns)
    service_account = next(d for d in chart if d["kind"] == "ServiceAccount")
    fk("apply", "-f", "-", input=json.dumps(service_account), namespace=fault_ns)
    operator_pod = _pod_from_template(next(d for d in chart if d["kind"] == "Deployment"), "operator")
    admitted = _dry_run(fk, fault_ns, operator_pod)
    assert admitted.returncode == 0 and "Warning" not in admitted.stderr, admitted.stderr

    apis.create(fault_ns, resource(fault_ns, "engine"))
    check, _ = wait_fleet(apis, fault_ns, timeout=60)
    assert check.problems == [], check.problems
    pods = apis.core.list_namespaced_pod(fault_ns, label_selector="app.kubernetes.io/instance=engine").items
    assert len(pods) == 1 and pods[0].spec.security_context.run_as_non_root is True
    engine = apis.apps.read_namespaced_deployment("engine", fault_ns)
    engine_pod = _pod_from_template(apis.apps.api_client.sanitize_for_serialization(engine), "engine-pod")
    admitted = _dry_run(fk, fault_ns, engine_pod)
    assert admitted.returncode == 0 and "Warning" not in admitted.stderr, admitted.stderr

    # The opt-out is baseline: admitted there, refused under restricted for runAsNonRoot alone.
    fk("label", "namespace", fault_ns, "pod-security.kubernetes.io/enforce=baseline", "--overwrite")
    as_root = resource(fault_ns, "as-root")
    as_root["spec"]["security"] = {"runAsNonRoot": False}
    as_root["spec"]["modelCache"] = {"mountPath": "/root/.cache/huggingface"}
    apis.create(fault_ns, as_root)
    check, _ = wait_fleet(apis, fault_ns, timeout=60)
    assert check.problems == [], check.problems
    deployment = apis.apps.read_namespaced_deployment("as-root", fault_ns)
    root_pod = _pod_from_template(apis.apps.api_client.sanitize_for_serialization(deployment), "root-pod")
    fk("label", "namespace", fault_ns, "pod-security.kubernetes.io/enforce=restricted", "--overwrite")
    refused = _dry_run(fk, fault_ns, root_pod)
    assert refused.returncode != 0
    violations = refused.stderr.split('violates PodSecurity "restricted:latest": ', 1)[1].strip()
    assert violations.startswith("runAsNonRoot != true") and "," not in violations.split("(", 1)[0], (
        violations
    )
