"""Command-line entry point: one subcommand module per verb, registered here."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from specdeploy import __version__

# Each module exposes ``register(subparsers)`` and sets ``func`` on its parser; heavy imports
# (kopf, kubernetes, transformers) happen inside the command functions so ``--help`` stays fast.
COMMAND_MODULES = (
    "specdeploy.commands.sandbox",
    "specdeploy.commands.crd",
    "specdeploy.commands.render",
    "specdeploy.commands.check",
    "specdeploy.commands.plan",
    "specdeploy.commands.run",
    "specdeploy.commands.demo",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specdeploy",
        description="Deploy EAGLE-3 verifier/speculator pairs on Kubernetes (vLLM, SGLang).",
    )
    parser.add_argument("--version", action="version", version=f"specdeploy {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help(sys.stderr)
        return 2
    result: int = args.func(args)
    return result
