"""Bad input never breaks a reconcile: every object the pipeline reads, malformed, becomes a
condition naming the field, and a fuzz over generated specs, ConfigMaps, Secrets and node labels
finds no input that reaches the pipeline's internal-error boundary."""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdeploy import api, pipeline
from specdeploy.api.base import QUANTITY_PATTERN
from specdeploy.controller import admission
from specdeploy.modelinfo import ModelResolver, RetryPolicy
from specdeploy.planning import inventory_from_nodes
from specdeploy.planning.offline import gpu_node_object
from support.fuzz import any_spec, configmap_data, example_spec, node_labels, secret_values

NAMESPACE = "team"
H100 = "NVIDIA-H100-80GB-HBM3"


@contextmanager
def no_network() -> Iterator[None]:
    """Every connection refused at once: a Hub lookup fails as an unreachable Hub would."""

    def refuse(*_: object, **__: object) -> None:
        raise ConnectionRefusedError("no network in unit tests")

    with (
        mock.patch.object(socket.socket, "connect", refuse),
        mock.patch.object(socket, "getaddrinfo", refuse),
    ):
        yield


@pytest.fixture
def resolver(tmp_path: Path) -> ModelResolver:
    return ModelResolver(cache_dir=tmp_path, retry=RetryPolicy(attempts=1), sleep=lambda _: None)


def body(spec: dict[str, Any] | None = None, **changes: Any) -> dict[str, Any]:
    spec = spec if spec is not None else example_spec()
    spec.update(changes)
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "metadata": {"name": "pair", "namespace": NAMESPACE, "uid": "u-1", "generation": 1},
        "spec": spec,
    }


def h100s() -> Any:
    return inventory_from_nodes([gpu_node_object("gpu-0", H100, 8)])


def conditions(desired: pipeline.Desired) -> dict[str, tuple[str, str, str]]:
    return {c.type: (c.status, c.reason, c.message) for c in desired.conditions}


def with_configmap(data: dict[str, str] | None) -> pipeline.ConfigMapReader:
    return lambda namespace, name: data


@pytest.mark.parametrize("architectures", [True, "Eagle3Speculator", [1]])
def test_a_configmap_whose_architectures_is_no_list_of_names_is_refused_by_key(
    resolver: ModelResolver, architectures: object
) -> None:
    """Found by the boundary fuzz test below: ``"architectures": true`` reached the pairing rules."""
    config = {"architectures": architectures, "model_type": "llama"}
    cm = with_configmap({"speculator.json": json.dumps(config)})
    desired = pipeline.compute(body(pairing={"metadataConfigMap": "meta"}), resolver, h100s(), cm)
    assert (desired.blocked, desired.reason) == (True, "InvalidMetadataConfigMap")
    assert "key speculator.json: has architectures" in desired.message
    assert "not a list of class names" in desired.message


def test_a_configmap_that_is_not_json_is_a_condition_naming_field_and_key(resolver: ModelResolver) -> None:
    cm = with_configmap({"speculator.json": "{not json"})
    desired = pipeline.compute(body(pairing={"metadataConfigMap": "meta"}), resolver, h100s(), cm)
    assert desired.blocked and desired.retry and desired.child("Deployment") is None
    status, reason, message = conditions(desired)[api.PAIRING_VERIFIED]
    assert (status, reason) == ("False", "InvalidMetadataConfigMap")
    assert message.startswith(
        "spec.pairing.metadataConfigMap (team/meta), key speculator.json: is not valid JSON"
    )


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"verifier.json": "[1, 2]"}, "key verifier.json: is not a JSON object"),
        ({"speculator.json": '{"hidden_size": 4096}'}, "has neither architectures nor model_type"),
        ({"config.json": "{}"}, "has neither verifier.json nor speculator.json"),
        ({}, "has neither verifier.json nor speculator.json"),
    ],
    ids=["not-an-object", "no-architectures", "wrong-key", "empty"],
)
def test_a_configmap_of_the_wrong_shape_is_a_condition(
    resolver: ModelResolver, data: dict[str, str], problem: str
) -> None:
    desired = pipeline.compute(
        body(pairing={"metadataConfigMap": "meta"}), resolver, h100s(), with_configmap(data)
    )
    status, reason, message = conditions(desired)[api.PAIRING_VERIFIED]
    assert (status, reason) == ("False", "InvalidMetadataConfigMap")
    assert problem in message and "spec.pairing.metadataConfigMap" in message
    assert desired.blocked and desired.retry


