"""``specdeploy plan -f cr.yaml``: the GPU plan the operator would choose.

Runs the operator's planner (``specdeploy.planning.plan``) against the current kubeconfig's
cluster, or a hypothetical inventory (``--gpus h100-80gb:8,l4:4``), another cluster's nodes
(``--kubeconfig``) or the offline cluster (``--offline``, and the default without a kubeconfig:
2 x 8 H100, 1 x 8 A100 40GB, 2 x 4 L4). The models are resolved exactly as the operator resolves
them (``specdeploy.pairing``: catalog shorthands, local directories, the Hub). Exit 0 when a plan
fits, 1 when nothing fits (the message says what would), 2 on bad input (unreadable file, invalid
spec or --gpus, invalid tensor size, unknown GPU product, models whose metadata cannot be found),
7 when the cluster cannot be reached.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from specdeploy.cli.inventory import ChosenInventory, InventoryUnavailable, add_inventory_flags, choose
from specdeploy.cli.results import add_output_flag, dump, exit_code
from specdeploy.exitcodes import ExitCode

if TYPE_CHECKING:
    from specdeploy import api
    from specdeploy.planning import PlanOutcome

WEIGHTS_SOURCES = {
    "metadata": "weights size from the model's metadata (safetensors total)",
    "config": "weights estimated from config.json",
}


class PlanInputError(ValueError):
    """The input cannot be planned; the message says why."""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="show the GPU plan (tensor-parallel size, GPU product) for a resource",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-f", "--filename", required=True, type=Path, help="SpeculativeDeployment YAML")
    add_inventory_flags(parser)
    add_output_flag(parser, human="text")
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


def _plan_dict(outcome: PlanOutcome) -> dict[str, Any] | None:
    return outcome.plan.model_dump(by_alias=True, exclude_none=True) if outcome.plan else None


def render_text(name: str, outcome: PlanOutcome, chosen: ChosenInventory, notes: Sequence[str] = ()) -> str:
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
    inventory = chosen.inventory.describe().splitlines()
    lines += ["", f"GPU inventory ({chosen.label()}):", *(f"  {line}" for line in inventory)]
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

    try:
        default_endpoint()
        specs = load_specs(args.filename)
    except (PlanInputError, HubEndpointError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    try:
        chosen = choose(args)
    except InventoryUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code

    resolver = ModelResolver()
    status = ExitCode.OK
    documents: list[dict[str, Any]] = []
    texts: list[str] = []
    for name, spec in specs:
        try:
            resolved = pairing.resolve_pair(spec, resolver)
        except (pairing.PairingError, ModelUnavailable) as exc:
            print(f"error: {name or args.filename}: {exc}", file=sys.stderr)
            status = max(status, ExitCode.BAD_INPUT)
            documents.append(_document(name, chosen, exc.reason, str(exc), None))
            continue
        effective = pairing.effective_spec(spec, resolved)
        outcome = planning.plan(effective, resolved.verifier, resolved.speculator, chosen.inventory)
        if not outcome.fits:
            status = max(status, exit_code(outcome.reason))
            if args.output != "text":
                print(f"error: {name or args.filename}: {outcome.reason}: {outcome.message}", file=sys.stderr)
        documents.append(_document(name, chosen, outcome.reason, outcome.message, _plan_dict(outcome)))
        texts.append(render_text(name, outcome, chosen, resolved.notes))
    if args.output != "text":
        print(dump(documents[0] if len(documents) == 1 else documents, args.output), end="")
    elif texts:
        print("\n\n".join(texts))
    return status


def _document(
    name: str, chosen: ChosenInventory, reason: str, message: str, plan: dict[str, Any] | None
) -> dict[str, Any]:
    """One resource's result: ``plan`` is exactly what ``status.plan`` will hold (null: no plan)."""
    return {
        "name": name,
        "inventory": chosen.document(),
        "reason": str(reason),
        "message": message,
        "plan": plan,
    }
