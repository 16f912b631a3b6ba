"""Container env and argv on engine nodes, resolved by kubelet's rules."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from specdeploy_sandbox.enginenode.environment import (
    ConfigError,
    Kind,
    container_argv,
    container_env,
    expand,
    field_ref,
)

POD: dict[str, Any] = {
    "metadata": {
        "name": "engine-abc", "namespace": "team", "uid": "u-1",
        "labels": {"app": "demo"}, "annotations": {"note": "hi"},
    },
    "spec": {"nodeName": "engine-0", "serviceAccountName": "default"},
}  # fmt: skip
OBJECTS: dict[tuple[Kind, str, str], dict[str, str]] = {
    ("Secret", "team", "hf"): {"token": "s3cret"},
    ("ConfigMap", "team", "settings"): {"MODE": "fast", "LEVEL": "2"},
}


def lookup(kind: Kind, namespace: str, name: str) -> Mapping[str, str] | None:
    return OBJECTS.get((kind, namespace, name))


def resolve(container: dict[str, Any]) -> dict[str, str]:
    return container_env(POD, {"name": "c", **container}, "127.42.128.2", "127.0.0.1", lookup)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$(A)/x", "1/x"),
        ("$(MISSING)", "$(MISSING)"),
        ("$$(A)", "$(A)"),
        ("$$", "$"),
        ("a$", "a$"),
        ("$(A", "$(A"),
        ("$x$(B)", "$x2"),
        ("$(A)$(B)", "12"),
    ],
)
def test_expansion_follows_kubernetes_rules(text: str, expected: str) -> None:
    assert expand(text, {"A": "1", "B": "2"}) == expected


def test_env_values_see_only_variables_defined_before_them() -> None:
    env = resolve({"env": [
        {"name": "LATER_REF", "value": "$(BASE)/x"},
        {"name": "BASE", "value": "/data"},
        {"name": "EARLIER_REF", "value": "$(BASE)/y"},
    ]})  # fmt: skip
    assert env == {"LATER_REF": "$(BASE)/x", "BASE": "/data", "EARLIER_REF": "/data/y"}


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("metadata.name", "engine-abc"),
        ("metadata.namespace", "team"),
        ("metadata.uid", "u-1"),
        ("metadata.labels['app']", "demo"),
        ("metadata.annotations['note']", "hi"),
        ("metadata.labels['absent']", ""),
        ("spec.nodeName", "engine-0"),
        ("spec.serviceAccountName", "default"),
        ("status.podIP", "127.42.128.2"),
        ("status.hostIP", "127.0.0.1"),
    ],
)
def test_field_refs(path: str, value: str) -> None:
    assert field_ref(POD, path, "127.42.128.2", "127.0.0.1") == value


def test_unknown_field_path_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"spec\.hostname"):
        field_ref(POD, "spec.hostname", "", "")


def test_secret_and_config_map_refs_and_env_from_with_prefix() -> None:
    env = resolve({
        "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "CFG_"}],
        "env": [
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
            {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "MODE"}}},
            {"name": "OPTIONAL",
             "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k", "optional": True}}},
            {"name": "URL", "value": "http://x/$(CFG_LEVEL)"},
        ],
    })  # fmt: skip
    assert env == {
        "CFG_MODE": "fast",
        "CFG_LEVEL": "2",
        "HF_TOKEN": "s3cret",
        "MODE": "fast",
        "URL": "http://x/2",
    }


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"secretKeyRef": {"name": "nope", "key": "token"}}, 'secret "nope" not found'),
        ({"secretKeyRef": {"name": "hf", "key": "other"}}, "couldn't find key other in Secret team/hf"),
        ({"configMapKeyRef": {"name": "nope", "key": "k"}}, 'configmap "nope" not found'),
        (
            {"configMapKeyRef": {"name": "settings", "key": "k"}},
            "couldn't find key k in ConfigMap team/settings",
        ),
        ({"resourceFieldRef": {"resource": "limits.cpu"}}, "not supported"),
    ],
)
def test_missing_references_are_config_errors_with_kubelets_message(
    source: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        resolve({"env": [{"name": "X", "valueFrom": source}]})
    assert message in str(info.value)


def test_missing_env_from_source_is_an_error_unless_optional() -> None:
    with pytest.raises(ConfigError, match='secret "creds" not found'):
        resolve({"envFrom": [{"secretRef": {"name": "creds"}}]})
    assert resolve({"envFrom": [{"secretRef": {"name": "creds", "optional": True}}]}) == {}


def test_command_and_args_are_expanded_against_the_env() -> None:
    container = {"name": "c", "image": "python:3.11", "command": ["python", "-m", "http.server"],
                 "args": ["--bind", "$(POD_IP)", "$(UNSET)"]}  # fmt: skip
    assert container_argv(container, {"POD_IP": "127.42.128.2"}) == [
        "python", "-m", "http.server", "--bind", "127.42.128.2", "$(UNSET)",
    ]  # fmt: skip


def test_without_command_the_image_maps_entrypoint_runs_else_the_container_cannot_start() -> None:
    container = {"name": "c", "image": "python:3.11", "args": ["-c", "$(CODE)"]}
    assert container_argv(container, {"CODE": "pass"}, ("python",)) == ["python", "-c", "pass"]
    with pytest.raises(ConfigError, match="entrypoint"):
        container_argv(container, {})
