"""``specdeploy demo``: the whole product in one command, on the local sandbox.

Starts (or reuses) the sandbox, installs the CRD, runs the operator in the background (stopped
with the sandbox), applies the seed example and waits until it is Ready. Unless ``--no-engine``,
it also deploys the tiny EAGLE-3 pair beside it, which the sandbox's engine node serves with a
real vLLM, waits until that engine answers its readiness probe, sends it a chat completion, then
a little traffic, and shows the acceptance the operator measured from the engine's counters.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

CRD_NAME = "speculativedeployments.specdeploy.io"
DEFAULT_EXAMPLE = Path("manifests/examples/qwen3-30b-a3b-instruct-2507-eagle3.yaml")
ENGINE_EXAMPLE = Path("manifests/examples/sandbox-tiny-eagle3.yaml")
READY_TIMEOUT_S = 180.0
# A real engine loads, compiles and warms up on CPU: about 80-130 s on 2 cores.
ENGINE_READY_TIMEOUT_S = 600.0
PROMPT = "Say hello to the sandbox."
# Traffic for an acceptance verdict: the example needs 100 draft tokens in its window (3 per
# verifier step), and the sandbox's operator reads the engine every 10 s.
TRAFFIC_REQUESTS = 4
TRAFFIC_TOKENS = 64
VERDICT_TIMEOUT_S = 60.0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("demo", help="sandbox + CRD + operator + the seed example, until Ready")
    parser.add_argument("-f", "--filename", type=Path, default=DEFAULT_EXAMPLE, help="resource to apply")
    parser.add_argument("--name", help="sandbox name (default: default, or $SPECDEPLOY_SANDBOX)")
    parser.add_argument("--namespace", default="default", help="namespace for the example")
    parser.add_argument(
        "--no-engine",
        action="store_true",
        help="skip the real engine (no engine node, no vLLM install): phantom pods only, about a minute",
    )
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


def _apply_and_wait(k: _Kubectl, namespace: str, path: Path, timeout: float) -> tuple[str, bool]:
    """Apply ``path``; its name and whether it turned Ready within ``timeout`` seconds."""
    print(k("apply", "-n", namespace, "-f", str(path)), end="")
    name = k("get", "-n", namespace, "-f", str(path), "-o", "jsonpath={.metadata.name}").strip()
    _say(f"waiting for {name} to become Ready")
    ready_status = "jsonpath={.status.conditions[?(@.type=='Ready')].status}"
    ready = _poll(
        lambda: k("get", "-n", namespace, "sdep", name, "-o", ready_status, check=False).strip() == "True",
        timeout,
    )
    _show(k, namespace, name)
    if not ready:
        conditions = k("get", "-n", namespace, "sdep", name, "-o", "jsonpath={.status.conditions}")
        print(f"error: {name} not Ready within {timeout:.0f}s; conditions: {conditions}", file=sys.stderr)
    return name, ready


def chat_request(model: str, max_tokens: int = 24) -> dict[str, Any]:
    request: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    if max_tokens != 24:
        # Exactly this many tokens (vLLM's extension), so traffic is measured, not guessed.
        request["ignore_eos"] = True
    return request


def chat(url: str, model: str, timeout: float = 60.0, max_tokens: int = 24) -> str:
    """The assistant's reply to :data:`PROMPT` from the OpenAI-compatible server at ``url``."""
    request = urllib.request.Request(
        f"{url}/v1/chat/completions",
        data=json.dumps(chat_request(model, max_tokens)).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        body = json.loads(response.read())
    return str(body["choices"][0]["message"]["content"])


def _engine(k: _Kubectl, namespace: str, name: str) -> tuple[str, str]:
    """(URL of the ready engine pod, model name) of a resource."""
    selector = f"app.kubernetes.io/instance={name}"
    pod_ip = k(
        "get", "-n", namespace, "pods", "-l", selector, "-o", "jsonpath={.items[0].status.podIP}"
    ).strip()
    model = json.loads(k("get", "-n", namespace, "sdep", name, "-o", "json"))["spec"]["verifier"]["model"]
    return f"http://{pod_ip}:8000", str(model)


def _talk_to_engine(url: str, model: str) -> bool:
    """Send one chat completion to the ready engine pod and show how to send another."""
    _say(f"asking the engine at {url}: {PROMPT!r}")
    try:
        reply = chat(url, model)
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: the engine at {url} did not answer: {exc}", file=sys.stderr)
        return False
    _say(f"reply: {reply!r} (random weights: the tiny verifier always emits the same token)")
    print(
        "Send another:\n"
        f"  curl -s {url}/v1/chat/completions -H 'Content-Type: application/json' \\\n"
        f"    -d '{json.dumps(chat_request(model))}'\n"
        f"  curl -s {url}/metrics | grep spec_decode"
    )
    return True


def _show_acceptance(k: _Kubectl, namespace: str, name: str, url: str, model: str) -> bool:
    """Send traffic to the engine and show the acceptance the operator measures from it."""
    _say(f"sending {TRAFFIC_REQUESTS} chat completions of {TRAFFIC_TOKENS} tokens for an acceptance verdict")
    try:
        for _ in range(TRAFFIC_REQUESTS):
            chat(url, model, max_tokens=TRAFFIC_TOKENS)
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: the engine at {url} did not answer: {exc}", file=sys.stderr)
        return False
    effective = "jsonpath={.status.conditions[?(@.type=='SpeculationEffective')]}"

    def verdict() -> dict[str, Any]:
        found = k("get", "-n", namespace, "sdep", name, "-o", effective, check=False).strip()
        return dict(json.loads(found)) if found else {}

    judged = _poll(lambda: verdict().get("status") in ("True", "False"), VERDICT_TIMEOUT_S)
    print(k("get", "-n", namespace, "sdep", name), end="")
    found = verdict()
    _say(f"SpeculationEffective={found.get('status')} ({found.get('reason')}): {found.get('message')}")
    if not judged:
        print(f"error: no acceptance verdict within {VERDICT_TIMEOUT_S:.0f}s", file=sys.stderr)
    return judged


def run(args: argparse.Namespace) -> int:
    from specdeploy_sandbox import operator_process
    from specdeploy_sandbox.binaries import BuildError, ensure_kubectl
    from specdeploy_sandbox.cluster import Sandbox, SandboxError

    if not args.filename.exists():
        print(f"error: {args.filename} not found; run from the repository root or pass -f", file=sys.stderr)
        return 2
    engine = not args.no_engine
    sandbox = Sandbox(args.name)
    _say(f"starting sandbox {sandbox.name!r} (reused when running)")
    try:
        up = sandbox.up(engine_nodes=None if engine else 0)
    except (BuildError, SandboxError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _say(
        ("reused" if up.already_running else "started") + f" in {up.seconds:.1f}s; kubeconfig {up.kubeconfig}"
    )
    if engine and sandbox.hub_endpoint() is None:
        print(
            f"error: sandbox {sandbox.name!r} runs without an engine node; stop it "
            "(specdeploy sandbox down) or pass --no-engine",
            file=sys.stderr,
        )
        return 2
    k = _Kubectl(ensure_kubectl(), up.kubeconfig)
    _say("installing the SpeculativeDeployment CRD")
    if not _install_crd(k, sandbox.dir / "crd.yaml"):
        print("error: the CRD did not become Established within 60s", file=sys.stderr)
        return 1
    pid = operator_process.ensure_running(sandbox)
    _say(f"operator running (pid {pid}); log: {operator_process.log_path(sandbox)}")
    _say(f"applying {args.filename}")
    name, ready = _apply_and_wait(k, args.namespace, args.filename, READY_TIMEOUT_S)
    if not ready:
        return 1
    if engine:
        _say(f"applying {ENGINE_EXAMPLE}: a tiny pair the engine node serves with a real vLLM")
        engine_name, ready = _apply_and_wait(k, args.namespace, ENGINE_EXAMPLE, ENGINE_READY_TIMEOUT_S)
        if not ready:
            return 1
        url, model = _engine(k, args.namespace, engine_name)
        if not _talk_to_engine(url, model):
            return 1
        if not _show_acceptance(k, args.namespace, engine_name, url, model):
            return 1
    print(
        "\nLook around:\n"
        f"  export KUBECONFIG={up.kubeconfig}\n"
        "  kubectl get sdep -o wide\n"
        f"  kubectl describe sdep {name}\n"
        f"  kubectl get sdep {name} -o jsonpath='{{.status.command}}'\n"
        + (f"  kubectl logs deploy/{engine_name}\n" if engine else "")
        + "  specdeploy sandbox status\n"
        "Stop everything (operator included):\n"
        f"  specdeploy sandbox down{' --name ' + sandbox.name if args.name else ''}"
    )
    return 0
