"""The operator as a local background process: for ``specdeploy demo``, tests and benchmarks.

Probes, metrics and the admission webhook listen on loopback only. Under ``specdeploy demo`` the
process is registered in the sandbox's state like a control-plane component, so
``sandbox down`` stops it too.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from specdeploy_sandbox.cluster import Sandbox, SandboxError
from specdeploy_sandbox.processes import free_ports, pid_alive, process_start_time, stop_child

NAME = "specdeploy-operator"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
# The sandbox operator reads engine metrics every 10 s (30 s in production): a demo shows its
# acceptance verdict within seconds of its traffic.
SANDBOX_READ_INTERVAL_S = 10


@dataclass(frozen=True)
class LocalOperator:
    """A running ``specdeploy run`` process and where to read it."""

    process: subprocess.Popen[bytes]
    ports: tuple[int, ...]
    probe_url: str
    metrics_url: str
    log: Path

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        stop_child(self.process, STOP_TIMEOUT_S)


def _argv(
    ports: tuple[int, int, int],
    webhook_dir: Path | None,
    hub_endpoint: str | None,
    extra_args: tuple[str, ...],
    configure_webhook: bool = True,
    webhook_client_ca: Path | None = None,
) -> list[str]:
    """``specdeploy run`` with probes, metrics and (optionally) the webhook on loopback."""
    probe, metrics, webhook = ports
    argv = [
        sys.executable, "-m", "specdeploy", "run",
        "--probe-address", "127.0.0.1",
        "--probe-port", str(probe),
        "--metrics-port", str(metrics),
        *extra_args,
    ]  # fmt: skip
    if hub_endpoint is not None:
        argv += ["--hub-endpoint", hub_endpoint]
    if webhook_dir is not None:
        argv += [
            "--webhook-address", "127.0.0.1",
            "--webhook-port", str(webhook),
            "--webhook-host", "127.0.0.1",
            *(["--webhook-configure"] if configure_webhook else []),
            "--webhook-cert-dir", str(webhook_dir),
        ]  # fmt: skip
        if webhook_client_ca is not None:
            argv += ["--webhook-client-ca", str(webhook_client_ca)]
    return argv


def _ready(running: LocalOperator, webhook: bool) -> bool:
    """/healthz answers 200 and, when it serves one, the webhook port accepts connections (kopf
    starts that server after the probe); OSError while either is not up yet."""
    with urllib.request.urlopen(running.probe_url, timeout=2) as response:
        if response.status != 200:
            return False
    if webhook:
        socket.create_connection(("127.0.0.1", running.ports[2]), timeout=2).close()
    return True


def _wait_ready(running: LocalOperator, webhook: bool) -> LocalOperator:
    """Return once the operator is ready; stop it and raise if it exits or never gets there."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if running.process.poll() is not None:
            code = running.process.returncode
            raise SandboxError(f"the operator exited with {code}:\n{running.log_tail()}")
        try:
            if _ready(running, webhook):
                return running
        except OSError:
            pass
        time.sleep(0.3)
    running.stop()
    what = running.probe_url + (f" and the webhook port {running.ports[2]}" if webhook else "")
    raise SandboxError(f"the operator did not answer {what} within {START_TIMEOUT_S:.0f}s")


def start_operator(
    kubeconfig: Path,
    log: Path,
    webhook_dir: Path | None,
    extra_args: tuple[str, ...] = (),
    detach: bool = False,
    hub_endpoint: str | None = None,
    configure_webhook: bool = True,
    webhook_client_ca: Path | None = None,
) -> LocalOperator:
    """Start the operator against ``kubeconfig`` and wait until /healthz answers.

    With ``webhook_dir`` it also serves the validating webhook on 127.0.0.1 (certificates
    there) and, unless ``configure_webhook`` is False (a second replica), writes the webhook
    configuration itself, as a sandbox needs; with ``webhook_client_ca`` it answers only the
    clients that CA signed (a sandbox's apiserver). ``hub_endpoint``
    is the operator-wide model hub (the sandbox's, when it serves one).
    """
    probe, metrics, webhook = free_ports(3)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        process = subprocess.Popen(
            _argv(
                (probe, metrics, webhook),
                webhook_dir,
                hub_endpoint,
                extra_args,
                configure_webhook,
                webhook_client_ca,
            ),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "KUBECONFIG": str(kubeconfig)},
            start_new_session=detach,
        )
    return _wait_ready(
        LocalOperator(
            process,
            (probe, metrics, webhook),
            f"http://127.0.0.1:{probe}/healthz",
            f"http://127.0.0.1:{metrics}/metrics",
            log,
        ),
        webhook=webhook_dir is not None,
    )


def log_path(sandbox: Sandbox) -> Path:
    return sandbox.logs / f"{NAME}.log"


def running_pid(sandbox: Sandbox) -> int | None:
    info = ((sandbox.read_state() or {}).get("processes") or {}).get(NAME)
    if info and pid_alive(info["pid"], info.get("start_time")):
        return int(info["pid"])
    return None


def start_registered(
    sandbox: Sandbox, read_interval_s: int = SANDBOX_READ_INTERVAL_S, detach: bool = True
) -> LocalOperator:
    """Start the sandbox's operator and register it in the sandbox's state, so ``sandbox down``
    stops it and ``specdeploy demo`` finds it running; ``detach`` outlives this process."""
    running = start_operator(
        sandbox.kubeconfig,
        log_path(sandbox),
        sandbox.dir / "webhook-tls",
        extra_args=("--acceptance-interval", str(read_interval_s)),
        detach=detach,
        hub_endpoint=sandbox.hub_endpoint(),
        webhook_client_ca=sandbox.webhook_client_ca(),
    )
    pid = running.process.pid
    sandbox.register_process(NAME, pid, process_start_time(pid), list(running.ports))
    return running


def ensure_running(sandbox: Sandbox) -> int:
    """The sandbox's operator, started detached (and registered) unless it already runs."""
    pid = running_pid(sandbox)
    if pid is not None:
        return pid
    return start_registered(sandbox).process.pid
