"""`specdeploy check VERIFIER SPECULATOR`: the operator's pairing check, before any cluster exists.

Exit 0 when compatible (warnings allowed), 1 when a check fails, 2 when a model cannot be resolved
(argparse also exits 2 on bad usage): the shared codes of ``specdeploy.exitcodes``.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from specdeploy.cli.results import add_output_flag, dump
from specdeploy.exitcodes import ExitCode

if TYPE_CHECKING:
    from specdeploy.modelinfo import ModelInfo

STATUS_MARK = {"Passed": "ok", "Failed": "FAIL", "Warning": "warn", "Skipped": "skip"}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "check",
        help="check that an EAGLE-3 speculator matches its verifier",
        description="Run the pairing checks on a verifier and a speculator (Hugging Face ids or local "
        "directories holding config.json). Exit 0 compatible, 1 incompatible, 2 unresolvable.",
    )
    parser.add_argument("verifier", metavar="VERIFIER", help="verifier model id or local directory")
    parser.add_argument("speculator", metavar="SPECULATOR", help="speculator model id or local directory")
    parser.add_argument("--engine", choices=("vllm", "sglang"), default="vllm", help="inference engine")
    add_output_flag(parser, human="text")
    parser.add_argument(
        "--revision-verifier", default=None, metavar="REV", help="verifier branch, tag or commit"
    )
    parser.add_argument(
        "--revision-speculator", default=None, metavar="REV", help="speculator branch, tag or commit"
    )
    parser.add_argument(
        "--allow-verifier-mismatch",
        action="store_true",
        help="accept a speculator trained for another verifier (reported as a warning)",
    )
    parser.add_argument(
        "--endpoint",
        default=None,
        help="Hub endpoint (mirror); default $SPECDEPLOY_HUB_ENDPOINT, else HF_ENDPOINT, else the Hub",
    )
    parser.add_argument("--offline", action="store_true", help="use only the catalog and the local Hub cache")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from specdeploy.modelinfo import ModelResolver, ModelUnavailable
    from specdeploy.modelinfo.hub import HubEndpointError, default_endpoint
    from specdeploy.pairing import check_pair

    try:
        default_endpoint()
    except HubEndpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    resolver = ModelResolver()
    try:
        verifier, speculator = (
            resolver.resolve(
                model, revision, endpoint=args.endpoint, offline=args.offline, want_tokenizer=True
            )
            for model, revision in (
                (args.verifier, args.revision_verifier),
                (args.speculator, args.revision_speculator),
            )
        )
    except ModelUnavailable as exc:
        if args.output != "text":
            print(
                dump({"error": exc.reason, "model": exc.model_id, "message": exc.message}, args.output),
                end="",
            )
        else:
            print(f"error: {exc.reason}: {exc.message}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    report = check_pair(
        verifier, speculator, engine=args.engine, allow_verifier_mismatch=args.allow_verifier_mismatch
    )
    notes = _notes(verifier, speculator)
    if args.output != "text":
        document = {
            "verifier": report.verifier_id,
            "speculator": report.speculator_id,
            "engine": args.engine,
            "verified": report.verified,
            "reason": report.reason,
            "message": report.message,
            "warnings": report.warnings,
            "checks": [c.model_dump(by_alias=True) for c in report.checks],
            "sources": {"verifier": verifier.source, "speculator": speculator.source},
            "notes": notes,
        }
        print(dump(document, args.output), end="")
    else:
        width = max(len(c.name) for c in report.checks)
        for c in report.checks:
            print(f"{STATUS_MARK[c.status]:<5} {c.name:<{width}}  {c.reason}: {c.message}")
        print(f"PairingVerified={report.verified} ({report.reason}): {report.message}")
        for note in notes:
            print(f"note: {note}")
    return ExitCode.REFUSED if report.verified == "False" else ExitCode.OK


def _notes(*models: ModelInfo) -> list[str]:
    """Where catalog facts came from, and why they stood in for the Hub: what the check relied on."""
    notes = []
    for model in models:
        if model.provenance:
            notes.append(f"{model.model_id}: the catalog's facts ({model.provenance})")
        if model.note:
            notes.append(f"{model.model_id}: {model.note}")
    return notes
