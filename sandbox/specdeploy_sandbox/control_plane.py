"""What each control-plane process of a sandbox runs: its command line, and the files it reads.

Kept apart from the lifecycle in ``cluster`` so every flag a component is pinned to reads as one
list, next to the reason it is there.
"""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Any, NamedTuple

from specdeploy_sandbox import nodes
from specdeploy_sandbox.binaries import KUBERNETES_VERSION, Binaries
from specdeploy_sandbox.pki import Pki

SERVICE_CIDR = "10.96.0.0/16"
UNUSED_CONTROLLERS = (
    "endpoints-controller",
    "endpointslice-controller",
    "endpointslice-mirroring-controller",
)
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata"}],
}


class Ports(NamedTuple):
    """The loopback ports of one sandbox, picked free together when it starts."""

    etcd: int
    etcd_peer: int
    api: int
    controller_manager: int
    scheduler: int


def etcd(bins: Binaries, data_dir: Path, ports: Ports) -> list[str]:
    url = f"http://127.0.0.1:{ports.etcd}"
    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    return [
        str(bins.etcd),
        "--name=sandbox",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={url}",
        f"--advertise-client-urls={url}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=sandbox={peer}",
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]


def admission_configuration(webhook_kubeconfig: Path) -> dict[str, Any]:
    """The apiserver's admission plugin configuration: it authenticates to every webhook with
    the credentials of ``webhook_kubeconfig``."""
    plugins = []
    for plugin, kind in (
        ("ValidatingAdmissionWebhook", "WebhookAdmissionConfiguration"),
        ("MutatingAdmissionWebhook", "WebhookAdmissionConfiguration"),
    ):
        plugins.append(
            {
                "name": plugin,
                "configuration": {
                    "apiVersion": "apiserver.config.k8s.io/v1",
                    "kind": kind,
                    "kubeConfigFile": str(webhook_kubeconfig),
                },
            }
        )
    return {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration", "plugins": plugins}


def webhook_client_kubeconfig(keys: Pki) -> dict[str, Any]:
    """One user for every webhook host ("*"): the sandbox's webhook client certificate."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "users": [
            {
                "name": "*",
                "user": {
                    "client-certificate": str(keys.webhook_client_cert),
                    "client-key": str(keys.webhook_client_key),
                },
            }
        ],
    }


def kube_apiserver(
    bins: Binaries,
    keys: Pki,
    ports: Ports,
    cert_dir: Path,
    audit_policy: Path,
    audit_log: Path,
    admission_config: Path,
) -> list[str]:
    return [
        str(bins.kube_apiserver),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={ports.api}",
        f"--tls-cert-file={keys.apiserver_cert}",
        f"--tls-private-key-file={keys.apiserver_key}",
        f"--client-ca-file={keys.ca_cert}",
        "--authorization-mode=Node,RBAC",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={keys.service_account_pub}",
        f"--service-account-signing-key-file={keys.service_account_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--endpoint-reconciler-type=none",
        "--allow-privileged=true",
        "--profiling=false",
        f"--cert-dir={cert_dir}",
        f"--audit-policy-file={audit_policy}",
        f"--audit-log-path={audit_log}",
        # A client certificate for webhook calls, so webhooks can refuse unknown clients.
        f"--admission-control-config-file={admission_config}",
    ]


def _client_flags(kubeconfig: Path) -> list[str]:
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        # The default 20 requests/s throttles the controllers long before this machine does
        # when hundreds of Deployments roll out at once (benchmarks, scale tests).
        "--kube-api-qps=200",
        "--kube-api-burst=400",
    ]


def kube_controller_manager(bins: Binaries, keys: Pki, ports: Ports, kubeconfig: Path) -> list[str]:
    return [
        str(bins.kube_controller_manager),
        *_client_flags(kubeconfig),
        f"--secure-port={ports.controller_manager}",
        f"--service-account-private-key-file={keys.service_account_key}",
        f"--root-ca-file={keys.ca_cert}",
        f"--cluster-signing-cert-file={keys.ca_cert}",
        f"--cluster-signing-key-file={keys.ca_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        # Sandbox pod IPs are loopback addresses, which the apiserver refuses in Endpoints and
        # EndpointSlices: these controllers would retry every Service forever (thousands of failed
        # writes and Events in a scale run), and nothing here routes Services (no kube-proxy).
        f"--controllers=*,{','.join('-' + c for c in UNUSED_CONTROLLERS)}",
    ]


def kube_scheduler(bins: Binaries, ports: Ports, kubeconfig: Path) -> list[str]:
    return [str(bins.kube_scheduler), *_client_flags(kubeconfig), f"--secure-port={ports.scheduler}"]


def kwok(bins: Binaries, kubeconfig: Path, pod_cidr: str) -> list[str]:
    """KWOK with the KWOK half of the sandbox's pod IPs (engine nodes have the other half)."""
    return [
        str(bins.kwok),
        f"--kubeconfig={kubeconfig}",
        f"--manage-nodes-with-annotation-selector={nodes.KWOK_ANNOTATION}={nodes.KWOK_ANNOTATION_VALUE}",
        # No --server-address and --node-port=0: kwok serves nothing (no exec/logs endpoints needed).
        f"--cidr={pod_cidr}",
        "--node-ip=127.0.0.1",
        "--node-port=0",
        # Node leases are the heartbeat the node lifecycle controller watches; without them
        # it marks the nodes (and their pods) NotReady after the grace period.
        "--node-lease-duration-seconds=40",
    ]


def engine_node(
    kubeconfig: Path, node: str, state_dir: Path, pod_cidr: str, port: int, runtimes: dict[str, Path]
) -> list[str]:
    """The agent that plays the kubelet of engine node ``node`` (see ``sandbox.enginenode``)."""
    return [
        sys.executable, "-m", "specdeploy_sandbox.enginenode", f"--kubeconfig={kubeconfig}",
        f"--node={node}", f"--state-dir={state_dir}", f"--pod-cidr={pod_cidr}", f"--kubelet-port={port}",
        f"--kubelet-version={KUBERNETES_VERSION}",
        *(f"--runtime={name}={directory}" for name, directory in sorted(runtimes.items())),
    ]  # fmt: skip


def kubeconfig(name: str, keys: Pki, port: int) -> dict[str, Any]:
    """An admin kubeconfig for the sandbox ``name``, with its certificates inlined."""

    def b64(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    context = f"specdeploy-{name}"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": context,
                "cluster": {
                    "server": f"https://127.0.0.1:{port}",
                    "certificate-authority-data": b64(keys.ca_cert),
                },
            }
        ],
        "users": [
            {
                "name": f"{context}-admin",
                "user": {
                    "client-certificate-data": b64(keys.admin_cert),
                    "client-key-data": b64(keys.admin_key),
                },
            }
        ],
        "contexts": [{"name": context, "context": {"cluster": context, "user": f"{context}-admin"}}],
        "current-context": context,
    }
