"""The objects one benchmark run creates, as plain manifests.

A run is anchored to one Job that runs nothing (``parallelism: 0``) but expires by itself
(``activeDeadlineSeconds``, then ``ttlSecondsAfterFinished``): the baseline Deployment and Service
and the load Job are its dependents, so the garbage collector removes all of them when the CLI
deletes it at the end, when the CLI was killed and the deadline passed, or when the
SpeculativeDeployment (its owner) is deleted. A kept baseline is handed to the
SpeculativeDeployment instead.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from typing import Any

from specdeploy import api, children, engines
from specdeploy.api.engine_pod import NAME_LABEL
from specdeploy.children.labels import owner_reference
from specdeploy.speedup.load import Variant

BENCHMARK_OF_LABEL = f"{api.GROUP}/benchmark-of"
ROLE_LABEL = f"{api.GROUP}/benchmark-role"
MANAGED_BY = "specdeploy-bench"
TEMPLATE_HASH_ANNOTATION = f"{api.GROUP}/baseline-template-hash"
# What the SpeculativeDeployment keeps of its latest benchmark (see docs/benchmark.md).
SUMMARY_ANNOTATION = api.BENCHMARK_ANNOTATION
# Labels and annotations the operator sets on engine pods; a baseline gets its own instead.
OWN_LABELS = frozenset(
    {NAME_LABEL, children.INSTANCE_LABEL, children.MANAGED_BY_LABEL, children.ENGINE_LABEL,
     "app.kubernetes.io/component"}
)  # fmt: skip
LOAD_CONTAINER = "load"
# What the load Job asks of the engines' node: ``vllm bench serve`` is one Python process.
LOAD_REQUESTS = {"cpu": "1", "memory": "2Gi"}
# The variable ``vllm bench serve`` sends as its bearer token (benchmarks/lib/endpoint_request_func.py).
LOAD_API_KEY_ENV = "OPENAI_API_KEY"
DNS_LABEL_MAX = 63
# A run Job past its deadline (its CLI was killed) is deleted this soon after, and with it the
# baseline holding GPUs; a run that ends normally is deleted by the CLI at once.
FINISHED_TTL_S = 10


def child_name(name: str, suffix: str) -> str:
    """``<name>-<suffix>``, shortened with a hash of ``name`` to fit a DNS label (Service names)."""
    full = f"{name}-{suffix}"
    if len(full) <= DNS_LABEL_MAX:
        return full
    digest = hashlib.sha256(name.encode()).hexdigest()[:6]
    return f"{name[: DNS_LABEL_MAX - len(suffix) - 8]}-{digest}-{suffix}"


ROLE_SUFFIX = {"run": "bench", "baseline": "baseline", "load": "bench-load", "draft-length": "draft"}


def run_name(name: str) -> str:
    return child_name(name, ROLE_SUFFIX["run"])


def baseline_name(name: str) -> str:
    return child_name(name, ROLE_SUFFIX["baseline"])


def load_name(name: str) -> str:
    return child_name(name, ROLE_SUFFIX["load"])


def labels(name: str, role: str) -> dict[str, str]:
    return {children.MANAGED_BY_LABEL: MANAGED_BY, BENCHMARK_OF_LABEL: name, ROLE_LABEL: role}


BASELINES_SELECTOR = f"{children.MANAGED_BY_LABEL}={MANAGED_BY},{ROLE_LABEL}=baseline"


def kept_baseline_like(deployments: list[dict[str, Any]], template_hash_: str) -> dict[str, Any] | None:
    """Among baseline Deployments, a kept one (owned by its SpeculativeDeployment, so no run will
    remove it) whose pod is the one ``template_hash_`` describes: another resource's baseline
    that serves this one too."""
    for deployment in deployments:
        meta = deployment["metadata"]
        kept = any(ref.get("kind") == api.KIND for ref in meta.get("ownerReferences") or [])
        same = (meta.get("annotations") or {}).get(TEMPLATE_HASH_ANNOTATION) == template_hash_
        if kept and same and not meta.get("deletionTimestamp"):
            return deployment
    return None


def job_owner(job: dict[str, Any]) -> dict[str, Any]:
    """An owner reference to the run Job (not a controller: nothing but the GC acts on it)."""
    meta = job["metadata"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": meta["name"],
        "uid": meta["uid"],
        "blockOwnerDeletion": True,
    }


def _job(
    name: str,
    namespace: str,
    role: str,
    owner: dict[str, Any],
    deadline_s: int,
    pod: dict[str, Any],
    suffix: str = "",
) -> dict[str, Any]:
    """A Job of the run that never retries and fails at ``deadline_s``; ``pod`` is its pod spec;
    ``suffix`` tells apart the Jobs of one role in one run."""
    meta = labels(name, role)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": child_name(name, ROLE_SUFFIX[role] + suffix), "namespace": namespace,
                     "labels": meta, "ownerReferences": [owner]},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": deadline_s,
            "template": {"metadata": {"labels": meta}, "spec": {"restartPolicy": "Never", **pod}},
        },
    }  # fmt: skip


def run_job(resource: dict[str, Any], image: str, deadline_s: int) -> dict[str, Any]:
    """The run's anchor: a Job with no pods that fails at ``deadline_s`` and is then deleted."""
    meta = resource["metadata"]
    pod = {"containers": [{"name": "anchor", "image": image, "command": ["true"]}]}
    job = _job(meta["name"], meta["namespace"], "run", owner_reference(resource), deadline_s, pod)
    job["spec"].update(parallelism=0, completions=1, ttlSecondsAfterFinished=FINISHED_TTL_S)
    return job


