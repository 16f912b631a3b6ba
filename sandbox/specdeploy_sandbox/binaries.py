"""Build and cache the control-plane binaries the sandbox runs.

Nothing can be downloaded as a prebuilt binary, so kube-apiserver, kube-controller-manager,
kube-scheduler, kubectl, etcd and kwok are compiled from Go modules once per pinned version and
kept under the user's cache directory.

etcd is built in the same wrapper module as Kubernetes, at the version Kubernetes itself
requires: kube-apiserver 1.35 needs etcd >= 3.5.13 for watch progress requests, without which
clients using streaming lists (KWOK) see their watches end and react only on periodic relists.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

KUBERNETES_VERSION = "v1.35.4"
KWOK_VERSION = "v0.7.0"
ETCD_VERSION = "v3.6.5"
ETCD_MODULE = "go.etcd.io/etcd/server/v3"
KUBE_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
_STAGING = re.compile(r"^\s*(k8s\.io/[A-Za-z0-9._-]+) v0\.0\.0\s*$", re.MULTILINE)
_GODEBUG = re.compile(r"^godebug .*$", re.MULTILINE)
_GO_LINE = re.compile(r"^go (\S+)$", re.MULTILINE)


class BuildError(RuntimeError):
    """A binary could not be built or found; the message says what to install or what failed."""


def cache_root() -> Path:
    """Per-user cache directory, outside any checkout, shared by all sandboxes."""
    override = os.environ.get("SPECDEPLOY_CACHE_DIR")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specdeploy"


@dataclass(frozen=True)
class Binaries:
    """Absolute paths of every executable a sandbox starts."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kwok: Path


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildError(
            "the Go toolchain is needed to build the Kubernetes binaries on first use: "
            "install Go >= 1.26.6 (https://go.dev/doc/install, or your distribution's golang package)"
        )
    return go


def _run(cmd: list[str], cwd: Path, what: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        cmd,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-25:])
        raise BuildError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")
    return proc.stdout


def _progress(message: str) -> None:
    print(f"[specdeploy] {message}", file=sys.stderr, flush=True)


def _version_ldflags(version: str) -> str:
    major, minor = version.lstrip("v").split(".")[:2]
    flags = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={version}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
        ]
    return "-s -w " + " ".join(flags)


def wrapper_go_mod(kubernetes_go_mod: str, version: str) -> str:
    """go.mod for a module that builds k8s.io/kubernetes commands from the module proxy.

    k8s.io/kubernetes requires its staging modules at v0.0.0; each must be replaced by the
    published v0.MINOR.PATCH of the same release. The etcd server module is required at the
    pinned version so etcd is built from the same dependency graph.
    """
    staging = sorted(set(_STAGING.findall(kubernetes_go_mod)))
    if not staging:
        raise BuildError("no staging modules found in k8s.io/kubernetes go.mod")
    go_line = _GO_LINE.search(kubernetes_go_mod)
    godebug = _GODEBUG.findall(kubernetes_go_mod)
    staged_version = "v0." + version.lstrip("v").split(".", 1)[1]
    lines = ["module specdeploy.local/k8sbuild", "", f"go {go_line.group(1) if go_line else '1.25.0'}"]
    lines += ["", *godebug, "", "require ("]
    lines += [f"\tk8s.io/kubernetes {version}", f"\t{ETCD_MODULE} {ETCD_VERSION}", ")", "", "replace ("]
    lines += [f"\t{name} => {name} {staged_version}" for name in staging]
    lines += [")", ""]
    return "\n".join(lines)


def _wrapper_module(version: str) -> Path:
    """Directory of the wrapper module, its go.mod written from k8s.io/kubernetes's own."""
    go = _go()
    work = cache_root() / "build" / f"kubernetes-{version}"
    work.mkdir(parents=True, exist_ok=True)
    _progress(f"fetching k8s.io/kubernetes {version} from the Go module proxy")
    info = json.loads(
        _run([go, "mod", "download", "-json", f"k8s.io/kubernetes@{version}"], work, "go mod download")
    )
    (work / "go.mod").write_text(wrapper_go_mod(Path(info["GoMod"]).read_text(), version))
    return work


def _build_in_wrapper(version: str, targets: list[tuple[str, str, Path]]) -> None:
    """Build (label, package, output) targets in the wrapper module, with version stamps."""
    go = _go()
    work = _wrapper_module(version)
    env = {"CGO_ENABLED": "0", "GOFLAGS": "-mod=mod -buildvcs=false"}
    for number, (label, package, output) in enumerate(targets, start=1):
        _progress(
            f"building {label} ({number}/{len(targets)}); a cold build takes several minutes each on 2 cores"
        )
        output.parent.mkdir(parents=True, exist_ok=True)
        _run(
            [go, "build", "-trimpath", "-ldflags", _version_ldflags(version), "-o", str(output), package],
            work,
            f"building {label}",
            env,
        )


