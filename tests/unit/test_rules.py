"""Each validation rule is written once (``api.rules``): its CEL expression, evaluated by a real CEL
implementation, and its Python predicate agree on every input generated for what the rule sees
as ``self``; the CRD carries exactly the table's rules, where the table says; the offline rules
reject on parse with the rule's message."""

from __future__ import annotations

from functools import cache
from typing import Any

import celpy
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from specdeploy import api, engines
from specdeploy.api import rules
from specdeploy.api.crd import custom_resource_definition
from specdeploy.api.rules import RULES, Rule

CEL = celpy.Environment()


@cache
def program(cel: str) -> celpy.Runner:
    return CEL.program(CEL.compile(cel))


def cel_holds(rule: Rule, value: Any) -> bool:
    """The apiserver's verdict: the CEL expression on ``self``, as a real CEL runtime evaluates it."""
    return bool(program(rule.cel).evaluate({"self": celpy.json_to_cel(value)}))


def optional(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """An object whose fields are each set or absent, as on the wire."""
    return st.fixed_dictionaries({}, optional=fields)


INT_OR_STRING = st.one_of(st.sampled_from(["auto", "Auto", "", "8"]), st.integers(-2, 70))
MOUNT_PATHS = st.one_of(
    st.sampled_from(["/root", "/root/", "/root/.cache", "/rootless", "//root", "root/x", "/home/engine"]),
    st.text(alphabet="/ro.t", max_size=8),
)
QUANTITIES = st.dictionaries(
    st.sampled_from(["cpu", "memory", api.GPU_RESOURCE, f"{api.GPU_RESOURCE}.shared"]),
    st.just("1"),
    max_size=3,
)
CONTAINER_NAMES = st.sampled_from(["engine", "engine", "sidecar", "Engine"])
RESOURCE_NAMES = st.sampled_from(["cpu", "nvidia.com/gpu", "nvidia.com/mig-1g.5gb", "amd.com/gpu", "gpu"])
LABEL_KEYS = st.sampled_from(
    [
        "team",
        "app.kubernetes.io/name",
        "app.kubernetes.io/part-of",
        "specdeploy.io/engine",
        "x.specdeploy.io/y",
    ]
)
NAMES = st.one_of(
    st.sampled_from(["qwen3-8b", "qwen3.5-8b", "Qwen3-8b", "8b", "a-", "a" * 47, "a" * 48]),
    st.text(alphabet="ab9-._A", min_size=1, max_size=50),
)
# Batch ranges near a partition of the batch sizes: small starts and ends, the end often absent.
BATCH_RANGE = st.fixed_dictionaries(
    {"fromBatch": st.integers(1, 4), "tokens": st.integers(0, 4)}, optional={"toBatch": st.integers(1, 4)}
)
# What each schema node's rules see as self: small ranges, so every rule both holds and breaks.
SELF: dict[str, st.SearchStrategy[Any]] = {
    rules.OBJECT: st.fixed_dictionaries({"metadata": st.fixed_dictionaries({"name": NAMES})}),
    "spec": optional(
        verifier=st.just({"model": "org/verifier"}),
        speculator=optional(model=st.just("org/draft"), numSpeculativeTokens=st.integers(1, 4)),
        security=optional(runAsNonRoot=st.booleans(), runAsUser=st.just(65532)),
        modelCache=optional(mountPath=MOUNT_PATHS, sizeLimit=st.just("200Gi")),
    ),
    "spec.speculator": optional(
        numSpeculativeTokens=st.integers(1, 4), schedule=st.lists(BATCH_RANGE, min_size=1, max_size=4)
    ),
    "spec.speculator.schedule[]": BATCH_RANGE,
    "spec.engine": st.fixed_dictionaries(
        {"name": st.sampled_from(["vllm", "sglang"])},
        optional={"vllm": st.just({}), "sglang": optional(numSteps=st.integers(1, 4))},
    ),
    "spec.engine.sglang": optional(
        numSteps=st.integers(1, 4),
        eagleTopk=st.sampled_from([1, 1, 2, 8]),
        numDraftTokens=st.integers(1, 6),
        memFractionStatic=st.just(0.8),
    ),
    "spec.parallelism.tensor": INT_OR_STRING,
    "spec.parallelism.nodes": INT_OR_STRING,
    "spec.parallelism.pipeline": INT_OR_STRING,
    "spec.modelCache": optional(
        claimName=st.just("cache"), sizeLimit=st.just("200Gi"), mountPath=MOUNT_PATHS
    ),
    "spec.resources": optional(requests=QUANTITIES, limits=QUANTITIES),
    "spec.podTemplate.metadata": optional(
        labels=st.dictionaries(LABEL_KEYS, st.just("v"), max_size=2), annotations=st.just({"a": "b"})
    ),
    "spec.podTemplate.spec": optional(
        affinity=st.just({"podAntiAffinity": {}}), serviceAccountName=st.just("sa")
    ),
    "spec.podTemplate.spec.containers[]": st.fixed_dictionaries(
        {"name": CONTAINER_NAMES},
        optional={
            **{field: st.just(["x"]) for field in ("command", "args")},
            "image": st.just("img"),
            "ports": st.just([{"containerPort": 1}]),
            **{probe: st.just({}) for probe in ("startupProbe", "readinessProbe", "livenessProbe")},
            "resources": optional(
                requests=st.dictionaries(RESOURCE_NAMES, st.just("1"), max_size=2),
                limits=st.dictionaries(RESOURCE_NAMES, st.just(1), max_size=2),
            ),
            "envFrom": st.just([{"secretRef": {"name": "s"}}]),
        },
    ),
    "spec.lifecycle": optional(
        startupTimeoutSeconds=st.just(1800),
        preStopSleepSeconds=st.integers(0, 12),
        terminationGracePeriodSeconds=st.integers(1, 12),
    ),
}


VERIFIER = {"model": "org/verifier"}
COUNTS = ["auto", "Auto", 0, 1, 3, 4, 9]
# Explicit values, run on every run besides the generated ones: between them, each rule of the
# node both holds and breaks.
EDGES: dict[str, list[Any]] = {
    rules.OBJECT: [{"metadata": {"name": "qwen3-8b"}}, {"metadata": {"name": "qwen3.5-8b"}}],
    "spec": [
        {"verifier": VERIFIER},
        {"speculator": {}},
        {"verifier": VERIFIER, "security": {"runAsNonRoot": True}, "modelCache": {"mountPath": "/root"}},
        {
            "speculator": {"model": "org/draft"},
            "security": {"runAsNonRoot": False},
            "modelCache": {"mountPath": "/root/x"},
        },
    ],
    "spec.speculator": [
        {
            "numSpeculativeTokens": 3,
            "schedule": [{"fromBatch": 1, "toBatch": 2, "tokens": 3}, {"fromBatch": 3, "tokens": 0}],
        },
        {
            "numSpeculativeTokens": 2,
            "schedule": [{"fromBatch": 1, "toBatch": 2, "tokens": 3}, {"fromBatch": 3, "tokens": 0}],
        },
        {"schedule": [{"fromBatch": 3, "tokens": 0}, {"fromBatch": 1, "toBatch": 2, "tokens": 1}]},
        {"schedule": [{"fromBatch": 1, "toBatch": 2, "tokens": 1}, {"fromBatch": 4, "tokens": 0}]},
        {"schedule": [{"fromBatch": 1, "toBatch": 3, "tokens": 1}, {"fromBatch": 2, "tokens": 0}]},
        {
            "schedule": [
                {"fromBatch": 1, "toBatch": 2, "tokens": 1},
                {"fromBatch": 3, "toBatch": 4, "tokens": 0},
            ]
        },
        {"schedule": [{"fromBatch": 1, "tokens": 1}, {"fromBatch": 1, "tokens": 0}]},
    ],
    "spec.speculator.schedule[]": [
        {"fromBatch": 2, "toBatch": 1, "tokens": 0},
        {"fromBatch": 2, "tokens": 0},
    ],
    "spec.engine": [
        {"name": "vllm", "vllm": {}},
        {"name": "vllm", "sglang": {}},
        {"name": "sglang", "vllm": {}},
    ],
    "spec.engine.sglang": [
        {"eagleTopk": 1, "numDraftTokens": 4, "numSteps": 3},
        {"eagleTopk": 1, "numDraftTokens": 8, "numSteps": 3},
        {"eagleTopk": 8},
    ],
    "spec.parallelism.tensor": COUNTS,
    "spec.parallelism.nodes": COUNTS,
    "spec.parallelism.pipeline": COUNTS,
    "spec.modelCache": [{}, {"claimName": "cache", "sizeLimit": "200Gi"}],
    "spec.resources": [{"requests": {"cpu": "1"}}, {"limits": {api.GPU_RESOURCE: "1"}}],
    "spec.podTemplate.metadata": [{"labels": {"team": "a"}}, {"labels": {"specdeploy.io/role": "x"}}],
    "spec.podTemplate.spec": [{"imagePullSecrets": [{"name": "r"}]}, {"affinity": {}}],
    "spec.podTemplate.spec.containers[]": [
        {"name": "engine", "env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]},
        *({"name": "engine", field: {}} for field in rules.ENGINE_OWNED),
        {"name": "sidecar", "command": ["x"], "resources": {"limits": {"cpu": 1}}},
        {"name": "sidecar", "resources": {"requests": {"amd.com/gpu": "1"}}},
        {"name": "sidecar", "resources": {"limits": {"nvidia.com/gpu": 1}}},
    ],
    "spec.lifecycle": [
        {"preStopSleepSeconds": 9, "terminationGracePeriodSeconds": 10},
        {"preStopSleepSeconds": 10, "terminationGracePeriodSeconds": 10},
    ],
}


def rule_id(rule: Rule) -> str:
    return f"{rule.at or 'object'}:{rule.message[:40]}"


def test_every_rule_has_a_generator_and_edges() -> None:
    assert {rule.at for rule in RULES} <= SELF.keys() & EDGES.keys()


@pytest.mark.parametrize("rule", RULES, ids=rule_id)
def test_cel_and_python_agree(rule: Rule) -> None:
    outcomes: set[bool] = set()

    def agree(value: Any) -> None:
        verdict = cel_holds(rule, value)
        assert rule.holds(value) is verdict, f"CEL says {verdict} for self = {value!r}"
        outcomes.add(verdict)

    run = given(SELF[rule.at])(agree)
    for value in EDGES[rule.at]:
        run = example(value)(run)
    settings(max_examples=50, deadline=None, database=None)(run)()
    assert outcomes == {True, False}, (
        f"add to EDGES[{rule.at!r}] a value where the rule holds and one where not"
    )


def placed(at: str, value: Any) -> dict[str, Any]:
    """A spec holding ``value`` at the schema node ``at``."""
    if at == "spec":
        assert isinstance(value, dict)
        return value
    spec: dict[str, Any] = {"verifier": {"model": "org/verifier"}}
    node = spec
    *parents, leaf = at.split(".")[1:]
    for name in parents:
        node = node.setdefault(name, {})
    # name[]: one item of the list ``name``.
    node[leaf.removesuffix("[]")] = [value] if leaf.endswith("[]") else value
    return spec


# A violation of each rule the models check on parse, for specs that skip the apiserver.
# Each of the engine container's fields set to a value of its type.
OWNED_VALUES = {"command": ["x"], "args": ["x"], "image": "img", "ports": [{"containerPort": 1}]}
SIDECAR_GPU = {"name": "sidecar", "resources": {"limits": {api.GPU_RESOURCE: 1}}}


def broken_container(rule: Rule) -> dict[str, Any]:
    """A container of the patch breaking one of the container rules."""
    field = (rule.field_path or "").lstrip(".")
    if not rule.message.startswith(f"{field} of the"):
        return SIDECAR_GPU
    return {"name": "engine", field: OWNED_VALUES.get(field, {})}


BROKEN: dict[str, Any] = {
    "spec.podTemplate.metadata": {"labels": {"app.kubernetes.io/instance": "other"}},
    "spec.podTemplate.spec": {"affinity": {"nodeAffinity": {}}},
    rules.OBJECT: {"metadata": {"name": "qwen3.5-8b"}},
    "spec.parallelism.nodes": 9,
    "spec.speculator.schedule[]": {"fromBatch": 3, "toBatch": 2, "tokens": 1},
    "spec.parallelism.pipeline": "2",
    "spec.lifecycle": {"preStopSleepSeconds": 30, "terminationGracePeriodSeconds": 30},
    "spec": {
        "verifier": {"model": "org/verifier"},
        "security": {"runAsNonRoot": True},
        "modelCache": {"mountPath": "/root/.cache"},
    },
}


# Where one node has several offline rules: a violation of each alone.
BROKEN_RULE: dict[Rule, Any] = {
    rules.SCHEDULE_COVERS: {
        "schedule": [{"fromBatch": 1, "toBatch": 2, "tokens": 1}, {"fromBatch": 4, "tokens": 0}]
    },
    rules.SCHEDULE_TOKENS: {"numSpeculativeTokens": 2, "schedule": [{"fromBatch": 1, "tokens": 3}]},
}


@pytest.mark.parametrize("rule", [rule for rule in RULES if rule.offline], ids=rule_id)
def test_offline_rules_reject_on_parse_with_the_rules_message(rule: Rule) -> None:
    if rule.at == rules.TEMPLATE_CONTAINER:
        broken = broken_container(rule)
    else:
        broken = BROKEN_RULE[rule] if rule in BROKEN_RULE else BROKEN[rule.at]
    assert not cel_holds(rule, broken)
    with pytest.raises(ValidationError) as caught:
        if rule.at == rules.OBJECT:
            api.SpeculativeDeployment.model_validate({**broken, "spec": {"verifier": VERIFIER}})
        else:
            api.SpeculativeDeploymentSpec.model_validate(placed(rule.at, broken))
    assert rule.error() in str(caught.value)


def test_the_crd_carries_exactly_the_tables_rules_where_they_say() -> None:
    found: list[tuple[str, Any]] = []

    def walk(node: dict[str, Any], path: str) -> None:
        found.extend((path, entry) for entry in node.get("x-kubernetes-validations", []))
        for name, sub in node.get("properties", {}).items():
            walk(sub, f"{path}.{name}" if path else name)
        if "items" in node:
            walk(node["items"], f"{path}[]")

    version = custom_resource_definition()["spec"]["versions"][0]
    walk(version["schema"]["openAPIV3Schema"], rules.OBJECT)
    table = [(rule.at, rule.entry()) for rule in RULES]
    # Sorted by node only: within one node the order is the table's.
    assert sorted(found, key=lambda item: item[0]) == sorted(table, key=lambda item: item[0])


def test_the_sglang_engine_gives_the_crds_draft_shape_messages() -> None:
    spec = {
        "verifier": {"model": "Qwen/Qwen3-30B-A3B-Instruct-2507"},
        "speculator": {"model": "org/draft", "numSpeculativeTokens": 3},
        "parallelism": {"tensor": 1},
    }
    half = {**spec, "engine": {"name": "sglang", "sglang": {"numDraftTokens": 8}}}
    chain = {**spec, "engine": {"name": "sglang", "sglang": {"eagleTopk": 1, "numDraftTokens": 8}}}
    [error] = engines.validate(api.SpeculativeDeploymentSpec.model_validate(half))
    assert error.message == rules.SGLANG_TOPK_WITH_DRAFT_TOKENS.message
    [error] = engines.validate(api.SpeculativeDeploymentSpec.model_validate(chain))
    assert error.message.startswith(rules.SGLANG_CHAIN.message)
