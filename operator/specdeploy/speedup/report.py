"""How a comparison is shown: a table for a terminal, the summary the resource keeps, the Event."""

from __future__ import annotations

import json
from datetime import datetime

from specdeploy import api
from specdeploy.acceptance import decimal
from specdeploy.speedup.results import Comparison, DraftLengthLevel, Figures, Level, spread

BENCHMARKED = "Benchmarked"
NOT_PAYING = "SpeculationNotPaying"
COLUMNS = (
    "CONCURRENCY", "SPEC TOK/S", "BASE TOK/S", "SPEED-UP", "SPEC TTFT p50/p99", "BASE TTFT p50/p99",
    "SPEC ITL p50/p99", "BASE ITL p50/p99", "SPEC TPOT", "BASE TPOT", "ACCEPTANCE", "FAILED",
)  # fmt: skip


def _pair(figures: Figures, metric: str) -> str:
    value = getattr(figures, metric)
    return f"{value.p50:.1f}/{value.p99:.1f} ms"


def _acceptance(level: Level) -> str:
    found = level.acceptance
    return f"{decimal(found.rate)} ({decimal(found.mean_length)} tokens/step)" if found else "-"


def verdict_line(comparison: Comparison) -> str:
    """Where speculation pays, in one sentence."""
    stops = comparison.stops_paying_above
    if stops is None:
        return "Speculation pays at every concurrency measured."
    if stops == 0:
        return "Speculation does not pay at any concurrency measured."
    return f"Speculation pays up to concurrency {stops} and stops paying above it."


def spread_line(comparison: Comparison) -> str | None:
    """How far the repeats of one engine at one concurrency lie from their median, at most: the
    noise two figures of the report must differ by to differ (None when each level ran once)."""
    figures = [side for level in comparison.results for side in (level.speculative, level.baseline)]
    cells = [(f.output_tokens_per_second, f.samples) for f in figures]
    cells += [(r.output_tokens_per_second, r.samples) for k in comparison.draft_lengths for r in k.results]
    cells += [(r.output_tokens_per_second, r.samples) for r in comparison.idle_draft or []]
    repeats = min(len(samples) for _, samples in cells)
    if repeats < 2:
        return None
    worst = max(spread(median, samples) for median, samples in cells)
    return (
        f"Each figure is the median of {repeats} runs; "
        f"one engine's runs at one concurrency lie within {worst:.0%} of it."
    )


def table(comparison: Comparison) -> str:
    rows = [COLUMNS]
    for level in comparison.results:
        spec, base = level.speculative, level.baseline
        rows.append(
            (
                str(level.concurrency),
                f"{spec.output_tokens_per_second:.1f}",
                f"{base.output_tokens_per_second:.1f}",
                f"{level.speedup:.2f}x",
                _pair(spec, "ttft_ms"),
                _pair(base, "ttft_ms"),
                _pair(spec, "itl_ms"),
                _pair(base, "itl_ms"),
                f"{spec.tpot_ms.p50:.1f} ms",
                f"{base.tpot_ms.p50:.1f} ms",
                _acceptance(level),
                f"{spec.failed}/{base.failed}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = ["   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    extra = ["", draft_length_table(comparison)] if comparison.draft_lengths else []
    noise = spread_line(comparison)
    return "\n".join([*lines, "", verdict_line(comparison), *([noise] if noise else []), *extra])


def speedups(comparison: Comparison) -> str:
    return ", ".join(
        f"{level.speedup:.2f}x at concurrency {level.concurrency}" for level in comparison.results
    )


def summary(comparison: Comparison, measured_at: datetime, load: dict[str, object], command: str) -> str:
    """The annotation value: compact JSON small enough to read in ``kubectl get -o yaml``.

    ``command``: the digest of the command the resource ran; with draft lengths measured, each
    one's output tokens/s and tokens per verifier step by concurrency (the cost curve the
    operator's adaptive speculation reads, ``adaptive.costs``), and the idle draft's output
    tokens/s when measured (what a 0 range beside ranges that draft costs)."""
    body: dict[str, object] = {
        "measuredAt": measured_at.strftime(api.TIME_FORMAT),
        "command": command,
        "speedup": {str(level.concurrency): level.speedup for level in comparison.results},
        "outputTokensPerSecond": {
            str(level.concurrency): {
                "speculative": level.speculative.output_tokens_per_second,
                "baseline": level.baseline.output_tokens_per_second,
            }
            for level in comparison.results
        },
        "stopsPayingAbove": comparison.stops_paying_above,
        "load": load,
    }
    if comparison.draft_lengths:
        body["meanLength"] = {
            str(level.concurrency): level.acceptance.mean_length
            for level in comparison.results
            if level.acceptance is not None
        }
        body["draftLengths"] = {
            str(length.tokens): {
                **_measured(length.results),
                "meanLength": {
                    str(r.concurrency): r.acceptance.mean_length if r.acceptance else 1.0
                    for r in length.results
                    if r.acceptance is not None or length.tokens == 0
                },
            }
            for length in comparison.draft_lengths
        }
    if comparison.idle_draft is not None:
        body["idleDraft"] = _measured(comparison.idle_draft)
    return json.dumps(body, separators=(",", ":"))


def _measured(levels: list[DraftLengthLevel]) -> dict[str, object]:
    """One engine copy's output tokens/s and their spread by concurrency, as the annotation keeps them."""
    return {
        "outputTokensPerSecond": {str(r.concurrency): r.output_tokens_per_second for r in levels},
        "spread": {
            str(r.concurrency): round(spread(r.output_tokens_per_second, r.samples), 3) for r in levels
        },
    }


def draft_length_table(comparison: Comparison) -> str:
    """Output tokens/s (and the speed-up over the baseline) of each draft length by concurrency."""
    columns = [(f"K={length.tokens}", length.results) for length in comparison.draft_lengths]
    columns += [("K=0, DRAFT IDLE", comparison.idle_draft)] if comparison.idle_draft is not None else []
    rows = [("CONCURRENCY", *(title for title, _ in columns), "AS RUNNING")]
    for index, level in enumerate(comparison.results):
        cells = [f"{f[index].output_tokens_per_second:.1f} ({f[index].speedup:.2f}x)" for _, f in columns]
        running = f"{level.speculative.output_tokens_per_second:.1f} ({level.speedup:.2f}x)"
        rows.append((str(level.concurrency), *cells, running))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    return "\n".join(["Output tokens/s by draft length (speed-up over the baseline):", *lines])


def event(comparison: Comparison) -> tuple[str, str, str]:
    """(type, reason, message) of the Event posted on the resource: a Warning when speculation
    does not pay even at the lowest concurrency measured."""
    message = (
        f"Speed-up in output tokens/s against a baseline without the speculator: {speedups(comparison)}. "
    )
    message += verdict_line(comparison)
    if comparison.stops_paying_above == 0:
        return "Warning", NOT_PAYING, message
    return "Normal", BENCHMARKED, message
