"""What each draft length costs on this pair's own hardware: the cost curve ``specdeploy bench
--tokens`` keeps on the resource (``api.BENCHMARK_ANNOTATION``), as the operator reads it."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CostCurve:
    """Output tokens/s and tokens per verifier step of each draft length (0: the baseline) at
    each concurrency measured, from one benchmark run.

    ``command``: digest of the command the resource ran while measured; ``running``: its own
    output tokens/s then (what a schedule it ran delivered); ``spread``: how far each figure's
    repeats lay from it, relative (0 where it ran once, or a summary predates it); ``idle``: the
    output tokens/s with the draft loaded and drafting none, what a 0 range beside ranges that
    draft costs (None unless measured), and ``idle_spread`` its spreads."""

    measured_at: str
    command: str
    concurrencies: tuple[int, ...]
    throughput: Mapping[int, tuple[float, ...]]
    mean_length: Mapping[int, tuple[float, ...]]
    running: tuple[float, ...]
    spread: Mapping[int, tuple[float, ...]]
    idle: tuple[float, ...] | None = None
    idle_spread: tuple[float, ...] = ()

    def noise(self, tokens: int, other: int, index: int) -> float:
        """How far apart two draft lengths' figures at the ``index``-th concurrency may lie by the
        run's noise alone, relative: the sum of their spreads."""
        return self.spread[tokens][index] + self.spread[other][index]

    def step_cost(self, tokens: int, index: int) -> float:
        """The verifier step's time drafting ``tokens``, relative to the baseline's, at the
        ``index``-th concurrency C: a step yields C x L tokens, so its time is C x L / T, and
        relative to the baseline (L = 1) that is L(K) x T(0) / T(K)."""
        return self.mean_length[tokens][index] * self.throughput[0][index] / self.throughput[tokens][index]

    @property
    def lengths(self) -> tuple[int, ...]:
        """The draft lengths measured, the baseline (0) first."""
        return tuple(sorted(self.throughput))


def _series(by_concurrency: Any, concurrencies: tuple[int, ...]) -> tuple[float, ...] | None:
    if not isinstance(by_concurrency, dict):
        return None
    try:
        values = tuple(float(by_concurrency[str(c)]) for c in concurrencies)
    except (KeyError, TypeError, ValueError):
        return None
    return values if all(v > 0 for v in values) else None


def _spreads(by_concurrency: Any, concurrencies: tuple[int, ...]) -> tuple[float, ...]:
    """The spread of each figure; 0 for one not given, or not a finite number of 0 or more."""
    given = by_concurrency if isinstance(by_concurrency, dict) else {}
    found = []
    for c in concurrencies:
        try:
            value = float(given.get(str(c), 0.0))
        except (TypeError, ValueError):
            value = 0.0
        found.append(value if math.isfinite(value) and value >= 0 else 0.0)
    return tuple(found)


def parse(annotation: str | None) -> CostCurve | None:
    """The curve of a benchmark summary; None when there is none, it measured no draft lengths,
    or any figure is missing, not a number or not positive (a hand-edited annotation is ignored
    rather than trusted)."""
    if not annotation:
        return None
    try:
        body = json.loads(annotation)
    except ValueError:
        return None
    if not isinstance(body, dict) or not isinstance(body.get("draftLengths"), dict):
        return None
    speedups = body.get("speedup")
    if not isinstance(speedups, dict) or not speedups:
        return None
    try:
        concurrencies = tuple(sorted(int(c) for c in speedups))
    except ValueError:
        return None
    throughput: dict[int, tuple[float, ...]] = {}
    mean_length: dict[int, tuple[float, ...]] = {}
    spread: dict[int, tuple[float, ...]] = {}
    for key, measured in body["draftLengths"].items():
        if not str(key).isdigit() or not isinstance(measured, dict):
            return None
        tokens = int(key)
        found = _series(measured.get("outputTokensPerSecond"), concurrencies)
        lengths = _series(measured.get("meanLength"), concurrencies)
        if found is None or lengths is None:
            return None
        throughput[tokens], mean_length[tokens] = found, lengths
        spread[tokens] = _spreads(measured.get("spread"), concurrencies)
    running = _series(
        {
            c: v.get("speculative")
            for c, v in (body.get("outputTokensPerSecond") or {}).items()
            if isinstance(v, dict)
        },
        concurrencies,
    )
    if 0 not in throughput or running is None:
        return None
    idle: dict[str, Any] = body["idleDraft"] if isinstance(body.get("idleDraft"), dict) else {}
    idle_throughput = _series(idle.get("outputTokensPerSecond"), concurrencies)
    return CostCurve(
        measured_at=str(body.get("measuredAt", "")),
        command=str(body.get("command", "")),
        concurrencies=concurrencies,
        throughput=throughput,
        mean_length=mean_length,
        running=running,
        spread=spread,
        idle=idle_throughput,
        idle_spread=_spreads(idle.get("spread"), concurrencies),
    )
