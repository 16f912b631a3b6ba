"""Container probes, run for real: HTTP GET, TCP connect or a command, against the pod's IP.

ProbeSpec reads a core/v1 Probe (kubelet's defaults); ProbeTracker applies its thresholds: the
result is unknown until ``successThreshold`` successes or ``failureThreshold`` failures in a
row. ``run_probe`` does one attempt; the pod worker runs it off its own thread.
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ProbeConfigError(ValueError):
    """A probe the engine node cannot run (e.g. a port name the container does not declare)."""


@dataclass(frozen=True)
class ProbeSpec:
    kind: str  # httpGet, tcpSocket, exec
    port: int = 0
    path: str = "/"
    scheme: str = "HTTP"
    host: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    command: tuple[str, ...] = ()
    initial_delay_s: float = 0.0
    period_s: float = 10.0
    timeout_s: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3
    termination_grace_s: float | None = None


def _port(value: Any, container: Mapping[str, Any]) -> int:
    """A probe port: a number, or the name of one of the container's ports."""
    if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
        return int(value)
    for port in container.get("ports") or []:
        if port.get("name") == value:
            return int(port["containerPort"])
    raise ProbeConfigError(f"probe port {value!r} is not a port of container {container.get('name')!r}")


def parse_probe(probe: Mapping[str, Any], container: Mapping[str, Any]) -> ProbeSpec:
    timing: dict[str, Any] = {
        "initial_delay_s": float(probe.get("initialDelaySeconds", 0)),
        "period_s": float(probe.get("periodSeconds", 10)),
        "timeout_s": float(probe.get("timeoutSeconds", 1)),
        "success_threshold": int(probe.get("successThreshold", 1)),
        "failure_threshold": int(probe.get("failureThreshold", 3)),
        "termination_grace_s": probe.get("terminationGracePeriodSeconds"),
    }
    if "httpGet" in probe:
        http = probe["httpGet"]
        headers = tuple((h["name"], h["value"]) for h in http.get("httpHeaders") or [])
        return ProbeSpec(
            "httpGet", port=_port(http["port"], container), path=http.get("path", "/"),
            scheme=http.get("scheme", "HTTP"), host=http.get("host", ""), headers=headers, **timing,
        )  # fmt: skip
    if "tcpSocket" in probe:
        tcp = probe["tcpSocket"]
        return ProbeSpec("tcpSocket", port=_port(tcp["port"], container), host=tcp.get("host", ""), **timing)
    if "exec" in probe:
        return ProbeSpec("exec", command=tuple(probe["exec"].get("command") or []), **timing)
    raise ProbeConfigError(f"unsupported probe handler {sorted(probe)} on a sandbox engine node")


@dataclass
class ProbeTracker:
    """Consecutive results of one probe of one container run, and when it is due next."""

    spec: ProbeSpec
    next_due: float
    result: bool | None = None
    successes: int = 0
    failures: int = 0
    last_failure: str = ""

    @classmethod
    def starting(cls, spec: ProbeSpec, started: float) -> ProbeTracker:
        return cls(spec, next_due=started + spec.initial_delay_s)

    def record(self, ok: bool, now: float, detail: str = "") -> None:
        """Count one attempt made at ``now``; the next one is a period later."""
        self.next_due = now + self.spec.period_s
        if ok:
            self.successes, self.failures = self.successes + 1, 0
            if self.successes >= self.spec.success_threshold:
                self.result = True
        else:
            self.successes, self.failures = 0, self.failures + 1
            self.last_failure = detail
            if self.failures >= self.spec.failure_threshold:
                self.result = False


class _NoRedirectToOtherHosts(urllib.request.HTTPRedirectHandler):
    """kubelet follows redirects only to the same host; others count as success (as kubelet does)."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> Any:
        if urllib.parse.urlsplit(newurl).hostname != urllib.parse.urlsplit(req.full_url).hostname:
            return None
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _http(spec: ProbeSpec, host: str) -> tuple[bool, str]:
    path = spec.path if spec.path.startswith("/") else "/" + spec.path
    url = f"{spec.scheme.lower()}://{host}:{spec.port}{path}"
    request = urllib.request.Request(url, headers={"User-Agent": "kube-probe/sandbox", **dict(spec.headers)})
    context = ssl._create_unverified_context()  # kubelet does not verify probe certificates either
    https = urllib.request.HTTPSHandler(context=context)
    opener = urllib.request.build_opener(_NoRedirectToOtherHosts(), https)
    try:
        with opener.open(request, timeout=spec.timeout_s) as response:
            code = int(response.status)
    except urllib.error.HTTPError as exc:
        code = exc.code
    except (OSError, ValueError) as exc:
        return False, f"Get {url!r}: {exc}"
    ok = 200 <= code < 400
    return ok, "" if ok else f"HTTP probe failed with statuscode: {code}"


def _tcp(spec: ProbeSpec, host: str) -> tuple[bool, str]:
    try:
        with socket.create_connection((host, spec.port), timeout=spec.timeout_s):
            return True, ""
    except OSError as exc:
        return False, f"dial tcp {host}:{spec.port}: {exc}"


def _exec(spec: ProbeSpec, env: Mapping[str, str], cwd: Path) -> tuple[bool, str]:
    try:
        proc = subprocess.run(
            list(spec.command), env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL,
            capture_output=True, timeout=spec.timeout_s, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return False, f"command timed out after {spec.timeout_s:g}s"
    except OSError as exc:
        return False, str(exc)
    output = (proc.stdout + proc.stderr).decode(errors="replace").strip()
    return proc.returncode == 0, output[-1024:]


def run_probe(spec: ProbeSpec, pod_ip: str, env: Mapping[str, str], cwd: Path) -> tuple[bool, str]:
    """One attempt: (success, what failed)."""
    host = spec.host or pod_ip
    if spec.kind == "httpGet":
        return _http(spec, host)
    if spec.kind == "tcpSocket":
        return _tcp(spec, host)
    return _exec(spec, env, cwd)
