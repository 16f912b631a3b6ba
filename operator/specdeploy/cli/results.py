"""How every verb prints a result and turns an outcome into an exit code, the same way.

``-o/--output`` is a format on every verb that prints a result, as in kubectl: ``json``, ``yaml``
and the human form where the verb has one. The exit codes are ``specdeploy.exitcodes``.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from specdeploy.exitcodes import ExitCode

MACHINE_FORMATS = ("json", "yaml")


def add_output_flag(parser: Any, human: str | None = None) -> None:
    """``-o/--output FORMAT``: ``human`` (the verb's readable form) or json or yaml.

    The default is the human form, and yaml for a verb without one (manifests, as kubectl prints).
    """
    choices = (human, *MACHINE_FORMATS) if human else ("yaml", "json")
    default = choices[0]
    parser.add_argument(
        "-o",
        "--output",
        choices=choices,
        default=default,
        help=f"output format: {', '.join(choices)} (default: {default})",
    )


def dump(document: Any, output: str) -> str:
    """``document`` as JSON or YAML text, ending in a newline."""
    if output == "json":
        return json.dumps(document, indent=2) + "\n"
    if output == "yaml":
        return yaml.safe_dump(document, sort_keys=False, width=120)
    raise ValueError(f"not a machine-readable format: {output!r}")


def exit_code(reason: str) -> ExitCode:
    """The exit code of a pipeline or planner blocking reason.

    An incompatible pair or a cluster without a node for the pair is a refusal (1): the input is
    valid but cannot be served as given. Every other blocking reason is the input's fault (2).
    """
    from specdeploy.pipeline import LWS_MISSING, PAIRING_FAILED
    from specdeploy.planning import Reason

    refusals = {PAIRING_FAILED, LWS_MISSING, Reason.NO_NODE_FITS, Reason.GPU_NODE_NOT_RECOGNIZED}
    return ExitCode.REFUSED if reason in refusals else ExitCode.BAD_INPUT
