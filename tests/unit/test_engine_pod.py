"""Engine pods that survive: sizing from the plan, the non-root user, stopping, spreading, rollout
strategy and the disruption budget, as ``children`` renders them (no cluster)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from specdeploy import api, children, engines
from specdeploy.children.sizing import container_resources, pod_sizing
from specdeploy.engines.base import STARTUP_PERIOD_S, startup_failure_threshold
from specdeploy.planning import Placement
from specdeploy.speedup import manifests as bench_manifests

VERIFIER = "Qwen/Qwen3-30B-A3B-Instruct-2507"
SPECULATOR = "RedHatAI/Qwen3-30B-A3B-Instruct-2507-speculator.eagle3"


def plan(gpus: int = 1, weights: float = 56.9, draft: float = 1.0) -> api.Plan:
    return api.Plan(
        tensor_parallel_size=gpus,
        gpus_per_replica=gpus,
        gpu_product="NVIDIA-H100-80GB-HBM3",
        weights_gib=weights,
        speculator_weights_gib=draft,
    )


def spec(**fields: Any) -> api.SpeculativeDeploymentSpec:
    raw: dict[str, Any] = {
        "verifier": {"model": VERIFIER},
        "speculator": {"model": SPECULATOR, "numSpeculativeTokens": 3},
        "parallelism": {"tensor": 1},
        "maxModelLen": 32768,
        **fields,
    }
    return api.SpeculativeDeploymentSpec.model_validate(raw)


def deployment(s: api.SpeculativeDeploymentSpec, p: api.Plan | None = None) -> dict[str, Any]:
    p = p or plan()
    placement = Placement(gpus=p.gpus_per_replica, node_requirements=(), tolerations=())
    return children.build_deployment("pair", "ns", s, engines.render(s), placement, p)


def pod_of(d: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = d["spec"]["template"]["spec"]
    return result


def engine_of(d: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = pod_of(d)["containers"][0]
    return result


@pytest.mark.parametrize(
    ("gpus", "weights", "cpu", "memory", "shm", "cache"),
    [
        (1, 56.9, "4", "66Gi", "2Gi", "75Gi"),  # 57.9 + 2 + 4 + 2 = 65.9; 57.9 x 1.2 + 5 = 74.5
        (4, 438.0, "10", "459Gi", "8Gi", "532Gi"),  # 439 + 8 + 4 + 8; 439 x 1.2 + 5 = 531.8
        (8, 1300.0, "18", "1337Gi", "16Gi", "1567Gi"),  # shm capped at 16 GiB
    ],
)
def test_sizes_follow_the_plan(
    gpus: int, weights: float, cpu: str, memory: str, shm: str, cache: str
) -> None:
    sizing = pod_sizing(plan(gpus, weights))
    assert (sizing.cpu, sizing.memory, sizing.shm, sizing.cache) == (cpu, memory, shm, cache)


def test_user_resources_win_and_memory_is_limited_to_its_request() -> None:
    sizing = pod_sizing(plan())
    derived = container_resources(api.Resources(), sizing, 1)
    assert derived == {
        "requests": {"cpu": "4", "memory": "66Gi", "nvidia.com/gpu": "1"},
        "limits": {"memory": "66Gi", "nvidia.com/gpu": "1"},
    }
    # A CPU request of the user's, and a memory limit alone (which the apiserver takes as the
    # request too): both kept, nothing derived in their place.
    user = container_resources(api.Resources(requests={"cpu": "30"}, limits={"memory": "200Gi"}), sizing, 2)
    assert user["requests"] == {"cpu": "30", "memory": "200Gi", "nvidia.com/gpu": "2"}
    assert user["limits"] == {"memory": "200Gi", "nvidia.com/gpu": "2"}
    # A memory request above the derived one gets its own value as the limit.
    big = container_resources(api.Resources(requests={"memory": "100Gi"}), sizing, 1)
    assert big["limits"]["memory"] == "100Gi" and big["requests"]["cpu"] == "4"


def test_cache_volume_is_sized_unless_the_user_sized_it_or_named_a_claim() -> None:
    volumes = {v["name"]: v for v in pod_of(deployment(spec()))["volumes"]}
    assert volumes["model-cache"] == {"name": "model-cache", "emptyDir": {"sizeLimit": "75Gi"}}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "2Gi"}
    sized = {v["name"]: v for v in pod_of(deployment(spec(modelCache={"sizeLimit": "300Gi"})))["volumes"]}
    assert sized["model-cache"]["emptyDir"] == {"sizeLimit": "300Gi"}
    claim = {v["name"]: v for v in pod_of(deployment(spec(modelCache={"claimName": "models"})))["volumes"]}
    assert claim["model-cache"] == {"name": "model-cache", "persistentVolumeClaim": {"claimName": "models"}}


def test_engine_runs_as_a_non_root_user_with_home_and_cache_on_its_volumes() -> None:
    d = deployment(spec())
    pod, engine = pod_of(d), engine_of(d)
    assert pod["securityContext"] == {
        "seccompProfile": {"type": "RuntimeDefault"},
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "fsGroup": 65532,
        "fsGroupChangePolicy": "OnRootMismatch",
    }
    assert engine["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod["automountServiceAccountToken"] is False
    env = {e["name"]: e.get("value") for e in engine["env"]}
    mounts = {m["mountPath"]: m["name"] for m in engine["volumeMounts"]}
    assert mounts[env["HOME"]] == "home" and mounts[env["HF_HOME"]] == "model-cache"
    assert not env["HF_HOME"].startswith("/root")

    custom = deployment(spec(security={"runAsUser": 2000, "runAsGroup": 3000, "fsGroup": 4000}))
    context = pod_of(custom)["securityContext"]
    assert (context["runAsUser"], context["runAsGroup"], context["fsGroup"]) == (2000, 3000, 4000)


def test_root_is_an_opt_out_and_a_cache_under_root_needs_it() -> None:
    root = deployment(
        spec(security={"runAsNonRoot": False}, modelCache={"mountPath": "/root/.cache/huggingface"})
    )
    assert pod_of(root)["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    with pytest.raises(ValidationError, match=r"modelCache\.mountPath: a non-root engine cannot reach"):
        spec(modelCache={"mountPath": "/root/.cache/huggingface"})
    with pytest.raises(ValidationError, match=r"modelCache\.mountPath"):
        spec(modelCache={"mountPath": "/root"})
    spec(modelCache={"mountPath": "/rootless/cache"})  # only /root itself and below


def test_engine_env_overrides_home_without_a_duplicate() -> None:
    d = deployment(spec(engine={"env": [{"name": "HOME", "value": "/scratch"}]}))
    names = [e["name"] for e in engine_of(d)["env"]]
    assert names.count("HOME") == 1 and "HF_HOME" in names
    assert {"name": "HOME", "value": "/scratch"} in engine_of(d)["env"]


def test_stopping_and_starting_follow_spec_lifecycle() -> None:
    d = deployment(spec())
    assert engine_of(d)["lifecycle"] == {"preStop": {"sleep": {"seconds": 10}}}
    assert pod_of(d)["terminationGracePeriodSeconds"] == 90
    assert engine_of(d)["startupProbe"]["failureThreshold"] * STARTUP_PERIOD_S == 1800

    slow = spec(
        lifecycle={
            "startupTimeoutSeconds": 7205,
            "preStopSleepSeconds": 0,
            "terminationGracePeriodSeconds": 30,
        }
    )
    assert startup_failure_threshold(slow) == 721  # rounded up: never less time than granted
    d = deployment(slow)
    assert "lifecycle" not in engine_of(d) and pod_of(d)["terminationGracePeriodSeconds"] == 30
    assert engine_of(d)["startupProbe"]["failureThreshold"] == 721
    with pytest.raises(ValidationError, match="less than terminationGracePeriodSeconds"):
        spec(lifecycle={"preStopSleepSeconds": 30, "terminationGracePeriodSeconds": 30})


@pytest.mark.parametrize(("strategy", "surge", "unavailable"), [("NoSurge", 0, 1), ("Surge", 1, 0)])
def test_rollout_strategy(strategy: str, surge: int, unavailable: int) -> None:
    d = deployment(spec(rollout={"strategy": strategy}))
    assert d["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable},
    }


def test_default_rollout_needs_no_spare_gpus() -> None:
    assert deployment(spec())["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}


def test_replicas_spread_over_nodes_softly() -> None:
    assert "topologySpreadConstraints" not in pod_of(deployment(spec()))
    (constraint,) = pod_of(deployment(spec(replicas=3)))["topologySpreadConstraints"]
    assert constraint == {
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": deployment(spec())["spec"]["selector"]["matchLabels"]},
        "matchLabelKeys": ["pod-template-hash"],
    }


def test_disruption_budget_allows_one_eviction_and_selects_the_engine_pods() -> None:
    s = spec(replicas=4)
    budget = children.build_disruption_budget(
        "pair", "ns", s, owner={"metadata": {"name": "pair", "uid": "u1"}}
    )
    assert budget is not None and budget["spec"] == {
        "maxUnavailable": 1,
        "selector": {"matchLabels": deployment(s)["spec"]["selector"]["matchLabels"]},
        "unhealthyPodEvictionPolicy": "AlwaysAllow",
    }
    assert budget["metadata"]["ownerReferences"][0]["uid"] == "u1"
    # The same object at any replica count above one (scaling never rewrites it); none at one.
    assert children.build_disruption_budget("pair", "ns", spec(replicas=1)) is None
    assert children.build_disruption_budget(
        "pair", "ns", spec(replicas=2)
    ) == children.build_disruption_budget("pair", "ns", s)


def test_bench_load_job_takes_hub_access_but_not_the_engine_cache() -> None:
    d = deployment(spec(modelAccess={"endpoint": "http://127.0.0.1:8090"}))
    d["metadata"]["namespace"] = "ns"
    owner = {"apiVersion": "v1", "kind": "X", "name": "x", "uid": "u"}
    job = bench_manifests.load_job(d, "bench", owner, "img", ["true"], 60)
    env = {e["name"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env == {"HF_ENDPOINT"}
