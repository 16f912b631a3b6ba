"""The engine Deployment of a SpeculativeDeployment, as a plain manifest.

A pure function of the effective spec, the engine launch and the plan's placement: the operator
applies what it returns and ``specdeploy render`` prints it, so a reviewed diff of ``render``
output is exactly what the cluster will get.
"""

from __future__ import annotations

from typing import Any

from specdeploy import api
from specdeploy.children.labels import common_labels, object_metadata, selector_labels
from specdeploy.engines import EngineLaunch
from specdeploy.modelinfo.hub import default_endpoint
from specdeploy.planning import Placement

ENGINE_CONTAINER = "engine"
# The engines serve their OpenAI-compatible API and their Prometheus /metrics on one port.
ENGINE_PORT_NAME = "http"
METRICS_PATH = "/metrics"
SHM_SIZE = "16Gi"
CACHE_VOLUME = "model-cache"
SHM_VOLUME = "dshm"
TERMINATION_GRACE_SECONDS = 60
# The restricted Pod Security Standard's container rules the engines allow: no privilege
# escalation, no Linux capability (single-node tensor parallelism shares GPU memory through
# CUDA IPC and /dev/shm, neither needs one) and the runtime's default seccomp profile. Not
# runAsNonRoot: the vLLM and SGLang images run as root and write their caches under /root.
ENGINE_SECURITY_CONTEXT: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _env(spec: api.SpeculativeDeploymentSpec, launch: EngineLaunch) -> list[dict[str, Any]]:
    """Hub access (token, endpoint, offline) then ``engine.env``. The endpoint is the resource's,
    else the operator-wide default, so engines download from the mirror the operator looked in."""
    access = spec.model_access
    env: list[dict[str, Any]] = []
    if access.token_secret_ref is not None:
        env.append(
            {
                "name": "HF_TOKEN",
                "valueFrom": {
                    "secretKeyRef": {"name": access.token_secret_ref.name, "key": access.token_secret_ref.key}
                },
            }
        )
    endpoint = access.endpoint or default_endpoint()
    if endpoint:
        env.append({"name": "HF_ENDPOINT", "value": endpoint})
    if access.offline:
        env.append({"name": "HF_HUB_OFFLINE", "value": "1"})
    return [*env, *launch.env]


def _volumes(spec: api.SpeculativeDeploymentSpec) -> list[dict[str, Any]]:
    """The model cache (a claim, else an emptyDir) and a RAM-backed /dev/shm for NCCL and the
    engine's worker processes (a container's default is 64 MiB)."""
    cache = spec.model_cache
    if cache.claim_name:
        cache_volume: dict[str, Any] = {
            "name": CACHE_VOLUME,
            "persistentVolumeClaim": {"claimName": cache.claim_name},
        }
    else:
        empty_dir: dict[str, Any] = {}
        if cache.size_limit:
            empty_dir["sizeLimit"] = cache.size_limit
        cache_volume = {"name": CACHE_VOLUME, "emptyDir": empty_dir}
    return [cache_volume, {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": SHM_SIZE}}]


def _mounts(spec: api.SpeculativeDeploymentSpec) -> list[dict[str, Any]]:
    return [
        {"name": CACHE_VOLUME, "mountPath": spec.model_cache.mount_path},
        {"name": SHM_VOLUME, "mountPath": "/dev/shm"},
    ]


def _resources(spec: api.SpeculativeDeploymentSpec, gpus: int) -> dict[str, Any]:
    requests = {**spec.resources.requests, api.GPU_RESOURCE: str(gpus)}
    limits = {**spec.resources.limits, api.GPU_RESOURCE: str(gpus)}
    return {"requests": requests, "limits": limits}


def _merge_affinity(
    user: dict[str, Any] | None, required_terms: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """AND the plan's node requirements into every term the user gave (or make one term)."""
    if not required_terms:
        return user
    affinity = dict(user or {})
    node_affinity = dict(affinity.get("nodeAffinity") or {})
    required = dict(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or [{}]
    merged_terms = []
    for term in terms:
        term = dict(term)
        term["matchExpressions"] = [*(term.get("matchExpressions") or []), *required_terms]
        merged_terms.append(term)
    required["nodeSelectorTerms"] = merged_terms
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = required
    affinity["nodeAffinity"] = node_affinity
    return affinity


def _container(spec: api.SpeculativeDeploymentSpec, launch: EngineLaunch, gpus: int) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": ENGINE_CONTAINER,
        "image": launch.image,
        "imagePullPolicy": spec.engine.image_pull_policy,
        "command": launch.command,
        "ports": [{"name": ENGINE_PORT_NAME, "containerPort": launch.port, "protocol": "TCP"}],
        "resources": _resources(spec, gpus),
        "volumeMounts": _mounts(spec),
        "startupProbe": launch.startup_probe,
        "readinessProbe": launch.readiness_probe,
        "livenessProbe": launch.liveness_probe,
        # A failed engine's last log lines (its error) become the termination message in the
        # pod status, which the operator reports in the Degraded condition.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": ENGINE_SECURITY_CONTEXT,
    }
    env = _env(spec, launch)
    if env:
        container["env"] = env
    return container


def _pod_spec(
    spec: api.SpeculativeDeploymentSpec, launch: EngineLaunch, placement: Placement
) -> dict[str, Any]:
    """The engine container with its volumes, and the plan's placement merged with spec.scheduling."""
    scheduling = spec.scheduling
    tolerations = [
        *(dict(t) for t in placement.tolerations),
        *(t.model_dump(by_alias=True, exclude_none=True) for t in scheduling.tolerations),
    ]
    pod_spec: dict[str, Any] = {
        "containers": [_container(spec, launch, placement.gpus)],
        "volumes": _volumes(spec),
        "tolerations": tolerations,
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        "enableServiceLinks": False,
        # An engine never calls the Kubernetes API: no ServiceAccount token in its filesystem.
        "automountServiceAccountToken": False,
    }
    if scheduling.node_selector:
        pod_spec["nodeSelector"] = dict(scheduling.node_selector)
    affinity = _merge_affinity(scheduling.affinity, list(placement.node_requirements))
    if affinity:
        pod_spec["affinity"] = affinity
    if scheduling.priority_class_name:
        pod_spec["priorityClassName"] = scheduling.priority_class_name
    if scheduling.runtime_class_name:
        pod_spec["runtimeClassName"] = scheduling.runtime_class_name
    return pod_spec


def build_deployment(
    name: str,
    namespace: str,
    spec: api.SpeculativeDeploymentSpec,
    launch: EngineLaunch,
    placement: Placement,
    owner: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The engine Deployment for an effective spec (models, TP and engine knobs resolved).

    ``placement`` comes from the GPU plan: GPUs per replica, node requirements, tolerations.
    """
    labels = common_labels(name, spec.engine.name)
    # The annotations plain Prometheus' kubernetes-pods job scrapes by; spec.podMetadata can
    # override them (prometheus.io/scrape: "false" where a PodMonitor already scrapes).
    scrape = {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(launch.port),
        "prometheus.io/path": METRICS_PATH,
    }
    pod_meta: dict[str, Any] = {
        "labels": {**spec.pod_metadata.labels, **labels},
        "annotations": {**scrape, **spec.pod_metadata.annotations},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": object_metadata(name, namespace, labels, owner),
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": selector_labels(name)},
            # A GPU pair cannot surge: a second copy would need a second set of GPUs.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "template": {"metadata": pod_meta, "spec": _pod_spec(spec, launch, placement)},
        },
    }
