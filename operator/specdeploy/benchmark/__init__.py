"""Speculation against a baseline: the objects a benchmark run creates, the load it sends, and
the comparison it reports, all pure; ``session`` runs it against the cluster through the
controller's client, and ``plot`` draws it."""

from specdeploy.benchmark.load import BASELINE, SPECULATIVE, Load, command, plan
from specdeploy.benchmark.results import Comparison, ResultsError, compare

__all__ = ["BASELINE", "SPECULATIVE", "Comparison", "Load", "ResultsError", "command", "compare", "plan"]
