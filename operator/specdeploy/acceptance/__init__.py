"""Speculative decoding acceptance: engine counters, their sliding window, and what status says.

Sits above the pipeline and below the controller: pure functions and plain data, no I/O, so the
figures and the SpeculationEffective condition are unit-tested without a cluster or an engine.
"""

from specdeploy.acceptance.counters import NoSpeculationMetrics, SpecCounters, counters, counters_from
from specdeploy.acceptance.verdict import Reading, decimal, figures, judge
from specdeploy.acceptance.window import Totals, Window

__all__ = [
    "NoSpeculationMetrics",
    "Reading",
    "SpecCounters",
    "Totals",
    "Window",
    "counters",
    "counters_from",
    "decimal",
    "figures",
    "judge",
]
