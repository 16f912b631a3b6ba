"""The draft length that serves the most tokens per second at each batch size: the model.

A verifier step drafting K tokens yields ``E(K) = 1 + a_1 + ... + a_K`` tokens per sequence,
where ``a_k`` is the acceptance at position k unconditionally (a position counts only when every
one before it was accepted), which the engines count per position. What the step costs at each
batch size comes from the benchmark (``costs.CostCurve.step_cost``, relative to the baseline's
step). The speed-up of K at a batch size is then ``E(K) / cost(K)``; the baseline's is 1.
docs/adaptive.md derives it and works an example.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specdeploy.adaptive.costs import CostCurve


@dataclass(frozen=True)
class Range:
    """A draft length for batch sizes ``from_batch`` to ``to_batch`` (None: and above)."""

    from_batch: int
    to_batch: int | None
    tokens: int


def expected_tokens(per_position: Sequence[float], tokens: int) -> float:
    """Tokens per sequence and verifier step drafting ``tokens``: the verifier's own plus each
    position's unconditional acceptance."""
    return 1 + sum(per_position[:tokens])


def speedup(curve: CostCurve, per_position: Sequence[float], tokens: int, index: int) -> float:
    """Expected output tokens/s drafting ``tokens`` over the baseline's, at the ``index``-th
    concurrency of ``curve``."""
    if tokens == 0:
        return 1.0
    return expected_tokens(per_position, tokens) / curve.step_cost(tokens, index)


def tokens_at(schedule: Sequence[Range], batch: int) -> int:
    """The draft length a schedule gives a batch size."""
    return next(
        r.tokens for r in schedule if r.from_batch <= batch and (r.to_batch is None or batch <= r.to_batch)
    )


def best(curve: CostCurve, per_position: Sequence[float], longest: int) -> list[Range]:
    """Per measured concurrency, the draft length (among those measured, up to ``longest`` and
    to the positions measured) with the highest expected speed-up, the shorter on a tie; as
    ranges from each measured concurrency to the next (the first from 1, the last open), merged
    where they agree."""
    candidates = [k for k in curve.lengths if k <= min(longest, len(per_position))]
    chosen = []
    for i in range(len(curve.concurrencies)):
        scores = {k: round(speedup(curve, per_position, k, i), 6) for k in candidates}
        chosen.append(max(candidates, key=lambda k: (scores[k], -k)))
    ranges: list[Range] = []
    for i, tokens in enumerate(chosen):
        start = 1 if i == 0 else curve.concurrencies[i]
        if ranges and ranges[-1].tokens == tokens:
            continue
        if ranges:
            ranges[-1] = Range(ranges[-1].from_batch, start - 1, ranges[-1].tokens)
        ranges.append(Range(start, None, tokens))
    return ranges


def predicted(
    curve: CostCurve, per_position: Sequence[float], schedule: Sequence[Range]
) -> list[float | None]:
    """A schedule's expected speed-up at each measured concurrency (None where it drafts a length
    the benchmark did not measure)."""
    found: list[float | None] = []
    for i, concurrency in enumerate(curve.concurrencies):
        tokens = tokens_at(schedule, concurrency)
        found.append(speedup(curve, per_position, tokens, i) if tokens in curve.throughput else None)
    return found


def gain(
    curve: CostCurve, per_position: Sequence[float], new: Sequence[Range], running: Sequence[Range]
) -> float | None:
    """The largest fraction by which ``new`` beats ``running`` at a measured concurrency; None
    when no concurrency has both predicted."""
    pairs = [
        (a, b)
        for a, b in zip(
            predicted(curve, per_position, new), predicted(curve, per_position, running), strict=True
        )
        if a is not None and b is not None
    ]
    return max((a / b - 1 for a, b in pairs), default=None)
