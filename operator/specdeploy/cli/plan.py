"""``specdeploy plan -f cr.yaml``: the GPU plan the operator would choose, offline.

Runs the operator's planner (``specdeploy.planning.plan``) against a hypothetical inventory
(``--gpus h100-80gb:8,l4:4``), a real cluster's nodes (``--kubeconfig``) or, by default, the
offline cluster (``planning.offline``: 2 x 8 H100, 1 x 8 A100 40GB, 2 x 4 L4). The models are
resolved exactly as the operator resolves them (``specdeploy.pairing``: catalog shorthands, local
directories, the Hub). Exit 0 when a plan fits, 1 when nothing fits (the message says what would),
2 on bad input (unreadable file, invalid spec or --gpus, invalid tensor size, unknown GPU product,
models whose metadata cannot be found).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from specdeploy import api
    from specdeploy.planning import Inventory, PlanOutcome

EXIT_FITS, EXIT_NO_FIT, EXIT_BAD_INPUT = 0, 1, 2
WEIGHTS_SOURCES = {
    "metadata": "weights size from the model's metadata (safetensors total)",
    "config": "weights estimated from config.json",
}


class PlanInputError(ValueError):
    """The input cannot be planned; the message says why."""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="show the GPU plan (tensor-parallel size, GPU product) for a resource, offline",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-f", "--filename", required=True, type=Path, help="SpeculativeDeployment YAML")
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--gpus",
        help="hypothetical inventory: ALIAS:GPUS[xNODES],... e.g. h100-80gb:8,l4:4 (GPUs per node)",
    )
    source.add_argument("--kubeconfig", type=Path, help="plan against the GPU nodes of this cluster")
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text", help="output format")
    parser.set_defaults(func=run)


def load_specs(path: Path) -> list[tuple[str, api.SpeculativeDeploymentSpec]]:
    """(name, spec) of every SpeculativeDeployment in a (multi-document) YAML file."""
    from pydantic import ValidationError

    from specdeploy import api

    try:
        documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    except (OSError, yaml.YAMLError) as exc:
        raise PlanInputError(f"cannot read {path}: {exc}") from exc
    found = []
    for document in documents:
        if not isinstance(document, dict) or document.get("kind") != api.KIND:
            continue
        try:
            resource = api.SpeculativeDeployment.model_validate(document)
        except ValidationError as exc:
            problems = api.validation_problems(exc, prefix="")
            raise PlanInputError(f"{path}: invalid {api.KIND}: {problems}") from exc
        found.append((str(resource.metadata.get("name", "")), resource.spec))
    if not found:
        raise PlanInputError(f"no {api.KIND} in {path}")
    return found


def cluster_inventory(kubeconfig: Path) -> Inventory:
    """The GPU inventory of the cluster ``kubeconfig`` points at (raw Node JSON, camelCase)."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException

    from specdeploy.planning import inventory_from_nodes

    try:
        api_client = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
        response: Any = client.CoreV1Api(api_client).list_node(_preload_content=False)
        items: list[dict[str, Any]] = json.loads(response.data)["items"]
    except (OSError, ValueError, ApiException, ConfigException) as exc:
        raise PlanInputError(f"cannot list the nodes of the cluster in {kubeconfig}: {exc}") from exc
    return inventory_from_nodes(items)


def _plan_dict(outcome: PlanOutcome) -> dict[str, Any] | None:
    return outcome.plan.model_dump(by_alias=True, exclude_none=True) if outcome.plan else None


def render_text(name: str, outcome: PlanOutcome, inventory: Inventory, notes: Sequence[str] = ()) -> str:
    """The plan (or why nothing fits), how the pair was chosen, the inventory and the alternatives."""
    from specdeploy.planning.gpus import display_name

    lines = [f"{name or 'resource'}: {outcome.reason}"]
    plan_fields = _plan_dict(outcome)
    if plan_fields:
        width = max(len(key) for key in plan_fields)
        lines += [f"  {key:<{width}}  {value}" for key, value in plan_fields.items() if key != "reason"]
        lines.append(f"  {'reason':<{width}}  {outcome.message}")
    else:
        lines.append(f"  {outcome.message}")
    estimate = outcome.estimate
    if estimate is not None:
        lines.append(
            f"  memory model: {WEIGHTS_SOURCES[estimate.weights_source]}; KV cache for "
            f"{estimate.max_model_len} tokens x {estimate.sequences} sequences; "
            f"gpuMemoryUtilization {estimate.utilization}; {estimate.reserve_gib} GiB reserve per GPU"
        )
    if notes:
        lines += ["", "Pair:", *(f"  {note}" for note in notes)]
    lines += ["", "GPU inventory:", *(f"  {line}" for line in inventory.describe().splitlines())]
    if outcome.alternatives:
        rows = [
            (
                str(a.nodes),
                str(a.tensor_parallel_size),
                str(a.pipeline_parallel_size),
                display_name(a.gpu_product) if a.gpu_product else "-",
                a.reason,
            )
            for a in outcome.alternatives
        ]
        gpu_width = max(len("GPU"), *(len(row[3]) for row in rows))
        lines += ["", "Alternatives considered:", f"  NODES  TP  PP  {'GPU':<{gpu_width}}  VERDICT"]
        lines += [
            f"  {nodes:<5}  {tp:<2}  {pp:<2}  {gpu:<{gpu_width}}  {verdict}"
            for nodes, tp, pp, gpu, verdict in rows
        ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from specdeploy import pairing, planning
    from specdeploy.modelinfo import ModelResolver, ModelUnavailable
    from specdeploy.modelinfo.hub import HubEndpointError, default_endpoint
    from specdeploy.planning.offline import offline_inventory

    try:
        default_endpoint()
        specs = load_specs(args.filename)
        if args.gpus:
            inventory = planning.parse_gpus_flag(args.gpus)
        elif args.kubeconfig:
            inventory = cluster_inventory(args.kubeconfig)
        else:
            inventory = offline_inventory()
    except (PlanInputError, planning.GpuInventoryError, HubEndpointError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT

    resolver = ModelResolver()
    status = EXIT_FITS
    plans: list[dict[str, Any] | None] = []
    texts: list[str] = []
    for name, spec in specs:
        try:
            resolved = pairing.resolve_pair(spec, resolver)
        except (pairing.PairingError, ModelUnavailable) as exc:
            print(f"error: {name or args.filename}: {exc}", file=sys.stderr)
            status = max(status, EXIT_BAD_INPUT)
            continue
        effective = pairing.effective_spec(spec, resolved)
        outcome = planning.plan(effective, resolved.verifier, resolved.speculator, inventory)
        if not outcome.fits:
            code = EXIT_NO_FIT if outcome.reason is planning.Reason.NO_NODE_FITS else EXIT_BAD_INPUT
            status = max(status, code)
            if args.output == "json":
                print(f"error: {name or args.filename}: {outcome.reason}: {outcome.message}", file=sys.stderr)
        plans.append(_plan_dict(outcome))
        texts.append(render_text(name, outcome, inventory, resolved.notes))
    if args.output == "json":
        fitting = [p for p in plans if p is not None]
        if fitting:
            print(json.dumps(fitting[0] if len(specs) == 1 else plans, indent=2))
    elif texts:
        print("\n\n".join(texts))
    return status
