"""The controller core: per-resource serialisation, event coalescing, retry with backoff, write dedup.

What controller-runtime gives a Go operator, kept free of kopf so it can be unit-tested with an
injected clock and timer: the kopf handlers only pass keys in. Memory is bounded by the number of
live resources; ``forget`` drops everything held for a deleted one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

Key = tuple[str | None, str]
Outcome = Literal["converged", "blocked", "retry", "error"]
RETRY_MIN_SECONDS = 5.0
RETRY_MAX_SECONDS = 300.0

log = logging.getLogger(__name__)


class Timer(Protocol):
    """A pending callback that can be cancelled (asyncio.TimerHandle is one)."""

    def cancel(self) -> None: ...


CallLater = Callable[[float, Callable[[], None]], Timer]


def loop_call_later(delay: float, callback: Callable[[], None]) -> Timer:
    """The production timer: the running event loop's ``call_later``."""
    return asyncio.get_running_loop().call_later(delay, callback)


@dataclass
class _Retry:
    """One resource's backoff: the delay grows per failed retry, not per failing event."""

    delay: float
    timer: Timer | None = None


@dataclass
class _Slot:
    """One key's serialisation, held only while passes for it run or wait.

    Dropped when its last user leaves, never while in use: a deletion during a pass cannot let a
    new event take a fresh lock and run beside it. ``forgotten`` tells the running pass that the
    resource was deleted meanwhile, so its failure arms no retry.
    """

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0
    forgotten: bool = False


class WorkQueue:
    """Runs ``reconcile(key)`` one pass at a time per key, coalescing bursts, retrying failures.

    ``reconcile`` returns the pass's outcome, or None when the resource is gone (nothing to count).
    A burst of events for one key while a pass runs collapses into a single follow-up pass that
    reads the newest state. A pass that returns ``retry`` or raises is run again after a backoff
    that starts at ``retry_min`` and doubles up to ``retry_max``; one timer per key at most, so
    failing event-driven passes cannot push the delay to its maximum. At most ``concurrency``
    passes (of different keys) run at once.
    """

    def __init__(
        self,
        reconcile: Callable[[Key], Awaitable[Outcome | None]],
        *,
        concurrency: int,
        call_later: CallLater = loop_call_later,
        clock: Callable[[], float] = time.monotonic,
        on_done: Callable[[Outcome, float], None] = lambda outcome, seconds: None,
        retry_min: float = RETRY_MIN_SECONDS,
        retry_max: float = RETRY_MAX_SECONDS,
    ) -> None:
        self._reconcile = reconcile
        # At most ``concurrency`` passes run; the rest wait holding only their key, so a burst of
        # a thousand new resources does not read (and keep) a thousand bodies at once.
        self._running = asyncio.Semaphore(concurrency)
        self._call_later = call_later
        self._clock = clock
        self._on_done = on_done
        self.retry_min = retry_min
        self.retry_max = retry_max
        self._slots: dict[Key, _Slot] = {}
        self._waiting: set[Key] = set()
        self._retries: dict[Key, _Retry] = {}
        self._deadlines: dict[Key, Timer] = {}
        self._stopped = False
        self._tasks: set[asyncio.Task[None]] = set()

    def enqueue(self, key: Key) -> None:
        """Schedule a pass for ``key`` and return at once (a watch handler must not wait for it).

        kopf feeds each object's events through one worker that waits for its handler; a handler
        held for a whole pass would let that object's later events, full bodies each, pile up in
        kopf's backlog. A key already waiting folds into the pass that waits.
        """
        slot = self._claim(key)
        if slot is not None:
            task = asyncio.get_running_loop().create_task(self._serve(key, slot))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def enqueue_after(self, key: Key, delay: float) -> None:
        """One pass for ``key`` in ``delay`` seconds: a deadline no watch event will announce.

        One timer per key: a new deadline replaces the pending one, so a pass that sets the same
        deadline again does not add timers. A key forgotten during its pass, or a stopped queue,
        arms none."""
        self.cancel_deadline(key)
        slot = self._slots.get(key)
        if self._stopped or (slot is not None and slot.forgotten):
            return

        def fire() -> None:
            self._deadlines.pop(key, None)
            self.enqueue(key)

        self._deadlines[key] = self._call_later(delay, fire)

    def cancel_deadline(self, key: Key) -> None:
        """Drop the key's pending deadline, if any (what it waited for happened)."""
        pending = self._deadlines.pop(key, None)
        if pending is not None:
            pending.cancel()

    async def submit(self, key: Key) -> None:
        """Reconcile ``key`` now and wait for it, or fold into the pass already waiting for it."""
        slot = self._claim(key)
        if slot is not None:
            await self._serve(key, slot)

    async def join(self) -> None:
        """Wait until every enqueued pass has ended (those enqueued meanwhile included)."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))

    async def stop(self, grace: float) -> None:
        """Let running passes finish for up to ``grace`` seconds, cancel the rest and every retry."""
        for key in list(self._retries):
            self._cancel_retry(key)
        self._stopped = True
        for key in list(self._deadlines):
            self.cancel_deadline(key)
        try:
            await asyncio.wait_for(self.join(), grace)
        except TimeoutError:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _claim(self, key: Key) -> _Slot | None:
        """Mark a pass for ``key`` as waiting; None when one already waits (the event folds)."""
        if key in self._waiting:
            return None
        self._waiting.add(key)
        slot = self._slots.setdefault(key, _Slot())
        slot.users += 1
        return slot

    async def _serve(self, key: Key, slot: _Slot) -> None:
        """Run the claimed pass once the key's lock is free."""
        try:
            try:
                await slot.lock.acquire()
            finally:
                # Acquired, or cancelled while waiting: later events must not fold into this
                # pass any more (a cancelled waiter would otherwise swallow them for good).
                self._waiting.discard(key)
            try:
                async with self._running:
                    started = self._clock()
                    outcome = await self._pass(key, slot)
            finally:
                slot.lock.release()
        finally:
            slot.users -= 1
            if not slot.users:
                del self._slots[key]
        if outcome is not None:
            self._on_done(outcome, self._clock() - started)

    def forget(self, key: Key) -> None:
        """Drop any pending retry or deadline of a deleted resource; a pass running for it arms none."""
        self._cancel_retry(key)
        self.cancel_deadline(key)
        slot = self._slots.get(key)
        if slot is not None:
            slot.forgotten = True

    def retry_delay(self, key: Key) -> float | None:
        """The backoff of a pending retry (None when none is pending)."""
        retry = self._retries.get(key)
        return retry.delay if retry is not None and retry.timer is not None else None

    def __len__(self) -> int:
        """Keys holding state (a pass running or waiting, or a retry): bounded by the live resources."""
        return len(self._slots.keys() | self._retries.keys() | self._deadlines.keys())

    async def _pass(self, key: Key, slot: _Slot) -> Outcome | None:
        """One pass under the key's lock; its outcome arms or cancels the key's retry."""
        slot.forgotten = False
        try:
            outcome: Outcome | None = await self._reconcile(key)
        except Exception as exc:
            # The loop's boundary, as in any controller: an API error, a conflict or a bug in
            # one resource must not stop the others; it is retried with backoff instead.
            log.error("reconcile of %s/%s failed, will retry: %s", *key, exc)
            outcome = "error"
        if outcome not in ("retry", "error"):
            self._cancel_retry(key)
        elif not slot.forgotten:
            self._schedule_retry(key)
        return outcome

    def _schedule_retry(self, key: Key) -> None:
        retry = self._retries.get(key)
        if retry is None:
            retry = self._retries[key] = _Retry(self.retry_min)
        elif retry.timer is not None:
            return
        else:
            retry.delay = min(retry.delay * 2, self.retry_max)
        pending = retry

        def fire() -> None:
            pending.timer = None
            self.enqueue(key)

        pending.timer = self._call_later(pending.delay, fire)

    def _cancel_retry(self, key: Key) -> None:
        retry = self._retries.pop(key, None)
        if retry is not None and retry.timer is not None:
            retry.timer.cancel()


