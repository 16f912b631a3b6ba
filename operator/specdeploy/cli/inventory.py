"""The GPU inventory ``plan`` and ``render`` plan against, chosen the same way for both.

``--gpus`` is a hypothetical inventory, ``--offline`` the offline cluster (``planning.offline``),
``--kubeconfig FILE`` the cluster that file's current context names (its GPU nodes and its
Karpenter NodePools, as the operator plans on them). Without any of them: the
current kubeconfig's cluster (``$KUBECONFIG``, else ``~/.kube/config``) when it has a current
context, as kubectl would use, else the offline cluster. A cluster that cannot be listed is an
error, never a silent fall-back to the offline cluster, which would plan for GPUs it may not have.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from specdeploy.exitcodes import CommandFailed, ExitCode

if TYPE_CHECKING:
    from specdeploy.planning import Inventory

DEFAULT_KUBECONFIG = "~/.kube/config"
LIST_TIMEOUT_S = 15
OFFLINE_HINT = "--offline (or --gpus) plans without the cluster"


class InventoryUnavailable(CommandFailed):
    """The inventory asked for cannot be read."""


@dataclass(frozen=True)
class ChosenInventory:
    """The inventory and where it came from, for stderr and the machine-readable output."""

    inventory: Inventory
    source: str
    details: dict[str, str] = field(default_factory=dict)

    def document(self) -> dict[str, str]:
        """``{"source": "kubeconfig", "context": ..., "server": ...}``, ``{"source": "offline"}``, ..."""
        return {"source": self.source, **self.details}

    def label(self) -> str:
        """Which inventory, in a few words."""
        if self.source == "kubeconfig":
            return f"kubeconfig context {self.details['context']} ({self.details['server']})"
        if self.source == "gpus":
            return f"--gpus {self.details['gpus']}"
        return "the offline cluster"


def add_inventory_flags(parser: Any) -> None:
    """``--gpus``, ``--kubeconfig`` and ``--offline``: at most one of them."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--gpus",
        help="plan against a hypothetical inventory: ALIAS:GPUS[xNODES],... e.g. h100-80gb:8,l4:4 "
        "(GPUs per node)",
    )
    source.add_argument(
        "--kubeconfig",
        type=Path,
        help="plan against the GPU nodes of this kubeconfig's current cluster "
        f"(default: $KUBECONFIG, else {DEFAULT_KUBECONFIG}, when it has a current context)",
    )
    source.add_argument(
        "--offline",
        action="store_true",
        help="plan against the offline cluster (2 x 8 H100 80GB, 1 x 8 A100 40GB, 2 x 4 L4) "
        "even when a kubeconfig names a cluster",
    )


def choose(args: argparse.Namespace) -> ChosenInventory:
    """The inventory the flags ask for (see the module's docstring), said on stderr."""
    from specdeploy import planning
    from specdeploy.planning.offline import offline_inventory

    if args.gpus:
        try:
            chosen = ChosenInventory(planning.parse_gpus_flag(args.gpus), "gpus", {"gpus": args.gpus})
        except planning.GpuInventoryError as exc:
            raise InventoryUnavailable(ExitCode.BAD_INPUT, str(exc)) from exc
    elif args.offline:
        chosen = ChosenInventory(offline_inventory(), "offline")
    else:
        explicit = args.kubeconfig is not None
        location = str(args.kubeconfig) if explicit else os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG
        found = cluster_inventory(location, explicit)
        chosen = found or ChosenInventory(offline_inventory(), "offline")
    hint = (
        " (no kubeconfig with a current context)" if chosen.source == "offline" and not args.offline else ""
    )
    print(f"planning against {chosen.label()}{hint}", file=sys.stderr)
    return chosen


