"""LeaderWorkerSet in the sandbox: its CRDs, its controller's configuration and its webhooks,
served on loopback with a certificate from the sandbox's CA.

Multi-node replicas run as LeaderWorkerSet groups, so the sandbox runs the real LWS controller
(``sigs.k8s.io/lws``, built once and cached like the Kubernetes binaries: ``binaries.ensure_lws``)
the way its release manifest installs it, with what a local control plane needs instead: the
apiserver calls the webhooks at ``https://127.0.0.1:PORT`` (no Service, no in-cluster DNS) with the
sandbox CA as their ``caBundle``, and the controller's own certificate rotation, leader election
and metrics server are off.
"""

from __future__ import annotations

import base64
import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from specdeploy_sandbox.binaries import LwsBuild

PROCESS = "lws-controller"
# The release manifest's pod webhooks see only LWS pods (its kustomize patches add this selector).
LWS_POD_SELECTOR = {"matchExpressions": [{"key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists"}]}
_POD_WEBHOOKS = ("mpod.kb.io", "vpod.kb.io")
# The webhook registered last: once it answers, they all do.
POD_WEBHOOK_PATH = "/mutate--v1-pod"


@dataclass(frozen=True)
class Ports:
    webhook: int
    health: int


def configuration(ports: Ports, cert_dir: Path) -> dict[str, Any]:
    """The controller's Configuration: loopback only, no metrics server, no leader election, the
    sandbox's certificate instead of its own rotation."""
    return {
        "apiVersion": "config.lws.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": ports.webhook, "certDir": str(cert_dir)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports.health}"},
    }


def webhook_configurations(build: LwsBuild, port: int, ca_bundle: bytes) -> list[dict[str, Any]]:
    """The release's webhook configurations, calling the controller on loopback."""
    configured = []
    for document in yaml.safe_load_all(build.webhooks.read_text()):
        if not document:
            continue
        document = copy.deepcopy(document)
        document["metadata"]["name"] = f"lws-{document['metadata']['name']}"
        for webhook in document["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {
                "url": f"https://127.0.0.1:{port}{path}",
                "caBundle": base64.b64encode(ca_bundle).decode(),
            }
            if webhook["name"] in _POD_WEBHOOKS:
                webhook["objectSelector"] = copy.deepcopy(LWS_POD_SELECTOR)
        configured.append(document)
    return configured


def custom_resource_definitions(build: LwsBuild) -> list[dict[str, Any]]:
    """The CRDs (2.8 MB of YAML: libyaml's loader reads them ten times faster than PyYAML's)."""
    return [yaml.load(path.read_text(), Loader=yaml.CSafeLoader) for path in build.crds]


def command(build: LwsBuild, config_file: Path) -> list[str]:
    return [str(build.manager), f"--config={config_file}"]