def test_a_missing_or_unreadable_configmap_is_unknown_and_retried(resolver: ModelResolver) -> None:
    missing = pipeline.compute(
        body(pairing={"metadataConfigMap": "meta"}), resolver, h100s(), with_configmap(None)
    )
    assert conditions(missing)[api.PAIRING_VERIFIED][:2] == ("Unknown", "MetadataConfigMapNotFound")
    assert missing.retry and missing.blocked

    def forbidden(namespace: str, name: str) -> dict[str, str]:
        raise pipeline.ReadFailed("HTTP 403 Forbidden")

    refused = pipeline.compute(body(pairing={"metadataConfigMap": "meta"}), resolver, h100s(), forbidden)
    status, reason, message = conditions(refused)[api.PAIRING_VERIFIED]
    assert (status, reason) == ("Unknown", "MetadataConfigMapUnreadable")
    assert "HTTP 403 Forbidden" in message and "spec.pairing.metadataConfigMap" in message


def test_an_unreachable_apiserver_fails_the_pass_instead_of_writing_a_condition(
    resolver: ModelResolver,
) -> None:
    def down(namespace: str, name: str) -> dict[str, str]:
        raise pipeline.Unreachable("connection refused")

    with pytest.raises(pipeline.Unreachable):
        pipeline.compute(body(pairing={"metadataConfigMap": "meta"}), resolver, h100s(), down)


class RecordingResolver(ModelResolver):
    """The real resolver (catalog answers), remembering the tokens it was given."""

    def __init__(self) -> None:
        super().__init__(retry=RetryPolicy(attempts=1), sleep=lambda _: None)
        self.tokens: list[str | None] = []

    def resolve(self, model: str, revision: str | None = None, **kwargs: Any) -> Any:
        self.tokens.append(kwargs.get("token"))
        return super().resolve(model, revision, **kwargs)


TOKEN_SPEC = {"tokenSecretRef": {"name": "hf", "key": "token"}}


def test_a_token_with_a_trailing_newline_is_used_stripped() -> None:
    resolver = RecordingResolver()
    desired = pipeline.compute(
        body(modelAccess=TOKEN_SPEC), resolver, h100s(), read_secret=lambda *_: b"hf_abc123\n"
    )
    assert not desired.blocked, desired.message
    assert resolver.tokens and set(resolver.tokens) == {"hf_abc123"}


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "TokenSecretNotFound"),
        (b"\xff\xfehf_qz7wv", "InvalidTokenSecret"),
        (b"hf_qz\x077wv", "InvalidTokenSecret"),
        (b"  \n", "InvalidTokenSecret"),
    ],
    ids=["missing", "not-utf8", "control-character", "blank"],
)
def test_a_token_secret_that_gives_no_token_is_a_condition_without_the_value(
    resolver: ModelResolver, value: bytes | None, reason: str
) -> None:
    desired = pipeline.compute(body(modelAccess=TOKEN_SPEC), resolver, h100s(), read_secret=lambda *_: value)
    status, got, message = conditions(desired)[api.PAIRING_VERIFIED]
    assert (status, got) == ("Unknown", reason)
    assert "spec.modelAccess.tokenSecretRef (team/hf, key token)" in message
    assert "qz" not in message and "7wv" not in message and "xff" not in message
    assert desired.blocked and desired.retry and desired.child("Deployment") is None


@pytest.mark.parametrize("endpoint", ["\x1f", "hf-mirror.internal", "ftp://mirror", "https://m/?q=1"])
def test_a_hub_endpoint_that_is_not_an_http_url_is_a_condition_naming_the_field(
    resolver: ModelResolver, endpoint: str
) -> None:
    """Found by the fuzz test below: a control character reached the hub client's URL parser."""
    with no_network():
        desired = pipeline.compute(body(modelAccess={"endpoint": endpoint}), resolver, h100s())
    assert (desired.blocked, desired.reason, desired.child("Deployment")) == (True, "InvalidSpec", None)
    assert desired.message.startswith(f"spec.modelAccess.endpoint: {endpoint!r} is not a hub endpoint")


def test_a_negative_or_zero_memory_label_counts_as_no_label() -> None:
    nodes = []
    for index, memory in enumerate(("-81559", "0", "abc")):
        manifest = gpu_node_object(f"gpu-{index}", "acme-gpu", 8, memory_mib=1)
        manifest["metadata"]["labels"]["nvidia.com/gpu.memory"] = memory
        nodes.append(manifest)
    assert {n.memory_mib for n in inventory_from_nodes(nodes).nodes} == {None}