def current_context(kubeconfig: str, explicit: bool) -> tuple[str, str] | None:
    """The current context of a kubeconfig (its files merged: the first that sets one wins), and
    its files that hold anything, joined as ``KUBECONFIG`` joins them.

    None when no file exists or none sets a current context and the kubeconfig was not asked
    for by name; a file that exists but cannot be read is an error either way, as in kubectl.
    """
    paths = [Path(path).expanduser() for path in kubeconfig.split(os.pathsep) if path]
    found = [path for path in paths if path.exists()]
    if not found and not explicit:
        return None
    if not found:
        raise InventoryUnavailable(ExitCode.BAD_INPUT, f"--kubeconfig {kubeconfig}: no such file")
    context = None
    files = []
    for path in found:
        try:
            document = yaml.safe_load(path.read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise InventoryUnavailable(ExitCode.BAD_INPUT, f"kubeconfig {path}: {exc}") from exc
        if document is None:
            continue
        if not isinstance(document, dict):
            raise InventoryUnavailable(ExitCode.BAD_INPUT, f"kubeconfig {path}: not a kubeconfig")
        files.append(str(path))
        context = context or document.get("current-context")
    if context:
        return str(context), os.pathsep.join(files)
    if explicit:
        raise InventoryUnavailable(ExitCode.BAD_INPUT, f"--kubeconfig {kubeconfig}: no current-context")
    return None


def cluster_inventory(kubeconfig: str, explicit: bool) -> ChosenInventory | None:
    """The GPU inventory of the kubeconfig's current cluster (None: no kubeconfig names one).

    ``kubeconfig`` may list several files (``KUBECONFIG``'s path separator), merged as kubectl
    does. A kubeconfig given with ``--kubeconfig`` must name a cluster.
    """
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException
    from urllib3.exceptions import HTTPError

    from specdeploy.planning import inventory_from_nodes
    from specdeploy.planning.pools import KARPENTER_GROUP, karpenter_pools

    found = current_context(kubeconfig, explicit)
    if found is None:
        return None
    context, files = found
    try:
        api_client = config.new_client_from_config(config_file=files)  # type: ignore[no-untyped-call]
    except (ConfigException, OSError, ValueError) as exc:
        raise InventoryUnavailable(
            ExitCode.BAD_INPUT, f"kubeconfig {kubeconfig}, context {context}: {exc}"
        ) from exc
    server = str(api_client.configuration.host)
    try:
        response: Any = client.CoreV1Api(api_client).list_node(
            _preload_content=False, _request_timeout=LIST_TIMEOUT_S
        )
        items: list[dict[str, Any]] = json.loads(response.data)["items"]
        nodepools = _nodepools(client.CustomObjectsApi(api_client), KARPENTER_GROUP)
    except ApiException as exc:
        refusal = f"{exc.status} {exc.reason}"
        message = f"the cluster of context {context} ({server}) refused to list nodes: {refusal}"
        raise InventoryUnavailable(ExitCode.CLUSTER_UNREACHABLE, f"{message}; {OFFLINE_HINT}") from exc
    except (HTTPError, OSError, ValueError) as exc:
        cause = getattr(exc, "reason", None) or exc
        message = f"cannot reach the cluster of context {context} ({server}): {cause}"
        raise InventoryUnavailable(ExitCode.CLUSTER_UNREACHABLE, f"{message}; {OFFLINE_HINT}") from exc
    finally:
        api_client.close()
    details = {"kubeconfig": kubeconfig, "context": context, "server": server}
    inventory = inventory_from_nodes(items).with_pools(*karpenter_pools(nodepools))
    return ChosenInventory(inventory, "kubeconfig", details)


def _nodepools(objects: Any, group: str) -> list[dict[str, Any]]:
    """The cluster's Karpenter NodePools, as the operator plans on them (none without Karpenter,
    or without the right to list them: then said on stderr)."""
    from kubernetes.client.exceptions import ApiException

    try:
        listed: dict[str, Any] = objects.list_cluster_custom_object(
            group, "v1", "nodepools", _request_timeout=LIST_TIMEOUT_S
        )
    except ApiException as exc:
        if exc.status == 403:
            print(f"not allowed to list Karpenter NodePools ({exc.reason}): nodes only", file=sys.stderr)
        if exc.status in (403, 404):
            return []
        refusal = f"{exc.status} {exc.reason}"
        message = f"the cluster refused to list Karpenter NodePools: {refusal}"
        raise InventoryUnavailable(ExitCode.CLUSTER_UNREACHABLE, f"{message}; {OFFLINE_HINT}") from exc
    items: list[dict[str, Any]] = listed["items"]
    return items
