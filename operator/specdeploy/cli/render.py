"""``specdeploy render -f cr.yaml``: the child manifests the operator would apply, offline.

Same code path as the operator (``specdeploy.pipeline.compute``), so GitOps reviews and CI see
exactly what the cluster will get. Exit 0 with manifests, 1 when the pipeline blocks (the
reason is printed), 2 on unreadable input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "render", help="print the Deployment (or LeaderWorkerSet) and Service for a resource, offline"
    )
    parser.add_argument("-f", "--filename", required=True, type=Path, help="SpeculativeDeployment YAML")
    parser.add_argument(
        "-n", "--namespace", default=None, help="namespace (default: the file's, else default)"
    )
    parser.add_argument(
        "--gpus",
        help="hypothetical GPU inventory as alias:GPUs-per-node, e.g. h100-80gb:8,l4:4 "
        "(default: the offline cluster, 2 x 8 H100, 1 x 8 A100 40GB, 2 x 4 L4)",
    )
    parser.set_defaults(func=run)


def load_resources(path: Path) -> list[dict[str, Any]]:
    """Every SpeculativeDeployment in a (multi-document) YAML file."""
    from specdeploy import api

    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return [d for d in docs if d.get("kind") == api.KIND]


def run(args: argparse.Namespace) -> int:
    from specdeploy import pipeline, planning
    from specdeploy.modelinfo import ModelResolver
    from specdeploy.modelinfo.hub import default_endpoint
    from specdeploy.planning.offline import offline_inventory

    try:
        default_endpoint()  # a bad SPECDEPLOY_HUB_ENDPOINT is bad input (exit 2), not a crash
        resources = load_resources(args.filename)
        inventory = planning.parse_gpus_flag(args.gpus) if args.gpus else offline_inventory()
    except (OSError, yaml.YAMLError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not resources:
        print(f"error: no SpeculativeDeployment in {args.filename}", file=sys.stderr)
        return 2
    resolver = ModelResolver()
    documents: list[dict[str, Any]] = []
    status = 0
    for body in resources:
        meta = body.setdefault("metadata", {})
        meta["namespace"] = args.namespace or meta.get("namespace") or "default"
        result = pipeline.compute(body, resolver, inventory)
        if result.blocked:
            print(f"error: {meta.get('name')}: {result.reason}: {result.message}", file=sys.stderr)
            status = 1
            continue
        documents += result.children.values()
    if documents:
        print(yaml.safe_dump_all(documents, sort_keys=False, width=120), end="")
    return status
