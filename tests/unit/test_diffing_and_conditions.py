"""Zero-write reconciles rest on these two comparisons: child drift and status conditions."""

from __future__ import annotations

import copy
from typing import Any

from specdeploy.api import Condition
from specdeploy.controller import conditions, diffing


def manifest() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "a", "namespace": "n", "labels": {"x": "1"}},
        "spec": {
            "replicas": 1,
            "template": {"spec": {"containers": [{"name": "c", "command": ["a"], "env": []}]}},
        },
    }


def as_stored(want: dict[str, Any]) -> dict[str, Any]:
    """What the apiserver returns: defaults added, empty lists dropped."""
    stored = copy.deepcopy(want)
    container = stored["spec"]["template"]["spec"]["containers"][0]
    del container["env"]
    container["imagePullPolicy"] = "IfNotPresent"
    stored["spec"]["revisionHistoryLimit"] = 10
    stored["metadata"]["resourceVersion"] = "7"
    return stored


def test_unchanged_child_needs_no_write() -> None:
    want = diffing.stamped(manifest())
    assert not diffing.needs_apply(want, as_stored(want))


def test_missing_child_is_applied() -> None:
    assert diffing.needs_apply(diffing.stamped(manifest()), None)


def test_a_removed_owner_reference_is_repaired_and_an_extra_one_kept() -> None:
    base = manifest()
    ours = {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment", "name": "a", "uid": "u1",
            "controller": True, "blockOwnerDeletion": True}  # fmt: skip
    base["metadata"]["ownerReferences"] = [ours]
    want = diffing.stamped(base)
    stored = as_stored(want)
    assert not diffing.needs_apply(want, stored)
    theirs = {"apiVersion": "v1", "kind": "ConfigMap", "name": "keep", "uid": "u2"}
    stored["metadata"]["ownerReferences"] = [theirs, ours]
    assert not diffing.needs_apply(want, stored)
    del stored["metadata"]["ownerReferences"]
    assert diffing.needs_apply(want, stored)


def test_hand_edited_field_is_repaired() -> None:
    want = diffing.stamped(manifest())
    edited = as_stored(want)
    edited["spec"]["template"]["spec"]["containers"][0]["command"] = ["sleep", "inf"]
    assert diffing.needs_apply(want, edited)


def test_removed_field_in_spec_changes_the_hash() -> None:
    """A field the operator stops setting is still 'a subset'; the hash catches it."""
    old = manifest()
    old["spec"]["template"]["spec"]["nodeSelector"] = {"a": "b"}
    stored = as_stored(diffing.stamped(old))
    assert diffing.needs_apply(diffing.stamped(manifest()), stored)


def test_hash_ignores_key_order() -> None:
    a = manifest()
    b = {k: a[k] for k in reversed(list(a))}
    assert diffing.manifest_hash(a) == diffing.manifest_hash(b)


def test_condition_transition_time_moves_only_on_status_change() -> None:
    first, transitions = conditions.merge([], [Condition(type="Ready", status="False", reason="Starting")], 1)
    assert [t.status for t in transitions] == ["False"]
    stored = [{**first[0], "lastTransitionTime": "2020-01-01T00:00:00Z"}]
    again, transitions = conditions.merge(
        stored, [Condition(type="Ready", status="False", reason="Starting")], 1
    )
    assert again[0]["lastTransitionTime"] == "2020-01-01T00:00:00Z" and transitions == []
    assert conditions.same(stored, again)
    flipped, transitions = conditions.merge(
        stored, [Condition(type="Ready", status="True", reason="Ready")], 2
    )
    assert flipped[0]["lastTransitionTime"] != "2020-01-01T00:00:00Z"
    assert flipped[0]["observedGeneration"] == 2
    assert [(t.type, t.status, t.reason) for t in transitions] == [("Ready", "True", "Ready")]
    assert not conditions.same(stored, flipped)


def test_conditions_are_ordered_ready_first() -> None:
    merged, _ = conditions.merge(
        [],
        [Condition(type=t, status="True", reason="r") for t in ("PairingVerified", "Degraded", "Ready")],
        1,
    )
    assert [c["type"] for c in merged] == ["Ready", "Degraded", "PairingVerified"]
