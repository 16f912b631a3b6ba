"""The engine Deployment of a SpeculativeDeployment, as a plain manifest.

A pure function of the effective spec, the engine launch and the plan's placement: the operator
applies what it returns and ``specdeploy render`` prints it, so a reviewed diff of ``render``
output is exactly what the cluster will get.
"""

from __future__ import annotations

from typing import Any

from specdeploy import api
from specdeploy.api.engine_pod import ENGINE_CONTAINER
from specdeploy.children.defaults import NO_DEFAULTS, PodDefaults
from specdeploy.children.labels import child_manifest, common_labels, selector_labels
from specdeploy.children.podpatch import patch_pod_template
from specdeploy.children.sizing import PodSizing, container_resources, pod_sizing
from specdeploy.engines import EngineLaunch
from specdeploy.modelinfo.hub import default_endpoint
from specdeploy.planning import Placement

# The engines serve their OpenAI-compatible API and their Prometheus /metrics on one port.
ENGINE_PORT_NAME = "http"
METRICS_PATH = "/metrics"
CACHE_VOLUME = "model-cache"
SHM_VOLUME = "dshm"
HOME_VOLUME = "home"
HOSTNAME_KEY = "kubernetes.io/hostname"
# The restricted Pod Security Standard's container rules: no privilege escalation, no Linux
# capability (single-node tensor parallelism shares GPU memory through CUDA IPC and /dev/shm,
# neither needs one) and the runtime's default seccomp profile. The non-root user is set on the
# pod (spec.security), with HOME and HF_HOME moved out of the images' /root.
ENGINE_SECURITY_CONTEXT: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _env(
    spec: api.SpeculativeDeploymentSpec, launch: EngineLaunch, defaults: PodDefaults
) -> list[dict[str, Any]]:
    """Hub access (token, endpoint, offline) then the launch's (the API key, ``engine.env``). The
    endpoint is the resource's, else the operator-wide default, so engines download from the
    mirror the operator looked in; the token likewise (an operator-wide one is optional,
    ``children.defaults``)."""
    access = spec.model_access
    env: list[dict[str, Any]] = []
    token = defaults.token(spec)
    if token is not None:
        ref: dict[str, Any] = {"name": token.name, "key": token.key}
        if token.optional:
            ref["optional"] = True
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": ref}})
    endpoint = access.endpoint or default_endpoint()
    if endpoint:
        env.append({"name": "HF_ENDPOINT", "value": endpoint})
    if access.offline:
        env.append({"name": "HF_HUB_OFFLINE", "value": "1"})
    # HOME and the hub cache on the pod's volumes, so any user can write them (engine.env wins).
    user_set = {e["name"] for e in launch.env}
    places = {"HOME": api.ENGINE_HOME, "HF_HOME": spec.model_cache.mount_path}
    env.extend({"name": k, "value": v} for k, v in places.items() if k not in user_set)
    return [*env, *launch.env]


def _volumes(spec: api.SpeculativeDeploymentSpec, sizing: PodSizing) -> list[dict[str, Any]]:
    """The model cache (a claim, else an emptyDir sized from the plan), a RAM-backed /dev/shm for
    NCCL and the engine's worker processes (a container's default is 64 MiB), and HOME."""
    cache = spec.model_cache
    if cache.claim_name:
        cache_volume: dict[str, Any] = {
            "name": CACHE_VOLUME,
            "persistentVolumeClaim": {"claimName": cache.claim_name},
        }
    else:
        cache_volume = {"name": CACHE_VOLUME, "emptyDir": {"sizeLimit": cache.size_limit or sizing.cache}}
    return [
        cache_volume,
        {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": sizing.shm}},
        {"name": HOME_VOLUME, "emptyDir": {}},
    ]


def _mounts(spec: api.SpeculativeDeploymentSpec) -> list[dict[str, Any]]:
    return [
        {"name": CACHE_VOLUME, "mountPath": spec.model_cache.mount_path},
        {"name": SHM_VOLUME, "mountPath": "/dev/shm"},
        {"name": HOME_VOLUME, "mountPath": api.ENGINE_HOME},
    ]


def _pod_security(security: api.Security) -> dict[str, Any]:
    """The pod's user: non-root by default (restricted Pod Security Standard); fsGroup makes the
    volumes writable, changing ownership only when the volume's root differs (a large model cache
    claim is not walked on every start)."""
    context: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}
    if security.run_as_non_root:
        context.update(
            runAsNonRoot=True,
            runAsUser=security.run_as_user,
            runAsGroup=security.run_as_group,
            fsGroup=security.fs_group,
            fsGroupChangePolicy="OnRootMismatch",
        )
    return context


def _lifecycle(lifecycle: api.Lifecycle) -> dict[str, Any]:
    """A preStop pause, so endpoints drop the pod before the engine stops taking requests."""
    if not lifecycle.pre_stop_sleep_seconds:
        return {}
    return {"lifecycle": {"preStop": {"sleep": {"seconds": lifecycle.pre_stop_sleep_seconds}}}}


def _spread(spec: api.SpeculativeDeploymentSpec, name: str) -> list[dict[str, Any]]:
    """Replicas on different nodes where the scheduler can (a soft rule: a GPU node short of
    peers still takes a second replica); only this revision's pods count, so a rollout's old
    pods do not push the new ones away."""
    if spec.replicas <= 1:
        return []
    return [
        {
            "maxSkew": 1,
            "topologyKey": HOSTNAME_KEY,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector_labels(name)},
            "matchLabelKeys": ["pod-template-hash"],
        }
    ]


