"""``specdeploy render -f cr.yaml``: the child manifests the operator would apply.

Same code path as the operator (``specdeploy.pipeline.compute``), so GitOps reviews and CI see
exactly what the cluster will get, planned against the same inventory ``plan`` uses (the current
kubeconfig's cluster, ``--kubeconfig``, ``--gpus`` or ``--offline``). The exit codes are the
shared ones (``specdeploy.exitcodes``): 0 with manifests, 1 when the pair fails its check or no
node fits, 2 on bad input (unreadable file, invalid spec), 7 when the cluster cannot be reached;
the reason is printed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from specdeploy.cli.inventory import InventoryUnavailable, add_inventory_flags, choose
from specdeploy.cli.results import add_output_flag, dump, exit_code
from specdeploy.exitcodes import ExitCode


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "render", help="print the Deployment (or LeaderWorkerSet) and Service for a resource"
    )
    parser.add_argument("-f", "--filename", required=True, type=Path, help="SpeculativeDeployment YAML")
    parser.add_argument(
        "-n", "--namespace", default=None, help="namespace (default: the file's, else default)"
    )
    add_inventory_flags(parser)
    add_output_flag(parser)
    parser.set_defaults(func=run)


def load_resources(path: Path) -> list[dict[str, Any]]:
    """Every SpeculativeDeployment in a (multi-document) YAML file."""
    from specdeploy import api

    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return [d for d in docs if d.get("kind") == api.KIND]


def run(args: argparse.Namespace) -> int:
    from specdeploy import pipeline
    from specdeploy.modelinfo import ModelResolver
    from specdeploy.modelinfo.hub import default_endpoint

    try:
        default_endpoint()  # a bad SPECDEPLOY_HUB_ENDPOINT is bad input (exit 2), not a crash
        resources = load_resources(args.filename)
    except (OSError, yaml.YAMLError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    if not resources:
        print(f"error: no SpeculativeDeployment in {args.filename}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    try:
        inventory = choose(args).inventory
    except InventoryUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    resolver = ModelResolver()
    documents: list[dict[str, Any]] = []
    status = ExitCode.OK
    for body in resources:
        meta = body.setdefault("metadata", {})
        meta["namespace"] = args.namespace or meta.get("namespace") or "default"
        result = pipeline.compute(body, resolver, inventory)
        if result.blocked:
            print(f"error: {meta.get('name')}: {result.reason}: {result.message}", file=sys.stderr)
            status = max(status, exit_code(result.reason))
            continue
        documents += result.children.values()
    if not documents:
        return status
    if args.output == "json":
        # kubectl's form for several objects, which `kubectl apply -f` takes as it is.
        print(dump({"apiVersion": "v1", "kind": "List", "items": documents}, "json"), end="")
    else:
        print(yaml.safe_dump_all(documents, sort_keys=False, width=120), end="")
    return status
