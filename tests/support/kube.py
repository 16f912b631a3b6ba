"""Helpers for tests that talk to a real (sandbox) cluster: kubectl, objects and their conditions,
bounded waits with diagnostics, the operator's writes and metrics."""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

from specdeploy_sandbox.operator_process import LocalOperator
from support.paths import CRD_FILE, CRD_NAME

T = TypeVar("T")


@dataclass(frozen=True)
class Cluster:
    """The cluster under test. ``pod_cidr``, ``audit_log`` and ``webhook_client_ca`` (the CA of
    the certificate its apiserver presents to webhooks) are None for a reused external cluster."""

    kubeconfig: Path
    pod_cidr: str | None
    audit_log: Path | None
    webhook_client_ca: Path | None = None


class Kubectl:
    """Runs the pinned kubectl against the cluster under test."""

    def __init__(self, binary: str, kubeconfig: Path) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig

    def run(
        self, *args: str, input: str | None = None, namespace: str | None = None, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        argv = [self.binary, f"--kubeconfig={self.kubeconfig}"]
        if namespace:
            argv.append(f"--namespace={namespace}")
        return subprocess.run(
            [*argv, *args], input=input, capture_output=True, text=True, timeout=timeout, check=False
        )

    def __call__(
        self, *args: str, input: str | None = None, namespace: str | None = None, timeout: float = 60.0
    ) -> str:
        """stdout of a kubectl command that must succeed."""
        proc = self.run(*args, input=input, namespace=namespace, timeout=timeout)
        if proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc.stdout


class WaitFor:
    """Polls a predicate with a deadline; on timeout fails with a dump of the namespace and nodes."""

    def __init__(self, kubectl: Kubectl, namespace: str | None) -> None:
        self.kubectl = kubectl
        self.namespace = namespace

    def __call__(self, predicate: Callable[[], T | None], timeout: float = 60.0, describe: str = "") -> T:
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while True:
            try:
                result = predicate()
                if result:
                    return result
            except Exception as exc:
                last_error = exc
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
        detail = f"\nlast error: {last_error!r}" if last_error else ""
        pytest.fail(
            f"timed out after {timeout:.0f}s waiting for {describe or predicate}{detail}\n{self.snapshot()}",
            pytrace=False,
        )

    def snapshot(self) -> str:
        """What the cluster looked like: workloads and events of the namespace, and the nodes."""
        commands = [("get", "nodes", "-o", "wide")]
        if self.namespace:
            commands.insert(0, ("get", "all,events", "-o", "wide", f"--namespace={self.namespace}"))
        parts = []
        for command in commands:
            proc = self.kubectl.run(*command, timeout=30)
            parts.append(f"$ kubectl {' '.join(command)}\n{proc.stdout}{proc.stderr}")
        return "\n".join(parts)


def wait_crd_established(kubectl: Kubectl, name: str, timeout: float = 60.0) -> None:
    """Poll the CRD's Established condition; `kubectl wait` errors while it has no conditions yet."""
    status = "jsonpath={.status.conditions[?(@.type=='Established')].status}"
    WaitFor(kubectl, None)(
        lambda: kubectl.run("get", "crd", name, "-o", status).stdout == "True",
        timeout,
        f"CRD {name} to be Established",
    )


@contextmanager
def fresh_namespace(kubectl: Kubectl, test_name: str) -> Iterator[str]:
    """A fresh namespace named after the test, with its default ServiceAccount ready (pods are
    refused until the serviceaccount controller made it); deleted afterwards, without waiting."""
    slug = re.sub(r"[^a-z0-9-]+", "-", test_name.lower()).strip("-")[:40].rstrip("-")
    name = f"{slug}-{secrets.token_hex(3)}"
    kubectl("create", "namespace", name)
    try:
        WaitFor(kubectl, name)(
            lambda: kubectl.run("get", "serviceaccount", "default", namespace=name).returncode == 0,
            timeout=30,
            describe=f"the default ServiceAccount in {name}",
        )
        yield name
    finally:
        kubectl.run("delete", "namespace", name, "--wait=false")


def install_crd(kubectl: Kubectl) -> None:
    """The checked-in CRD applied (server-side, taking over any field) and Established."""
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    wait_crd_established(kubectl, CRD_NAME)


def get(kubectl: Kubectl, namespace: str | None, *what: str) -> dict[str, Any]:
    """``kubectl get <what> -o json`` (in ``namespace`` when given), parsed."""
    result: dict[str, Any] = json.loads(kubectl("get", *what, "-o", "json", namespace=namespace))
    return result


def condition(body: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    """The object's ``type_`` condition, or {} when it has none (so ``.get`` reads any field)."""
    for found in ((body or {}).get("status") or {}).get("conditions") or []:
        if found["type"] == type_:
            return dict(found)
    return {}


def events(kubectl: Kubectl, namespace: str, name: str, reason: str = "") -> list[dict[str, Any]]:
    """Events about the object called ``name`` in ``namespace`` (with ``reason``, when given)."""
    selector = f"involvedObject.name={name}" + (f",reason={reason}" if reason else "")
    items: list[dict[str, Any]] = get(kubectl, namespace, "events", "--field-selector", selector)["items"]
    return items


def operator_writes(audit_log: Path, namespace: str, since: int) -> list[dict[str, Any]]:
    """Audit events of mutating requests the operator sent in ``namespace`` after byte ``since``."""
    writes = []
    with open(audit_log, "rb") as handle:
        handle.seek(since)
        for line in handle:
            event = json.loads(line)
            if event.get("stage") != "ResponseComplete":
                continue
            if event.get("verb") not in ("create", "update", "patch", "delete", "deletecollection"):
                continue
            agent = event.get("userAgent", "")
            if not agent.startswith(("specdeploy", "kopf")):
                continue
            if event.get("objectRef", {}).get("namespace") == namespace:
                writes.append(event)
    return writes


def metric_samples(url: str, name: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every sample called ``name`` on a /metrics endpoint."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return [
        (sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]


def reconciles(operator: LocalOperator, outcome: str = "") -> float:
    """The operator's reconcile counter (from its /metrics), for one outcome or all of them."""
    counts = metric_samples(operator.metrics_url, "specdeploy_reconciles_total")
    return sum(value for labels, value in counts if not outcome or labels["outcome"] == outcome)


class RoseThenQuiet:
    """A wait_for predicate: true once ``read()`` rose by ``at_least`` and then stayed put for ``quiet`` s.

    Stopping as soon as the counter rises would end a window while reconciles caused by the same
    events (the controllers' own status updates after them) may still be coming; a quiet period
    after the rise lets every one of them finish inside it.
    """

    def __init__(self, read: Callable[[], float], at_least: float, quiet: float) -> None:
        self.read, self.at_least, self.quiet = read, at_least, quiet
        self.start = self.last = read()
        self.changed = time.monotonic()

    def __call__(self) -> bool:
        now = self.read()
        if now != self.last:
            # Timed from when the change is seen, so the quiet period is never shorter than asked.
            self.last, self.changed = now, time.monotonic()
        return now - self.start >= self.at_least and time.monotonic() - self.changed >= self.quiet
