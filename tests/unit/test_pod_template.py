"""``spec.podTemplate``: the strategic-merge-like patch (``children.podpatch``) and the engine pods
it produces in a Deployment, a LeaderWorkerSet and the benchmark's baseline (no cluster)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from specdeploy import api, children, engines, pipeline, planning
from specdeploy.children.leaderworkerset import ROLE_LABEL
from specdeploy.children.podpatch import POD_LISTS, merge, patch_pod_template
from specdeploy.modelinfo import ModelResolver
from specdeploy.planning import Placement
from specdeploy.speedup import manifests as bench_manifests

VERIFIER = "Qwen/Qwen3-30B-A3B-Instruct-2507"
SPECULATOR = "RedHatAI/Qwen3-30B-A3B-Instruct-2507-speculator.eagle3"
SECRET_ENV = {"name": "API_TOKEN", "valueFrom": {"secretKeyRef": {"name": "tokens", "key": "api"}}}
# What a platform patches: a private registry, a workload identity, a CA bundle, env from Secrets.
PATCH: dict[str, Any] = {
    "metadata": {"labels": {"team": "search"}, "annotations": {"sidecar.istio.io/inject": "false"}},
    "spec": {
        "imagePullSecrets": [{"name": "regcred"}],
        "serviceAccountName": "engine",
        "volumes": [{"name": "ca", "configMap": {"name": "corp-ca"}}],
        "containers": [
            {
                "name": "engine",
                "env": [SECRET_ENV],
                "envFrom": [{"secretRef": {"name": "engine-env"}}],
                "volumeMounts": [{"name": "ca", "mountPath": "/etc/ssl/corp", "readOnly": True}],
            }
        ],
    },
}


def spec(**fields: Any) -> api.SpeculativeDeploymentSpec:
    raw: dict[str, Any] = {
        "verifier": {"model": VERIFIER},
        "speculator": {"model": SPECULATOR, "numSpeculativeTokens": 3},
        "parallelism": {"tensor": 1},
        "maxModelLen": 32768,
        **fields,
    }
    return api.SpeculativeDeploymentSpec.model_validate(raw)


def deployment(s: api.SpeculativeDeploymentSpec) -> dict[str, Any]:
    plan = api.Plan(tensor_parallel_size=1, gpus_per_replica=1, gpu_product="NVIDIA-H100-80GB-HBM3")
    placement = Placement(
        gpus=1,
        node_requirements=({"key": "nvidia.com/gpu.product", "operator": "In", "values": ["X"]},),
        tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},),
    )
    return children.build_deployment("pair", "ns", s, engines.render(s), placement, plan)


def engine(pod: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in pod["containers"] if c["name"] == "engine")
    return found


# --- the merge -------------------------------------------------------------------------------


def test_maps_merge_and_scalars_and_plain_lists_replace() -> None:
    base = {"securityContext": {"runAsUser": 1, "fsGroup": 2}, "automountServiceAccountToken": False,
            "readinessGates": [{"conditionType": "a"}]}  # fmt: skip
    patch = {"securityContext": {"fsGroup": 3}, "automountServiceAccountToken": True,
             "readinessGates": [{"conditionType": "b"}]}  # fmt: skip
    assert merge(base, patch, POD_LISTS) == {
        "securityContext": {"runAsUser": 1, "fsGroup": 3},
        "automountServiceAccountToken": True,
        "readinessGates": [{"conditionType": "b"}],
    }


def test_keyed_lists_merge_by_their_merge_key_and_append_new_entries() -> None:
    node_name = {"fieldRef": {"fieldPath": "spec.nodeName"}}
    base = {
        "containers": [
            {"name": "engine", "image": "e",
             "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
             "volumeMounts": [{"name": "home", "mountPath": "/home/engine"}]},
        ],
        "imagePullSecrets": [{"name": "a"}],
    }  # fmt: skip
    patch = {
        "containers": [
            {"name": "engine", "env": [{"name": "B", "valueFrom": node_name}, {"name": "C", "value": "3"}],
             "volumeMounts": [{"name": "home", "mountPath": "/home/engine", "readOnly": True}]},
            {"name": "proxy", "image": "p"},
        ],
        "imagePullSecrets": [{"name": "a"}, {"name": "b"}],
    }  # fmt: skip
    merged = merge(base, patch, POD_LISTS)
    [engine_, proxy] = merged["containers"]
    assert engine_["image"] == "e" and proxy == {"name": "proxy", "image": "p"}
    # An env var given again is replaced whole: valueFrom instead of value, not both.
    assert engine_["env"] == [
        {"name": "A", "value": "1"},
        {"name": "B", "valueFrom": node_name},
        {"name": "C", "value": "3"},
    ]
    assert engine_["volumeMounts"] == [{"name": "home", "mountPath": "/home/engine", "readOnly": True}]
    assert merged["imagePullSecrets"] == [{"name": "a"}, {"name": "b"}]


def test_a_volume_given_again_changes_its_source() -> None:
    base = {"volumes": [{"name": "model-cache", "emptyDir": {"sizeLimit": "75Gi"}}]}
    patch = {"volumes": [{"name": "model-cache", "persistentVolumeClaim": {"claimName": "weights"}}]}
    assert merge(base, patch, POD_LISTS) == patch


def test_tolerations_are_added_to_the_templates_not_replacing_them() -> None:
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    sku = {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
    assert merge({"tolerations": [gpu]}, {"tolerations": [sku, gpu]}, POD_LISTS) == {
        "tolerations": [gpu, sku]
    }


def test_the_merge_changes_neither_input() -> None:
    base = {"metadata": {"labels": {"a": "1"}}, "spec": {"containers": [{"name": "engine", "env": []}]}}
    patch = {
        "metadata": {"labels": {"b": "2"}},
        "spec": {"containers": [{"name": "engine", "env": [{"name": "X"}]}]},
    }
    before = (repr(base), repr(patch))
    merged = patch_pod_template(base, patch)
    merged["spec"]["containers"][0]["env"].append({"name": "Y"})
    assert (repr(base), repr(patch)) == before
    assert merged["metadata"]["labels"] == {"a": "1", "b": "2"}


# --- the engine pods -------------------------------------------------------------------------


def test_a_deployment_gets_the_patch_over_the_operators_template() -> None:
    plain = deployment(spec())["spec"]["template"]
    patched = deployment(spec(podTemplate=PATCH))["spec"]["template"]
    pod, container = patched["spec"], engine(patched["spec"])
    assert pod["imagePullSecrets"] == [{"name": "regcred"}] and pod["serviceAccountName"] == "engine"
    assert pod["volumes"] == [*plain["spec"]["volumes"], PATCH["spec"]["volumes"][0]]
    assert container["env"] == [*engine(plain["spec"])["env"], SECRET_ENV]
    assert container["envFrom"] == [{"secretRef": {"name": "engine-env"}}]
    assert container["volumeMounts"][-1] == {"name": "ca", "mountPath": "/etc/ssl/corp", "readOnly": True}
    # The operator's parts are as they were.
    for field in ("command", "image", "resources", "ports", "startupProbe", "readinessProbe"):
        assert container[field] == engine(plain["spec"])[field]
    assert pod["affinity"] == plain["spec"]["affinity"] and pod["tolerations"] == plain["spec"]["tolerations"]
    assert patched["metadata"]["labels"] == {**plain["metadata"]["labels"], "team": "search"}
    assert patched["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"


def test_the_patch_wins_over_the_typed_fields_it_overlaps() -> None:
    s = spec(
        engine={"env": [{"name": "VLLM_LOGGING_LEVEL", "value": "INFO"}]},
        scheduling={"nodeSelector": {"pool": "a", "zone": "z1"}},
        podMetadata={"annotations": {"owner": "typed"}},
        podTemplate={
            "metadata": {"annotations": {"owner": "template"}},
            "spec": {
                "nodeSelector": {"pool": "b"},
                "securityContext": {"runAsUser": 1000},
                "containers": [{"name": "engine", "env": [{"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}]}],
            },
        },
    )
    template = deployment(s)["spec"]["template"]
    assert template["spec"]["nodeSelector"] == {"pool": "b", "zone": "z1"}
    assert template["spec"]["securityContext"]["runAsUser"] == 1000
    assert template["spec"]["securityContext"]["runAsNonRoot"] is True
    assert {"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"} in engine(template["spec"])["env"]
    assert template["metadata"]["annotations"]["owner"] == "template"


@pytest.mark.parametrize(
    ("container", "field"),
    [
        ({"name": "engine", "command": ["sh"]}, "command"),
        ({"name": "engine", "args": ["--x"]}, "args"),
        ({"name": "engine", "image": "mine"}, "image"),
        ({"name": "engine", "resources": {"limits": {"memory": "1Gi"}}}, "resources"),
        ({"name": "engine", "readinessProbe": {"exec": {"command": ["true"]}}}, "readinessProbe"),
        ({"name": "proxy", "image": "p", "resources": {"limits": {"nvidia.com/gpu": 1}}}, "resources"),
    ],
)
def test_the_operators_fields_are_refused_with_the_field_named(container: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        spec(podTemplate={"spec": {"containers": [container]}})
    problems = api.validation_problems(caught.value)
    assert problems.startswith("spec.podTemplate.spec.containers.0: ") and f"{field}" in problems


def test_the_node_affinity_and_the_selector_labels_are_refused() -> None:
    with pytest.raises(ValidationError, match=r"spec\.scheduling\.affinity"):
        spec(podTemplate={"spec": {"affinity": {"podAntiAffinity": {}}}})
    with pytest.raises(ValidationError, match=r"app\.kubernetes\.io/instance"):
        spec(podTemplate={"metadata": {"labels": {"app.kubernetes.io/instance": "other"}}})


def test_a_sidecar_may_take_cpu_and_its_own_command() -> None:
    sidecar = {"name": "proxy", "image": "p", "command": ["proxy"], "resources": {"requests": {"cpu": 1}}}
    pod = deployment(spec(podTemplate={"spec": {"containers": [sidecar]}}))["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["engine", "proxy"]
    assert pod["containers"][1] == sidecar


H100_NODES = "h100-80gb:8,h100-80gb:8"


def test_every_pod_of_a_leader_worker_set_gets_the_patch() -> None:
    body = {
        "metadata": {"name": "llama", "namespace": "ai"},
        "spec": {
            "verifier": {"model": "meta-llama/Llama-3.3-70B-Instruct"},
            "parallelism": {"nodes": 2},
            "podTemplate": PATCH,
        },
    }
    result = pipeline.compute(body, ModelResolver(), planning.parse_gpus_flag(H100_NODES))
    lws = result.child("LeaderWorkerSet")
    assert lws is not None, result.message
    group = lws["spec"]["leaderWorkerTemplate"]
    for role, template in (("leader", group["leaderTemplate"]), ("worker", group["workerTemplate"])):
        assert template["metadata"]["labels"][ROLE_LABEL] == role
        assert template["metadata"]["labels"]["team"] == "search"
        assert template["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
        assert SECRET_ENV in engine(template["spec"])["env"]


def test_the_benchmarks_baseline_and_load_job_run_like_the_engine() -> None:
    d = deployment(spec(podTemplate=PATCH))
    d["metadata"].update(namespace="ns", labels={**d["metadata"]["labels"]})
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "run", "uid": "u"}
    baseline, _ = bench_manifests.baseline(d, "pair", owner)
    pod = baseline["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}] and pod["serviceAccountName"] == "engine"
    assert SECRET_ENV in engine(pod)["env"] and engine(pod)["envFrom"] == [
        {"secretRef": {"name": "engine-env"}}
    ]
    load = bench_manifests.load_job(d, "pair", owner, "img", ["true"], 60)
    assert load["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
