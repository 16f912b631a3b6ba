"""``specdeploy demo``: the whole product in one command, on the local sandbox.

Starts (or reuses) the sandbox, installs the CRD, runs the operator in the background (stopped
with the sandbox), applies the seed example and waits until it is Ready.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CRD_NAME = "speculativedeployments.specdeploy.io"
DEFAULT_EXAMPLE = Path("manifests/examples/qwen3-30b-a3b-instruct-2507-eagle3.yaml")
READY_TIMEOUT_S = 180.0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("demo", help="sandbox + CRD + operator + the seed example, until Ready")
    parser.add_argument("-f", "--filename", type=Path, default=DEFAULT_EXAMPLE, help="resource to apply")
    parser.add_argument("--name", help="sandbox name (default: default, or $SPECDEPLOY_SANDBOX)")
    parser.add_argument("--namespace", default="default", help="namespace for the example")
    parser.set_defaults(func=run)


def _poll(predicate: Callable[[], bool], timeout: float) -> bool:
    """Whether ``predicate`` held within ``timeout`` seconds (checked every second)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(1.0)
    return False


def _say(message: str) -> None:
    print(f"==> {message}", flush=True)


class _Kubectl:
    """The pinned kubectl against the sandbox; a failing command ends the demo with its message."""

    def __init__(self, binary: Path, kubeconfig: Path) -> None:
        self.argv = [str(binary), f"--kubeconfig={kubeconfig}"]

    def __call__(self, *argv: str, check: bool = True) -> str:
        proc = subprocess.run([*self.argv, *argv], capture_output=True, text=True, check=False)
        if check and proc.returncode != 0:
            raise SystemExit(f"error: kubectl {' '.join(argv)}: {proc.stderr.strip()}")
        return proc.stdout


def _install_crd(k: _Kubectl, crd_file: Path) -> bool:
    """Apply the generated CRD and wait until the apiserver serves it."""
    from specdeploy.api.crd import render_yaml

    crd_file.write_text(render_yaml())
    k("apply", "--server-side", "--force-conflicts", "-f", str(crd_file))
    established = "jsonpath={.status.conditions[?(@.type=='Established')].status}"
    return _poll(lambda: k("get", "crd", CRD_NAME, "-o", established, check=False).strip() == "True", 60)


def _show(k: _Kubectl, namespace: str, name: str) -> None:
    """The resource, its Deployment, pods and Service, and the engine command it renders."""
    print(k("get", "-n", namespace, "sdep", name, "-o", "wide"), end="")
    selector = f"app.kubernetes.io/instance={name}"
    print(k("get", "-n", namespace, "deploy,pods,svc", "-o", "wide", "-l", selector), end="")
    status = json.loads(k("get", "-n", namespace, "sdep", name, "-o", "json")).get("status", {})
    _say(f"engine command: {shlex.join(status.get('command', []))}")


def run(args: argparse.Namespace) -> int:
    from specdeploy.sandbox import operator_process
    from specdeploy.sandbox.binaries import BuildError, ensure_kubectl
    from specdeploy.sandbox.cluster import Sandbox, SandboxError

    if not args.filename.exists():
        print(f"error: {args.filename} not found; run from the repository root or pass -f", file=sys.stderr)
        return 2
    sandbox = Sandbox(args.name)
    _say(f"starting sandbox {sandbox.name!r} (reused when running)")
    try:
        up = sandbox.up()
    except (BuildError, SandboxError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _say(
        ("reused" if up.already_running else "started") + f" in {up.seconds:.1f}s; kubeconfig {up.kubeconfig}"
    )
    k = _Kubectl(ensure_kubectl(), up.kubeconfig)
    _say("installing the SpeculativeDeployment CRD")
    if not _install_crd(k, sandbox.dir / "crd.yaml"):
        print("error: the CRD did not become Established within 60s", file=sys.stderr)
        return 1
    pid = operator_process.ensure_running(sandbox)
    _say(f"operator running (pid {pid}); log: {operator_process.log_path(sandbox)}")
    _say(f"applying {args.filename}")
    print(k("apply", "-n", args.namespace, "-f", str(args.filename)), end="")
    name = k("get", "-n", args.namespace, "-f", str(args.filename), "-o", "jsonpath={.metadata.name}").strip()
    _say(f"waiting for {name} to become Ready")
    ready_status = "jsonpath={.status.conditions[?(@.type=='Ready')].status}"
    ready = _poll(
        lambda: k("get", "-n", args.namespace, "sdep", name, "-o", ready_status, check=False).strip()
        == "True",
        READY_TIMEOUT_S,
    )
    _show(k, args.namespace, name)
    if not ready:
        conditions = k("get", "-n", args.namespace, "sdep", name, "-o", "jsonpath={.status.conditions}")
        print(
            f"error: {name} not Ready within {READY_TIMEOUT_S:.0f}s; conditions: {conditions}",
            file=sys.stderr,
        )
        return 1
    print(
        "\nLook around:\n"
        f"  export KUBECONFIG={up.kubeconfig}\n"
        "  kubectl get sdep -o wide\n"
        f"  kubectl describe sdep {name}\n"
        f"  kubectl get sdep {name} -o jsonpath='{{.status.command}}'\n"
        "  specdeploy sandbox status\n"
        "Stop everything (operator included):\n"
        f"  specdeploy sandbox down{' --name ' + sandbox.name if args.name else ''}"
    )
    return 0
