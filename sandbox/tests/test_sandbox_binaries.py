"""The wrapper module that builds Kubernetes commands from the Go module proxy."""

from __future__ import annotations

import pytest

from specdeploy_sandbox import binaries

KUBERNETES_GO_MOD = """module k8s.io/kubernetes

go 1.25.0

godebug default=go1.25

require (
\tgithub.com/spf13/cobra v1.9.1
\tk8s.io/api v0.0.0
\tk8s.io/apiserver v0.0.0
\tk8s.io/klog/v2 v2.130.1
\tk8s.io/utils v0.0.0-20250604170112-4c0f3b243397
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/apiserver => ./staging/src/k8s.io/apiserver
)
"""


def test_wrapper_replaces_every_staging_module_with_the_published_release() -> None:
    go_mod = binaries.wrapper_go_mod(KUBERNETES_GO_MOD, "v1.35.4")
    assert "\tk8s.io/kubernetes v1.35.4\n" in go_mod
    assert f"\t{binaries.ETCD_MODULE} {binaries.ETCD_VERSION}\n" in go_mod
    assert "\tk8s.io/api => k8s.io/api v0.35.4" in go_mod
    assert "\tk8s.io/apiserver => k8s.io/apiserver v0.35.4" in go_mod
    assert "godebug default=go1.25" in go_mod
    assert "go 1.25.0" in go_mod


def test_wrapper_leaves_non_staging_k8s_modules_alone() -> None:
    go_mod = binaries.wrapper_go_mod(KUBERNETES_GO_MOD, "v1.35.4")
    assert "k8s.io/utils =>" not in go_mod
    assert "k8s.io/klog/v2 =>" not in go_mod
    assert "./staging" not in go_mod


def test_wrapper_refuses_a_go_mod_without_staging_modules() -> None:
    with pytest.raises(binaries.BuildError):
        binaries.wrapper_go_mod("module k8s.io/kubernetes\n\ngo 1.25.0\n", "v1.35.4")


def test_version_ldflags_stamp_component_base_and_client_go() -> None:
    flags = binaries._version_ldflags("v1.35.4")
    assert "-X k8s.io/component-base/version.gitVersion=v1.35.4" in flags
    assert "-X k8s.io/client-go/pkg/version.gitMinor=35" in flags


def test_missing_go_gives_an_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(binaries.shutil, "which", lambda _name: None)
    with pytest.raises(binaries.BuildError, match="install Go"):
        binaries._go()
