"""What ``specdeploy run`` asks of the operator process, typed: the CLI's argparse namespace is read
in one place (``cli.run.operator_options``, unit-tested), and every use in the controller is
type-checked instead of an untyped attribute lookup at start-up."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specdeploy.children import NO_DEFAULTS, PodDefaults
from specdeploy.planning.pools import DeclaredPool

# The default of --node-wait: a cloud GPU node takes minutes to boot and join.
NODE_WAIT_SECONDS = 900.0


@dataclass(frozen=True)
class OperatorOptions:
    """The operator's options, one field per ``specdeploy run`` flag it reads."""

    # Watched namespaces; empty: the whole cluster.
    namespaces: tuple[str, ...]
    probe_address: str
    probe_port: int
    # 0: no metrics server.
    metrics_port: int
    # 0: no admission webhook; the other webhook fields apply only with a port.
    webhook_port: int
    webhook_address: str
    # None: a fresh temporary directory with a self-signed certificate.
    webhook_cert_dir: Path | None
    webhook_host: str | None
    webhook_configure: bool
    webhook_client_ca: Path | None
    read_token_secrets: bool
    hub_endpoint: str | None
    # 0: no engine metrics reader.
    acceptance_interval: float
    acceptance_timeout: float
    acceptance_concurrency: int
    leader_elect: bool
    leader_election_namespace: str | None
    leader_election_id: str
    leader_election_lease_seconds: int
    verbose: bool
    # What every engine pod gets unless its resource says otherwise (the --default-* flags).
    pod_defaults: PodDefaults = NO_DEFAULTS
    # Node pools a provisioner scales from zero that no NodePool object describes (--node-pools).
    node_pools: tuple[DeclaredPool, ...] = ()
    # How long an engine pod planned on a node pool waits for its node before Degraded says so.
    node_wait: float = NODE_WAIT_SECONDS
