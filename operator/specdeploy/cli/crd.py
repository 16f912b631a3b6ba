"""``specdeploy crd``: print (or write) the generated CustomResourceDefinition."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from specdeploy.cli.results import add_output_flag, dump
from specdeploy.exitcodes import ExitCode


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "crd", help="print the CustomResourceDefinition generated from the API models"
    )
    add_output_flag(parser)
    parser.add_argument(
        "--output-file", type=Path, metavar="FILE", help="write to this file instead of stdout"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from specdeploy.api.crd import custom_resource_definition, render_yaml

    # YAML is the checked-in file's exact text (with its header); JSON is the same object.
    text = render_yaml() if args.output == "yaml" else dump(custom_resource_definition(), args.output)
    if args.output_file:
        args.output_file.write_text(text)
    else:
        print(text, end="")
    return ExitCode.OK
