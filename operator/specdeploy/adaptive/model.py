"""The draft length that serves the most tokens per second at each batch size: the model.

A verifier step drafting K tokens yields ``E(K) = 1 + a_1 + ... + a_K`` tokens per sequence,
where ``a_k`` is the acceptance at position k unconditionally (a position counts only when every
one before it was accepted), which the engines count per position. What the step costs at each
batch size comes from the benchmark (``costs.CostCurve.step_cost``, relative to the baseline's
step). The speed-up of K at a batch size is then ``E(K) / cost(K)``; the baseline's is 1.

A 0 is the baseline only where it is 0 at every batch size (served without the draft). Beside
ranges that draft, the engine runs the draft's first pass on every step to keep its cache
current (vLLM 0.32.0 does so at a per-batch-size 0), so such a 0 is priced by the benchmark's
idle draft (``specdeploy bench --tokens 0,idle,...``: the draft loaded, drafting nothing); where
that was not measured, a schedule either drafts at every batch size or is off everywhere.
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


def idle_speedup(curve: CostCurve, index: int) -> float | None:
    """Output tokens/s with the draft loaded and drafting none over the baseline's, at the
    ``index``-th concurrency; None unless the benchmark measured it."""
    return None if curve.idle is None else curve.idle[index] / curve.throughput[0][index]


def tokens_at(schedule: Sequence[Range], batch: int) -> int:
    """The draft length a schedule gives a batch size."""
    return next(
        r.tokens for r in schedule if r.from_batch <= batch and (r.to_batch is None or batch <= r.to_batch)
    )


@dataclass(frozen=True)
class Choice:
    """The draft length chosen at one measured concurrency, its expected speed-up, and how far
    from the baseline's that may lie by the benchmark's noise alone (relative)."""

    tokens: int
    speedup: float
    noise: float

    @property
    def resolved(self) -> float:
        """The speed-up, or 1 where the benchmark's repeats cannot tell it from the baseline's."""
        return 1.0 if abs(self.speedup - 1) <= self.noise else self.speedup


def drafting(curve: CostCurve, per_position: Sequence[float], longest: int) -> list[Choice]:
    """Per measured concurrency, the draft length (among those measured, from 1 up to ``longest``
    and to the positions measured) with the highest expected speed-up, the shorter on a tie; the
    longest of them where the best is within the run's noise of it (a difference the repeats do
    not resolve is no reason for another range); 0, where the idle draft was measured and beats
    that beyond the noise. Empty when no such length was measured."""
    candidates = [k for k in curve.lengths if 0 < k <= min(longest, len(per_position))]
    if not candidates:
        return []
    reference = max(candidates)
    found = []
    for i in range(len(curve.concurrencies)):
        scores = {k: round(speedup(curve, per_position, k, i), 6) for k in candidates}
        tokens = max(candidates, key=lambda k: (scores[k], -k))
        if scores[tokens] <= scores[reference] * (1 + curve.noise(tokens, reference, i)):
            tokens = reference
        idle = idle_speedup(curve, i)
        if idle is not None and idle > scores[tokens] * (1 + curve.idle_spread[i] + curve.spread[tokens][i]):
            found.append(Choice(0, round(idle, 6), curve.idle_spread[i] + curve.spread[0][i]))
        else:
            found.append(Choice(tokens, scores[tokens], curve.noise(tokens, 0, i)))
    return found


def off_is_better(chosen: Sequence[Choice]) -> bool:
    """Whether serving without the draft keeps a larger share of the best expected at its worst
    concurrency than drafting does: a draft that gains 5% at batch 1 and loses 30% at 16 is not
    worth loading, nor one whose gains and losses the benchmark's noise does not resolve."""
    expected = [c.resolved for c in chosen]
    best_at = [max(1.0, s) for s in expected]
    off = min(1 / b for b in best_at)
    return off >= min(s / b for s, b in zip(expected, best_at, strict=True))


def best(curve: CostCurve, per_position: Sequence[float], longest: int) -> list[Range]:
    """The schedule :func:`schedule_of` the :func:`drafting` lengths."""
    return schedule_of(curve, drafting(curve, per_position, longest))


def schedule_of(curve: CostCurve, chosen: Sequence[Choice]) -> list[Range]:
    """The lengths ``chosen`` per measured concurrency as ranges from each to the next (the first
    from 1, the last open), merged where they agree; or 0 everywhere when :func:`off_is_better`
    (or nothing was chosen)."""
    if not chosen or off_is_better(chosen):
        return [Range(1, None, 0)]
    ranges: list[Range] = []
    for i, choice in enumerate(chosen):
        start = 1 if i == 0 else curve.concurrencies[i]
        if ranges and ranges[-1].tokens == choice.tokens:
            continue
        if ranges:
            ranges[-1] = Range(ranges[-1].from_batch, start - 1, ranges[-1].tokens)
        ranges.append(Range(start, None, choice.tokens))
    return ranges


def predicted(
    curve: CostCurve, per_position: Sequence[float], schedule: Sequence[Range]
) -> list[float | None]:
    """A schedule's expected speed-up at each measured concurrency (None where it drafts a length
    the benchmark did not measure, or 0 beside ranges that draft while the idle draft that runs
    there was not measured)."""
    drafts = any(r.tokens for r in schedule)
    found: list[float | None] = []
    for i, concurrency in enumerate(curve.concurrencies):
        tokens = tokens_at(schedule, concurrency)
        if drafts and tokens == 0:
            found.append(idle_speedup(curve, i))
        else:
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
