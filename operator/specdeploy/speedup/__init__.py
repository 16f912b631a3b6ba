"""Speculation against a baseline: the objects a benchmark run creates, the load it sends, and
the comparison it reports, all pure; ``session`` runs it against the cluster through the
controller's client, and ``plot`` draws it.

The feature behind ``specdeploy bench`` (``cli/bench.py``, its options and output); named for
what it measures so it is not confused with ``bench/``, the project's own benchmark scripts."""

from specdeploy.speedup.load import BASELINE, SPECULATIVE, Load, command, plan
from specdeploy.speedup.results import Comparison, ResultsError, compare, with_draft_lengths

__all__ = [
    "BASELINE",
    "SPECULATIVE",
    "Comparison",
    "Load",
    "ResultsError",
    "command",
    "compare",
    "plan",
    "with_draft_lengths",
]
