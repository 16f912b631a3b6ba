"""The comparison as a picture: throughput, speed-up and latency against concurrency."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from specdeploy.speedup.results import Comparison, Figures

SPEC_STYLE = {"color": "tab:blue", "marker": "o", "label": "speculative"}
BASE_STYLE = {"color": "tab:gray", "marker": "s", "label": "baseline"}


def _spread(ax: Any, x: list[int], samples: list[list[float]], medians: list[float], color: str) -> None:
    """The lowest to the highest of the repeats behind each median, as a bar: how far apart two
    lines must be to differ (nothing when each level ran once)."""
    if all(len(found) > 1 for found in samples):
        low = [median - min(found) for median, found in zip(medians, samples, strict=True)]
        high = [max(found) - median for median, found in zip(medians, samples, strict=True)]
        ax.errorbar(x, medians, yerr=[low, high], fmt="none", ecolor=color, capsize=3, alpha=0.6)


def plot(comparison: Comparison, title: str, path: Path) -> None:
    """Four panels against concurrency (log scale): output tokens/s (with each draft length
    measured besides, and the spread of the repeats behind each point), speed-up (with the line
    at 1 below which speculation costs), TPOT p50 and TTFT p50; the format follows ``path``'s
    suffix.

    TPOT rather than ITL: ITL is the gap between streamed chunks, and a speculative engine sends
    several tokens per chunk, so its ITL grows exactly when it is faster per token.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    levels = comparison.results
    x = [level.concurrency for level in levels]
    figure, axes = pyplot.subplots(2, 2, figsize=(11, 8), constrained_layout=True)
    panels: tuple[tuple[Any, str, Callable[[Figures], float]], ...] = (
        (axes[0][0], "output tokens/s", lambda f: f.output_tokens_per_second),
        (axes[1][0], "time per output token p50 (ms)", lambda f: f.tpot_ms.p50),
        (axes[1][1], "time to first token p50 (ms)", lambda f: f.ttft_ms.p50),
    )
    for ax, label, value in panels:
        ax.plot(x, [value(level.speculative) for level in levels], **SPEC_STYLE)
        ax.plot(x, [value(level.baseline) for level in levels], **BASE_STYLE)
        ax.set_ylabel(label)
    throughput = axes[0][0]
    for found, style in (
        ([level.speculative for level in levels], SPEC_STYLE),
        ([level.baseline for level in levels], BASE_STYLE),
    ):
        medians = [f.output_tokens_per_second for f in found]
        _spread(throughput, x, [f.samples for f in found], medians, str(style["color"]))
    copies = [
        (f"{length.tokens} draft tokens at every batch size", length.results)
        for length in comparison.draft_lengths
        if length.tokens
    ]
    copies += [("draft loaded, 0 tokens at every batch size", comparison.idle_draft or [])]
    for label, results in copies:
        if results:
            medians = [r.output_tokens_per_second for r in results]
            [line] = throughput.plot(x, medians, linestyle=":", marker=".", label=label)
            _spread(throughput, x, [r.samples for r in results], medians, line.get_color())
    for ax, _, _ in panels:
        ax.legend()
    speedup = axes[0][1]
    speedup.plot(x, [level.speedup for level in levels], color="tab:green", marker="o")
    speedup.axhline(1.0, color="tab:red", linestyle="--", linewidth=1, label="no gain")
    for level in levels:
        speedup.annotate(f"{level.speedup:.2f}x", (level.concurrency, level.speedup),
                         textcoords="offset points", xytext=(0, 6), ha="center")  # fmt: skip
    speedup.set_ylabel("speed-up (output tokens/s, speculative / baseline)")
    speedup.set_ylim(0, max([1.0, *(level.speedup for level in levels)]) * 1.2)
    speedup.legend()
    for ax in axes.flat:
        ax.set_xscale("log", base=2)
        ax.set_xticks(x, [str(c) for c in x])
        ax.set_xlabel("concurrency (requests in flight per engine)")
        ax.grid(True, alpha=0.3)
    figure.suptitle(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    pyplot.close(figure)
