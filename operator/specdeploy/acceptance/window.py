"""A sliding window over the speculative decoding counters of one resource's engine pods.

Counters only grow while an engine process lives; rates come from their differences between
reads. Per pod, each read adds what was counted since the previous one (an *increment*), and the
window is the sum of the increments read within it, so pods coming and going, pods that miss
reads, and restarted pods are all handled by one rule: a restarted process (its container's
restart count moved, or a counter went down) contributes everything it counted since its
restart, never a negative or mixed difference. A pod's first read counts whole when it began
serving within the window (all it counted lies in the window: a new pod serving at once loses
nothing), and is only a baseline otherwise (what it counted cannot be placed in time).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from specdeploy.acceptance.counters import SpecCounters


@dataclass
class _Series:
    """One pod's counters as last read, and its increments by read time (non-zero ones only)."""

    restarts: int
    last: SpecCounters
    first_read: float
    increments: deque[tuple[float, SpecCounters]] = field(default_factory=deque)


@dataclass(frozen=True, slots=True)
class Totals:
    """What a window holds: the summed increments, the pods read in it and the span it covers."""

    counters: SpecCounters
    pods: int
    seconds: float


class Window:
    """The increments of one resource's pods; memory bounded by pods x reads per window."""

    def __init__(self) -> None:
        self._series: dict[str, _Series] = {}

    def record(
        self, pod: str, restarts: int, counters: SpecCounters, now: float, *, since: float | None = None
    ) -> None:
        """Add a read of ``pod`` (its container restart count and counters) made at ``now``;
        ``since``: when it began serving, if within the window (same clock as ``now``)."""
        series = self._series.get(pod)
        if series is None:
            series = self._series[pod] = _Series(restarts, counters, now if since is None else since)
            if since is not None and counters:
                series.increments.append((now, counters))
            return
        delta = counters.since(series.last) if restarts == series.restarts else None
        if delta is None:
            # Restarted since the last read: all it counted is newer than that read.
            delta = counters
        series.restarts, series.last = restarts, counters
        if delta:
            series.increments.append((now, delta))

    def totals(self, now: float, seconds: float) -> Totals:
        """The window ending at ``now``: increments read in the last ``seconds``."""
        start = now - seconds
        summed = SpecCounters()
        for series in self._series.values():
            for at, delta in series.increments:
                if at > start:
                    summed = summed + delta
        first = min((s.first_read for s in self._series.values()), default=now)
        return Totals(summed, len(self._series), min(seconds, now - first))

    def prune(self, now: float, seconds: float, present: set[str]) -> None:
        """Drop increments older than the window, and pods gone from ``present`` once nothing of
        theirs is left in it (what a deleted pod counted still belongs to the window)."""
        start = now - seconds
        for pod in list(self._series):
            series = self._series[pod]
            while series.increments and series.increments[0][0] <= start:
                series.increments.popleft()
            if pod not in present and not series.increments:
                del self._series[pod]

    def __len__(self) -> int:
        return len(self._series)
