"""Issue: install paths. The Helm chart renders and lints, and the checked-in copies are current.

manifests/install.yaml is ``helm template`` of the chart with INSTALL_VALUES plus the Namespace: no
admission webhook, so no private key in the file and nothing that changes between renders (the
webhook needs Helm's per-install certificates or cert-manager), and the placeholder image
``specdeploy`` that manifests/kustomization.yaml retargets (``kustomize edit set image``).
Regenerate (and review the diff) with
``UPDATE_GOLDEN=1 pytest tests/packaging/test_install_manifests.py -k install_yaml``. A packaging
test: helm and kustomize are built from source (once, then cached) by the session's
``helm_binary`` and ``kustomize_binary`` fixtures.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

import specdeploy
from specdeploy import api
from specdeploy.children import PodDefaults
from specdeploy.cli import build_parser
from specdeploy.cli.run import operator_options
from specdeploy.planning.pools import parse_declared_pools
from specdeploy_sandbox import binaries
from support.paths import REPO

CHART = REPO / "charts" / "specdeploy"
INSTALL_YAML = REPO / "manifests" / "install.yaml"
INSTALL_NAMESPACE = "specdeploy-system"
# Every render needs an image (none is published): the tests use this placeholder repository.
IMAGE = ("--set", "image.repository=specdeploy")
INSTALL_VALUES = (*IMAGE, "--set", "webhook.enabled=false")
HEADER = f"""\
# specdeploy operator without its admission webhook, for `kubectl apply --server-side -f install.yaml`
# (image `specdeploy`, a placeholder: no image is published) or, with your image set in
# kustomization.yaml (`kustomize edit set image specdeploy=REGISTRY/specdeploy:TAG`),
# `kubectl apply --server-side -k .`. Generated from charts/specdeploy by
# `helm template specdeploy charts/specdeploy --namespace {INSTALL_NAMESPACE}
# --set image.repository=specdeploy --set webhook.enabled=false`; do not edit. No webhook means no
# private key in this file; the operator still checks every pair (the PairingVerified condition).
apiVersion: v1
kind: Namespace
metadata:
  name: {INSTALL_NAMESPACE}
  labels:
    app.kubernetes.io/part-of: specdeploy
