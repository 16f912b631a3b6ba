"""From the load Job's log to the comparison: figures per engine and concurrency, the speed-up,
the acceptance measured during the speculative runs, and where speculation stops paying."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from typing import Any

from pydantic import Field

from specdeploy.acceptance import NoSpeculationMetrics, SpecCounters, counters
from specdeploy.api import EngineName
from specdeploy.api.base import ApiModel
from specdeploy.speedup.driver import MARK
from specdeploy.speedup.load import BASELINE, IDLE, SPECULATIVE, Variant, draft_length_target

# Speculation pays at a concurrency when the speculative engine delivers more output tokens per
# second than the baseline; at or below this ratio it does not.
PAYS_ABOVE = 1.0


class ResultsError(ValueError):
    """The load Job's log does not hold a result for every run of the plan."""


class Percentiles(ApiModel):
    p50: float
    p99: float


class Figures(ApiModel):
    """One engine at one concurrency, from ``vllm bench serve``'s results (latencies in ms): each
    figure the median over the repeats, ``samples`` the output tokens/s of each repeat as run
    (how far they spread is the noise of the measurement), the requests counted over all."""

    output_tokens_per_second: float
    ttft_ms: Percentiles
    itl_ms: Percentiles
    tpot_ms: Percentiles
    completed: int
    failed: int
    samples: list[float] = Field(default_factory=list)


class MeasuredAcceptance(ApiModel):
    """What the speculative engine counted during its run: accepted / proposed draft tokens,
    tokens per verifier step (1 + accepted / drafts), and per position where the engine counts it."""

    rate: float
    mean_length: float
    draft_tokens: int
    per_position: list[float]


class Level(ApiModel):
    concurrency: int
    speculative: Figures
    baseline: Figures
    speedup: float
    acceptance: MeasuredAcceptance | None


class DraftLengthLevel(ApiModel):
    """One draft length at one concurrency: throughput (the median of ``samples``), speed-up
    over the baseline, acceptance."""

    concurrency: int
    output_tokens_per_second: float
    speedup: float
    acceptance: MeasuredAcceptance | None
    samples: list[float] = Field(default_factory=list)


class DraftLength(ApiModel):
    """The engine drafting ``tokens`` tokens at every batch size (0: the baseline)."""

    tokens: int
    results: list[DraftLengthLevel]


class Comparison(ApiModel):
    """Every level, in the order run; ``paysAt`` the concurrencies where the speed-up exceeds 1;
    ``stopsPayingAbove`` the last of those before the first that does not (0 when even the lowest
    does not), None when it pays at every level measured; ``draftLengths`` the static draft
    lengths measured besides (``--tokens``), each against the same baseline; ``idleDraft`` the
    engine with its draft loaded and drafting none (``--tokens idle``), None unless measured."""

    results: list[Level]
    pays_at: list[int]
    stops_paying_above: int | None
    draft_lengths: list[DraftLength] = Field(default_factory=list)
    idle_draft: list[DraftLengthLevel] | None = None

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True)


def spread(median: float, samples: Sequence[float]) -> float:
    """How far the repeats of one cell lie from their median, at most, relative to it (0 for a
    single run): the noise two figures must differ by to differ."""
    if len(samples) < 2 or not median:
        return 0.0
    return max(abs(found - median) / median for found in samples)


def _median(values: Sequence[float]) -> float:
    return round(statistics.median(values), 3)


def _percentiles(results: Sequence[dict[str, Any]], metric: str) -> Percentiles:
    p50 = [float(r.get(f"p50_{metric}_ms", r.get(f"median_{metric}_ms", 0.0))) for r in results]
    return Percentiles(
        p50=_median(p50), p99=_median([float(r.get(f"p99_{metric}_ms", 0.0)) for r in results])
    )


def figures(runs: Sequence[dict[str, Any]]) -> Figures:
    """The figures of one engine's runs at one concurrency (the driver's records, in order)."""
    results = [run["result"] for run in runs]
    samples = [round(float(result["output_throughput"]), 3) for result in results]
    return Figures(
        output_tokens_per_second=_median(samples),
        ttft_ms=_percentiles(results, "ttft"),
        itl_ms=_percentiles(results, "itl"),
        tpot_ms=_percentiles(results, "tpot"),
        completed=sum(int(result["completed"]) for result in results),
        failed=sum(int(result.get("failed", 0)) for result in results),
        samples=samples,
    )


