"""What the operator's indices keep of a watched object (controller/cached.py)."""

from __future__ import annotations

import copy
import json
import sys
from typing import Any

from specdeploy.controller.cached import pack, strip_unread

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def watched_deployment() -> dict[str, Any]:
    """A Deployment as a watch delivers it: managedFields, a defaulted spec, a status."""
    fields = [
        {
            "manager": manager,
            "operation": "Apply",
            "apiVersion": "apps/v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {f"f:field{i}": {} for i in range(40)}},
        }
        for manager in ("specdeploy", "kube-controller-manager")
    ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "pair",
            "namespace": "team",
            "resourceVersion": "42",
            "labels": {"app.kubernetes.io/instance": "pair"},
            "annotations": {"specdeploy.io/applied-hash": "abc", LAST_APPLIED: json.dumps({"spec": {}})},
            "managedFields": fields,
        },
        "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "engine", "args": ["ü"]}]}}},
        "status": {"readyReplicas": 1, "conditions": [{"type": "Available", "status": "True"}]},
    }


def deep_size(value: Any) -> int:
    size = sys.getsizeof(value)
    if isinstance(value, dict):
        size += sum(deep_size(k) + deep_size(v) for k, v in value.items())
    elif isinstance(value, list):
        size += sum(deep_size(v) for v in value)
    return size


def test_keeps_everything_a_reconcile_reads_and_drops_the_rest() -> None:
    body = watched_deployment()
    expected = copy.deepcopy(body)
    strip_unread(body)
    kept = pack(body).unpack()
    del expected["metadata"]["managedFields"]
    del expected["metadata"]["annotations"][LAST_APPLIED]
    assert kept == expected


def test_objects_without_those_fields_are_left_alone() -> None:
    """Bookmarks, errors and objects without annotations pass the watch unchanged."""
    for body in (
        {"kind": "Status", "code": 410},
        {"metadata": {"resourceVersion": "7"}},
        {"metadata": {"name": "s", "annotations": {"team": "a"}}},
    ):
        before = copy.deepcopy(body)
        strip_unread(body)
        assert body == before


def test_each_read_is_a_fresh_copy() -> None:
    cached = pack(watched_deployment())
    first = cached.unpack()
    first["spec"]["replicas"] = 9
    assert cached.unpack()["spec"]["replicas"] == 1


def test_an_object_without_metadata_extras_round_trips() -> None:
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {"ports": []}}
    assert pack(service).unpack() == service


def test_far_smaller_than_the_parsed_body() -> None:
    body = watched_deployment()
    parsed = deep_size(body)
    strip_unread(body)
    assert sys.getsizeof(pack(body).data) * 5 < parsed