"""


def run_helm(helm: str, *args: str) -> str:
    proc = subprocess.run([helm, *args], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, f"helm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def template(helm: str, *args: str) -> list[dict[str, Any]]:
    out = run_helm(
        helm, "template", "specdeploy", str(CHART), "--namespace", INSTALL_NAMESPACE, *IMAGE, *args
    )
    return [doc for doc in yaml.safe_load_all(out) if doc]


def render_install_yaml(helm: str) -> str:
    body = run_helm(
        helm, "template", "specdeploy", str(CHART), "--namespace", INSTALL_NAMESPACE, *INSTALL_VALUES
    )
    return HEADER + body


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name))


def test_install_yaml_is_current(helm_binary: str) -> None:
    rendered = render_install_yaml(helm_binary)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        INSTALL_YAML.write_text(rendered)
    assert INSTALL_YAML.is_file(), "missing manifests/install.yaml; run with UPDATE_GOLDEN=1"
    assert INSTALL_YAML.read_text() == rendered, (
        "manifests/install.yaml is stale: regenerate with "
        "UPDATE_GOLDEN=1 pytest tests/packaging/test_install_manifests.py -k install_yaml"
    )


def test_chart_ships_the_generated_crd_byte_for_byte() -> None:
    """templates/crd.yaml renders files/ as is; a copy (not a symlink) survives `helm package`."""
    generated = REPO / "crds" / "specdeploy.io_speculativedeployments.yaml"
    shipped = CHART / "files" / generated.name
    assert not shipped.is_symlink()
    assert shipped.read_bytes() == generated.read_bytes(), (
        f"copy {generated.relative_to(REPO)} to {shipped.relative_to(REPO)} (make crd regenerates the former)"
    )


def test_chart_app_version_is_the_package_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == specdeploy.__version__


@pytest.mark.parametrize(
    "values",
    [
        [],
        ["--set", "watchNamespaces={a,b}"],
        ["--set", "webhook.certManager.enabled=true"],
        ["--set", "webhook.enabled=false", "--set", "metrics.enabled=false"],
        ["--set", "catalog.engines.vllm.eagle3.MistralForCausalLM=unconfirmed"],
        ["--set", "replicaCount=3"],
        ["--set", "crds.install=false"],
    ],
    ids=["defaults", "namespaces", "cert-manager", "minimal", "catalog", "replicas", "no-crd"],
)
def test_helm_lint_passes(helm_binary: str, values: list[str]) -> None:
    run_helm(helm_binary, "lint", "--strict", str(CHART), *IMAGE, *values)


def test_schema_rejects_unknown_and_invalid_values(helm_binary: str) -> None:
    invalid = (
        "webhook.failurePolicy=Sometimes",
        "replicas=0",
        "replicaCount=0",
        "imagePullSecrets[0].secret=x",
        "leaderElection.leaseSeconds=2",
        "catalog.models.x=1",
    )
    for bad in invalid:
        argv = [helm_binary, "template", "x", str(CHART), *IMAGE, "--set", bad]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert proc.returncode != 0, bad


def test_operator_pod_is_restricted_and_single(helm_binary: str) -> None:
    docs = template(helm_binary)
    deployment = find(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "probe"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "probe"}
    assert set(container["resources"]) == {"requests", "limits"}
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert container["image"] == f"specdeploy:{specdeploy.__version__}"
    assert "--webhook-cert-dir=/tls" in container["args"]


def test_two_replicas_elect_a_leader_and_keep_one_through_disruptions(helm_binary: str) -> None:
    docs = template(helm_binary, "--set", "replicaCount=2")
    deployment = find(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    rolling = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    assert deployment["spec"]["strategy"] == rolling
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert {"--leader-elect", "--leader-election-id=specdeploy", "--leader-election-lease-seconds=15"} <= set(
        container["args"]
    )
    downward = {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert {"name": "POD_NAMESPACE", "valueFrom": downward} in container["env"]
    spread = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert spread["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    role = find(docs, "Role", "specdeploy-leader-election")
    assert role["metadata"]["namespace"] == INSTALL_NAMESPACE
    assert _rules(role) == {
        ("coordination.k8s.io", "leases", "create"),
        ("coordination.k8s.io", "leases", "get"),
        ("coordination.k8s.io", "leases", "update"),
    }
    assert [r.get("resourceNames") for r in role["rules"]] == [None, ["specdeploy"]]
    binding = find(docs, "RoleBinding", "specdeploy-leader-election")
    subject = {"kind": "ServiceAccount", "name": "specdeploy", "namespace": INSTALL_NAMESPACE}
    assert binding["subjects"] == [subject]
    pdb = find(docs, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == pod_labels(deployment)
    single = template(helm_binary)
    assert not [d for d in single if d["kind"] in ("PodDisruptionBudget", "Role")]
    (alone,) = find(single, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert "--leader-elect" not in alone["args"]


def pod_labels(deployment: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = deployment["spec"]["selector"]["matchLabels"]
    return labels


def test_image_settings(helm_binary: str) -> None:
    digest = "sha256:" + "a" * 64
    docs = template(
        helm_binary,
        "--set", "image.registry=registry.example.com",
        "--set", "image.repository=mirror/specdeploy",
        "--set", f"image.digest={digest}",
        "--set", "image.pullPolicy=Always",
        "--set", "imagePullSecrets={regcred}",
    )  # fmt: skip
    pod = find(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == f"registry.example.com/mirror/specdeploy@{digest}"
    assert pod["containers"][0]["imagePullPolicy"] == "Always"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]


def _rules(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


NAMESPACED = {
    ("specdeploy.io", "speculativedeployments", "get"),
    ("specdeploy.io", "speculativedeployments", "list"),
    ("specdeploy.io", "speculativedeployments", "watch"),
    ("specdeploy.io", "speculativedeployments/status", "get"),
    ("specdeploy.io", "speculativedeployments/status", "patch"),
    *{("apps", "deployments", v) for v in ("get", "list", "watch", "create", "patch", "delete")},
    *{
        ("leaderworkerset.x-k8s.io", "leaderworkersets", v)
        for v in ("get", "list", "watch", "create", "patch", "delete")
    },
    *{("", "services", v) for v in ("get", "list", "watch", "create", "patch")},
    *{("policy", "poddisruptionbudgets", v) for v in ("get", "list", "watch", "create", "patch")},
    ("", "pods", "list"),
    ("", "pods", "watch"),
    ("", "pods/log", "get"),
    ("", "configmaps", "get"),
    ("", "events", "create"),
    ("", "events", "patch"),
}
CLUSTER = {
    ("", "nodes", "get"),
    ("", "nodes", "list"),
    ("", "nodes", "watch"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "list"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
    ("karpenter.sh", "nodepools", "list"),
    ("karpenter.sh", "nodepools", "watch"),
}


def test_rbac_is_exactly_what_the_operator_uses(helm_binary: str) -> None:
    clusterwide = template(helm_binary)
    assert _rules(find(clusterwide, "ClusterRole")) == NAMESPACED | CLUSTER
    assert not [d for d in clusterwide if d["kind"] in ("Role", "RoleBinding")]

    namespaced = template(helm_binary, "--set", "watchNamespaces={a,b}")
    namespaces = {("", "namespaces", "list"), ("", "namespaces", "watch")}
    assert _rules(find(namespaced, "ClusterRole")) == CLUSTER | namespaces
    roles = [d for d in namespaced if d["kind"] == "Role"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["a", "b"]
    assert all(_rules(r) == NAMESPACED for r in roles)
    bindings = [d for d in namespaced if d["kind"] == "RoleBinding"]
    # One binding per Role, each granting it to the operator's ServiceAccount in the install namespace.
    granted = sorted(
        (b["metadata"]["namespace"], b["roleRef"]["kind"], b["roleRef"]["name"]) for b in bindings
    )
    assert granted == sorted((r["metadata"]["namespace"], "Role", r["metadata"]["name"]) for r in roles)
    account = find(namespaced, "ServiceAccount")["metadata"]["name"]
    subject = {"kind": "ServiceAccount", "name": account, "namespace": INSTALL_NAMESPACE}
    assert all(b["subjects"] == [subject] for b in bindings)
    for doc in clusterwide + namespaced:
        if doc["kind"] in ("Role", "ClusterRole"):
            assert not [r for r in doc["rules"] if "secrets" in r["resources"] or "*" in r["verbs"]]


def test_reading_token_secrets_is_opt_in(helm_binary: str) -> None:
    docs = template(helm_binary, "--set", "rbac.readTokenSecrets=true", "--set", "watchNamespaces={a}")
    (role,) = [d for d in docs if d["kind"] == "Role"]
    assert _rules(role) == NAMESPACED | {("", "secrets", "get")}
    operator = find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "--read-token-secrets" in operator["args"]
    default = find(template(helm_binary), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "--read-token-secrets" not in default["args"]


def test_engine_pod_defaults_become_the_operators_flags(helm_binary: str, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "enginePodDefaults": {
                    "tolerations": [
                        {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
                    ],
                    "nodeSelector": {"agentpool": "gpu"},
                    "imagePullSecrets": [{"name": "regcred"}, "mirror"],
                    "tokenSecret": {"name": "hf-token"},
                }
            }
        )
    )
    docs = template(helm_binary, "-f", str(values))
    args = find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    # The operator takes the flags the chart writes as the defaults the values say.
    defaults = operator_options(build_parser().parse_args(["run", *args])).pod_defaults
    assert defaults == PodDefaults(
        tolerations=(api.Toleration(key="sku", operator="Equal", value="gpu", effect="NoSchedule"),),
        node_selector=(("agentpool", "gpu"),),
        image_pull_secrets=("regcred", "mirror"),
        token_secret=api.SecretKeyRef(name="hf-token", key="token"),
    )
    plain = find(template(helm_binary), "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [a for a in plain if a.startswith("--default-")]


def test_webhook_configuration(helm_binary: str) -> None:
    docs = template(helm_binary)
    (webhook,) = find(docs, "ValidatingWebhookConfiguration")["webhooks"]
    assert webhook["failurePolicy"] == "Ignore"
    assert webhook["timeoutSeconds"] == 5
    assert webhook["sideEffects"] == "None"
    assert webhook["admissionReviewVersions"] == ["v1"]
    assert webhook["rules"] == [
        {
            "apiGroups": ["specdeploy.io"],
            "apiVersions": ["v1alpha1"],
            "resources": ["speculativedeployments"],
            "operations": ["CREATE", "UPDATE"],
            "scope": "Namespaced",
        }
    ]
    service = webhook["clientConfig"]["service"]
    assert service["path"] == "/validate"
    secret = find(docs, "Secret")
    assert webhook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]

    managed = template(helm_binary, "--set", "webhook.certManager.enabled=true")
    vwc = find(managed, "ValidatingWebhookConfiguration")
    assert "caBundle" not in vwc["webhooks"][0]["clientConfig"]
    certificate = find(managed, "Certificate")
    assert vwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        f"{INSTALL_NAMESPACE}/{certificate['metadata']['name']}"
    )
    assert certificate["spec"]["dnsNames"][0] == f"{service['name']}.{INSTALL_NAMESPACE}.svc"
    assert not [d for d in managed if d["kind"] == "Secret"]

    off = template(helm_binary, "--set", "webhook.enabled=false")
    assert not [d for d in off if d["kind"] in ("ValidatingWebhookConfiguration", "Secret")]
    installed = [d for d in yaml.safe_load_all(INSTALL_YAML.read_text()) if d]
    assert not [d for d in installed if d["kind"] == "Secret" or "tls.key" in str(d)], "a key in install.yaml"
    assert not [a for a in find(off, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
                if a.startswith("--webhook")]  # fmt: skip


def test_helm_is_stamped_with_its_version() -> None:
    flags = binaries.helm_ldflags("v3.22.0")
    assert "-X helm.sh/helm/v3/internal/version.version=v3.22.0" in flags
    assert "-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37" in flags


def test_image_repository_is_required(helm_binary: str) -> None:
    proc = subprocess.run(
        [helm_binary, "template", "x", str(CHART)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode != 0
    assert "image.repository is required: no specdeploy image is published yet" in proc.stderr


def test_production_values(helm_binary: str) -> None:
    """replicaCount (and the former replicas), pull Secrets in both forms, spread, extra volumes."""
    zone = "topology.kubernetes.io/zone"
    spread = {"maxSkew": 1, "topologyKey": zone, "whenUnsatisfiable": "ScheduleAnyway"}
    values = {
        "replicaCount": 2,
        "imagePullSecrets": [{"name": "regcred"}, "legacy"],
        "topologySpreadConstraints": [spread],
        "extraVolumes": [{"name": "ca", "configMap": {"name": "client-ca"}}],
        "extraVolumeMounts": [{"name": "ca", "mountPath": "/etc/ca", "readOnly": True}],
        "podSecurityContext": {"runAsNonRoot": True, "runAsUser": 1000},
        "securityContext": {"readOnlyRootFilesystem": True},
    }
    flags = [a for k, v in values.items() for a in ("--set-json", f"{k}={json.dumps(v)}")]
    docs = template(helm_binary, *flags)
    deployment = find(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 2
    assert pod["imagePullSecrets"] == [{"name": "regcred"}, {"name": "legacy"}]
    assert pod["topologySpreadConstraints"] == [spread]
    assert {"name": "ca", "configMap": {"name": "client-ca"}} in pod["volumes"]
    assert {"name": "ca", "mountPath": "/etc/ca", "readOnly": True} in pod["containers"][0]["volumeMounts"]
    # Helm merges a values map over the default one: the keys set win, the others stay.
    assert pod["securityContext"]["runAsUser"] == 1000
    assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    legacy = find(template(helm_binary, "--set", "replicas=3"), "Deployment")
    assert legacy["spec"]["replicas"] == 3


def test_crd_is_templated_and_kept_on_uninstall(helm_binary: str) -> None:
    crd = find(template(helm_binary), "CustomResourceDefinition")
    generated = yaml.safe_load((REPO / "crds" / "specdeploy.io_speculativedeployments.yaml").read_text())
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert crd["spec"] == generated["spec"]
    without = template(helm_binary, "--set", "crds.install=false")
    assert not [d for d in without if d["kind"] == "CustomResourceDefinition"]
    assert not (CHART / "crds").exists(), "Helm never upgrades crds/: the CRD is in templates/crd.yaml"


ARGOCD = REPO / "manifests" / "gitops" / "argocd" / "application.yaml"
WEBHOOK_KINDS = ("Secret", "ValidatingWebhookConfiguration", "Certificate", "Issuer")


def test_argocd_renders_the_same_webhook_every_time(helm_binary: str, tmp_path: Path) -> None:
    """Argo CD renders with `helm template` (no lookup): its example must not rotate certificates."""
    app = yaml.safe_load(ARGOCD.read_text())
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(app["spec"]["source"]["helm"]["valuesObject"]))
    namespace = app["spec"]["destination"]["namespace"]

    def webhook_objects() -> list[dict[str, Any]]:
        out = run_helm(helm_binary, "template", app["spec"]["source"]["helm"]["releaseName"], str(CHART),
                       "--namespace", namespace, "-f", str(values))  # fmt: skip
        return [d for d in yaml.safe_load_all(out) if d and d["kind"] in WEBHOOK_KINDS]

    first = webhook_objects()
    assert {d["kind"] for d in first} >= {"ValidatingWebhookConfiguration", "Certificate"}
    assert first == webhook_objects()


def test_flux_helmrelease_rolls_out_chart_changes() -> None:
    text = (REPO / "manifests" / "gitops" / "flux" / "helmrelease.yaml").read_text()
    docs = [d for d in yaml.safe_load_all(text) if d]
    release = find(docs, "HelmRelease")
    assert release["spec"]["chart"]["spec"]["reconcileStrategy"] == "Revision"
    assert release["spec"]["values"]["image"]["repository"]


KUSTOMIZATION = REPO / "manifests" / "kustomization.yaml"


def _kustomize(kustomize: str, directory: Path, *args: str) -> str:
    proc = subprocess.run(
        [kustomize, *args], cwd=directory, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, f"kustomize {' '.join(args)} failed:\n{proc.stderr}"
    return proc.stdout


def _by_identity(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def test_kustomization_sets_the_image_and_the_namespace(kustomize_binary: str, tmp_path: Path) -> None:
    """manifests/ as a kustomize base: unchanged it is install.yaml; `kustomize edit` retargets it."""
    for source in (INSTALL_YAML, KUSTOMIZATION):
        (tmp_path / source.name).write_bytes(source.read_bytes())
    installed = [d for d in yaml.safe_load_all(INSTALL_YAML.read_text()) if d]
    built = [d for d in yaml.safe_load_all(_kustomize(kustomize_binary, tmp_path, "build")) if d]
    assert _by_identity(built) == _by_identity(installed)
    (image_entry,) = yaml.safe_load(KUSTOMIZATION.read_text())["images"]
    image = find(installed, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"{image_entry['name']}:{specdeploy.__version__}"

    # What the kustomization's comment tells users to run.
    mine = "registry.example.com/ml/specdeploy"
    _kustomize(kustomize_binary, tmp_path, "edit", "set", "image", f"specdeploy={mine}:1.2.3")
    _kustomize(kustomize_binary, tmp_path, "edit", "set", "namespace", "ops")
    edited = [d for d in yaml.safe_load_all(_kustomize(kustomize_binary, tmp_path, "build")) if d]
    renamed = set(_by_identity(installed)) - {("Namespace", INSTALL_NAMESPACE)} | {("Namespace", "ops")}
    assert set(_by_identity(edited)) == renamed
    pod = find(edited, "Deployment")["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == f"{mine}:1.2.3"
    cluster_scoped = ("Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding")
    for doc in edited:
        if doc["kind"] not in cluster_scoped:
            assert doc["metadata"]["namespace"] == "ops", doc["kind"]
    # The binding follows the ServiceAccount into the new namespace, or the operator has no RBAC.
    binding = find(edited, "ClusterRoleBinding")
    account = {"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": "ops"}
    assert binding["subjects"] == [account]

    digest = "sha256:" + "b" * 64
    _kustomize(kustomize_binary, tmp_path, "edit", "set", "image", f"specdeploy={mine}@{digest}")
    pinned = [d for d in yaml.safe_load_all(_kustomize(kustomize_binary, tmp_path, "build")) if d]
    container = find(pinned, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"{mine}@{digest}"


def test_install_notes_repeat_the_readme_quickstart() -> None:
    """NOTES.txt prints files/quickstart.sh (the sandbox install test reads it in helm's output),
    which is README's quickstart from step 3 on, verbatim."""
    steps = (CHART / "files" / "quickstart.sh").read_text()
    assert steps.startswith("# 3. ") and "# 6. " in steps and "kubectl wait sdep/" in steps
    readme = (REPO / "README.md").read_text().split("## Quickstart on a GPU cluster", 1)[1]
    block = readme.split("```sh\n", 1)[1].split("```", 1)[0]
    assert block.endswith(steps), "copy README's quickstart from step 3 on to charts/specdeploy/files/"
    assert '{{ .Files.Get "files/quickstart.sh" }}' in (CHART / "templates" / "NOTES.txt").read_text()


def test_declared_node_pools_reach_the_operator_as_a_file_it_parses(helm_binary: str, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "nodePools": [
                    {
                        "name": "l4-pool",
                        "gpuProduct": "l4",
                        "gpusPerNode": 4,
                        "maxNodes": 3,
                        "nodeSelector": {"cloud.google.com/gke-nodepool": "l4-pool"},
                    }
                ]
            }
        )
    )
    docs = template(helm_binary, "-f", str(values))
    data = find(docs, "ConfigMap", "specdeploy-node-pools")["data"]["node-pools.yaml"]
    (pool,) = parse_declared_pools(yaml.safe_load(data))
    assert (pool.name, pool.gpus_per_node, pool.node_selector) == (
        "l4-pool",
        4,
        {"cloud.google.com/gke-nodepool": "l4-pool"},
    )
    pod = find(docs, "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    (flag,) = [a for a in container["args"] if a.startswith("--node-pools=")]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "node-pools"]
    assert flag == f"--node-pools={mount['mountPath']}/node-pools.yaml"

    values.write_text(yaml.safe_dump({"nodePools": [{"name": "l4-pool", "gpuProduct": "l4"}]}))
    refused = subprocess.run(
        [helm_binary, "template", "specdeploy", str(CHART), *IMAGE, "-f", str(values)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert refused.returncode != 0 and "nodePools" in refused.stderr, refused.stderr
