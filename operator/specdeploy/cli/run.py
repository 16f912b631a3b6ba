"""``specdeploy run``: start the operator against the current kubeconfig."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from specdeploy import api
from specdeploy.children import PodDefaults
from specdeploy.controller.options import NODE_WAIT_SECONDS, OperatorOptions
from specdeploy.planning.pools import DeclaredPool, PoolError, parse_declared_pools


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("run", help="run the operator (kopf) against the current kubeconfig")
    parser.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        help="watch only this namespace (repeatable); default: all namespaces",
    )
    parser.add_argument(
        "--probe-address",
        default="0.0.0.0",
        help="address of the /healthz liveness endpoint (default 0.0.0.0, for kubelet probes)",
    )
    parser.add_argument("--probe-port", type=int, default=8080, help="port of the /healthz endpoint")
    parser.add_argument("--metrics-port", type=int, default=9090, help="Prometheus metrics port (0 disables)")
    parser.add_argument(
        "--webhook-port", type=int, default=0, help="serve the admission webhook here (0: off)"
    )
    parser.add_argument("--webhook-address", default="0.0.0.0", help="bind address of the webhook server")
    parser.add_argument("--webhook-cert-dir", help="directory with tls.crt and tls.key for the webhook")
    parser.add_argument(
        "--webhook-host",
        help="host the apiserver uses to reach the webhook; with --webhook-configure the operator "
        "writes the ValidatingWebhookConfiguration itself (sandbox and development)",
    )
    parser.add_argument("--webhook-configure", action="store_true", help="manage the webhook configuration")
    parser.add_argument(
        "--webhook-client-ca",
        metavar="FILE",
        help="accept webhook calls only from clients with a certificate this CA signed (the "
        "apiserver's, given in its admission configuration); default: any client",
    )
    parser.add_argument(
        "--read-token-secrets",
        action="store_true",
        help="read the hub token Secret a resource names, for the pairing check's downloads "
        "(needs RBAC get on secrets; off by default: the engine pods get the token either way)",
    )
    parser.add_argument(
        "--hub-endpoint",
        type=_hub_endpoint,
        default=None,
        metavar="URL",
        help="model hub (a Hugging Face mirror) for every resource without spec.modelAccess.endpoint: "
        "the operator's own lookups and the engines' HF_ENDPOINT (default: $SPECDEPLOY_HUB_ENDPOINT, "
        "else HF_ENDPOINT, else the Hub)",
    )
    parser.add_argument(
        "--acceptance-interval",
        type=_at_least(0.0, float),
        default=30.0,
        metavar="SECONDS",
        help="read ready engine pods' /metrics for acceptance this often (0 disables; default 30)",
    )
    parser.add_argument(
        "--acceptance-timeout",
        type=_at_least(0.1, float),
        default=5.0,
        metavar="SECONDS",
        help="give up on one pod's /metrics after this long (default 5)",
    )
    parser.add_argument(
        "--acceptance-concurrency",
        type=_at_least(1, int),
        default=32,
        metavar="N",
        help="read at most this many engine pods at once (default 32)",
    )
    parser.add_argument(
        "--leader-elect",
        action="store_true",
        help="run as one of several replicas: only the holder of a coordination.k8s.io Lease "
        "reconciles, every replica serves the webhook (needs RBAC on leases)",
    )
    parser.add_argument(
        "--leader-election-namespace",
        help="namespace of the Lease (default: $POD_NAMESPACE, else default)",
    )
    parser.add_argument(
        "--leader-election-id",
        default="specdeploy-operator",
        help="name of the Lease (default specdeploy-operator)",
    )
    parser.add_argument(
        "--leader-election-lease-seconds",
        type=_at_least(5, int),
        default=15,
        metavar="SECONDS",
        help="how long a Lease lasts unrenewed: the longest failover after a leader dies (default "
        "15; renewals are due within 2/3 of it, every 2 s)",
    )
    defaults = parser.add_argument_group(
        "engine pod defaults",
        "what every engine pod gets unless its resource says otherwise (docs/api.md, operator-wide defaults)",
    )
    defaults.add_argument(
        "--default-toleration",
        action="append",
        default=[],
        type=_toleration,
        metavar="TOLERATION",
        help="tolerate this taint on every engine pod, besides the resource's own (repeatable): "
        "KEY[=VALUE]:EFFECT as kubectl taint writes it (sku=gpu:NoSchedule), or a core/v1 "
        "Toleration as JSON",
    )
    defaults.add_argument(
        "--default-node-selector",
        action="append",
        default=[],
        type=_label,
        metavar="KEY=VALUE",
        help="node selector label of every engine pod (repeatable); the resource's "
        "spec.scheduling.nodeSelector overrides the same key",
    )
    defaults.add_argument(
        "--default-image-pull-secret",
        action="append",
        default=[],
        metavar="NAME",
        help="image pull Secret of every engine pod, in the resource's namespace (repeatable)",
    )
    defaults.add_argument(
        "--default-token-secret",
        type=_secret_key,
        metavar="NAME[:KEY]",
        help="hub token Secret (key default token) for resources without "
        "spec.modelAccess.tokenSecretRef: the engines' HF_TOKEN (optional: a namespace without it "
        "runs without a token) and, with --read-token-secrets, the operator's lookups",
    )
    parser.add_argument(
        "--node-pools",
        type=_node_pools,
        default=(),
        metavar="FILE",
        help="YAML list of GPU node pools a provisioner creates nodes in (cluster-autoscaler groups, "
        "GKE node auto-provisioning): name, gpuProduct, gpusPerNode, maxNodes, nodeSelector and "
        "optional gpuMemoryMiB and tolerations (docs/capacity.md); Karpenter NodePools are read "
        "from the cluster",
    )
    parser.add_argument(
        "--node-wait",
        type=_at_least(1, float),
        default=NODE_WAIT_SECONDS,
        metavar="SECONDS",
        help="how long an engine pod planned on a node pool waits for its node before Degraded "
        f"says NodeNotProvisioned (default {NODE_WAIT_SECONDS:g})",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.set_defaults(func=run)


def _at_least(low: float, kind: type[float] | type[int]) -> Callable[[str], float]:
    """argparse type: a number of ``kind`` no smaller than ``low`` (a usage error otherwise)."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from exc
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low:g}, not {text}")
        return value

    return parse


