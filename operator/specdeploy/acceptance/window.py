"""A sliding window over the speculative decoding counters of one resource's engine pods.

Counters only grow while an engine process lives; rates come from their differences between
reads. Per pod, each read adds what was counted since the previous one (an *increment*), and the
window is the sum of the increments read within it, so pods coming and going, pods that miss
reads, and restarted pods are all handled by one rule: a restarted process (its container's
restart count moved, or a counter went down) contributes everything it counted since its
restart, never a negative or mixed difference. What cannot be placed in the window is left out
rather than booked at the wrong time: a pod's first read is a baseline unless the caller knows
it began serving since its previous round, and so is a read after a gap longer than the window.
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
    last_read: float
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
        self,
        pod: str,
        restarts: int,
        counters: SpecCounters,
        now: float,
        seconds: float,
        *,
        ready_at: float | None = None,
        previous_round: float | None = None,
    ) -> None:
        """Add a read of ``pod`` (its engine container's restart count and counters) made at
        ``now``, for a window of ``seconds``.

        ``ready_at``: when its current Ready period began; ``previous_round``: when the reader's
        previous round began (both on ``now``'s clock, None when unknown). When the previous
        counters do not apply (a new pod, a restart, a gap longer than the window), the counters
        count whole if the pod began serving within the window and after it was last read (for
        a new pod: after the previous round, which would have read it), else they are a baseline.
        """
        if not counters.consistent():
            return
        start = now - seconds
        series = self._series.get(pod)
        if series is None:
            fresh = (
                ready_at is not None and previous_round is not None and ready_at >= max(previous_round, start)
            )
            first = ready_at if fresh and ready_at is not None else now
            series = self._series[pod] = _Series(restarts, counters, now, first)
            delta = counters if fresh else None
        else:
            difference = counters.since(series.last)
            if restarts != series.restarts or now - series.last_read > seconds or difference is None:
                fresh = ready_at is not None and ready_at > max(series.last_read, start)
                delta = counters if fresh else None
            else:
                delta = difference
            series.restarts, series.last, series.last_read = restarts, counters, now
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