def _engine_container(pod_spec: dict[str, Any]) -> dict[str, Any]:
    found = [c for c in pod_spec.get("containers") or [] if c.get("name") == children.ENGINE_CONTAINER]
    if not found:
        raise ValueError(f"the Deployment has no {children.ENGINE_CONTAINER!r} container")
    container: dict[str, Any] = found[0]
    return container


def template_hash(template: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:16]


def baseline(
    speculative: dict[str, Any], name: str, owner: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The baseline Deployment and Service: the running pod template of ``speculative`` (same
    image, verifier, TP, GPUs, placement, env), its engine argv without speculation, one replica."""
    engine = engines.engine_for(speculative["metadata"]["labels"][children.ENGINE_LABEL])
    return _engine_copy(speculative, name, owner, "baseline", baseline_name(name), engine.baseline_command)


def draft_length(
    speculative: dict[str, Any], name: str, owner: dict[str, Any], variant: Variant
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A copy of the engine like the baseline, drafting ``variant`` tokens at every batch size, or
    with the draft loaded and idle: one point of the cost curve ``specdeploy bench --tokens``
    measures."""
    engine = engines.engine_for(speculative["metadata"]["labels"][children.ENGINE_LABEL])

    def command(argv: list[str]) -> list[str]:
        if isinstance(variant, int):
            return engine.draft_length_command(argv, variant)
        return engine.idle_draft_command(argv)

    return _engine_copy(speculative, name, owner, "draft-length", draft_length_name(name, variant), command)


def draft_length_name(name: str, variant: Variant) -> str:
    suffix = ROLE_SUFFIX["draft-length"]
    return child_name(name, f"{suffix}{variant}" if isinstance(variant, int) else f"{suffix}-{variant}")


def _engine_copy(
    speculative: dict[str, Any],
    name: str,
    owner: dict[str, Any],
    role: str,
    instance: str,
    command: Callable[[list[str]], list[str]],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One replica of ``speculative``'s running pod template, named ``instance``, with its engine
    argv changed by ``command``, and a Service in front of it."""
    namespace = speculative["metadata"]["namespace"]
    template = copy.deepcopy(speculative["spec"]["template"])
    container = _engine_container(template["spec"])
    container["command"] = command(container["command"])
    own = {**labels(name, role), NAME_LABEL: f"specdeploy-{role}", children.INSTANCE_LABEL: instance}
    user = {k: v for k, v in (template["metadata"].get("labels") or {}).items() if k not in OWN_LABELS}
    # Hashed before the run's own labels go on: two resources whose baselines would run the same
    # pod (one verifier, engine, image and placement; drafts differ) get the same hash.
    template["metadata"]["labels"] = user
    hashed = template_hash(template)
    template["metadata"]["labels"] = {**user, **own}
    selector = {NAME_LABEL: own[NAME_LABEL], children.INSTANCE_LABEL: own[children.INSTANCE_LABEL]}
    metadata = {
        "name": instance,
        "namespace": namespace,
        "labels": own,
        "annotations": {TEMPLATE_HASH_ANNOTATION: hashed},
        "ownerReferences": [owner],
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": selector},
            "strategy": {"type": "Recreate"},
            "template": template,
        },
    }
    port = next(p for p in container["ports"] if p["name"] == children.ENGINE_PORT_NAME)["containerPort"]
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {k: v for k, v in metadata.items() if k != "annotations"},
        "spec": {
            "selector": selector,
            "ports": [
                {"name": children.ENGINE_PORT_NAME, "port": port, "targetPort": port, "protocol": "TCP"}
            ],
        },
    }
    return deployment, service


def load_job(
    speculative: dict[str, Any],
    name: str,
    owner: dict[str, Any],
    image: str,
    argv: list[str],
    deadline_s: int,
    suffix: str = "",
) -> dict[str, Any]:
    """The load generator's Job: one pod, placed like the engines (so it reaches them as closely
    as a client in their zone would), with their hub access for the tokenizer and their API key
    (from the same Secret) for the requests, run once."""
    pod_spec = speculative["spec"]["template"]["spec"]
    # Hub access, not the engine's cache: the load pod has no volume at HF_HOME.
    engine_env = _engine_container(pod_spec).get("env") or []
    env = [e for e in engine_env if e["name"].startswith("HF_") and e["name"] != "HF_HOME"]
    key_env = engines.engine_for(speculative["metadata"]["labels"][children.ENGINE_LABEL]).api_key_env
    keys = [e for e in engine_env if e["name"] == key_env]
    if keys:
        env.append({**keys[-1], "name": LOAD_API_KEY_ENV})
    container: dict[str, Any] = {
        "name": LOAD_CONTAINER,
        "image": image,
        "command": argv,
        "resources": {"requests": dict(LOAD_REQUESTS)},
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if env:
        container["env"] = env
    # Placed like the engines, and its image pulled with their secrets (a private registry's mirror
    # of the engine image).
    copied = ("nodeSelector", "affinity", "tolerations", "imagePullSecrets")
    placement = {k: pod_spec[k] for k in copied if pod_spec.get(k)}
    pod = {"enableServiceLinks": False, "containers": [container], **placement}
    return _job(name, speculative["metadata"]["namespace"], "load", owner, deadline_s, pod, suffix)