def test_a_bug_anywhere_in_the_pipeline_becomes_a_retried_condition(resolver: ModelResolver) -> None:
    with mock.patch.object(resolver, "resolve", side_effect=KeyError("num_hidden_layers")):
        desired = pipeline.compute(body(), resolver, h100s())
    assert desired.blocked and desired.retry and desired.reason == "InternalError"
    assert "KeyError" in desired.message and "num_hidden_layers" in desired.message


def _nodes(labels: list[dict[str, str]], allocatable: list[str]) -> list[dict[str, Any]]:
    nodes = []
    for index, (extra, gpus) in enumerate(zip(labels, allocatable, strict=False)):
        manifest = gpu_node_object(f"fuzz-{index}", H100, 8)
        manifest["metadata"]["labels"].update(extra)
        manifest["status"]["allocatable"]["nvidia.com/gpu"] = gpus
        nodes.append(manifest)
    return nodes


# CI's count; SPECDEPLOY_FUZZ_EXAMPLES=5000 for a longer search.
FUZZ_EXAMPLES = int(os.environ.get("SPECDEPLOY_FUZZ_EXAMPLES", "400"))


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    spec=any_spec(),
    configmap=st.none() | configmap_data(),
    secret=st.none() | secret_values(),
    labels=st.lists(node_labels(), max_size=3),
    allocatable=st.lists(st.sampled_from(["8", "0", "-2", "1k", "x", "4"]), min_size=3, max_size=3),
)
def test_no_input_reaches_the_internal_error_boundary(
    spec: dict[str, Any],
    configmap: dict[str, str] | None,
    secret: bytes | None,
    labels: list[dict[str, str]],
    allocatable: list[str],
) -> None:
    spec = json.loads(json.dumps(spec))
    if isinstance(spec.get("pairing"), dict) and configmap is not None:
        spec["pairing"]["metadataConfigMap"] = "meta"
    resolver = ModelResolver(retry=RetryPolicy(attempts=1), sleep=lambda _: None, negative_ttl=0)
    with no_network():
        desired = pipeline.compute(
            body(spec),
            resolver,
            inventory_from_nodes(_nodes(labels, allocatable)),
            with_configmap(configmap),
            lambda *_: secret,
        )
    assert desired.reason != "InternalError", desired.message
    if desired.blocked:
        assert desired.reason and desired.message
        assert desired.child("Deployment") is None and desired.child("Service") is None
    else:
        assert desired.child("Deployment") is not None and desired.child("Service") is not None
        # A quantity the apiserver cannot parse fails the write with an HTTP 500, not a 422.
        pod = desired.child("Deployment")["spec"]["template"]["spec"]
        # A podTemplate sidecar may carry no resources at all.
        resources = [c.get("resources", {}) for c in pod["containers"]]
        quantities = [v for r in resources for kind in r.values() for v in kind.values()]
        quantities += [
            v["emptyDir"]["sizeLimit"] for v in pod["volumes"] if "sizeLimit" in v.get("emptyDir", {})
        ]
        assert all(re.match(QUANTITY_PATTERN, q) for q in quantities), quantities


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(spec=any_spec())
def test_the_webhook_review_answers_every_spec(spec: dict[str, Any]) -> None:
    """A raise in the webhook is an HTTP 500 the apiserver ignores (failurePolicy Ignore): the
    rejection it should have given would be lost."""
    resolver = ModelResolver(retry=RetryPolicy(attempts=1), sleep=lambda _: None)
    with no_network():
        answer = admission.review(body(json.loads(json.dumps(spec))), resolver)
    assert answer is None or (isinstance(answer, str) and answer)


def test_a_home_directory_of_an_unknown_user_is_a_model_not_found(resolver: ModelResolver) -> None:
    desired = pipeline.compute(body(verifier={"model": "~no-such-user-here/model"}), resolver, h100s())
    assert desired.blocked and desired.reason == "ModelNotFound", desired.message
    assert "~no-such-user-here/model is not a directory" in desired.message


def test_a_model_name_too_long_for_a_path_is_a_model_not_found(resolver: ModelResolver) -> None:
    desired = pipeline.compute(body(verifier={"model": "é" * 200}), resolver, h100s())  # 400 bytes
    assert desired.blocked and desired.reason == "ModelNotFound", desired.message


