"""Operator-wide defaults for engine pods (``specdeploy run --default-*``): the flags, and how a
resource's own fields override them in the pods and in the operator's hub token lookups."""

from __future__ import annotations

from typing import Any

import pytest

from specdeploy import api, children, engines, pipeline, planning
from specdeploy.cli import build_parser
from specdeploy.cli.run import operator_options
from specdeploy.modelinfo import ModelResolver
from specdeploy.planning import Placement

VERIFIER = "Qwen/Qwen3-30B-A3B-Instruct-2507"
SPECULATOR = "RedHatAI/Qwen3-30B-A3B-Instruct-2507-speculator.eagle3"
GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
AKS_GPU = {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
DEFAULTS = children.PodDefaults(
    tolerations=(api.Toleration.model_validate(AKS_GPU),),
    node_selector=(("pool", "gpu"), ("zone", "a")),
    image_pull_secrets=("regcred",),
    token_secret=api.SecretKeyRef(name="hf-token"),
)


def defaults_of(*flags: str) -> children.PodDefaults:
    return operator_options(build_parser().parse_args(["run", *flags])).pod_defaults


def test_the_flags_build_the_defaults() -> None:
    given = defaults_of(
        "--default-toleration", "sku=gpu:NoSchedule",
        "--default-node-selector", "pool=gpu", "--default-node-selector", "zone=a",
        "--default-image-pull-secret", "regcred", "--default-token-secret", "hf-token",
    )  # fmt: skip
    assert given == DEFAULTS
    assert defaults_of() == children.NO_DEFAULTS


@pytest.mark.parametrize(
    ("flag", "toleration"),
    [
        ("sku:NoExecute", {"key": "sku", "operator": "Exists", "effect": "NoExecute"}),
        ('{"key": "sku", "operator": "Exists", "tolerationSeconds": 30, "effect": "NoExecute"}',
         {"key": "sku", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}),
    ],
)  # fmt: skip
def test_a_toleration_is_a_taint_or_json(flag: str, toleration: dict[str, Any]) -> None:
    [parsed] = defaults_of("--default-toleration", flag).tolerations
    assert parsed.model_dump(by_alias=True, exclude_none=True) == toleration


@pytest.mark.parametrize(
    "flags",
    [
        ["--default-toleration", "sku=gpu:NoScheduled"],
        ["--default-toleration", ":NoSchedule"],
        ["--default-toleration", '{"key": "sku", "operator": "In"}'],
        ["--default-node-selector", "pool"],
        ["--default-token-secret", ":token"],
    ],
)
def test_bad_defaults_are_usage_errors(flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["run", *flags])
    assert exited.value.code == 2
    assert flags[0] in capsys.readouterr().err


def spec(**fields: Any) -> api.SpeculativeDeploymentSpec:
    raw = {"verifier": {"model": VERIFIER}, "speculator": {"model": SPECULATOR, "numSpeculativeTokens": 3}}
    raw["parallelism"] = {"tensor": 1}
    return api.SpeculativeDeploymentSpec.model_validate({**raw, "maxModelLen": 32768, **fields})


def pod(s: api.SpeculativeDeploymentSpec, defaults: children.PodDefaults = DEFAULTS) -> dict[str, Any]:
    plan = api.Plan(tensor_parallel_size=1, gpus_per_replica=1, gpu_product="NVIDIA-H100-80GB-HBM3")
    placement = Placement(gpus=1, node_requirements=(), tolerations=(GPU_TAINT,))
    d = children.build_deployment("pair", "ns", s, engines.render(s), placement, plan, defaults=defaults)
    result: dict[str, Any] = d["spec"]["template"]["spec"]
    return result


def hf_token(p: dict[str, Any]) -> dict[str, Any] | None:
    env = p["containers"][0]["env"]
    return next((e["valueFrom"]["secretKeyRef"] for e in env if e["name"] == "HF_TOKEN"), None)


def test_a_resource_without_its_own_fields_gets_every_default() -> None:
    p = pod(spec())
    assert p["tolerations"] == [GPU_TAINT, AKS_GPU]
    assert p["nodeSelector"] == {"pool": "gpu", "zone": "a"}
    assert p["imagePullSecrets"] == [{"name": "regcred"}]
    # The default Secret is optional: a namespace without it still runs the pods.
    assert hf_token(p) == {"name": "hf-token", "key": "token", "optional": True}


def test_without_defaults_the_pods_are_as_before() -> None:
    p = pod(spec(), children.NO_DEFAULTS)
    assert p["tolerations"] == [GPU_TAINT] and hf_token(p) is None
    assert "nodeSelector" not in p and "imagePullSecrets" not in p


def test_a_resources_own_fields_override_the_defaults() -> None:
    own = {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
    p = pod(
        spec(
            scheduling={"tolerations": [own, AKS_GPU], "nodeSelector": {"pool": "h100"}},
            modelAccess={"tokenSecretRef": {"name": "team-token", "key": "hf"}},
            podTemplate={"spec": {"imagePullSecrets": [{"name": "regcred"}, {"name": "team-registry"}]}},
        )
    )
    # Tolerations add up (each once); a node selector key is the resource's; pull secrets merge
    # by name; the resource's token Secret replaces the default, and is required.
    assert p["tolerations"] == [GPU_TAINT, AKS_GPU, own]
    assert p["nodeSelector"] == {"pool": "h100", "zone": "a"}
    assert p["imagePullSecrets"] == [{"name": "regcred"}, {"name": "team-registry"}]
    assert hf_token(p) == {"name": "team-token", "key": "hf"}


def compute(
    the_spec: dict[str, Any], secrets: dict[tuple[str, str], bytes]
) -> tuple[pipeline.Desired, list[str]]:
    read: list[str] = []

    def read_secret(namespace: str, name: str, key: str) -> bytes | None:
        read.append(f"{namespace}/{name}:{key}")
        return secrets.get((name, key))

    body = {"metadata": {"name": "pair", "namespace": "ns"}, "spec": the_spec}
    inventory = planning.parse_gpus_flag("h100-80gb:8")
    desired = pipeline.compute(body, ModelResolver(), inventory, read_secret=read_secret, defaults=DEFAULTS)
    return desired, read


PAIR = {"verifier": {"model": VERIFIER}, "speculator": {"model": SPECULATOR}}


def test_the_operators_lookups_use_the_default_token_and_run_without_a_missing_one() -> None:
    desired, read = compute(PAIR, {("hf-token", "token"): b"hf_abc\n"})
    assert read == ["ns/hf-token:token"] and not desired.blocked, desired.message
    desired, read = compute(PAIR, {})
    assert read == ["ns/hf-token:token"] and not desired.blocked, desired.message


def test_a_resources_own_missing_token_still_blocks() -> None:
    own = {**PAIR, "modelAccess": {"tokenSecretRef": {"name": "team-token"}}}
    desired, read = compute(own, {("hf-token", "token"): b"hf_abc"})
    assert read == ["ns/team-token:token"]
    assert desired.blocked and desired.reason == "TokenSecretNotFound"
    assert "spec.modelAccess.tokenSecretRef" in desired.message
