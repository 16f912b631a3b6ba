"""The reconcile layer with replicas on several nodes: waiting for LeaderWorkerSet, applying one,
and moving a resource between a Deployment and a LeaderWorkerSet without a gap (no cluster)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from specdeploy import api, children
from specdeploy.controller import status
from specdeploy.modelinfo import ModelResolver
from test_reconcile_pass import (
    H100,
    KEY,
    Harness,
    applied,
    conditions_of,
    converge_seed,
    node,
    reconciler_over_fakes,
    resource,
    rolled_out,
    stored,
    with_status,
)

TWO_NODES = {"tensor": "auto", "nodes": 2}


@pytest.fixture
def harness() -> Iterator[Harness]:
    """The catalog-backed reconciler on a cluster of two 8 x H100 nodes, with LeaderWorkerSet."""
    with reconciler_over_fakes(ModelResolver()) as h:
        h.view.node_objects["h100-1"] = node("h100-1", H100)
        h.reconciler.leader_worker_sets = True
        yield h


def test_without_leader_worker_set_the_plan_waits_and_resumes_once_it_is_installed(harness: Harness) -> None:
    harness.reconciler.leader_worker_sets = False
    key = harness.view.add(resource(parallelism=TWO_NODES))
    assert harness.run(key) == "blocked"
    assert harness.kube.applies == []
    ((_, patch),) = harness.kube.status_patches
    assert conditions_of(patch)[api.SCHEDULABLE] == ("False", "LeaderWorkerSetNotInstalled")
    assert patch["plan"]["nodesPerReplica"] == 2
    assert ("Warning", "LeaderWorkerSetNotInstalled") in harness.events.reasons()
    harness.view.resources[key] = with_status(harness.view.resources[key], patch, "14")
    harness.quiet()

    harness.deliver(lambda: harness.reconciler.leader_worker_sets_changed(True, harness.view))
    assert [m["kind"] for m in harness.kube.applies] == ["LeaderWorkerSet", "Service"]
    lws = applied(harness.kube, "LeaderWorkerSet")
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    selector = applied(harness.kube, "Service")["spec"]["selector"]
    assert selector[children.leaderworkerset.ROLE_LABEL] == "leader"


def test_a_ready_group_is_ready_and_reconciles_with_zero_writes(harness: Harness) -> None:
    key = harness.view.add(resource(parallelism=TWO_NODES))
    assert harness.run(key) == "converged"
    ((_, patch),) = harness.kube.status_patches
    group = applied(harness.kube, "LeaderWorkerSet")
    harness.view.leader_worker_sets[key] = stored(group, "11", **rolled_out())
    harness.view.services[key] = stored(applied(harness.kube, "Service"), "12")
    harness.view.resources[key] = with_status(harness.view.resources[key], patch, "13")
    harness.quiet()
    assert harness.run(key) == "converged"
    ((_, patch),) = harness.kube.status_patches
    assert conditions_of(patch)[api.READY] == ("True", "Ready")
    assert (patch["readyReplicas"], patch["plan"]["gpusPerReplica"]) == (1, 16)
    harness.view.resources[key] = with_status(harness.view.resources[key], patch, "15")
    harness.quiet()
    assert harness.run(key) == "converged"
    assert harness.kube.writes() == 0


def test_moving_to_several_nodes_keeps_the_deployment_serving_until_the_group_is_ready(
    harness: Harness,
) -> None:
    converge_seed(harness)
    deployment = harness.view.deployments[KEY]
    harness.view.deployments[KEY] = {**deployment, "status": rolled_out()}
    old_service = harness.view.services[KEY]
    moved = resource(generation=2, version="20", parallelism=TWO_NODES)
    harness.view.resources[KEY] = {**moved, "status": harness.view.resources[KEY]["status"]}

    assert harness.run() == "converged"
    assert [m["kind"] for m in harness.kube.applies] == ["LeaderWorkerSet"]  # Service kept
    assert harness.kube.deletes == []
    lws = stored(applied(harness.kube, "LeaderWorkerSet"), "21")
    harness.view.leader_worker_sets[KEY] = lws
    harness.quiet()

    assert harness.run() == "converged"  # the group is starting: still nothing else moves
    assert harness.kube.applies == [] and harness.kube.deletes == []

    harness.view.leader_worker_sets[KEY] = {**lws, "status": rolled_out()}
    harness.quiet()
    assert harness.run() == "converged"
    assert [m["kind"] for m in harness.kube.applies] == ["Service"]
    selector = applied(harness.kube, "Service")["spec"]["selector"]
    assert selector == {**old_service["spec"]["selector"], children.leaderworkerset.ROLE_LABEL: "leader"}
    assert harness.kube.deletes == [("Deployment", deployment["metadata"]["name"])]


def test_moving_back_to_one_node_deletes_the_group_once_the_deployment_is_ready(harness: Harness) -> None:
    key = harness.view.add(resource(parallelism=TWO_NODES))
    assert harness.run(key) == "converged"
    group = applied(harness.kube, "LeaderWorkerSet")
    harness.view.leader_worker_sets[key] = stored(group, "11", **rolled_out())
    harness.view.services[key] = stored(applied(harness.kube, "Service"), "12")
    harness.quiet()
    harness.view.resources[key] = resource(generation=2, version="20", parallelism={"tensor": 1})
    assert harness.run(key) == "converged"
    assert [m["kind"] for m in harness.kube.applies] == ["Deployment"]
    harness.view.deployments[key] = stored(applied(harness.kube, "Deployment"), "21", **rolled_out())
    harness.quiet()
    assert harness.run(key) == "converged"
    assert [m["kind"] for m in harness.kube.applies] == ["Service"]
    assert harness.kube.deletes == [("LeaderWorkerSet", key[1])]


def test_a_stored_multi_node_plan_or_wait_marks_the_resource_for_leader_worker_set_changes() -> None:
    assert status.multi_node({"status": {"plan": {"nodesPerReplica": 2}}})
    waiting = {"type": api.SCHEDULABLE, "status": "False", "reason": "LeaderWorkerSetNotInstalled"}
    assert status.multi_node({"status": {"conditions": [waiting]}})
    assert not status.multi_node({"status": {"plan": {"nodesPerReplica": 1}}})