def acceptance(engine: EngineName, runs: Sequence[dict[str, Any]]) -> MeasuredAcceptance | None:
    """From the engine's counters before its first run and after its last (the runs between
    them are other engines'); None when they say nothing (no speculation metrics, a restart in
    between, or no draft at all)."""
    before, after = runs[0].get("before"), runs[-1].get("after")
    if before is None or after is None:
        return None
    try:
        delta: SpecCounters | None = counters(engine, after).since(counters(engine, before))
    except NoSpeculationMetrics:
        return None
    if delta is None or not delta.drafts:
        return None
    return MeasuredAcceptance(
        rate=round(delta.accepted / delta.draft_tokens, 4) if delta.draft_tokens else 0.0,
        mean_length=round(1 + delta.accepted / delta.drafts, 4),
        draft_tokens=delta.draft_tokens,
        per_position=[round(kept / delta.drafts, 4) for kept in delta.per_position],
    )


def records(log: str) -> list[dict[str, Any]]:
    """The driver's result lines of a pod log, in order."""
    found = []
    for line in log.splitlines():
        _, marked, payload = line.partition(MARK)
        if marked:
            found.append(json.loads(payload))
    return found


def _runs(
    log: str, targets: tuple[str, ...], concurrencies: tuple[int, ...]
) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """The log's results of each target at each concurrency, in order run; ResultsError when one
    has none."""
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for record in records(log):
        runs.setdefault((record["target"], int(record["concurrency"])), []).append(record)
    for concurrency in concurrencies:
        missing = [t for t in targets if (t, concurrency) not in runs]
        if missing:
            raise ResultsError(
                f"the load Job's log has no {' or '.join(missing)} result at concurrency {concurrency}"
            )
    return runs


def compare(log: str, engine: EngineName, concurrencies: tuple[int, ...]) -> Comparison:
    """The comparison the log holds; ResultsError when a run of the plan is missing."""
    runs = _runs(log, (SPECULATIVE, BASELINE), concurrencies)
    levels = []
    for concurrency in concurrencies:
        spec_runs, base_runs = runs[(SPECULATIVE, concurrency)], runs[(BASELINE, concurrency)]
        spec, base = figures(spec_runs), figures(base_runs)
        speedup = (
            spec.output_tokens_per_second / base.output_tokens_per_second
            if base.output_tokens_per_second
            else 0.0
        )
        levels.append(
            Level(
                concurrency=concurrency,
                speculative=spec,
                baseline=base,
                speedup=round(speedup, 3),
                acceptance=acceptance(engine, spec_runs),
            )
        )
    return verdict(levels)


def verdict(levels: list[Level]) -> Comparison:
    """Where speculation pays, and the concurrency above which it stops (levels sorted by it)."""
    ordered = sorted(levels, key=lambda level: level.concurrency)
    pays = [level.concurrency for level in ordered if level.speedup > PAYS_ABOVE]
    first_not = next((level for level in ordered if level.speedup <= PAYS_ABOVE), None)
    stops: int | None = None
    if first_not is not None:
        before = [level.concurrency for level in ordered if level.concurrency < first_not.concurrency]
        stops = before[-1] if before else 0
    return Comparison(results=ordered, pays_at=pays, stops_paying_above=stops)


def with_draft_lengths(
    comparison: Comparison, logs: dict[Variant, str | None], engine: EngineName
) -> Comparison:
    """``comparison`` with each draft length of ``logs`` measured against its baseline: from the
    log of the load Job that ran the engine copy drafting that many tokens, or (None) from the
    speculative runs when the resource itself drafts that many at every batch size; 0 is the
    baseline itself. ``IDLE``, the copy with its draft loaded and drafting none, goes to
    ``idleDraft``."""
    lengths = [
        DraftLength(tokens=tokens, results=_levels(comparison, tokens, log, engine))
        for tokens, log in sorted((k, v) for k, v in logs.items() if isinstance(k, int))
    ]
    idle = _levels(comparison, IDLE, logs[IDLE], engine) if IDLE in logs else None
    return comparison.model_copy(update={"draft_lengths": lengths, "idle_draft": idle})


def _levels(
    comparison: Comparison, variant: Variant, log: str | None, engine: EngineName
) -> list[DraftLengthLevel]:
    """Each level of one engine copy of ``--tokens`` (see :func:`with_draft_lengths`)."""
    concurrencies = tuple(level.concurrency for level in comparison.results)
    runs = {} if log is None else _runs(log, (draft_length_target(variant),), concurrencies)
    levels = []
    for level in comparison.results:
        base = level.baseline.output_tokens_per_second
        if variant == 0:
            found, accepted = level.baseline, None
        elif log is None:
            found, accepted = level.speculative, level.acceptance
        else:
            copy_runs = runs[(draft_length_target(variant), level.concurrency)]
            found = figures(copy_runs)
            accepted = acceptance(engine, copy_runs)
        levels.append(
            DraftLengthLevel(
                concurrency=level.concurrency,
                output_tokens_per_second=found.output_tokens_per_second,
                speedup=round(found.output_tokens_per_second / base, 3) if base else 0.0,
                acceptance=accepted,
                samples=found.samples,
            )
        )
    return levels