def _toleration(text: str) -> api.Toleration:
    """argparse type: a core/v1 Toleration as JSON, or kubectl taint's KEY[=VALUE]:EFFECT."""
    try:
        if text.lstrip().startswith("{"):
            return api.Toleration.model_validate_json(text)
        taint, _, effect = text.rpartition(":")
        key, equal, value = taint.partition("=")
        if not key:
            raise ValueError("no KEY before :EFFECT")
        operator = "Equal" if equal else "Exists"
        return api.Toleration.model_validate(
            {"key": key, "operator": operator, "value": value or None, "effect": effect}
        )
    except ValueError as exc:
        problem = api.validation_problems(exc, "toleration") if isinstance(exc, ValidationError) else exc
        raise argparse.ArgumentTypeError(
            f"{text!r}: {problem} (KEY[=VALUE]:EFFECT, e.g. sku=gpu:NoSchedule, or a Toleration as JSON)"
        ) from exc


def _node_pools(path: str) -> tuple[DeclaredPool, ...]:
    """argparse type: the declared node pools in a YAML file, each checked."""
    try:
        return parse_declared_pools(yaml.safe_load(Path(path).read_text()))
    except (OSError, yaml.YAMLError, PoolError) as exc:
        raise argparse.ArgumentTypeError(f"{path}: {exc}") from exc


def _label(text: str) -> tuple[str, str]:
    """argparse type: KEY=VALUE."""
    key, equal, value = text.partition("=")
    if not key or not equal:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def _secret_key(text: str) -> api.SecretKeyRef:
    """argparse type: a Secret's NAME[:KEY] (key default token)."""
    name, _, key = text.partition(":")
    try:
        return api.SecretKeyRef(name=name, key=key) if key else api.SecretKeyRef(name=name)
    except ValidationError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {api.validation_problems(exc, 'secret')}") from exc


def _hub_endpoint(url: str) -> str:
    """argparse type: a usage error (exit 2) for a URL that is not http(s)."""
    from specdeploy.modelinfo.hub import HubEndpointError, check_endpoint

    try:
        return check_endpoint(url, "--hub-endpoint")
    except HubEndpointError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def operator_options(args: argparse.Namespace) -> OperatorOptions:
    """The parsed flags as the operator takes them (the namespace stops here)."""
    return OperatorOptions(
        namespaces=tuple(args.namespace),
        probe_address=args.probe_address,
        probe_port=args.probe_port,
        metrics_port=args.metrics_port,
        webhook_port=args.webhook_port,
        webhook_address=args.webhook_address,
        webhook_cert_dir=Path(args.webhook_cert_dir) if args.webhook_cert_dir else None,
        webhook_host=args.webhook_host,
        webhook_configure=args.webhook_configure,
        webhook_client_ca=Path(args.webhook_client_ca) if args.webhook_client_ca else None,
        read_token_secrets=args.read_token_secrets,
        hub_endpoint=args.hub_endpoint,
        acceptance_interval=args.acceptance_interval,
        acceptance_timeout=args.acceptance_timeout,
        acceptance_concurrency=args.acceptance_concurrency,
        leader_elect=args.leader_elect,
        leader_election_namespace=args.leader_election_namespace,
        leader_election_id=args.leader_election_id,
        leader_election_lease_seconds=args.leader_election_lease_seconds,
        verbose=args.verbose,
        pod_defaults=PodDefaults(
            tolerations=tuple(args.default_toleration),
            node_selector=tuple(args.default_node_selector),
            image_pull_secrets=tuple(args.default_image_pull_secret),
            token_secret=args.default_token_secret,
        ),
        node_pools=tuple(args.node_pools),
        node_wait=args.node_wait,
    )


def run(args: argparse.Namespace) -> int:
    from specdeploy.controller import main

    return main.main(operator_options(args))
