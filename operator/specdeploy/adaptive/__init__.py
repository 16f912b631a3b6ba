"""Adaptive speculation: the draft length per batch size, chosen from what the operator measured.

Pure, between the pipeline (which renders the running schedule, ``running_schedule``) and the
controller (which calls ``decide`` each pass and ``due`` each metrics round): the cost of each
draft length from ``specdeploy bench --tokens`` (``costs``), the expected throughput model
(``model``) and the guard rails of policy Apply (``policy``).
"""

from specdeploy.adaptive.costs import CostCurve, parse
from specdeploy.adaptive.model import Choice, Range, best, drafting, expected_tokens, gain, predicted, speedup
from specdeploy.adaptive.policy import Decision, decide, due, own_schedule, running_schedule

__all__ = [
    "Choice",
    "CostCurve",
    "Decision",
    "Range",
    "best",
    "decide",
    "drafting",
    "due",
    "expected_tokens",
    "gain",
    "own_schedule",
    "parse",
    "predicted",
    "running_schedule",
    "speedup",
]
