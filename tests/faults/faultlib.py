"""The fault suite's tools: a fleet of SpeculativeDeployments, the invariants their children must
keep, and an operator process that can be killed and started again.

Counts come from the environment so the reliability script can run the full figures
(``SPECDEPLOY_FAULT_*``); CI runs the defaults. ``SPECDEPLOY_FAULT_REPORT`` names a directory
where each test writes its figures as JSON.
"""

from __future__ import annotations

import json
import os
import ssl
import time
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client

from specdeploy import api, children
from specdeploy_sandbox.operator_process import LocalOperator, start_operator
from support.kube import metric_samples

H100 = "NVIDIA-H100-80GB-HBM3"
GPUS_PER_NODE = 8
INSTANCE = children.INSTANCE_LABEL
MANAGED = f"{children.MANAGED_BY_LABEL}={children.MANAGED_BY}"


def count(name: str, default: int) -> int:
    return int(os.environ.get(f"SPECDEPLOY_FAULT_{name}", str(default)))


def report(test: str, figures: dict[str, Any]) -> None:
    """Print the figures; also write them where the reliability script collects them."""
    print(f"\n{test}: {json.dumps(figures)}")
    directory = os.environ.get("SPECDEPLOY_FAULT_REPORT")
    if directory:
        Path(directory).mkdir(parents=True, exist_ok=True)
        (Path(directory) / f"{test}.json").write_text(json.dumps(figures, indent=2))


def resource(namespace: str, name: str, tokens: int = 3) -> dict[str, Any]:
    """A one-GPU pair the catalog knows (no Hub lookup), pinned to H100 so the fleet fits."""
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "verifier": {"model": "Qwen/Qwen3-30B-A3B-Instruct-2507"},
            "speculator": {
                "model": "RedHatAI/Qwen3-30B-A3B-Instruct-2507-speculator.eagle3",
                "numSpeculativeTokens": tokens,
            },
            "parallelism": {"tensor": 1, "gpuProduct": "h100-80gb"},
        },
    }


