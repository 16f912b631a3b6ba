"""Faults, against a real control plane: the operator SIGKILLed mid-rollout, kube-apiserver and
etcd restarted, children edited and deleted by hand, a resource deleted mid-reconcile.

Each test asserts the invariants (``faultlib.check_fleet``) and prints its figures; the counts
are CI's (``SPECDEPLOY_FAULT_*`` raises them: ``bench/reliability.py`` runs 200 resources and
20 kills).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from faultlib import Apis, OperatorUnderFault, check_fleet, count, report, resource, wait_fleet
from specdeploy_sandbox.cluster import Sandbox
from support.kube import Kubectl, RoseThenQuiet, WaitFor

RESOURCES = count("RESOURCES", 40)
KILLS = count("KILLS", 5)
RESTART_RESOURCES = count("RESTART_RESOURCES", 20)
SEED = count("SEED", 14)
# Lines in the operator's log that no fault excuses: a crash of a handler or of the process.
CRASHES = ("Traceback", "Unhandled", "failed with an exception")


def _crashes(lines: list[str]) -> list[str]:
    return [line for line in lines if any(marker in line for marker in CRASHES)]


def _create_fleet(apis: Apis, namespace: str, names: list[str], pace: float) -> threading.Thread:
    """Create the fleet from a thread, ``pace`` seconds apart (the rollout the faults hit)."""

    def create() -> None:
        for name in names:
            apis.create(namespace, resource(namespace, name))
            time.sleep(pace)

    thread = threading.Thread(target=create, daemon=True)
    thread.start()
    return thread


def test_operator_killed_at_random_moments_of_a_rollout_leaves_every_child_exactly_once(
    apis: Apis, fault_ns: str, operator_under_fault: OperatorUnderFault
) -> None:
    """KILLS SIGKILLs at random moments while RESOURCES resources are created and then half of
    them updated; the operator is started again after each. Then: one Deployment and one
    Service per resource, owned by it, on its newest spec, none orphaned, all Ready."""
    rng = random.Random(SEED)
    names = [f"pair-{i:04d}" for i in range(RESOURCES)]
    tokens = dict.fromkeys(names, 3)
    creating = _create_fleet(apis, fault_ns, names, pace=0.05)
    kill_times = []
    started = time.monotonic()
    for kill in range(KILLS):
        time.sleep(rng.uniform(0.2, 2.5))
        if kill == KILLS // 2:
            creating.join(timeout=120)
            for name in names[::2]:
                apis.patch_spec(fault_ns, name, {"speculator": {"numSpeculativeTokens": 4}})
                tokens[name] = 4
        operator_under_fault.kill()
        kill_times.append(round(time.monotonic() - started, 1))
        operator_under_fault.start()
    creating.join(timeout=120)
    assert not creating.is_alive()
    last_start = time.monotonic()
    check, waited = wait_fleet(apis, fault_ns, timeout=60 + RESOURCES, expect_tokens=tokens)
    assert check.problems == [], check.problems[:20]
    assert check.resources == RESOURCES and check.ready == RESOURCES
    assert _crashes(operator_under_fault.log_lines()) == []
    report(
        "operator-kills",
        {
            "resources": RESOURCES,
            "updated": len(names[::2]),
            "kills": KILLS,
            "killedAtSeconds": kill_times,
            "operatorStarts": operator_under_fault.starts,
            "convergedSecondsAfterLastStart": round(time.monotonic() - last_start, 1),
            "duplicateMissingOrOrphanedChildren": len(check.problems),
            "waitedSeconds": round(waited, 1),
        },
    )


@pytest.mark.parametrize("component", ["kube-apiserver", "etcd"])
def test_the_operator_recovers_by_itself_from_a_control_plane_restart(
    apis: Apis,
    fault_ns: str,
    fault_sandbox: Sandbox,
    operator_under_fault: OperatorUnderFault,
    component: str,
) -> None:
    """The component is SIGKILLed halfway through creating the fleet and started again 3 s later;
    the operator (never restarted) converges every resource on its own."""
    names = [f"pair-{i:04d}" for i in range(RESTART_RESOURCES)]
    pid = operator_under_fault.running.process.pid  # type: ignore[union-attr]
    first, second = names[: len(names) // 2], names[len(names) // 2 :]
    _create_fleet(apis, fault_ns, first, pace=0.0).join(timeout=60)
    down_at = time.monotonic()
    answering_after = fault_sandbox.restart(component, kill=True, down_seconds=3.0)
    back_at = time.monotonic()
    # The apiserver answers /readyz before every client reconnected; creates may still race.
    _create_with_retries(apis, fault_ns, second, deadline=back_at + 60)
    check, _ = wait_fleet(apis, fault_ns, timeout=120)
    converged_at = time.monotonic()
    assert check.problems == [], check.problems[:20]
    assert operator_under_fault.alive() and operator_under_fault.running.process.pid == pid  # type: ignore[union-attr]
    assert operator_under_fault.starts == 1
    assert _crashes(operator_under_fault.log_lines()) == []
    report(
        f"restart-{component}",
        {
            "resources": RESTART_RESOURCES,
            "component": component,
            "downSeconds": round(back_at - down_at - answering_after, 1),
            "answeringAfterStartSeconds": round(answering_after, 1),
            "allReadySecondsAfterBack": round(converged_at - back_at, 1),
            "operatorRestarts": 0,
        },
    )


def _create_with_retries(apis: Apis, namespace: str, names: list[str], deadline: float) -> None:
    for name in names:
        while True:
            try:
                apis.create(namespace, resource(namespace, name))
                break
            except ApiException as exc:
                if exc.status == 409 or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)


Edit = Callable[[Apis, str, str], None]


def _json_patch(*ops: tuple[str, str, Any]) -> Edit:
    """An edit of the Deployment by JSON patch: (op, path, value) each."""

    def edit(apis: Apis, namespace: str, name: str) -> None:
        body = [
            {"op": op, "path": path, **({"value": value} if op != "remove" else {})}
            for op, path, value in ops
        ]
        apis.apps.patch_namespaced_deployment(name, namespace, body)

    return edit


def _delete_service(apis: Apis, namespace: str, name: str) -> None:
    apis.core.delete_namespaced_service(name, namespace)


CONTAINER = "/spec/template/spec/containers/0"
DRIFT: dict[str, Edit] = {
    "args": _json_patch(("replace", f"{CONTAINER}/command", ["sleep", "infinity"])),
    "image": _json_patch(("replace", f"{CONTAINER}/image", "registry.example/other:latest")),
    "gpu-count": _json_patch(
        ("replace", f"{CONTAINER}/resources/limits/nvidia.com~1gpu", "2"),
        ("replace", f"{CONTAINER}/resources/requests/nvidia.com~1gpu", "2"),
    ),
    "replicas": _json_patch(("replace", "/spec/replicas", 3)),
    "owner-reference": _json_patch(("remove", "/metadata/ownerReferences", None)),
    "service-deleted": _delete_service,
}
REPAIR_LIMIT_S = 10.0


def test_drift_is_repaired_within_10_seconds_and_foreign_edits_are_left_alone(
    apis: Apis, fault_ns: str, fk: Kubectl, operator_under_fault: OperatorUnderFault
) -> None:
    names = [f"drift-{kind}" for kind in DRIFT] + ["foreign"]
    _create_fleet(apis, fault_ns, names, pace=0.0).join(timeout=60)
    check, _ = wait_fleet(apis, fault_ns, timeout=90)
    assert check.problems == [], check.problems
    before = check_fleet(apis, fault_ns)
    assert before.problems == []
    repaired: dict[str, float] = {}
    for kind, edit in DRIFT.items():
        name = f"drift-{kind}"
        edit(apis, fault_ns, name)
        started = time.monotonic()
        while True:
            problems = [p for p in check_fleet(apis, fault_ns).problems if name in p]
            drifted = _drifted(apis, fault_ns, name, kind)
            if not problems and not drifted:
                break
            assert time.monotonic() - started < REPAIR_LIMIT_S, f"{kind} not repaired: {problems or drifted}"
            time.sleep(0.2)
        repaired[kind] = round(time.monotonic() - started, 2)

    # Each edit of a child makes the operator reconcile its parent: once both passes are done
    # (the counter rose twice, then stayed put for 2 s), whatever it would undo is undone.
    reconciled = RoseThenQuiet(lambda: operator_under_fault.metric("specdeploy_reconciles_total"), 2, 2.0)
    fk("annotate", "deployment", "foreign", "team.example/owner=payments", namespace=fault_ns)
    fk("label", "service", "foreign", "team.example/tier=gold", namespace=fault_ns)
    applied_hash = _annotations(apis, fault_ns, "foreign")["specdeploy.io/applied-hash"]
    WaitFor(fk, fault_ns)(reconciled, REPAIR_LIMIT_S + 20, "the operator's passes over the foreign edits")
    annotations = _annotations(apis, fault_ns, "foreign")
    assert annotations.get("team.example/owner") == "payments"
    assert annotations["specdeploy.io/applied-hash"] == applied_hash
    assert (
        apis.core.read_namespaced_service("foreign", fault_ns).metadata.labels["team.example/tier"] == "gold"
    )
    report("drift", {"repairSeconds": repaired, "limitSeconds": REPAIR_LIMIT_S, "foreignEditsKept": 2})


def _annotations(apis: Apis, namespace: str, name: str) -> dict[str, str]:
    return dict(apis.apps.read_namespaced_deployment(name, namespace).metadata.annotations or {})


def _drifted(apis: Apis, namespace: str, name: str, kind: str) -> str | None:
    """What is still edited about the child (None once it is as the operator wants it)."""
    if kind == "service-deleted":
        try:
            apis.core.read_namespaced_service(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return "no Service"
            raise
        return None
    deployment = apis.apps.read_namespaced_deployment(name, namespace)
    container = deployment.spec.template.spec.containers[0]
    if kind == "args" and container.command[:2] == ["sleep", "infinity"]:
        return "command"
    if kind == "image" and container.image == "registry.example/other:latest":
        return "image"
    if kind == "gpu-count" and container.resources.limits.get("nvidia.com/gpu") != "1":
        return "gpu count"
    if kind == "replicas" and deployment.spec.replicas != 1:
        return "replicas"
    if kind == "owner-reference" and not deployment.metadata.owner_references:
        return "ownerReferences"
    return None


def test_a_resource_deleted_while_it_reconciles_gets_nothing_recreated(
    apis: Apis, fault_ns: str, operator_under_fault: OperatorUnderFault
) -> None:
    """Each resource is deleted right after it is created (its first pass in flight); 15 s later
    nothing of any of them exists and nothing came back."""
    names = [f"gone-{i:02d}" for i in range(count("DELETED", 10))]
    for name in names:
        apis.create(fault_ns, resource(fault_ns, name))
        apis.delete(fault_ns, name)
    deadline = time.monotonic() + 30
    while True:
        left = _children(apis, fault_ns)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert left == [], left
    time.sleep(15)  # the observation window: no pass, retry or resync in it brings a child back
    assert _children(apis, fault_ns) == []
    assert apis.resources(fault_ns) == []
    assert _crashes(operator_under_fault.log_lines()) == []
    report("deleted-in-flight", {"deleted": len(names), "childrenLeftAfter15s": 0})


def _children(apis: Apis, namespace: str) -> list[str]:
    found = [f"Deployment/{d.metadata.name}" for d in apis.apps.list_namespaced_deployment(namespace).items]
    found += [f"Service/{s.metadata.name}" for s in apis.core.list_namespaced_service(namespace).items]
    found += [f"Pod/{p.metadata.name}" for p in apis.core.list_namespaced_pod(namespace).items]
    return found
