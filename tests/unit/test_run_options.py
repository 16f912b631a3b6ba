"""``specdeploy run``'s flags as the typed options the operator process takes (cli/run.py builds
them; controller/main.py reads nothing else)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdeploy.cli import build_parser
from specdeploy.cli.run import operator_options
from specdeploy.controller.main import election_settings
from specdeploy.controller.options import OperatorOptions

DEFAULTS = OperatorOptions(
    namespaces=(),
    probe_address="0.0.0.0",
    probe_port=8080,
    metrics_port=9090,
    webhook_port=0,
    webhook_address="0.0.0.0",
    webhook_cert_dir=None,
    webhook_host=None,
    webhook_configure=False,
    webhook_client_ca=None,
    read_token_secrets=False,
    hub_endpoint=None,
    acceptance_interval=30.0,
    acceptance_timeout=5.0,
    acceptance_concurrency=32,
    leader_elect=False,
    leader_election_namespace=None,
    leader_election_id="specdeploy-operator",
    leader_election_lease_seconds=15,
    verbose=False,
)


def options(*flags: str) -> OperatorOptions:
    return operator_options(build_parser().parse_args(["run", *flags]))


def test_no_flags_give_the_documented_defaults() -> None:
    assert options() == DEFAULTS


def test_every_flag_reaches_its_option() -> None:
    given = options(
        "-n",
        "team-a",
        "-n",
        "team-b",
        "--probe-address",
        "127.0.0.1",
        "--probe-port",
        "8081",
        "--metrics-port",
        "0",
        "--webhook-port",
        "9443",
        "--webhook-address",
        "10.0.0.1",
        "--webhook-cert-dir",
        "/certs",
        "--webhook-host",
        "op.svc",
        "--webhook-configure",
        "--webhook-client-ca",
        "/ca/ca.crt",
        "--read-token-secrets",
        "--hub-endpoint",
        "https://mirror.example/hub",
        "--acceptance-interval",
        "0",
        "--acceptance-timeout",
        "2.5",
        "--acceptance-concurrency",
        "4",
        "--leader-elect",
        "--leader-election-namespace",
        "ops",
        "--leader-election-id",
        "lease",
        "--leader-election-lease-seconds",
        "30",
        "-v",
    )
    assert given == OperatorOptions(
        namespaces=("team-a", "team-b"),
        probe_address="127.0.0.1",
        probe_port=8081,
        metrics_port=0,
        webhook_port=9443,
        webhook_address="10.0.0.1",
        webhook_cert_dir=Path("/certs"),
        webhook_host="op.svc",
        webhook_configure=True,
        webhook_client_ca=Path("/ca/ca.crt"),
        read_token_secrets=True,
        hub_endpoint="https://mirror.example/hub",
        acceptance_interval=0.0,
        acceptance_timeout=2.5,
        acceptance_concurrency=4,
        leader_elect=True,
        leader_election_namespace="ops",
        leader_election_id="lease",
        leader_election_lease_seconds=30,
        verbose=True,
    )


def test_an_empty_webhook_path_means_none_given() -> None:
    """As before the options were typed: an empty directory or CA is no directory or CA."""
    assert options("--webhook-cert-dir", "", "--webhook-client-ca", "") == DEFAULTS


def test_the_lease_follows_the_options_then_the_pod_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "operator-ns")
    lease = election_settings(options("--leader-elect", "--leader-election-lease-seconds", "30"))
    assert (lease.namespace, lease.name) == ("operator-ns", "specdeploy-operator")
    assert (lease.lease_seconds, lease.renew_deadline_seconds, lease.retry_seconds) == (30, 20, 2)
    assert election_settings(options("--leader-election-namespace", "ops")).namespace == "ops"
    monkeypatch.delenv("POD_NAMESPACE")
    assert election_settings(DEFAULTS).namespace == "default"


def test_node_pools_come_from_a_yaml_file_and_a_bad_entry_stops_the_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pools = tmp_path / "node-pools.yaml"
    pools.write_text(
        "- name: l4-pool\n  gpuProduct: l4\n  gpusPerNode: 4\n  maxNodes: 3\n"
        "  nodeSelector: {cloud.google.com/gke-nodepool: l4-pool}\n"
    )
    (pool,) = options("--node-pools", str(pools)).node_pools
    assert (pool.name, pool.gpus_per_node, pool.max_nodes) == ("l4-pool", 4, 3)

    pools.write_text("- name: l4-pool\n  gpuProduct: l4\n  gpusPerNode: 4\n  maxNodes: 3\n")
    with pytest.raises(SystemExit) as stopped:
        options("--node-pools", str(pools))
    assert stopped.value.code == 2
    assert "node pool 0.nodeSelector: Field required" in capsys.readouterr().err
