"""Command-line entry point: one subcommand module per verb, registered here.

Other distributions add verbs through the ``specdeploy.commands`` entry-point group: each entry
names a module with the same ``register(subparsers)``. The local sandbox (``sandbox``, ``demo``)
comes that way, so the operator's own wheel and image carry none of it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points
from types import ModuleType

from specdeploy import __version__
from specdeploy.cli import bench, check, crd, plan, render, run

# Each module exposes ``register(subparsers)`` and sets ``func`` on its parser; heavy imports
# (kopf, kubernetes, transformers) happen inside the command functions so ``--help`` stays fast.
COMMANDS = (crd, render, check, plan, run, bench)
COMMAND_ENTRY_POINTS = "specdeploy.commands"


def installed_commands() -> list[ModuleType]:
    """The built-in verbs, then those other installed distributions add (by entry-point name)."""
    added = sorted(entry_points(group=COMMAND_ENTRY_POINTS), key=lambda point: point.name)
    return [*COMMANDS, *(point.load() for point in added)]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specdeploy",
        description="Deploy EAGLE-3 verifier/speculator pairs on Kubernetes (vLLM, SGLang).",
    )
    parser.add_argument("--version", action="version", version=f"specdeploy {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in installed_commands():
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