@pytest.mark.parametrize(
    ("status", "message", "refused"),
    [
        (422, 'Deployment.apps "pair" is invalid: spec.template.spec.nodeSelector: Invalid value', True),
        (403, 'deployments.apps "pair" is forbidden: exceeded quota', True),
        (
            500,
            "failed to create typed patch object (team/pair): .spec.template.spec.affinity.: not declared",
            True,
        ),
        (500, "etcdserver: request timed out", False),
        (409, "the object has been modified", False),
    ],
    ids=["invalid", "quota", "untypable", "etcd-timeout", "conflict"],
)
def test_which_apiserver_answers_to_an_apply_are_refusals(status: int, message: str, refused: bool) -> None:
    """A refusal becomes ChildRejected with the apiserver's message; anything else is retried."""
    from kubernetes.client.exceptions import ApiException

    from specdeploy.controller.kube import ApiError, KubeClient, Refused

    error = ApiException(status=status, reason="Reason")
    error.body = json.dumps({"kind": "Status", "message": message, "code": status})
    kube = KubeClient()
    manifest = {"kind": "Deployment", "metadata": {"name": "pair", "namespace": NAMESPACE}}
    with (
        mock.patch.object(
            KubeClient, "apps", mock.Mock(**{"patch_namespaced_deployment.side_effect": error})
        ),
        pytest.raises(Refused if refused else ApiError) as raised,
    ):
        kube.apply(manifest)
    assert message in str(raised.value)


def test_an_apply_into_a_namespace_being_deleted_is_no_error() -> None:
    """Apply creates what is missing, so a 404 means the namespace is going away with the owner:
    nothing to report or retry (the owner's DELETED event drops what is held for it)."""
    from kubernetes.client.exceptions import ApiException

    from specdeploy.controller.kube import KubeClient

    error = ApiException(status=404, reason="Not Found")
    error.body = json.dumps({"kind": "Status", "message": f'namespaces "{NAMESPACE}" not found', "code": 404})
    manifest = {"kind": "Deployment", "metadata": {"name": "pair", "namespace": NAMESPACE}}
    patch = mock.Mock(**{"patch_namespaced_deployment.side_effect": error})
    with mock.patch.object(KubeClient, "apps", patch):
        KubeClient().apply(manifest)
    patch.patch_namespaced_deployment.assert_called_once()


@pytest.mark.parametrize(
    "fields",
    [
        {"eagle_aux_hidden_state_layer_ids": [None, 3]},
        {"speculators_config": ["not", "an", "object"]},
        {"speculators_config": {"verifier": "a string", "proposal_methods": {"not": "a list"}}},
    ],
    ids=["aux-none", "config-list", "verifier-string"],
)
def test_a_draft_config_of_the_wrong_shapes_is_read_without_an_internal_error(
    resolver: ModelResolver, fields: dict[str, Any]
) -> None:
    """Found by the boundary fuzz test: a null layer id and sections that are not objects reached
    ``int()`` and ``.get`` inside the draft reader."""
    config = {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "transformer_layer_config": {
            "hidden_size": 4096,
            "vocab_size": 151936,
            "num_hidden_layers": 1,
            "num_attention_heads": 32,
        },
        **fields,
    }
    cm = with_configmap({"speculator.json": json.dumps(config)})
    desired = pipeline.compute(body(pairing={"metadataConfigMap": "meta"}), resolver, h100s(), cm)
    assert desired.reason != "InternalError", desired.message


def test_sizing_reads_fields_that_are_not_positive_integers_as_absent() -> None:
    """Found by the boundary fuzz test (a ConfigMap override that passed the pairing check): a
    list or a text where the memory estimate expects an integer."""
    from specdeploy.planning.shape import draft_parameter_count, model_shape

    layer = {"hidden_size": 64, "vocab_size": 1000, "num_hidden_layers": 2, "num_attention_heads": 4}
    malformed = {"num_key_value_heads": "2", "head_dim": [16], "intermediate_size": ":", "num_experts": 0}
    draft = {"transformer_layer_config": {**layer, **malformed}, "target_hidden_size": [64]}
    assert draft_parameter_count({**draft, "draft_vocab_size": "K"}) == draft_parameter_count(
        {"transformer_layer_config": layer}
    )
    moe = {**layer, "num_experts": 8, "mlp_only_layers": 3, "decoder_sparse_step": "x"}
    assert model_shape(moe).moe_layers == 2