@dataclass
class Apis:
    custom: client.CustomObjectsApi
    apps: client.AppsV1Api
    core: client.CoreV1Api
    coordination: client.CoordinationV1Api

    @classmethod
    def of(cls, api_client: client.ApiClient) -> Apis:
        return cls(
            client.CustomObjectsApi(api_client),
            client.AppsV1Api(api_client),
            client.CoreV1Api(api_client),
            client.CoordinationV1Api(api_client),
        )

    def resources(self, namespace: str) -> list[dict[str, Any]]:
        found = self.custom.list_namespaced_custom_object(api.GROUP, api.VERSION, namespace, api.PLURAL)
        items: list[dict[str, Any]] = found["items"]
        return items

    def create(self, namespace: str, body: dict[str, Any]) -> None:
        self.custom.create_namespaced_custom_object(api.GROUP, api.VERSION, namespace, api.PLURAL, body)

    def delete(self, namespace: str, name: str) -> None:
        self.custom.delete_namespaced_custom_object(api.GROUP, api.VERSION, namespace, api.PLURAL, name)

    def patch_spec(self, namespace: str, name: str, spec: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(
            api.GROUP, api.VERSION, namespace, api.PLURAL, name, {"spec": spec}
        )


def _speculative_tokens(command: list[str]) -> int | None:
    if "--speculative-config" not in command:
        return None
    value = json.loads(command[command.index("--speculative-config") + 1]).get("num_speculative_tokens")
    return int(value) if value is not None else None


@dataclass
class Check:
    """Every invariant the fleet must hold once settled; ``problems`` empty when it does."""

    problems: list[str] = field(default_factory=list)
    ready: int = 0
    resources: int = 0


def check_fleet(apis: Apis, namespace: str, expect_tokens: dict[str, int] | None = None) -> Check:
    """One Deployment and one Service per resource, owned by it (controller reference to its
    uid), none without a live owner, the Deployment on the resource's current command with one
    active ReplicaSet, and the resource Ready for its current generation."""
    check = Check()
    owners = {item["metadata"]["name"]: item for item in apis.resources(namespace)}
    check.resources = len(owners)
    uids = {item["metadata"]["uid"]: name for name, item in owners.items()}
    deployments = apis.apps.list_namespaced_deployment(namespace, label_selector=MANAGED).items
    services = apis.core.list_namespaced_service(namespace, label_selector=MANAGED).items
    replica_sets = apis.apps.list_namespaced_replica_set(namespace, label_selector=MANAGED).items
    for kind, objects in (("Deployment", deployments), ("Service", services)):
        per_owner = Counter(o.metadata.labels.get(INSTANCE) for o in objects)
        check.problems += [f"{n} {kind}s for {owner}" for owner, n in per_owner.items() if n > 1]
        check.problems += [f"no {kind} for {name}" for name in owners if per_owner[name] == 0]
        for obj in objects:
            refs = [r for r in obj.metadata.owner_references or [] if r.controller]
            if len(refs) != 1 or refs[0].uid not in uids:
                check.problems.append(f"{kind} {obj.metadata.name} has no live owner: {refs}")
            elif uids[refs[0].uid] != obj.metadata.name:
                check.problems.append(f"{kind} {obj.metadata.name} is owned by {uids[refs[0].uid]}")
    active = Counter(
        ref.name
        for rs in replica_sets
        if (rs.spec.replicas or 0) > 0
        for ref in rs.metadata.owner_references or []
        if ref.kind == "Deployment"
    )
    by_name = {d.metadata.name: d for d in deployments}
    for name, item in owners.items():
        status = item.get("status") or {}
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        ready = conditions.get(api.READY, {})
        if (
            ready.get("status") == "True"
            and status.get("observedGeneration") == item["metadata"]["generation"]
        ):
            check.ready += 1
        else:
            check.problems.append(
                f"{name} not Ready for generation {item['metadata']['generation']}: {ready}"
            )
        deployment = by_name.get(name)
        if deployment is None:
            continue
        command = deployment.spec.template.spec.containers[0].command
        if command != status.get("command"):
            check.problems.append(f"{name}: the Deployment does not run status.command")
        if expect_tokens is not None and _speculative_tokens(command) != expect_tokens.get(name):
            check.problems.append(
                f"{name}: {_speculative_tokens(command)} speculative tokens, not {expect_tokens[name]}"
            )
        if active[name] != 1:
            check.problems.append(f"{name}: {active[name]} active ReplicaSets")
    return check


def wait_fleet(
    apis: Apis, namespace: str, timeout: float, expect_tokens: dict[str, int] | None = None
) -> tuple[Check, float]:
    """Poll until the fleet holds every invariant (or ``timeout``); the last check and the wait."""
    started = time.monotonic()
    while True:
        check = check_fleet(apis, namespace, expect_tokens)
        if not check.problems or time.monotonic() - started > timeout:
            return check, time.monotonic() - started
        time.sleep(1.0)


class OperatorUnderFault:
    """``specdeploy run`` as a process this suite kills and starts again; one log for all runs."""

    def __init__(
        self,
        kubeconfig: Path,
        workdir: Path,
        extra_args: tuple[str, ...] = (),
        configure_webhook: bool = True,
        tls: Path | None = None,
        webhook_client_ca: Path | None = None,
        webhook: bool = True,
    ) -> None:
        self.kubeconfig = kubeconfig
        workdir.mkdir(parents=True, exist_ok=True)
        self.log = workdir / "operator.log"
        self.tls = tls or workdir / "tls"
        self.extra_args = extra_args
        self.configure_webhook = configure_webhook
        self.webhook_client_ca = webhook_client_ca
        self.webhook = webhook
        self.running: LocalOperator | None = None
        self.starts = 0

    def start(self) -> LocalOperator:
        assert self.running is None or self.running.process.poll() is not None, "already running"
        self.running = start_operator(
            self.kubeconfig,
            self.log,
            self.tls if self.webhook else None,
            extra_args=self.extra_args,
            configure_webhook=self.configure_webhook,
            webhook_client_ca=self.webhook_client_ca,
        )
        self.starts += 1
        return self.running

    def metric(self, name: str) -> float:
        """The sum of a sample of this process's /metrics (0 when it has none)."""
        assert self.running is not None
        return sum(value for _, value in metric_samples(self.running.metrics_url, name))

    def kill(self) -> None:
        """SIGKILL: no shutdown handler runs, as when a node dies or the OOM killer strikes."""
        assert self.running is not None
        self.running.process.kill()
        self.running.process.wait(timeout=10)

    def stop(self) -> None:
        if self.running is not None and self.running.process.poll() is None:
            self.running.stop()

    def alive(self) -> bool:
        return self.running is not None and self.running.process.poll() is None

    def log_lines(self, since: int = 0) -> list[str]:
        with open(self.log, "rb") as handle:
            handle.seek(since)
            return handle.read().decode(errors="replace").splitlines()


def review(
    replica: OperatorUnderFault, namespace: str, spec: dict[str, Any], certificate: tuple[Path, Path]
) -> dict[str, Any]:
    """POST an AdmissionReview straight to one replica's webhook server, as the apiserver would
    (with its webhook client certificate)."""
    assert replica.running is not None
    port = replica.running.ports[2]
    body = resource(namespace, "review")
    body["spec"] = spec
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": api.GROUP, "version": api.VERSION, "kind": api.KIND},
            "resource": {"group": api.GROUP, "version": api.VERSION, "resource": api.PLURAL},
            "operation": "CREATE",
            "namespace": namespace,
            "name": "review",
            "object": body,
            "userInfo": {"username": "fault-suite"},
        },
    }
    context = ssl.create_default_context(cafile=str(replica.tls / "ca.crt"))
    context.load_cert_chain(str(certificate[0]), str(certificate[1]))
    request = urllib.request.Request(
        f"https://127.0.0.1:{port}/validate",
        data=json.dumps(review).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, context=context, timeout=10) as answer:
        response: dict[str, Any] = json.loads(answer.read())["response"]
    return response
