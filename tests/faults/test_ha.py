"""Two operator replicas with leader election on a Lease: one reconciles, both serve the webhook,
and a killed or stopped leader is replaced; failover measured both ways."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from faultlib import Apis, OperatorUnderFault, report, resource, review, wait_fleet
from specdeploy import api
from specdeploy_sandbox.cluster import Sandbox

LEASE_SECONDS = 15
# A pair the catalog refuses (the speculator was trained for Qwen3-8B): the webhook's answer.
MISMATCH = {
    "verifier": {"model": "Qwen/Qwen3-30B-A3B-Instruct-2507"},
    "speculator": {"model": "RedHatAI/Qwen3-8B-speculator.eagle3"},
}


@pytest.fixture
def replicas(fault_sandbox: Sandbox, fault_ns: str, tmp_path: Path) -> Iterator[list[OperatorUnderFault]]:
    """Two replicas electing on a Lease in ``fault_ns``; only the first writes the webhook
    configuration (in a cluster the chart does, pointing at a Service over every replica)."""
    args = ("--leader-elect", "--leader-election-namespace", fault_ns, "--leader-election-lease-seconds",
            str(LEASE_SECONDS))  # fmt: skip
    made = [
        OperatorUnderFault(
            fault_sandbox.kubeconfig,
            tmp_path / f"replica-{index}",
            extra_args=args,
            configure_webhook=index == 0,
            tls=tmp_path / "tls",
            webhook_client_ca=fault_sandbox.webhook_client_ca(),
        )
        for index in range(2)
    ]
    for replica in made:
        replica.start()
    try:
        yield made
    finally:
        for replica in made:
            replica.stop()
        for index, replica in enumerate(made):
            print(f"\n--- replica {index} log (tail) ---\n" + "\n".join(replica.log_lines()[-25:]))


def _leaders(replicas: list[OperatorUnderFault]) -> list[int]:
    return [i for i, r in enumerate(replicas) if r.alive() and r.metric("specdeploy_leader") == 1]


def _wait_leader(replicas: list[OperatorUnderFault], timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while True:
        leaders = _leaders(replicas)
        assert len(leaders) <= 1, f"two leaders: {leaders}"
        if leaders:
            return leaders[0]
        assert time.monotonic() < deadline, "no replica took the Lease"
        time.sleep(0.2)


def _seconds_until_reconciled(apis: Apis, namespace: str, name: str, timeout: float) -> float:
    """Create ``name`` and time how long until it has conditions for its generation."""
    started = time.monotonic()
    apis.create(namespace, resource(namespace, name))
    while True:
        found = apis.custom.get_namespaced_custom_object(api.GROUP, api.VERSION, namespace, api.PLURAL, name)
        status = found.get("status") or {}
        if status.get("conditions") and status.get("observedGeneration") == found["metadata"]["generation"]:
            return time.monotonic() - started
        assert time.monotonic() - started < timeout, f"{name} not reconciled within {timeout:.0f}s"
        time.sleep(0.2)


def test_one_replica_reconciles_every_replica_serves_the_webhook_and_failover_is_measured(
    apis: Apis, fault_ns: str, fault_sandbox: Sandbox, replicas: list[OperatorUnderFault]
) -> None:
    client = (fault_sandbox.pki.webhook_client_cert, fault_sandbox.pki.webhook_client_key)
    leader = _wait_leader(replicas, timeout=30)
    follower = 1 - leader
    names = [f"ha-{i:02d}" for i in range(6)]
    for name in names:
        apis.create(fault_ns, resource(fault_ns, name))
    check, _ = wait_fleet(apis, fault_ns, timeout=90)
    assert check.problems == [], check.problems
    assert replicas[leader].metric("specdeploy_reconciles_total") >= len(names)
    assert replicas[follower].metric("specdeploy_reconciles_total") == 0
    assert replicas[follower].metric("specdeploy_writes_total") == 0

    for replica in replicas:
        answer = review(replica, fault_ns, MISMATCH, client)
        assert answer["allowed"] is False
        assert "pairing check failed" in answer["status"]["message"]
        assert review(replica, fault_ns, resource(fault_ns, "x")["spec"], client)["allowed"] is True

    # A crash: the Lease is only taken over once it expires.
    replicas[leader].kill()
    killed_failover = _seconds_until_reconciled(apis, fault_ns, "after-kill", timeout=LEASE_SECONDS + 30)
    assert _wait_leader(replicas, timeout=5) == follower
    replicas[leader].start()

    # A shutdown (a rolling update, a drain): the Lease is released, the other takes it at once.
    time.sleep(3)
    assert _leaders(replicas) == [follower]
    replicas[follower].stop()
    graceful_failover = _seconds_until_reconciled(apis, fault_ns, "after-stop", timeout=30)
    assert _wait_leader(replicas, timeout=5) == leader
    assert killed_failover < LEASE_SECONDS + 10
    assert graceful_failover < 10

    final, _ = wait_fleet(apis, fault_ns, timeout=60)
    assert final.problems == [] and final.resources == len(names) + 2
    report(
        "leader-election",
        {
            "replicas": 2,
            "leaseSeconds": LEASE_SECONDS,
            "followerReconciles": 0,
            "webhookServedByEveryReplica": True,
            "failoverAfterSigkillSeconds": round(killed_failover, 1),
            "failoverAfterSigtermSeconds": round(graceful_failover, 1),
        },
    )


def test_a_leader_exits_within_5_seconds_of_sigterm_and_hands_the_lease_back(
    apis: Apis, fault_ns: str, fault_sandbox: Sandbox, tmp_path: Path
) -> None:
    """What a rollout or a node drain does to the pod: SIGTERM. The process exits by itself well
    inside the grace period, with 0, and leaves the Lease without a holder for the next one."""
    args = ("--leader-elect", "--leader-election-namespace", fault_ns)
    leader = OperatorUnderFault(fault_sandbox.kubeconfig, tmp_path, extra_args=args, webhook=False)
    leader.start()
    try:
        assert _wait_leader([leader], timeout=30) == 0
        _seconds_until_reconciled(apis, fault_ns, "before-sigterm", timeout=60)
        assert leader.running is not None
        process = leader.running.process
        started = time.monotonic()
        process.terminate()
        code = process.wait(timeout=30)
        exited = time.monotonic() - started
    finally:
        leader.stop()
    assert exited < 5, f"exited {exited:.1f}s after SIGTERM"
    assert code == 0
    lease = apis.coordination.read_namespaced_lease("specdeploy-operator", fault_ns)
    assert lease.spec.holder_identity is None
    report("sigterm", {"exitSeconds": round(exited, 2), "exitCode": code, "leaseHolderAfter": None})