def rolling_update(rollout: api.Rollout) -> dict[str, int]:
    """NoSurge needs no spare GPUs; Surge keeps every replica serving but waits for spare GPUs."""
    surge = rollout.strategy == "Surge"
    return {"maxSurge": int(surge), "maxUnavailable": int(not surge)}


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


def _container(
    spec: api.SpeculativeDeploymentSpec,
    launch: EngineLaunch,
    gpus: int,
    sizing: PodSizing,
    defaults: PodDefaults,
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": ENGINE_CONTAINER,
        "image": launch.image,
        "imagePullPolicy": spec.engine.image_pull_policy,
        "command": launch.command,
        "ports": [{"name": ENGINE_PORT_NAME, "containerPort": launch.port, "protocol": "TCP"}],
        "resources": container_resources(spec.resources, sizing, gpus),
        "volumeMounts": _mounts(spec),
        "startupProbe": launch.startup_probe,
        "readinessProbe": launch.readiness_probe,
        "livenessProbe": launch.liveness_probe,
        # A failed engine's last log lines (its error) become the termination message in the
        # pod status, which the operator reports in the Degraded condition.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": ENGINE_SECURITY_CONTEXT,
        **_lifecycle(spec.lifecycle),
    }
    env = _env(spec, launch, defaults)
    if env:
        container["env"] = env
    return container


def _tolerations(
    placement: Placement, defaults: PodDefaults, scheduling: api.Scheduling
) -> list[dict[str, Any]]:
    """The plan's (the GPU taint), the operator-wide defaults, then the resource's, each once."""
    tolerations: list[dict[str, Any]] = []
    given = (
        *(dict(t) for t in placement.tolerations),
        *(
            t.model_dump(by_alias=True, exclude_none=True)
            for t in (*defaults.tolerations, *scheduling.tolerations)
        ),
    )
    for toleration in given:
        if toleration not in tolerations:
            tolerations.append(toleration)
    return tolerations


def _pod_spec(
    name: str,
    spec: api.SpeculativeDeploymentSpec,
    launch: EngineLaunch,
    placement: Placement,
    plan: api.Plan,
    defaults: PodDefaults,
) -> dict[str, Any]:
    """The engine container with its volumes, and the plan's placement merged with the operator's
    defaults and spec.scheduling."""
    scheduling = spec.scheduling
    sizing = pod_sizing(plan)
    pod_spec: dict[str, Any] = {
        "containers": [_container(spec, launch, placement.gpus, sizing, defaults)],
        "volumes": _volumes(spec, sizing),
        "securityContext": _pod_security(spec.security),
        "tolerations": _tolerations(placement, defaults, scheduling),
        "terminationGracePeriodSeconds": spec.lifecycle.termination_grace_period_seconds,
        "enableServiceLinks": False,
        # An engine never calls the Kubernetes API: no ServiceAccount token in its filesystem.
        "automountServiceAccountToken": False,
    }
    node_selector = {**dict(defaults.node_selector), **scheduling.node_selector}
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    if defaults.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": secret} for secret in defaults.image_pull_secrets]
    affinity = _merge_affinity(scheduling.affinity, list(placement.node_requirements))
    if affinity:
        pod_spec["affinity"] = affinity
    if scheduling.priority_class_name:
        pod_spec["priorityClassName"] = scheduling.priority_class_name
    if scheduling.runtime_class_name:
        pod_spec["runtimeClassName"] = scheduling.runtime_class_name
    spread = _spread(spec, name)
    if spread:
        pod_spec["topologySpreadConstraints"] = spread
    return pod_spec


def engine_pod_template(
    name: str,
    spec: api.SpeculativeDeploymentSpec,
    launch: EngineLaunch,
    placement: Placement,
    plan: api.Plan,
    defaults: PodDefaults = NO_DEFAULTS,
    extra_labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The engine pod template (metadata and spec) of one pod of a replica.

    ``placement`` comes from the GPU plan: GPUs per pod, node requirements, tolerations;
    ``plan`` sizes CPU, memory, /dev/shm and the cache (``children.sizing``); ``defaults`` are the
    operator-wide ones. ``spec.podTemplate`` is merged over the result (``children.podpatch``).
    """
    labels = {**common_labels(name, spec.engine.name), **(extra_labels or {})}
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
    template = {"metadata": pod_meta, "spec": _pod_spec(name, spec, launch, placement, plan, defaults)}
    if spec.pod_template is None:
        return template
    return patch_pod_template(template, spec.pod_template.patch())


def build_deployment(
    name: str,
    namespace: str,
    spec: api.SpeculativeDeploymentSpec,
    launch: EngineLaunch,
    placement: Placement,
    plan: api.Plan,
    owner: dict[str, Any] | None = None,
    defaults: PodDefaults = NO_DEFAULTS,
) -> dict[str, Any]:
    """The engine Deployment for an effective spec (models, TP and engine knobs resolved) whose
    replicas each fit on one node."""
    body = {
        "replicas": spec.replicas,
        "selector": {"matchLabels": selector_labels(name)},
        "strategy": {"type": "RollingUpdate", "rollingUpdate": rolling_update(spec.rollout)},
        "template": engine_pod_template(name, spec, launch, placement, plan, defaults),
    }
    return child_manifest("apps/v1", "Deployment", name, namespace, spec.engine.name, owner, body)