def _build_kwok(version: str, bin_dir: Path) -> None:
    go = _go()
    bin_dir.mkdir(parents=True, exist_ok=True)
    _progress(f"building kwok {version} (kubelet simulator)")
    _run(
        [go, "install", "-trimpath", "-ldflags", "-s -w", f"sigs.k8s.io/kwok/cmd/kwok@{version}"],
        bin_dir,
        "building kwok",
        {"CGO_ENABLED": "0", "GOBIN": str(bin_dir)},
    )


def _kube_bin() -> Path:
    return cache_root() / "k8s" / KUBERNETES_VERSION / "bin"


def _etcd_bin() -> Path:
    return cache_root() / "etcd" / ETCD_VERSION / "bin" / "etcd"


def ensure_binaries() -> Binaries:
    """Return the binaries, building whichever are not cached yet (idempotent, safe to re-run)."""
    kube_bin = _kube_bin()
    targets = [
        (f"{c} {KUBERNETES_VERSION}", f"k8s.io/kubernetes/cmd/{c}", kube_bin / c)
        for c in KUBE_COMMANDS
        if not (kube_bin / c).exists()
    ]
    if not _etcd_bin().exists():
        targets.append((f"etcd {ETCD_VERSION}", ETCD_MODULE, _etcd_bin()))
    if targets:
        _build_in_wrapper(KUBERNETES_VERSION, targets)
    kwok_bin = cache_root() / "kwok" / KWOK_VERSION / "bin"
    if not (kwok_bin / "kwok").exists():
        _build_kwok(KWOK_VERSION, kwok_bin)
    return Binaries(
        etcd=_etcd_bin(),
        kube_apiserver=kube_bin / "kube-apiserver",
        kube_controller_manager=kube_bin / "kube-controller-manager",
        kube_scheduler=kube_bin / "kube-scheduler",
        kwok=kwok_bin / "kwok",
    )


def ensure_kubectl() -> Path:
    """kubectl of the same pinned release, built in the same wrapper module.

    The tests use this one rather than whatever is on PATH, so client/server version skew and
    output formats are the same on every machine.
    """
    kubectl = _kube_bin() / "kubectl"
    if not kubectl.exists():
        _build_in_wrapper(
            KUBERNETES_VERSION, [(f"kubectl {KUBERNETES_VERSION}", "k8s.io/kubernetes/cmd/kubectl", kubectl)]
        )
    return kubectl


LWS_VERSION = "v0.9.0"  # the newest release whose module the Go module proxy here serves whole
LWS_MODULE = "sigs.k8s.io/lws"


@dataclass(frozen=True)
class LwsBuild:
    """The LeaderWorkerSet controller and, from its module's source, the release's CRDs and
    webhook configurations."""

    manager: Path
    crds: tuple[Path, ...]
    webhooks: Path


def ensure_lws() -> LwsBuild:
    """The LeaderWorkerSet controller at LWS_VERSION, built once into the cache.

    ``go install sigs.k8s.io/lws/cmd@VERSION`` first asks the proxy for the module's version list,
    which it refuses here; a wrapper module requiring the exact version builds the same package
    from the same source.
    """
    go = _go()
    work = cache_root() / "build" / f"lws-{LWS_VERSION}"
    work.mkdir(parents=True, exist_ok=True)
    info = json.loads(
        _run([go, "mod", "download", "-json", f"{LWS_MODULE}@{LWS_VERSION}"], work, "go mod download")
    )
    source = Path(info["Dir"])
    manager = cache_root() / "lws" / LWS_VERSION / "bin" / "lws-manager"
    if not manager.exists():
        wrapper = f"module specdeploy.local/lwsbuild\n\ngo 1.26.0\n\nrequire {LWS_MODULE} {LWS_VERSION}\n"
        (work / "go.mod").write_text(wrapper)
        manager.parent.mkdir(parents=True, exist_ok=True)
        _progress(f"building the LeaderWorkerSet controller {LWS_VERSION} (once; a few minutes on 2 cores)")
        _run(
            [go, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(manager), f"{LWS_MODULE}/cmd"],
            work,
            "building the LeaderWorkerSet controller",
            {"CGO_ENABLED": "0", "GOFLAGS": "-mod=mod -buildvcs=false"},
        )
    crds = tuple(sorted((source / "config" / "crd" / "bases").glob("*.yaml")))
    return LwsBuild(manager, crds, source / "config" / "webhook" / "manifests.yaml")


KARPENTER_MODULE = "sigs.k8s.io/karpenter"
# The newest release this machine's Go (1.26.8) builds: v1.14.3 and v1.15.0 ask for a newer Go.
KARPENTER_VERSION = "v1.14.1"
KARPENTER_PROVIDER = f"{KARPENTER_MODULE}/kwok"


