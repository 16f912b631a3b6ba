"""The one reader of engine metrics for the whole operator: acceptance measured from live engines.

Every ``interval`` (with jitter) one round reads ``/metrics`` of every ready engine pod that runs
the command its resource's status shows, at most ``concurrency`` at a time, each within
``timeout`` and a size cap. Resources without such pods cost nothing: no request, no state. The
counters go into each resource's sliding window (``acceptance.Window``); when what status would
show changed (``controller.status.acceptance_outdated``), or a guard rail of adaptive speculation
expired (``adaptive.due``), the resource is handed to the work queue, whose reconcile writes it.
No timer per object: one loop, one HTTP connection pool.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import aiohttp

from specdeploy import acceptance, adaptive, enginefacts
from specdeploy.children import ENGINE_LABEL, METRICS_PATH
from specdeploy.controller import metrics, status
from specdeploy.controller.pods import PodView, command_digest, serving
from specdeploy.controller.workqueue import Key

DEFAULT_INTERVAL_S = 30.0
DEFAULT_CONCURRENCY = 32
JITTER = 0.1
# A vLLM exposition is about 60 KB; a response this large is not an engine's.
MAX_BYTES = 2 * 1024 * 1024
# Connecting is quick or never: a pod that drops packets should not hold a slot for the whole
# timeout.
CONNECT_TIMEOUT_S = 2.0
CHUNK_BYTES = 64 * 1024

log = logging.getLogger(__name__)


class FetchError(Exception):
    """A pod did not answer with metrics; the message is short and stable (it lands in status)."""


class Fetch(Protocol):
    """GET a URL's body; FetchError when there is none (HttpFetch in production)."""

    async def __call__(self, url: str) -> str: ...

    async def close(self) -> None: ...


class View(Protocol):
    """What a round reads of the watch caches (the reconciler's ClusterView has it)."""

    def resource(self, key: Key) -> dict[str, Any] | None: ...

    def resource_keys(self) -> list[Key]: ...

    def pods(self, key: Key) -> list[PodView]: ...


def metrics_url(pod: PodView) -> str:
    host = f"[{pod.ip}]" if ipaddress.ip_address(pod.ip).version == 6 else pod.ip
    return f"http://{host}:{pod.port}{METRICS_PATH}"


class HttpFetch:
    """GET with a timeout and a size cap over one connection pool (created on first use, inside
    the running loop, as aiohttp requires)."""

    def __init__(self, timeout: float, concurrency: int) -> None:
        self.timeout = timeout
        self.concurrency = concurrency
        self._session: aiohttp.ClientSession | None = None

    async def __call__(self, url: str) -> str:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.concurrency),
                timeout=aiohttp.ClientTimeout(
                    total=self.timeout, sock_connect=min(self.timeout, CONNECT_TIMEOUT_S)
                ),
            )
        try:
            async with self._session.get(url, allow_redirects=False) as response:
                if response.status != 200:
                    raise FetchError(f"HTTP {response.status}")
                chunks: list[bytes] = []
                size = 0
                async for chunk in response.content.iter_chunked(CHUNK_BYTES):
                    size += len(chunk)
                    if size > MAX_BYTES:
                        raise FetchError(f"response larger than {MAX_BYTES // 2**20} MiB")
                    chunks.append(chunk)
        except TimeoutError as exc:
            raise FetchError(f"no answer within {self.timeout:g}s") from exc
        except aiohttp.ClientConnectorError as exc:
            # "Connection refused", not asyncio's message with the address in it.
            error = exc.os_error
            raise FetchError(os.strerror(error.errno) if error.errno else type(error).__name__) from exc
        except aiohttp.ClientError as exc:
            raise FetchError(type(exc).__name__) from exc
        return b"".join(chunks).decode(errors="replace")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


@dataclass(frozen=True, slots=True)
class _Read:
    """One pod's answer: its counters, or why there are none."""

    pod: PodView
    counters: acceptance.SpecCounters | None
    failure: str | None


@dataclass
class _Held:
    """One resource's window, for one command: when its pods were first asked and when one of
    them last answered."""

    command: str
    since: float
    window: acceptance.Window = field(default_factory=acceptance.Window)
    answered_at: float | None = None

    def silent(self, now: float, window_seconds: int) -> bool:
        """No pod has answered for a whole window: not merely not yet, which every new pod and
        every restarted operator is for a round or two."""
        last = self.answered_at if self.answered_at is not None else self.since
        return now - last > window_seconds


