"""Shared fixtures: one sandbox per test session, a namespace per test, kubectl, helm, kustomize
and wait_for.

Set SPECDEPLOY_TEST_KUBECONFIG to run the cluster suites against an already running cluster
(e.g. `specdeploy sandbox up` in another terminal) instead of starting a sandbox per session.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterlib import Cluster, Kubectl, WaitFor, sandbox_cluster

TESTS_DIR = Path(__file__).parent
CLUSTER_SUITES = ("integration", "e2e", "faults")
KUBECONFIG_ENV = "SPECDEPLOY_TEST_KUBECONFIG"
KUBECTL_ENV = "SPECDEPLOY_KUBECTL"
# `kustomize edit` (which kubectl does not embed) for the kustomization beside install.yaml.
KUSTOMIZE_VERSION = "v5.8.1"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Everything under tests/integration, tests/e2e and tests/faults needs a cluster: mark it so."""
    for item in items:
        relative = item.path.relative_to(TESTS_DIR) if item.path.is_relative_to(TESTS_DIR) else None
        if relative is not None and relative.parts[0] in CLUSTER_SUITES:
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session")
def kubectl_binary() -> str:
    """The kubectl of the pinned Kubernetes release (built once, cached), or $SPECDEPLOY_KUBECTL."""
    override = os.environ.get(KUBECTL_ENV)
    if override:
        return override
    from specdeploy.sandbox.binaries import ensure_kubectl

    return str(ensure_kubectl())


@pytest.fixture(scope="session")
def helm_binary() -> str:
    """helm at the pinned version (built once, cached): the packaging and integration suites use it."""
    from specdeploy.sandbox.binaries import ensure_helm

    return str(ensure_helm())


@pytest.fixture(scope="session")
def kustomize_binary() -> str:
    """kustomize at the pinned version, built once with `go install` into the cache like helm."""
    from specdeploy.sandbox.binaries import go_install

    return str(go_install("kustomize", "sigs.k8s.io/kustomize/kustomize/v5", KUSTOMIZE_VERSION))


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A running cluster for the whole session, stopped at the end even when tests fail."""
    external = os.environ.get(KUBECONFIG_ENV)
    if external:
        yield Cluster(kubeconfig=Path(external), pod_cidr=None, audit_log=None)
        return
    with sandbox_cluster(tmp_path_factory.mktemp("sandboxes"), f"pytest-{os.getpid()}") as running:
        yield running


@pytest.fixture(scope="session")
def kubectl(kubectl_binary: str, cluster: Cluster) -> Kubectl:
    return Kubectl(kubectl_binary, cluster.kubeconfig)


@pytest.fixture
def namespace(kubectl: Kubectl, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace named after the test, with its default ServiceAccount ready; deleted after."""
    slug = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].rstrip("-")
    name = f"{slug}-{secrets.token_hex(3)}"
    kubectl("create", "namespace", name)
    try:
        # Pods are rejected until the serviceaccount controller has made "default".
        WaitFor(kubectl, name)(
            lambda: kubectl.run("get", "serviceaccount", "default", namespace=name).returncode == 0,
            timeout=30,
            describe=f"the default ServiceAccount in {name}",
        )
        yield name
    finally:
        kubectl.run("delete", "namespace", name, "--wait=false")


@pytest.fixture
def wait_for(kubectl: Kubectl, namespace: str) -> WaitFor:
    return WaitFor(kubectl, namespace)
