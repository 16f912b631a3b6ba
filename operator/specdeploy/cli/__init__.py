"""Command-line entry point: one subcommand module per verb, registered here."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from specdeploy import __version__
from specdeploy.cli import bench, check, crd, demo, plan, render, run, sandbox

# Each module exposes ``register(subparsers)`` and sets ``func`` on its parser; heavy imports
# (kopf, kubernetes, transformers) happen inside the command functions so ``--help`` stays fast.
COMMANDS = (sandbox, crd, render, check, plan, run, demo, bench)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specdeploy",
        description="Deploy EAGLE-3 verifier/speculator pairs on Kubernetes (vLLM, SGLang).",
    )
    parser.add_argument("--version", action="version", version=f"specdeploy {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help(sys.stderr)
        return 2
    result: int = args.func(args)
    return result