class EngineMetricsReader:
    """Reads engine counters in rounds and keeps one window and one reading per resource.

    Memory is bounded by the resources with ready pods, their pods and the reads per window;
    ``forget`` drops a deleted resource, and each round drops what a missed deletion left.
    """

    def __init__(
        self,
        fetch: Fetch,
        *,
        interval: float = DEFAULT_INTERVAL_S,
        concurrency: int = DEFAULT_CONCURRENCY,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        jitter: Callable[[], float] = lambda: random.uniform(-JITTER, JITTER),
    ) -> None:
        self.fetch = fetch
        self.interval = interval
        self._limit = asyncio.Semaphore(concurrency)
        self._clock = clock
        self._wall_clock = wall_clock
        self._jitter = jitter
        self._held: dict[Key, _Held] = {}
        self._readings: dict[Key, acceptance.Reading] = {}
        # When the previous round started (monotonic): a pod Ready since then was never read.
        self._previous_round: float | None = None

    def reading(self, key: Key) -> acceptance.Reading | None:
        return self._readings.get(key)

    def forget(self, key: Key) -> None:
        if self._held.pop(key, None) is not None:
            metrics.publish_window(key, None)
        self._readings.pop(key, None)

    def __len__(self) -> int:
        """Resources holding a window (bounded by those with ready engine pods)."""
        return len(self._held)

    async def close(self) -> None:
        await self.fetch.close()

    async def run(self, view: Callable[[], View | None], changed: Callable[[Key], None]) -> None:
        """Read forever: one round per interval (+-10%), started from the previous round's start."""
        while True:
            started = self._clock()
            current = view()
            try:
                keys = [] if current is None else await self.read_round(current)
            except Exception:
                # The loop's boundary: a bug on one round must not end acceptance for good.
                log.exception("a round of engine metrics reads failed; the next one runs as planned")
                keys = []
            for key in keys:
                changed(key)
            elapsed = self._clock() - started
            metrics.ENGINE_READ_ROUND_SECONDS.observe(elapsed)
            await asyncio.sleep(max(0.0, self.interval * (1 + self._jitter()) - elapsed))

    async def read_round(self, view: View) -> list[Key]:
        """Read every resource's serving pods once; the keys whose status is now outdated.

        A resource whose pods are all unready (an engine restarting) keeps its window, so the
        restarted engine's counters are known to start from zero; it is dropped once its pods
        are gone and nothing of theirs is left in the window.
        """
        started = self._clock()
        keys = view.resource_keys()
        for gone in self._held.keys() - set(keys):
            self.forget(gone)
        jobs: list[tuple[Key, dict[str, Any], list[PodView], set[str]]] = []
        for key in keys:
            pods = view.pods(key)
            if key not in self._held and not any(p.ready for p in pods):
                continue  # nothing to read or keep: its body is not even decoded
            body = view.resource(key)
            if body is None:
                self.forget(key)
                continue
            command = (body.get("status") or {}).get("command") or []
            targets = serving(pods, command) if command else []
            if targets or key in self._held:
                jobs.append((key, body, targets, {p.name for p in pods}))
        reads = iter(await asyncio.gather(*(self._read(pod) for _, _, targets, _ in jobs for pod in targets)))
        changed = []
        alive = set(view.resource_keys())
        for key, body, targets, present in jobs:
            if key not in alive:
                self.forget(key)  # deleted while the round read
                continue
            reading = self._update(key, body, [next(reads) for _ in targets], present)
            if not targets and not self._held[key].window:
                self.forget(key)
            elif status.acceptance_outdated(body, reading, targets) or adaptive.due(body, self._wall_clock()):
                changed.append(key)
        self._previous_round = started
        return changed

    async def _read(self, pod: PodView) -> _Read:
        async with self._limit:
            try:
                names = enginefacts.facts_for(pod.engine).metrics
                text = await self.fetch(metrics_url(pod))
                found = acceptance.counters_from(names, text)
            except enginefacts.UnknownEngine as exc:
                # Not fetched: the engine label names no engine this operator can read.
                metrics.ENGINE_READS.labels("unknown_engine").inc()
                return _Read(pod, None, f"pod {pod.name}: {exc} (label {ENGINE_LABEL})")
            except FetchError as exc:
                metrics.ENGINE_READS.labels("unreachable").inc()
                return _Read(pod, None, f"pod {pod.name}: {exc}")
            except acceptance.NoSpeculationMetrics as exc:
                metrics.ENGINE_READS.labels("no_speculation").inc()
                return _Read(pod, None, f"pod {pod.name}: {exc}")
            except Exception as exc:
                # Whatever an exposition holds, one pod's answer must not cost the round.
                metrics.ENGINE_READS.labels("unparsable").inc()
                log.debug("metrics of pod %s do not parse: %s", pod.name, exc)
                return _Read(pod, None, f"pod {pod.name}: the exposition does not parse")
        metrics.ENGINE_READS.labels("ok").inc()
        return _Read(pod, found, None)

    def _ready_at(self, pod: PodView, now: float, wall: float) -> float | None:
        """When the pod's current Ready period began, on the monotonic clock (None: unknown)."""
        ready = pod.serving_since
        return None if ready is None else now - max(0.0, wall - ready)

    def _update(
        self, key: Key, body: dict[str, Any], reads: list[_Read], present: set[str]
    ) -> acceptance.Reading:
        """Record the reads in the resource's window (a new one when its command changed: what
        pods counted under other flags or another pair says nothing about this one)."""
        policy = status.acceptance_policy(body)
        now = self._clock()
        wall = self._wall_clock()
        digest = command_digest((body.get("status") or {}).get("command") or [])
        held = self._held.get(key)
        if held is None or held.command != digest:
            held = self._held[key] = _Held(digest, since=now)
        for read in reads:
            if read.counters is not None:
                held.window.record(
                    read.pod.name,
                    read.pod.restarts,
                    read.counters,
                    now,
                    policy.window_seconds,
                    ready_at=self._ready_at(read.pod, now, wall.timestamp()),
                    previous_round=self._previous_round,
                )
                held.answered_at = now
        held.window.prune(now, policy.window_seconds, present)
        totals = held.window.totals(now, policy.window_seconds)
        reading = acceptance.Reading(
            command=digest,
            measured_at=wall,
            targets=len(reads),
            answered=sum(read.counters is not None for read in reads),
            silent=held.silent(now, policy.window_seconds),
            failure=next((read.failure for read in reads if read.failure), None),
            counters=totals.counters,
            pods=totals.pods,
            window_seconds=round(totals.seconds),
        )
        self._readings[key] = reading
        metrics.publish_window(key, totals.counters.draft_tokens)
        return reading
