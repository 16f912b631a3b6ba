"""The reconcile layer around the controller core, without kopf, a cluster or the network.

``Reconciler`` runs against a fake KubeClient that records every write, a fake event poster and a
``ClusterView`` over plain dicts that the tests move forward the way the watch caches would (a
write shows up only once the test "delivers" it, with a new resourceVersion). The contracts are the
ones tests/integration/test_reconciler.py checks live: one write per child, zero writes when
nothing changed, drift repaired, failed pairs and NoNodeFits blocking, and the webhook's verdicts.
One file past 400 lines on purpose: one harness (the fakes) shared by every scenario of one pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY

from fake_timers import FakeTimers
from specdeploy import api, pipeline
from specdeploy.controller import admission, diffing, status
from specdeploy.controller.kube import Refused
from specdeploy.controller.pods import ContainerView, LogRead, PodView, command_digest
from specdeploy.controller.reconcile import GpuInventory, Reconciler
from specdeploy.controller.workqueue import RETRY_MIN_SECONDS, Key
from specdeploy.modelinfo import ModelResolver
from specdeploy.planning import inventory_from_nodes
from specdeploy.planning.inventory import planner_view
from specdeploy.planning.offline import gpu_node_object, offline_node_objects
from specdeploy.planning.pools import pool_view
from support.paths import REPO

EXAMPLE = REPO / "manifests" / "examples" / "qwen3-30b-a3b-instruct-2507-eagle3.yaml"
NAMESPACE = "models"
NAME = "qwen3-30b-a3b-eagle3"
KEY: Key = (NAMESPACE, NAME)
VERIFIER = "Qwen/Qwen3-30B-A3B-Instruct-2507"
# Trained for Qwen/Qwen3-8B (catalog): the pairing check fails without any download.
WRONG_SPECULATOR = "RedHatAI/Qwen3-8B-speculator.eagle3"
H100 = "NVIDIA-H100-80GB-HBM3"
B200 = "NVIDIA-B200"
CONDITION_TYPES = list(api.CONDITION_ORDER)
OUTCOMES = ("converged", "blocked", "retry", "error")


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every resource here resolves from the catalog or fails offline: any connection is a bug."""

    def refuse(*_: object) -> None:
        raise AssertionError("a unit test of the reconcile layer opened a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)


# ---------------------------------------------------------------------------------------------
# Real resources and nodes
# ---------------------------------------------------------------------------------------------


def resource(name: str = NAME, generation: int = 1, version: str = "10", **spec: Any) -> dict[str, Any]:
    """The seed example as the apiserver stores it (namespace, uid, generation, resourceVersion)."""
    body: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"].update(
        name=name, namespace=NAMESPACE, uid=f"uid-{name}", generation=generation, resourceVersion=version
    )
    for key, value in spec.items():
        body["spec"][key] = value
    return body


def wrong_pair(name: str = NAME, **meta: Any) -> dict[str, Any]:
    """The seed's verifier with a speculator trained for another verifier."""
    body = resource(name, **meta)
    body["spec"]["speculator"]["model"] = WRONG_SPECULATOR
    return body


def b200_only(name: str = "qwen3-b200") -> dict[str, Any]:
    """The seed restricted to B200 GPUs: NoNodeFits on a cluster without any."""
    body = resource(name)
    body["spec"]["parallelism"]["gpuProduct"] = "b200"
    return body


def node(name: str, product: str, gpus: int = 8, heartbeat: str = "2025-01-01T00:00:00Z") -> dict[str, Any]:
    """A GPU Node as a cluster presents it, with a Ready condition whose heartbeat moves."""
    body = gpu_node_object(name, product, gpus)
    body["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastHeartbeatTime": heartbeat}]
    return body


# ---------------------------------------------------------------------------------------------
# Fakes: the API client, the event poster, the timer and the watch caches
# ---------------------------------------------------------------------------------------------


@dataclass
class FakeKube:
    """KubeClient's surface, recording every call (the writes are what the tests count)."""

    applies: list[dict[str, Any]] = field(default_factory=list)
    status_patches: list[tuple[Key, dict[str, Any]]] = field(default_factory=list)
    reads: list[tuple[str, ...]] = field(default_factory=list)
    deletes: list[tuple[str, str]] = field(default_factory=list)
    # kind -> the message the apiserver refuses that kind's apply with
    refuse: dict[str, str] = field(default_factory=dict)
    # pod name -> the end of its log (a missing pod: the log cannot be read)
    logs: dict[str, str] = field(default_factory=dict)
    log_reads: list[tuple[str, LogRead]] = field(default_factory=list)

    def apply(self, manifest: dict[str, Any]) -> None:
        if manifest["kind"] in self.refuse:
            raise Refused(self.refuse[manifest["kind"]])
        self.applies.append(copy.deepcopy(manifest))

    def patch_status(self, key: Key, patch: dict[str, Any]) -> None:
        self.status_patches.append((key, copy.deepcopy(patch)))

    def delete(self, manifest: dict[str, Any]) -> None:
        self.deletes.append((manifest["kind"], manifest["metadata"]["name"]))

    def read_configmap(self, namespace: str, name: str) -> dict[str, str] | None:
        self.reads.append(("configmap", namespace, name))
        return None

    def read_secret(self, namespace: str, name: str, key: str) -> bytes | None:
        self.reads.append(("secret", namespace, name, key))
        return None

    def read_log(self, namespace: str, read: LogRead) -> str | None:
        self.log_reads.append((namespace, read))
        return self.logs.get(read.pod)

    def writes(self) -> int:
        return len(self.applies) + len(self.status_patches) + len(self.deletes)

    def clear(self) -> None:
        self.applies.clear()
        self.status_patches.clear()
        self.deletes.clear()


@dataclass
class Event:
    name: str
    type: str
    reason: str
    message: str


