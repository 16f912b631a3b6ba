"""The engine LeaderWorkerSet of a SpeculativeDeployment whose replicas span several nodes.

LeaderWorkerSet (LWS, a Kubernetes SIG project) runs each replica as a group of ``size`` pods, one
per node: the leader (index 0) and its workers. Every pod runs the engine's multi-node launch
(``engines``); only the leader serves HTTP, so only it has the port, the probes and the
Prometheus annotations, and the Service selects it by ``ROLE_LABEL``. A group is ready when all
its pods are, and a pod that fails restarts its whole group: the engine's process group cannot
take a restarted rank back.
"""

from __future__ import annotations

import copy
from typing import Any

from specdeploy import api
from specdeploy.api.engine_pod import ENGINE_CONTAINER
from specdeploy.children.defaults import NO_DEFAULTS, PodDefaults
from specdeploy.children.deployment import engine_pod_template, rolling_update
from specdeploy.children.labels import child_manifest
from specdeploy.engines import EngineLaunch
from specdeploy.planning import Placement

API_VERSION = "leaderworkerset.x-k8s.io/v1"
KIND = "LeaderWorkerSet"
# How a cluster gets LeaderWorkerSet: its release manifest (CRD, controller and webhooks).
LWS_VERSION = "v0.9.0"
INSTALL = (
    "kubectl apply --server-side -f "
    f"https://github.com/kubernetes-sigs/lws/releases/download/{LWS_VERSION}/manifests.yaml"
)
ROLE_LABEL = f"{api.GROUP}/role"
LEADER, WORKER = "leader", "worker"
# The leader's labels that only it carries: the Service's selector on a multi-node resource.
LEADER_SELECTOR = {ROLE_LABEL: LEADER}
_LEADER_ONLY = ("ports", "startupProbe", "readinessProbe", "livenessProbe", "lifecycle")


def _worker_template(leader: dict[str, Any], launch: EngineLaunch) -> dict[str, Any]:
    """The leader's template for the other pods: their command, no port, probe or scrape
    annotations (they serve no HTTP) and no preStop pause (no endpoint to leave)."""
    if launch.worker_command is None:
        raise ValueError("a multi-node launch needs the workers' command")
    worker = copy.deepcopy(leader)
    worker["metadata"]["labels"][ROLE_LABEL] = WORKER
    worker["metadata"]["annotations"] = {
        k: v for k, v in worker["metadata"]["annotations"].items() if not k.startswith("prometheus.io/")
    }
    for container in worker["spec"]["containers"]:
        if container["name"] == ENGINE_CONTAINER:
            container["command"] = launch.worker_command
            for key in _LEADER_ONLY:
                container.pop(key, None)
    return worker


def build_leader_worker_set(
    name: str,
    namespace: str,
    spec: api.SpeculativeDeploymentSpec,
    launch: EngineLaunch,
    placement: Placement,
    plan: api.Plan,
    owner: dict[str, Any] | None = None,
    defaults: PodDefaults = NO_DEFAULTS,
) -> dict[str, Any]:
    """The LeaderWorkerSet for an effective spec whose plan spans ``plan.nodesPerReplica`` nodes
    (the workers' template is the leader's, ``spec.podTemplate`` and the defaults included)."""
    leader = engine_pod_template(name, spec, launch, placement, plan, defaults, LEADER_SELECTOR)
    body = {
        "replicas": spec.replicas,
        "startupPolicy": "LeaderCreated",
        # As for a Deployment, but by groups: NoSurge replaces one group at a time in place,
        # Surge adds a group first (one replica's worth of spare nodes).
        "rolloutStrategy": {
            "type": "RollingUpdate",
            "rollingUpdateConfiguration": rolling_update(spec.rollout),
        },
        "leaderWorkerTemplate": {
            "size": plan.nodes_per_replica,
            "restartPolicy": "RecreateGroupOnPodRestart",
            "leaderTemplate": leader,
            "workerTemplate": _worker_template(leader, launch),
        },
    }
    return child_manifest(API_VERSION, KIND, name, namespace, spec.engine.name, owner, body)