@dataclass(frozen=True)
class KarpenterBuild:
    """Karpenter's KWOK provider and, from its module's source, the CRDs it needs: NodePool,
    NodeClaim and the KWOK provider's KWOKNodeClass."""

    provider: Path
    crds: tuple[Path, ...]


def _karpenter_source() -> Path:
    """The module's source, downloaded once into the Go module cache."""
    work = cache_root() / "build" / f"karpenter-{KARPENTER_VERSION}"
    work.mkdir(parents=True, exist_ok=True)
    module = f"{KARPENTER_MODULE}@{KARPENTER_VERSION}"
    info = json.loads(_run([_go(), "mod", "download", "-json", module], work, "go mod download"))
    return Path(info["Dir"])


def karpenter_crds() -> tuple[Path, ...]:
    """Karpenter's NodePool and NodeClaim CRDs (the ones its KWOK chart ships) and the KWOK
    provider's KWOKNodeClass CRD."""
    source = _karpenter_source()
    charts = source / "kwok" / "charts" / "crds"
    return (
        charts / "karpenter.sh_nodepools.yaml",
        charts / "karpenter.sh_nodeclaims.yaml",
        source / "kwok" / "apis" / "crds" / "karpenter.kwok.sh_kwoknodeclasses.yaml",
    )


def ensure_karpenter() -> KarpenterBuild:
    """Karpenter's KWOK provider at KARPENTER_VERSION, built once into the cache (its module has no
    replace directives: a wrapper module requiring the version builds it, as for LWS)."""
    crds = karpenter_crds()
    provider = cache_root() / "karpenter" / KARPENTER_VERSION / "bin" / "karpenter-kwok"
    if not provider.exists():
        work = cache_root() / "build" / f"karpenter-{KARPENTER_VERSION}"
        module = "module specdeploy.local/karpenterbuild\n\ngo 1.26.0\n\n"
        (work / "go.mod").write_text(f"{module}require {KARPENTER_MODULE} {KARPENTER_VERSION}\n")
        provider.parent.mkdir(parents=True, exist_ok=True)
        _progress(f"building Karpenter's KWOK provider {KARPENTER_VERSION} (once; a few minutes on 2 cores)")
        _run(
            [_go(), "build", "-trimpath", "-ldflags", "-s -w", "-o", str(provider), KARPENTER_PROVIDER],
            work,
            "building Karpenter's KWOK provider",
            {"CGO_ENABLED": "0", "GOFLAGS": "-mod=mod -buildvcs=false"},
        )
    return KarpenterBuild(provider, crds)


HELM_VERSION = "v3.22.0"
HELM_MODULE = "helm.sh/helm/v3"
# helm v3.22.0 is built against the Kubernetes 1.37 client modules; its Makefile stamps that
# version into the capabilities `helm template` and `helm lint` assume without a cluster.
HELM_K8S_MAJOR, HELM_K8S_MINOR = "1", "37"


def helm_ldflags(version: str) -> str:
    """Version stamps the helm Makefile sets, so `helm version` and kubeVersion checks are right."""
    flags = [
        f"-X {HELM_MODULE}/internal/version.version={version}",
        f"-X {HELM_MODULE}/internal/version.metadata=",
        f"-X {HELM_MODULE}/internal/version.gitTreeState=clean",
    ]
    for pkg in ("pkg/lint/rules", "pkg/chartutil"):
        flags += [
            f"-X {HELM_MODULE}/{pkg}.k8sVersionMajor={HELM_K8S_MAJOR}",
            f"-X {HELM_MODULE}/{pkg}.k8sVersionMinor={HELM_K8S_MINOR}",
        ]
    return "-s -w " + " ".join(flags)


def ensure_helm() -> Path:
    """helm at the pinned version, built once with `go install` (its module needs no replaces).

    The chart tests drive this binary rather than one on PATH, so lint rules and rendering are
    the same everywhere.
    """
    return go_install("helm", f"{HELM_MODULE}/cmd/helm", HELM_VERSION, helm_ldflags(HELM_VERSION))


def go_install(tool: str, package: str, version: str, ldflags: str = "-s -w") -> Path:
    """``tool`` built once from ``package@version`` with ``go install`` into
    ``<cache>/<tool>/<version>/bin`` (a static binary), then reused: the tools the tests drive
    (helm, kustomize, actionlint) are the same pinned build everywhere."""
    bin_dir = cache_root() / tool / version / "bin"
    binary = bin_dir / tool
    if not binary.exists():
        go = _go()
        bin_dir.mkdir(parents=True, exist_ok=True)
        _progress(f"building {tool} {version} (once; cached under {bin_dir})")
        _run(
            [go, "install", "-trimpath", "-ldflags", ldflags, f"{package}@{version}"],
            bin_dir,
            f"building {tool}",
            {"CGO_ENABLED": "0", "GOBIN": str(bin_dir)},
        )
    return binary