class WriteLedger:
    """Remembers each write with the cached version it was made on, so a stale cache cannot repeat it.

    The operator's own write reaches its watch cache only with the watch event; a reconcile in
    between (another child's event) would otherwise see the old object and send the same write
    again. Once the cache moves past the remembered version, the entry is dropped and the cluster
    compared again (this is also how a child deleted after our write gets recreated).
    """

    def __init__(self) -> None:
        self._written: dict[Key, dict[str, tuple[str, str | None]]] = {}

    def already_written(self, kind: str, key: Key, fingerprint: str, cached_version: str | None) -> bool:
        """True when this exact write was made on top of the version the cache still shows."""
        writes = self._written.get(key, {})
        remembered = writes.get(kind)
        if remembered is None:
            return False
        if remembered[1] != cached_version:
            del writes[kind]
            if not writes:
                del self._written[key]
            return False
        return remembered[0] == fingerprint

    def last_written(self, kind: str, key: Key) -> str | None:
        """The fingerprint of the last write of ``kind`` remembered for ``key``, whatever version
        the cache shows now."""
        remembered = self._written.get(key, {}).get(kind)
        return None if remembered is None else remembered[0]

    def remember(self, kind: str, key: Key, fingerprint: str, cached_version: str | None) -> None:
        self._written.setdefault(key, {})[kind] = (fingerprint, cached_version)

    def forget(self, key: Key) -> None:
        """Drop every write remembered for a deleted resource."""
        self._written.pop(key, None)

    def __len__(self) -> int:
        return sum(len(writes) for writes in self._written.values())
