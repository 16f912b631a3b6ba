"""``specdeploy crd``: print (or write) the generated CustomResourceDefinition."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "crd", help="print the CustomResourceDefinition generated from the API models"
    )
    parser.add_argument("-o", "--output-file", type=Path, help="write to this file instead of stdout")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from specdeploy.api.crd import render_yaml

    text = render_yaml()
    if args.output_file:
        args.output_file.write_text(text)
    else:
        print(text, end="")
    return 0
