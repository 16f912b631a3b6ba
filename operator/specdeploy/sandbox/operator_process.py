"""The operator as a background process of a sandbox (``specdeploy demo``).

It is registered in the sandbox's state like a control-plane component, so ``sandbox down``
stops it too. Its webhook and probes listen on loopback only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from specdeploy.sandbox.cluster import Sandbox, SandboxError, free_ports, pid_alive, process_start_time

NAME = "specdeploy-operator"
START_TIMEOUT_S = 60.0


def log_path(sandbox: Sandbox) -> Path:
    return sandbox.logs / f"{NAME}.log"


def running_pid(sandbox: Sandbox) -> int | None:
    info = ((sandbox.read_state() or {}).get("processes") or {}).get(NAME)
    if info and pid_alive(info["pid"], info.get("start_time")):
        return int(info["pid"])
    return None


def ensure_running(sandbox: Sandbox) -> int:
    """Start the operator against the sandbox unless it already runs; wait for /healthz."""
    pid = running_pid(sandbox)
    if pid is not None:
        return pid
    probe, metrics, webhook = free_ports(3)
    sandbox.logs.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "specdeploy",
        "run",
        "--probe-address",
        "127.0.0.1",
        "--probe-port",
        str(probe),
        "--metrics-port",
        str(metrics),
        "--webhook-address",
        "127.0.0.1",
        "--webhook-port",
        str(webhook),
        "--webhook-host",
        "127.0.0.1",
        "--webhook-configure",
        "--webhook-cert-dir",
        str(sandbox.dir / "webhook-tls"),
    ]
    with open(log_path(sandbox), "ab") as log:
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "KUBECONFIG": str(sandbox.kubeconfig)},
            start_new_session=True,
        )
    sandbox.register_process(NAME, proc.pid, process_start_time(proc.pid), [probe, metrics, webhook])
    deadline = time.monotonic() + START_TIMEOUT_S
    url = f"http://127.0.0.1:{probe}/healthz"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SandboxError(f"the operator exited with {proc.returncode}; see {log_path(sandbox)}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return proc.pid
        except OSError:
            time.sleep(0.5)
    raise SandboxError(
        f"the operator did not answer {url} within {START_TIMEOUT_S:.0f}s; see {log_path(sandbox)}"
    )