@dataclass
class FakeEvents:
    """The injected event poster."""

    posted: list[Event] = field(default_factory=list)

    def __call__(self, body: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self.posted.append(Event(body["metadata"]["name"], type_, reason, message))

    def reasons(self) -> list[tuple[str, str]]:
        return [(e.type, e.reason) for e in self.posted]


class FakeView:
    """The ClusterView protocol over plain dicts: what the watch caches hold right now."""

    def __init__(self, *nodes: dict[str, Any]) -> None:
        self.resources: dict[Key, dict[str, Any]] = {}
        self.deployments: dict[Key, dict[str, Any]] = {}
        self.leader_worker_sets: dict[Key, dict[str, Any]] = {}
        self.services: dict[Key, dict[str, Any]] = {}
        self.budgets: dict[Key, dict[str, Any]] = {}
        self.node_objects: dict[str, dict[str, Any]] = {n["metadata"]["name"]: n for n in nodes}
        self.pool_objects: dict[str, dict[str, Any]] = {}
        self.pod_views: dict[Key, list[PodView]] = {}

    def resource(self, key: Key) -> dict[str, Any] | None:
        return self.resources.get(key)

    def child(self, kind: str, key: Key) -> dict[str, Any] | None:
        by_kind = {
            "Deployment": self.deployments,
            "LeaderWorkerSet": self.leader_worker_sets,
            "Service": self.services,
            "PodDisruptionBudget": self.budgets,
        }
        return by_kind[kind].get(key)

    def resource_keys(self) -> list[Key]:
        return list(self.resources)

    def nodes(self) -> list[dict[str, Any]]:
        # What the gpu_nodes index holds in production: the planner's projection of each node.
        return [planner_view(n) for n in self.node_objects.values()]

    def node_pools(self) -> list[dict[str, Any]]:
        return [pool_view(p) for p in self.pool_objects.values()]

    def pods(self, key: Key) -> list[PodView]:
        return list(self.pod_views.get(key, []))

    def add(self, body: dict[str, Any]) -> Key:
        key: Key = (body["metadata"]["namespace"], body["metadata"]["name"])
        self.resources[key] = body
        return key


@dataclass
class Harness:
    reconciler: Reconciler
    kube: FakeKube
    events: FakeEvents
    timers: FakeTimers
    view: FakeView

    def run(self, key: Key = KEY) -> str | None:
        """One event for ``key``: a pass against the view; its outcome as the metrics counted it."""
        before = _outcome_counts()
        self.deliver(lambda: self.reconciler.submit(key, self.view))
        after = _outcome_counts()
        moved = [o for o in OUTCOMES if after[o] != before[o]]
        assert len(moved) <= 1, moved
        return moved[0] if moved else None

    def node_event(self, body: dict[str, Any] | None, name: str | None = None) -> None:
        """A node watch event as handlers.on_node passes it (None: the node was deleted)."""
        name = name or (body or {})["metadata"]["name"]
        if body is None:
            self.view.node_objects.pop(name, None)
        else:
            self.view.node_objects[name] = body
        view = None if body is None else planner_view(body)
        self.deliver(lambda: self.reconciler.node_changed(name, view, self.view))

    def pool_event(self, body: dict[str, Any]) -> None:
        """A NodePool watch event as handlers.on_node_pool passes it."""
        name = body["metadata"]["name"]
        self.view.pool_objects[name] = body
        self.deliver(lambda: self.reconciler.pool_changed(name, pool_view(body), self.view))

    def deliver(self, event: Callable[[], None]) -> None:
        """Hand a watch event over as a handler does, then wait for the passes it queued."""

        async def main() -> None:
            event()
            await self.reconciler.queue.join()

        asyncio.run(main())

    def quiet(self) -> None:
        """Forget the recorded writes and events (the state under test stays)."""
        self.kube.clear()
        self.events.posted.clear()


def _outcome_counts() -> dict[str, float]:
    return {
        o: REGISTRY.get_sample_value("specdeploy_reconciles_total", {"outcome": o}) or 0.0 for o in OUTCOMES
    }


@contextlib.contextmanager
def reconciler_over_fakes(resolver: ModelResolver) -> Iterator[Harness]:
    """A Reconciler over fakes, on a one-H100-node cluster; its I/O pool is shut down after."""
    kube, events, timers = FakeKube(), FakeEvents(), FakeTimers()
    reconciler = Reconciler(kube, events, resolver=resolver, call_later=timers)  # type: ignore[arg-type]
    try:
        yield Harness(reconciler, kube, events, timers, FakeView(node("h100-0", H100)))
    finally:
        reconciler.io.shutdown(wait=True)


@pytest.fixture
def harness() -> Iterator[Harness]:
    """The catalog-backed reconciler most tests use (no model here needs the Hub)."""
    with reconciler_over_fakes(ModelResolver()) as h:
        yield h


# ---------------------------------------------------------------------------------------------
# Delivering writes to the view, as the watch would
# ---------------------------------------------------------------------------------------------


def stored(manifest: dict[str, Any], version: str, **status_: Any) -> dict[str, Any]:
    """An applied child as the watch returns it: a resourceVersion and server-defaulted fields."""
    body = copy.deepcopy(manifest)
    body["metadata"].update(resourceVersion=version, uid=f"uid-{version}", generation=1)
    if body["kind"] == "LeaderWorkerSet":
        body["spec"]["networkConfig"] = {"subdomainPolicy": "Shared"}
        body["status"] = dict(status_)
    elif body["kind"] == "Deployment":
        body["spec"]["revisionHistoryLimit"] = 10
        body["spec"]["template"]["spec"]["restartPolicy"] = "Always"
        body["status"] = dict(status_)
    else:
        body["spec"]["clusterIP"] = "10.96.0.17"
    return body


def rolled_out(replicas: int = 1) -> dict[str, Any]:
    """A Deployment status with every replica updated and ready."""
    return {
        "observedGeneration": 1,
        "replicas": replicas,
        "readyReplicas": replicas,
        "updatedReplicas": replicas,
        "availableReplicas": replicas,
    }


def with_status(body: dict[str, Any], patch: dict[str, Any], version: str) -> dict[str, Any]:
    """The resource after a merge patch of its status (None deletes a field)."""
    result = copy.deepcopy(body)
    merged = dict(result.get("status") or {})
    for k, v in patch.items():
        if v is None:
            merged.pop(k, None)
        else:
            merged[k] = copy.deepcopy(v)
    result["status"] = merged
    result["metadata"]["resourceVersion"] = version
    return result


def applied(kube: FakeKube, kind: str) -> dict[str, Any]:
    (found,) = [m for m in kube.applies if m["kind"] == kind]
    return found


def conditions_of(status_: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status_["conditions"]}


def command(deployment: dict[str, Any]) -> list[str]:
    result: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    return result


def converge_seed(h: Harness, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """First pass of the seed, then deliver its writes to the view (children stored, status patched)."""
    key = h.view.add(body or resource())
    assert h.run(key) == "converged"
    ((_, patch),) = h.kube.status_patches
    h.view.deployments[key] = stored(applied(h.kube, "Deployment"), "11")
    h.view.services[key] = stored(applied(h.kube, "Service"), "12")
    h.view.resources[key] = with_status(h.view.resources[key], patch, "13")
    h.quiet()
    return patch


# ---------------------------------------------------------------------------------------------
# 1-3: first pass, zero-write passes, the write ledger and drift
# ---------------------------------------------------------------------------------------------


def test_first_pass_applies_each_child_once_and_patches_status(harness: Harness) -> None:
    """A new resource: one Deployment, one Service, one status patch, an event per new condition."""
    harness.view.add(resource())
    assert harness.run() == "converged"

    assert [m["kind"] for m in harness.kube.applies] == ["Deployment", "Service"]
    deployment, service = harness.kube.applies
    for manifest in (deployment, service):
        assert manifest["metadata"]["namespace"] == NAMESPACE and manifest["metadata"]["name"] == NAME
        assert manifest == diffing.stamped({**manifest, "metadata": _unstamped(manifest["metadata"])})
        assert manifest["metadata"]["ownerReferences"][0]["uid"] == f"uid-{NAME}"
    assert command(deployment)[:3] == ["vllm", "serve", VERIFIER]
    assert command(deployment)[command(deployment).index("--tensor-parallel-size") + 1] == "1"
    resources = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {"memory": resources["requests"]["memory"], "nvidia.com/gpu": "1"}
    assert service["spec"]["ports"][0]["port"] == 8000

    ((key, patch),) = harness.kube.status_patches
    assert key == KEY
    assert [c["type"] for c in patch["conditions"]] == CONDITION_TYPES
    assert conditions_of(patch) == {
        api.READY: ("False", "WaitingForReplicas"),
        api.PROGRESSING: ("True", "RollingOut"),
        api.DEGRADED: ("False", "AsExpected"),
        api.PAIRING_VERIFIED: ("True", "Compatible"),
        api.SCHEDULABLE: ("True", "Planned"),
        api.SPECULATION_EFFECTIVE: ("Unknown", "NotServing"),
    }
    assert all(c["observedGeneration"] == 1 and c["lastTransitionTime"] for c in patch["conditions"])
    assert patch["observedGeneration"] == 1
    assert (patch["replicas"], patch["readyReplicas"], patch["updatedReplicas"]) == (0, 0, 0)
    assert patch["command"] == command(deployment)
    assert patch["endpoint"] == f"http://{NAME}.{NAMESPACE}.svc:8000/v1"
    assert patch["verifier"] == VERIFIER and patch["tensorParallelSize"] == 1
    assert patch["plan"]["gpuProduct"] == H100

    # A healthy new resource starts its conditions without Events; changes and problems post them.
    assert harness.events.posted == []
    assert harness.timers.created == [] and harness.kube.reads == []


def test_a_child_the_apiserver_refuses_is_a_condition_with_its_message_and_a_retry(
    harness: Harness,
) -> None:
    refusal = (
        'the apiserver refused the Deployment: Deployment.apps "qwen3-30b-a3b-eagle3" is invalid: '
        'spec.template.spec.nodeSelector: Invalid value: "": name part must be non-empty'
    )
    harness.kube.refuse["Deployment"] = refusal
    harness.view.add(resource())
    assert harness.run() == "retry"
    assert harness.kube.applies == []  # the Service waits for the Deployment
    ((_, patch),) = harness.kube.status_patches
    conds = {c["type"]: c for c in patch["conditions"]}
    assert (conds[api.READY]["status"], conds[api.READY]["reason"]) == ("False", "ChildRejected")
    assert conds[api.READY]["message"] == refusal
    assert (conds[api.DEGRADED]["status"], conds[api.DEGRADED]["reason"]) == ("True", "ChildRejected")
    assert conds[api.PAIRING_VERIFIED]["status"] == "True"
    assert ("Warning", "ChildRejected") in harness.events.reasons()

    assert [t.delay for t in harness.timers.pending()] == [RETRY_MIN_SECONDS]
    del harness.kube.refuse["Deployment"]
    assert harness.run() == "converged"  # what the retry's pass finds once the refusal is gone
    assert [m["kind"] for m in harness.kube.applies] == ["Deployment", "Service"]


def _unstamped(meta: dict[str, Any]) -> dict[str, Any]:
    annotations = {k: v for k, v in meta["annotations"].items() if k != diffing.HASH_ANNOTATION}
    result = {k: v for k, v in meta.items() if k != "annotations"}
    return {**result, "annotations": annotations} if annotations else result


def test_unchanged_resource_reconciles_with_zero_writes(harness: Harness) -> None:
    """Once the watch shows our writes, events on the resource or a child cost no write at all."""
    converge_seed(harness)
    for _ in range(3):  # the resource, the Deployment and the Service were "touched"
        assert harness.run() == "converged"
    assert harness.kube.applies == [] and harness.kube.status_patches == []
    assert harness.events.posted == []


def test_rollout_completion_is_a_status_only_write(harness: Harness) -> None:
    """The Deployment reports its replicas ready: status moves, children are not re-applied."""
    first = converge_seed(harness)
    harness.view.deployments[KEY]["status"] = rolled_out()
    assert harness.run() == "converged"

    assert harness.kube.applies == []
    ((_, patch),) = harness.kube.status_patches
    assert conditions_of(patch)[api.READY] == ("True", "Ready")
    assert conditions_of(patch)[api.PROGRESSING] == ("False", "RolloutComplete")
    assert (patch["replicas"], patch["readyReplicas"], patch["updatedReplicas"]) == (1, 1, 1)
    # Unchanged conditions keep their transition time; of the two that moved, Ready is the one
    # Event (Progressing=False RolloutComplete says the same "1/1 replicas ready").
    unchanged = {c["type"]: c for c in first["conditions"]}
    for cond in patch["conditions"]:
        if cond["type"] in (api.DEGRADED, api.PAIRING_VERIFIED, api.SCHEDULABLE):
            assert cond["lastTransitionTime"] == unchanged[cond["type"]]["lastTransitionTime"]
    posted = [(e.type, e.reason) for e in harness.events.posted]
    assert posted == [("Normal", "Ready")]
    assert harness.events.posted[0].message == "Ready=True: 1/1 replicas ready"

    harness.view.resources[KEY] = with_status(harness.view.resources[KEY], patch, "14")
    harness.quiet()
    assert harness.run() == "converged"
    assert harness.kube.writes() == 0 and harness.events.posted == []


def test_the_watch_showing_back_our_status_write_runs_no_pass(harness: Harness) -> None:
    """Every status write comes back as a watch event of the resource; with the metadata a pass
    reads unchanged, it starts no pass. Someone else's status, or a label, still does."""
    key = harness.view.add(resource())

    def event(body: dict[str, Any]) -> str | None:
        harness.view.resources[key] = body
        before = _outcome_counts()
        harness.deliver(lambda: harness.reconciler.resource_changed(key, harness.view))
        moved = [o for o in OUTCOMES if _outcome_counts()[o] != before[o]]
        return moved[0] if moved else None

    assert event(harness.view.resources[key]) == "converged"
    ((_, patch),) = harness.kube.status_patches
    harness.view.deployments[key] = stored(applied(harness.kube, "Deployment"), "11")
    harness.view.services[key] = stored(applied(harness.kube, "Service"), "12")
    harness.quiet()
    echo = with_status(harness.view.resources[key], patch, "13")
    assert event(echo) is None

    edited = with_status(echo, {"readyReplicas": 5}, "14")
    assert event(edited) == "converged"
    ((_, repaired),) = harness.kube.status_patches
    assert repaired["readyReplicas"] == 0
    harness.quiet()
    assert event(with_status(edited, repaired, "15")) is None

    labelled = copy.deepcopy(harness.view.resources[key])
    labelled["metadata"]["labels"] = {"team": "inference"}
    assert event(labelled) == "converged"
    assert harness.kube.writes() == 0


def test_a_normal_start_writes_status_twice_and_posts_one_event(harness: Harness) -> None:
    """Taking the resource up and Ready are the only status writes of a healthy start, and Ready
    its only Event: the Deployment's intermediate counts ride along with the Ready write, and an
    engine pod seen ready before its Deployment counts it moves nothing (SpeculationEffective
    leaves NotServing with Ready, in one write)."""
    first = converge_seed(harness)
    deployment = harness.view.deployments[KEY]
    for version, counts in (("21", {"replicas": 1}), ("22", {"replicas": 1, "updatedReplicas": 1})):
        harness.view.deployments[KEY] = {
            **deployment,
            "metadata": {**deployment["metadata"], "resourceVersion": version},
            "status": {"observedGeneration": 1, **counts},
        }
        assert harness.run() == "converged"
        assert harness.kube.writes() == 0 and harness.events.posted == []
    container = ContainerView("engine", "img", 0, None, "", None, None)
    harness.view.pod_views[KEY] = [
        PodView(
            "pair-a",
            "Running",
            False,
            True,
            (container,),
            "vllm",
            "10.0.0.1",
            8000,
            command_digest(first["command"]),
        )
    ]
    assert harness.run() == "converged"
    assert harness.kube.writes() == 0 and harness.events.posted == []

    harness.view.deployments[KEY] = {**harness.view.deployments[KEY], "status": rolled_out()}
    assert harness.run() == "converged"
    ((_, patch),) = harness.kube.status_patches
    assert (patch["replicas"], patch["readyReplicas"], patch["updatedReplicas"]) == (1, 1, 1)
    conds = {c["type"]: (c["status"], c["reason"]) for c in patch["conditions"]}
    assert conds[api.READY] == ("True", "Ready")
    assert conds[api.SPECULATION_EFFECTIVE] == ("Unknown", "InsufficientSamples")
    assert harness.events.reasons() == [("Normal", "Ready")]


def test_scaling_posts_one_scaled_event_and_ready_again_once_scaled(harness: Harness) -> None:
    """A new replica count is one Scaled Event when the Deployment is written with it; waiting
    for the new replicas posts nothing, and all of them ready is Ready again."""
    first = converge_seed(harness)
    harness.view.deployments[KEY] = {**harness.view.deployments[KEY], "status": rolled_out()}
    assert harness.run() == "converged"
    ((_, ready),) = harness.kube.status_patches
    body = with_status(with_status(harness.view.resources[KEY], first, "13"), ready, "14")
    body["spec"]["replicas"] = 3
    body["metadata"]["generation"] = 2
    harness.view.resources[KEY] = body
    harness.quiet()

    assert harness.run() == "converged"
    assert applied(harness.kube, "Deployment")["spec"]["replicas"] == 3
    assert [(e.type, e.reason, e.message) for e in harness.events.posted] == [
        ("Normal", "Scaled", "scaled from 1 to 3 replicas")
    ]
    assert conditions_of(harness.kube.status_patches[0][1])[api.READY] == ("False", "WaitingForReplicas")
    harness.events.posted.clear()
    assert harness.run() == "converged"  # the watch has not shown the write yet: no second Scaled
    assert harness.events.posted == []


def test_a_resource_whose_first_status_is_ready_still_posts_its_ready_event(harness: Harness) -> None:
    """A pass applied the children and failed before its status write; the rollout finished
    before the next pass, whose status is the first: Ready=True appears, and is still news."""
    key = harness.view.add(resource())
    assert harness.run(key) == "converged"
    harness.view.deployments[key] = {
        **stored(applied(harness.kube, "Deployment"), "11"),
        "status": rolled_out(),
    }
    harness.view.services[key] = stored(applied(harness.kube, "Service"), "12")
    harness.quiet()
    assert harness.run(key) == "converged"

    ((_, patch),) = harness.kube.status_patches
    assert conditions_of(patch)[api.READY] == ("True", "Ready")
    assert conditions_of(patch)[api.PROGRESSING] == ("False", "RolloutComplete")
    assert [(e.type, e.reason) for e in harness.events.posted] == [("Normal", "Ready")]


def test_stale_cache_gets_no_duplicate_write_and_a_reverted_edit_is_reapplied(harness: Harness) -> None:
    """The ledger: no repeat while the cache lags behind our writes; drift seen later is repaired."""
    harness.view.add(resource())
    assert harness.run() == "converged"
    assert harness.kube.writes() == 3
    want, service = applied(harness.kube, "Deployment"), applied(harness.kube, "Service")
    harness.quiet()

    # A second event before the watch delivered anything: the view still shows no children and
    # the old status, so a naive reconcile would apply both children and patch status again.
    for _ in range(2):
        assert harness.run() == "converged"
    assert harness.kube.writes() == 0 and harness.events.posted == []

    # The ledger holds the three writes until the cache moves past the versions they were made on.
    assert len(harness.reconciler.ledger) == 3
    # The watch catches up, but with someone's edit on top: the command was replaced.
    edited = stored(want, "15")
    edited["spec"]["template"]["spec"]["containers"][0]["command"] = ["sleep", "inf"]
    harness.view.deployments[KEY] = edited
    harness.view.services[KEY] = stored(service, "12")
    assert harness.run() == "converged"
    assert [m["kind"] for m in harness.kube.applies] == ["Deployment"]
    assert command(harness.kube.applies[0]) == command(want)
    assert harness.kube.applies[0] == want

    # Until the watch shows the repaired object, the same stale edit is not re-applied again.
    harness.quiet()
    assert harness.run() == "converged"
    assert harness.kube.applies == []


def test_a_child_deleted_after_the_watch_showed_it_is_recreated(harness: Harness) -> None:
    """The ledger entry lapses once a pass saw the cache past our write, so a deletion is repaired."""
    converge_seed(harness)
    assert harness.run() == "converged"  # the watch event of our create: the pass sees version 11
    assert harness.kube.writes() == 0
    want = harness.view.deployments.pop(KEY)
    assert harness.run() == "converged"
    assert [m["kind"] for m in harness.kube.applies] == ["Deployment"]
    assert command(harness.kube.applies[0]) == command(want)
    assert harness.kube.status_patches == []


# ---------------------------------------------------------------------------------------------
# 4: a failed pairing blocks
# ---------------------------------------------------------------------------------------------


def test_failed_pairing_applies_nothing_and_reports_why(harness: Harness) -> None:
    """No GPU pod for a pair that fails its check: blocked, PairingVerified=False with the reason."""
    harness.view.add(wrong_pair())
    assert harness.run() == "blocked"

    assert harness.kube.applies == []
    ((_, patch),) = harness.kube.status_patches
    conds = conditions_of(patch)
    assert conds == {
        api.READY: ("False", "PairingFailed"),
        api.PROGRESSING: ("False", "PairingFailed"),
        api.DEGRADED: ("True", "PairingFailed"),
        api.PAIRING_VERIFIED: ("False", "VerifierMismatch"),
        api.SPECULATION_EFFECTIVE: ("Unknown", "NotServing"),
    }
    pairing = next(c for c in patch["conditions"] if c["type"] == api.PAIRING_VERIFIED)
    assert "trained for Qwen/Qwen3-8B" in pairing["message"] and VERIFIER in pairing["message"]
    assert patch["pairing"]["verified"] == "False" and patch["pairing"]["reason"] == "VerifierMismatch"
    assert patch["speculator"] == WRONG_SPECULATOR
    assert not {"command", "endpoint", "plan", "tensorParallelSize"} & set(patch)
    # One Warning for one problem: Degraded carries it (Ready, Progressing and PairingVerified
    # say the same in status).
    assert [(e.type, e.reason, e.message.split(":")[0]) for e in harness.events.posted] == [
        ("Warning", "PairingFailed", "Degraded=True"),
    ]
    assert harness.timers.created == []  # a mismatch is not retried on a timer: fix the spec


def test_an_update_that_breaks_a_running_pair_leaves_it_serving(harness: Harness) -> None:
    """Blocked after a good rollout: nothing is applied and status still describes what runs."""
    first = converge_seed(harness)
    harness.view.deployments[KEY]["status"] = rolled_out()
    broken = wrong_pair(generation=2, version="20")
    broken["status"] = harness.view.resources[KEY]["status"]
    harness.view.resources[KEY] = broken
    assert harness.run() == "blocked"

    assert harness.kube.applies == []
    ((_, patch),) = harness.kube.status_patches
    for kept in ("command", "endpoint", "selector", "tensorParallelSize"):
        assert patch[kept] == first[kept]
    assert patch["plan"] is None  # the blocked spec has no plan; the stale one is removed
    assert conditions_of(patch)[api.READY] == ("True", "PreviousVersionServing")
    assert conditions_of(patch)[api.DEGRADED] == ("True", "PairingFailed")
    assert patch["observedGeneration"] == 2 and patch["readyReplicas"] == 1


# ---------------------------------------------------------------------------------------------
# 5: NoNodeFits and the GPU inventory
# ---------------------------------------------------------------------------------------------


def _wait_for_b200(h: Harness) -> Key:
    """A B200-only resource on an H100 cluster: blocked with Schedulable=False, status delivered."""
    key = h.view.add(b200_only())
    assert h.run(key) == "blocked"
    assert h.kube.applies == []
    ((_, patch),) = h.kube.status_patches
    assert conditions_of(patch)[api.SCHEDULABLE] == ("False", "NoNodeFits")
    schedulable = next(c for c in patch["conditions"] if c["type"] == api.SCHEDULABLE)
    assert "no schedulable node has B200" in schedulable["message"]
    h.view.resources[key] = with_status(h.view.resources[key], patch, "30")
    assert status.waiting_for_gpus(h.view.resources[key])
    h.quiet()
    return key


def test_a_b200_node_joining_reconciles_the_waiting_resource(harness: Harness) -> None:
    """NoNodeFits is re-planned when the inventory changes; converged resources are left alone."""
    converge_seed(harness)  # a second resource, not waiting: it must not be reconciled
    key = _wait_for_b200(harness)

    harness.node_event(node("b200-0", B200))
    assert [(m["kind"], m["metadata"]["name"]) for m in harness.kube.applies] == [
        ("Deployment", "qwen3-b200"),
        ("Service", "qwen3-b200"),
    ]
    affinity = harness.kube.applies[0]["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == [B200]
    ((patched, patch),) = harness.kube.status_patches
    assert patched == key
    assert conditions_of(patch)[api.SCHEDULABLE] == ("True", "Planned")
    assert patch["plan"]["gpuProduct"] == B200
    # Planned and rolling out is the happy path: the next Event is Ready.
    assert harness.events.posted == []


def b200_nodepool(limit: str = "16") -> dict[str, Any]:
    """A Karpenter NodePool whose nodes have 8 B200 GPUs, as the API returns it."""
    labels = {"nvidia.com/gpu.product": B200, "nvidia.com/gpu.count": "8"}
    template = {"metadata": {"labels": labels}, "spec": {"requirements": []}}
    return {
        "metadata": {"name": "b200-pool"},
        "spec": {"template": template, "limits": {"nvidia.com/gpu": limit}},
        "status": {"resources": {}},
    }


def _planned_on_pool(harness: Harness) -> tuple[Key, dict[str, Any]]:
    """The B200-only resource planned on a NodePool of B200 nodes, its status and Deployment
    delivered; the NodePool's Deployment."""
    key = _wait_for_b200(harness)
    harness.pool_event(b200_nodepool())
    deployment, _ = harness.kube.applies
    ((_, patch),) = harness.kube.status_patches
    assert conditions_of(patch)[api.SCHEDULABLE] == ("True", "PlannedOnNodePool")
    assert patch["plan"]["nodePool"] == "b200-pool"
    harness.view.resources[key] = with_status(harness.view.resources[key], patch, "31")
    harness.view.deployments[key] = stored(deployment, "40")
    harness.quiet()
    return key, deployment


def test_a_nodepool_that_can_create_the_gpus_plans_the_waiting_resource_on_it(harness: Harness) -> None:
    """With no B200 node up, a NodePool of B200 nodes lets the waiting resource create its pods,
    pinned to the pool; the node the pool then creates changes nothing the resource wrote."""
    key, deployment = _planned_on_pool(harness)
    terms = deployment["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["b200-pool"]} in terms[0][
        "matchExpressions"
    ]
    assert harness.run(key) == "converged"  # the Deployment's own event
    assert harness.kube.writes() == 0

    created = node("b200-pool-x7k2p", B200)
    created["metadata"]["labels"]["karpenter.sh/nodepool"] = "b200-pool"
    harness.node_event(created)
    assert harness.kube.writes() == 0


def _waiting_pod(message: str, since: float) -> PodView:
    """The resource's engine pod as the scheduler leaves it while no node fits it."""
    return PodView(
        name="qwen3-b200-7d9f8b6c5-abcde",
        phase="Pending",
        deleting=False,
        ready=False,
        containers=(),
        unschedulable=message,
        unschedulable_since=since,
    )


def test_a_pod_waiting_for_the_pools_node_is_reported_and_a_late_node_degrades(harness: Harness) -> None:
    """Ready says the pod waits for the pool's node (the scheduler's words); one timer, not a
    poll, re-checks at --node-wait, and then Degraded says no node came."""
    key, _ = _planned_on_pool(harness)
    message = "0/5 nodes are available: 5 node(s) didn't match Pod's node affinity/selector."
    now = time.time()
    waiting = _waiting_pod(message, now - 10)
    harness.view.pod_views[key] = [waiting]
    harness.deliver(lambda: harness.reconciler.pod_changed(key, waiting.name, waiting, harness.view))
    ((_, patch),) = harness.kube.status_patches
    assert conditions_of(patch)[api.READY] == ("False", "WaitingForNode")
    assert conditions_of(patch)[api.DEGRADED] == ("False", "AsExpected")
    ready = next(c for c in patch["conditions"] if c["type"] == api.READY)
    assert "waits for node pool b200-pool to create a node: 0/5 nodes are available" in ready["message"]
    (deadline,) = harness.timers.pending()
    assert deadline.delay == pytest.approx(harness.reconciler.node_wait - 10 + 1, abs=2)
    harness.view.resources[key] = with_status(harness.view.resources[key], patch, "32")
    harness.quiet()

    late = dataclasses.replace(waiting, unschedulable_since=now - harness.reconciler.node_wait - 1)
    harness.view.pod_views[key] = [late]
    harness.deliver(harness.timers.fire)
    ((_, patch),) = harness.kube.status_patches
    assert conditions_of(patch)[api.DEGRADED] == ("True", "NodeNotProvisioned")
    degraded = next(c for c in patch["conditions"] if c["type"] == api.DEGRADED)
    assert degraded["message"].startswith(
        f"no node for pod {waiting.name} within 900 s from node pool b200-pool"
    )
    assert harness.timers.pending() == []


def test_the_deadline_goes_when_the_pod_gets_its_node(harness: Harness) -> None:
    key, _ = _planned_on_pool(harness)
    waiting = _waiting_pod("0/5 nodes are available.", time.time())
    harness.view.pod_views[key] = [waiting]
    harness.deliver(lambda: harness.reconciler.pod_changed(key, waiting.name, waiting, harness.view))
    (deadline,) = harness.timers.pending()
    scheduled = dataclasses.replace(waiting, phase="Running", unschedulable="", unschedulable_since=None)
    harness.view.pod_views[key] = [scheduled]
    harness.deliver(lambda: harness.reconciler.pod_changed(key, waiting.name, scheduled, harness.view))
    assert deadline.cancelled and harness.timers.pending() == []


def test_node_changes_the_planner_ignores_trigger_nothing(harness: Harness) -> None:
    """Heartbeats and an unchanged inventory cost a comparison, not a reconcile."""
    _wait_for_b200(harness)
    before = _outcome_counts()

    harness.node_event(node("h100-0", H100, heartbeat="2025-01-01T00:00:00Z"))
    harness.node_event(node("h100-0", H100, heartbeat="2025-01-01T00:00:40Z"))  # heartbeat only
    relabelled = node("h100-0", H100, heartbeat="2025-01-01T00:01:20Z")
    relabelled["metadata"]["labels"]["team"] = "inference"  # a new planner view, same inventory
    harness.node_event(relabelled)

    assert _outcome_counts() == before
    assert harness.kube.writes() == 0 and harness.events.posted == []


def test_the_heartbeat_check_compares_planner_views() -> None:
    """GpuInventory.changed is False only for the view it saw last for that node."""
    gpus = GpuInventory()
    first = planner_view(node("h100-0", H100, heartbeat="t1"))
    assert gpus.changed("Node", "h100-0", first) is True
    assert gpus.changed("Node", "h100-0", planner_view(node("h100-0", H100, heartbeat="t2"))) is False
    assert gpus.changed("Node", "h100-0", None) is True
    assert gpus.changed("Node", "h100-0", None) is False
    assert gpus.refresh([first], []) is True and gpus.refresh([first], []) is False
    assert [c.product for c in gpus.inventory.products()] == [H100]


def test_the_first_node_event_only_initialises_the_inventory(harness: Harness) -> None:
    """Before any reconcile, the first node event sets the inventory and submits nothing: the
    resources' own initial events plan against it. The next capacity change does submit."""
    waiting = b200_only()
    waiting["status"] = {
        "conditions": [{"type": api.SCHEDULABLE, "status": "False", "reason": "NoNodeFits", "message": ""}]
    }
    harness.view.add(waiting)
    harness.view.node_objects.clear()
    assert harness.reconciler.gpus.signature == ""

    harness.node_event(node("b200-0", B200))
    assert harness.kube.writes() == 0 and harness.events.posted == []
    assert [c.product for c in harness.reconciler.gpus.inventory.products()] == [B200]
    assert harness.reconciler.gpus.signature != ""

    harness.node_event(node("h100-0", H100))
    assert [m["kind"] for m in harness.kube.applies] == ["Deployment", "Service"]
    assert harness.kube.applies[0]["metadata"]["name"] == "qwen3-b200"


def test_a_node_deletion_leaves_resources_that_are_not_waiting_alone(harness: Harness) -> None:
    """A node deletion changes the inventory, but only Schedulable=False resources are submitted."""
    converge_seed(harness)
    before = _outcome_counts()
    harness.node_event(node("h100-0", H100))  # first event for it, same inventory: nothing
    harness.node_event(None, name="h100-0")
    assert _outcome_counts() == before and harness.kube.writes() == 0


def test_the_offline_cluster_plans_the_seed_on_h100(harness: Harness) -> None:
    """The offline cluster (the sandbox's GPU nodes too) as the view's nodes: the seed lands on H100."""
    harness.view.node_objects = {n["metadata"]["name"]: n for n in offline_node_objects()}
    harness.view.add(resource())
    assert harness.run() == "converged"
    ((_, patch),) = harness.kube.status_patches
    assert patch["plan"]["gpuProduct"] == H100 and harness.kube.writes() == 3


def test_unreachable_metadata_is_retried_on_the_injected_timer(tmp_path: Path) -> None:
    """A speculator not in the catalog with modelAccess.offline: blocked, one retry timer armed."""
    with reconciler_over_fakes(ModelResolver(cache_dir=tmp_path)) as h:
        body = resource(modelAccess={"offline": True})
        body["spec"]["speculator"]["model"] = "someone/not-in-the-catalog-eagle3"
        h.view.add(body)
        assert h.run() == "retry"
        assert h.kube.applies == []
        ((_, patch),) = h.kube.status_patches
        assert conditions_of(patch)[api.PAIRING_VERIFIED] == ("Unknown", "HubUnreachable")
        assert conditions_of(patch)[api.DEGRADED] == ("True", "HubUnreachable")
        assert [t.delay for t in h.timers.pending()] == [RETRY_MIN_SECONDS]


# ---------------------------------------------------------------------------------------------
# 6: status_for, lifecycle_conditions, waiting_for_gpus
# ---------------------------------------------------------------------------------------------


def _h100_inventory() -> Any:
    return inventory_from_nodes([node("h100-0", H100)])


def test_status_for_is_none_when_only_transition_times_differ() -> None:
    """A re-computed status equal to the stored one but for lastTransitionTime is not rewritten."""
    body = resource()
    desired = pipeline.compute(body, ModelResolver(), _h100_inventory())
    patch, transitions = status.status_for(body, desired, None)
    assert patch is not None and len(transitions) == len(api.CONDITION_ORDER)
    stale = with_status(body, patch, "11")
    for cond in stale["status"]["conditions"]:
        cond["lastTransitionTime"] = "2020-01-01T00:00:00Z"
    assert status.status_for(stale, desired, None) == (None, [])

    # Anything else differing is a write (an extra stored field is removed with None), figures
    # that are not the operator's among them.
    stale["status"]["leftover"] = 1
    stale["status"]["acceptance"] = {"kept": True}
    again, moved = status.status_for(stale, desired, None)
    assert again is not None and again["leftover"] is None and again["acceptance"] is None
    assert moved == []  # no condition changed, so no event

    # Inside a field too: a schedule reverted drops previousSchedule, which the merge patch
    # would otherwise keep from the stored status.
    stale["status"]["speculation"] = {"policy": "Apply", "previousSchedule": [{"fromBatch": 1, "tokens": 3}]}
    decided = api.Speculation(policy="Apply", reason="Recommended", message="m")
    written, _ = status.status_for(stale, desired, None, speculation_=decided)
    assert written is not None and written["speculation"] == {
        "policy": "Apply", "reason": "Recommended", "message": "m", "recommendedSchedule": [],
        "previousSchedule": None,
    }  # fmt: skip


def test_status_for_blocked_keeps_what_still_runs_only_while_a_deployment_exists() -> None:
    """command/endpoint/selector/tensorParallelSize survive a block only if a Deployment serves."""
    good = resource()
    desired = pipeline.compute(good, ModelResolver(), _h100_inventory())
    patch, _ = status.status_for(good, desired, None)
    assert patch is not None and desired.child("Deployment") is not None
    broken = wrong_pair(generation=2)
    broken["status"] = with_status(good, patch, "11")["status"]
    blocked = pipeline.compute(broken, ModelResolver(), _h100_inventory())
    assert blocked.blocked and blocked.reason == "PairingFailed"

    running = stored(diffing.stamped(desired.child("Deployment")), "12", **rolled_out())
    kept, transitions = status.status_for(broken, blocked, running)
    assert kept is not None
    for name in ("command", "endpoint", "selector", "tensorParallelSize"):
        assert kept[name] == patch[name]
    assert kept["plan"] is None
    assert conditions_of(kept)[api.READY] == ("True", "PreviousVersionServing")
    ready = next(c for c in kept["conditions"] if c["type"] == api.READY)
    assert "previous Deployment keeps serving (1 ready)" in ready["message"]
    # Schedulable is dropped (planning never ran): no transition for it, one for each of the others.
    assert [t.type for t in transitions] == [api.READY, api.PROGRESSING, api.DEGRADED, api.PAIRING_VERIFIED]
    assert api.SCHEDULABLE not in conditions_of(kept)

    gone, _ = status.status_for(broken, blocked, None)
    assert gone is not None
    for name in ("command", "endpoint", "selector", "tensorParallelSize", "plan"):
        assert gone[name] is None
    assert conditions_of(gone)[api.READY] == ("False", "PairingFailed")


def test_a_refused_service_leaves_running_pods_not_ready() -> None:
    """Engine pods ready behind a Service the apiserver refused serve nobody: Ready=False with the
    refusal as its reason; with a Service standing the same block is PreviousVersionServing."""
    body = resource()
    desired = pipeline.compute(body, ModelResolver(), _h100_inventory())
    assert desired.child("Deployment") is not None
    running = stored(diffing.stamped(desired.child("Deployment")), "12", **rolled_out())
    refused = replace(
        desired, blocked=True, reason="ChildRejected", message="the apiserver refused the Service", retry=True
    )
    conds = {c.type: c for c in status.lifecycle_conditions(refused, running, 1, reachable=False)}
    assert (conds[api.READY].status, conds[api.READY].reason) == ("False", "ChildRejected")
    assert "1 engine pods are ready but no Service reaches them" in conds[api.READY].message
    assert (conds[api.DEGRADED].status, conds[api.DEGRADED].reason) == ("True", "ChildRejected")
    conds = {c.type: c for c in status.lifecycle_conditions(refused, running, 1, reachable=True)}
    assert (conds[api.READY].status, conds[api.READY].reason) == ("True", "PreviousVersionServing")


def test_lifecycle_reports_a_failed_rollout_as_degraded() -> None:
    """ProgressDeadlineExceeded on the Deployment is Degraded=True RolloutFailed with its message."""
    body = resource()
    desired = pipeline.compute(body, ModelResolver(), _h100_inventory())
    assert desired.child("Deployment") is not None
    stuck = stored(diffing.stamped(desired.child("Deployment")), "12", replicas=1, updatedReplicas=1)
    stuck["status"]["conditions"] = [
        {
            "type": "Progressing",
            "status": "False",
            "reason": "ProgressDeadlineExceeded",
            "message": "too slow",
        }
    ]
    conds = {c.type: c for c in status.lifecycle_conditions(desired, stuck, 1)}
    assert (conds[api.DEGRADED].status, conds[api.DEGRADED].reason) == ("True", "RolloutFailed")
    assert conds[api.DEGRADED].message == "too slow"
    assert (conds[api.READY].status, conds[api.PROGRESSING].reason) == ("False", "RollingOut")

    # A rolled-out Deployment whose spec drifted from the desired one is not "complete".
    drifted = stored(diffing.stamped(desired.child("Deployment")), "13", **rolled_out())
    drifted["spec"]["template"]["spec"]["containers"][0]["command"] = ["sleep", "inf"]
    conds = {c.type: c for c in status.lifecycle_conditions(desired, drifted, 1)}
    assert (conds[api.PROGRESSING].status, conds[api.PROGRESSING].reason) == ("True", "RollingOut")


@pytest.mark.parametrize(
    ("conds", "waiting"),
    [
        ([{"type": "Schedulable", "status": "False", "reason": "NoNodeFits"}], True),
        ([{"type": "Schedulable", "status": "False", "reason": "UnknownGpuProduct"}], True),
        ([{"type": "Schedulable", "status": "True", "reason": "Planned"}], False),
        ([{"type": "Schedulable", "status": "Unknown", "reason": "NoNodeFits"}], False),
        ([{"type": "Ready", "status": "False", "reason": "NoNodeFits"}], False),
        ([], False),
        (None, False),
    ],
    ids=["nonodefits", "other-false", "true", "unknown", "other-type", "none", "no-status"],
)
def test_waiting_for_gpus_only_for_schedulable_false(
    conds: list[dict[str, str]] | None, waiting: bool
) -> None:
    """The node watch submits exactly the resources whose Schedulable condition is False."""
    body = resource()
    if conds is not None:
        body["status"] = {"conditions": conds}
    assert status.waiting_for_gpus(body) is waiting


# ---------------------------------------------------------------------------------------------
# 7: the admission webhook
# ---------------------------------------------------------------------------------------------


def test_admission_admits_the_seed() -> None:
    """The seed pair is compatible and its engine config valid."""
    assert admission.review(resource(), ModelResolver()) is None


def test_admission_rejects_an_owned_flag_in_engine_args_naming_its_index() -> None:
    """engine.args may not repeat a flag the operator renders; the message points at the entry."""
    body = resource(engine={"name": "vllm", "args": ["--max-num-seqs", "64", "--tensor-parallel-size", "2"]})
    problem = admission.review(body, ModelResolver())
    assert problem is not None
    assert "spec.engine.args[2]" in problem and "--tensor-parallel-size" in problem
    assert "spec.engine.args[0]" not in problem


def test_admission_rejects_a_pair_the_catalog_decides() -> None:
    """A speculator trained for another verifier is known to fail without any download."""
    problem = admission.review(wrong_pair(), ModelResolver())
    assert problem is not None
    assert problem.startswith("pairing check failed (VerifierMismatch): ")
    assert WRONG_SPECULATOR in problem and VERIFIER in problem


def test_admission_admits_a_pair_only_the_hub_could_decide() -> None:
    """Models outside the catalog need the network: admitted, left to the reconcile's condition."""
    body = resource(
        verifier={"model": "some-org/private-verifier"},
        speculator={"model": "some-org/private-verifier-eagle3", "numSpeculativeTokens": 3},
    )
    assert admission.review(body, ModelResolver()) is None


def test_admission_rejects_an_invalid_spec_naming_the_field() -> None:
    """Schema problems the CRD may not catch still name the field."""
    problem = admission.review(resource(replicas=-1), ModelResolver())
    assert problem is not None and "spec.replicas" in problem


def test_replicas_get_a_disruption_budget_that_scaling_down_leaves_alone(harness: Harness) -> None:
    """More than one replica: a PodDisruptionBudget, applied once and repaired like any child.
    Back at one replica nothing is applied or deleted for it (the same object allows that one
    eviction), and a single-replica resource never gets one."""
    key = harness.view.add(resource(replicas=3))
    assert harness.run() == "converged"
    assert [m["kind"] for m in harness.kube.applies] == ["Deployment", "Service", "PodDisruptionBudget"]
    budget = applied(harness.kube, "PodDisruptionBudget")
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["metadata"]["ownerReferences"][0]["uid"] == f"uid-{NAME}"
    harness.view.deployments[key] = stored(applied(harness.kube, "Deployment"), "11")
    harness.view.services[key] = stored(applied(harness.kube, "Service"), "12")
    harness.view.budgets[key] = stored(budget, "14")
    harness.quiet()

    # Someone loosens the budget: the next pass puts it back, and only it.
    edited = stored(budget, "15")
    edited["spec"]["maxUnavailable"] = 3
    harness.view.budgets[key] = edited
    assert harness.run() == "converged"
    assert [m["kind"] for m in harness.kube.applies] == ["PodDisruptionBudget"]
    assert harness.kube.applies[0]["spec"] == budget["spec"]
    harness.view.budgets[key] = stored(budget, "16")
    harness.quiet()

    harness.view.resources[key] = resource(replicas=1, generation=2, version="17")
    assert harness.run() == "converged"
    assert [m["kind"] for m in harness.kube.applies] == ["Deployment"]

    harness.quiet()
    single = harness.view.add(resource(name="single"))
    assert harness.run(single) == "converged"
    assert [m["kind"] for m in harness.kube.applies] == ["Deployment", "Service"]


def test_each_status_write_is_counted_under_its_cause(harness: Harness) -> None:
    """The metric that says where status writes come from: taking the resource up, then Ready."""

    def causes() -> dict[str, float]:
        return {
            cause: REGISTRY.get_sample_value("specdeploy_status_writes_total", {"cause": cause}) or 0.0
            for cause in ("first", api.READY, "readyReplicas")
        }

    before = causes()
    converge_seed(harness)
    harness.view.deployments[KEY] = {**harness.view.deployments[KEY], "status": rolled_out()}
    assert harness.run() == "converged"
    after = causes()
    assert {c: after[c] - before[c] for c in after} == {"first": 1, api.READY: 1, "readyReplicas": 0}
    assert status.write_cause({"conditions": [{"type": api.READY}]}, {"readyReplicas": 2}) == "readyReplicas"


def test_apply_turns_a_low_acceptance_pair_off_in_one_pass_then_writes_nothing(harness: Harness) -> None:
    """The pass that decides renders the decision: the Deployment's command and the status that
    records it are written together, then an unchanged resource writes nothing."""
    speculator = {
        **yaml.safe_load(EXAMPLE.read_text())["spec"]["speculator"],
        "adaptive": {"policy": "Apply"},
    }
    patch = converge_seed(harness, resource(speculator=speculator))
    figures = {
        "rate": "0", "meanLength": "1", "perPosition": ["0", "0", "0"], "draftTokens": 3000, "drafts": 1000,
        "pods": 1, "windowSeconds": 300, "measuredAt": "2026-12-07T12:00:00Z", "summary": "0 (1 tokens/step)",
    }  # fmt: skip
    assert patch["speculation"]["reason"] == "WaitingForAcceptance"
    harness.view.resources[KEY] = with_status(harness.view.resources[KEY], {"acceptance": figures}, "14")
    assert harness.run() == "converged"
    deployment = applied(harness.kube, "Deployment")
    # No draft at any batch size: served without the speculator at all.
    assert "--speculative-config" not in command(deployment)
    # A rollout like any spec change's: spec.rollout's NoSurge (one pod down at a time).
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}
    }  # fmt: skip
    ((_, written),) = harness.kube.status_patches
    assert written["command"] == command(deployment)
    assert written["speculation"]["appliedSchedule"] == [{"fromBatch": 1, "tokens": 0}]
    assert written["speculation"]["reason"] == "SpeculationIneffective"
    effective = next(c for c in written["conditions"] if c["type"] == "SpeculationEffective")
    assert (effective["status"], effective["reason"]) == ("Unknown", "SpeculationOff")
    assert ("Normal", "SpeculationScheduleApplied") in harness.events.reasons()

    harness.view.deployments[KEY] = stored(deployment, "15")
    harness.view.resources[KEY] = with_status(harness.view.resources[KEY], written, "16")
    harness.quiet()
    for _ in range(2):
        assert harness.run() == "converged"
    assert harness.kube.applies == [] and harness.kube.status_patches == []
