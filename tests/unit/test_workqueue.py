"""The kopf-free controller core: per-key serialisation, coalescing, retry backoff and the write ledger.

Timers and the clock are injected, so every scenario runs without real sleeps: a fake ``call_later``
records (delay, callback) and the test fires callbacks itself; passes block on events the test sets.
One file past 400 lines on purpose: it is one contract (WorkQueue and WriteLedger), scenario by
scenario, sharing one harness.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from fake_timers import FakeTimers
from specdeploy.controller.workqueue import Key, Outcome, WorkQueue, WriteLedger

A: Key = ("models", "a")
B: Key = ("models", "b")
RETRY_MIN = 1.0
RETRY_MAX = 5.0
CONCURRENCY = 3


@dataclass
class FakeClock:
    now: float = 100.0

    def __call__(self) -> float:
        return self.now


Planned = Outcome | None | Exception


class Script:
    """The reconcile under the queue: planned outcomes per key, optional gates, and a record of passes."""

    def __init__(self, clock: FakeClock, seconds: float) -> None:
        self.clock = clock
        self.seconds = seconds
        self.calls: list[Key] = []
        self.outcomes: dict[Key, list[Planned]] = {}
        self.gates: dict[Key, list[asyncio.Event]] = {}
        self.running: Counter[Key] = Counter()
        self.most_concurrent: Counter[Key] = Counter()
        self.finished: list[Key] = []

    def plan(self, key: Key, *outcomes: Planned) -> None:
        """The next passes of ``key`` end with these (then "converged")."""
        self.outcomes.setdefault(key, []).extend(outcomes)

    def hold(self, key: Key) -> asyncio.Event:
        """The next pass of ``key`` not yet started blocks until the returned event is set."""
        gate = asyncio.Event()
        self.gates.setdefault(key, []).append(gate)
        return gate

    async def __call__(self, key: Key) -> Outcome | None:
        self.calls.append(key)
        self.running[key] += 1
        self.most_concurrent[key] = max(self.most_concurrent[key], self.running[key])
        try:
            gates = self.gates.get(key)
            if gates:
                await gates.pop(0).wait()
            self.clock.now += self.seconds
            planned = self.outcomes.get(key)
            result = planned.pop(0) if planned else "converged"
            if isinstance(result, Exception):
                raise result
            return result
        finally:
            self.running[key] -= 1
            self.finished.append(key)

    def passes(self, key: Key) -> int:
        return self.calls.count(key)


@dataclass
class Harness:
    script: Script
    timers: FakeTimers
    clock: FakeClock
    done: list[tuple[Outcome, float]]
    queue: WorkQueue
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def submit(self, key: Key) -> asyncio.Task[None]:
        """Submit as a kopf handler would, without waiting for the pass."""
        task = asyncio.get_running_loop().create_task(self.queue.submit(key))
        self.tasks.append(task)
        return task

    async def drain(self) -> None:
        """Let every submitted task run to its end (the gates must be open by then)."""
        await settle()
        await asyncio.gather(*self.tasks)


def harness(seconds: float = 0.0) -> Harness:
    clock = FakeClock()
    script = Script(clock, seconds)
    timers = FakeTimers()
    done: list[tuple[Outcome, float]] = []
    queue = WorkQueue(
        script,
        concurrency=CONCURRENCY,
        call_later=timers,
        clock=clock,
        on_done=lambda outcome, s: done.append((outcome, s)),
        retry_min=RETRY_MIN,
        retry_max=RETRY_MAX,
    )
    return Harness(script, timers, clock, done, queue)


async def settle() -> None:
    """Let ready tasks interleave until each is blocked on something the test controls."""
    for _ in range(20):
        await asyncio.sleep(0)


def run(scenario: Callable[[Harness], Awaitable[None]], seconds: float = 0.0) -> Harness:
    """Run a scenario on a fresh loop; the queue is built inside it, like the operator's."""
    result: list[Harness] = []

    async def main() -> None:
        h = harness(seconds)
        result.append(h)
        await scenario(h)

    asyncio.run(main())
    return result[0]


# Serialisation and coalescing


def test_one_pass_at_a_time_per_key_while_other_keys_run() -> None:
    """A second event for a busy key waits for the running pass; another key's pass is not held up."""

    async def scenario(h: Harness) -> None:
        gate = h.script.hold(A)
        first = h.submit(A)
        await settle()
        second = h.submit(A)
        await settle()
        assert h.script.passes(A) == 1 and h.script.running[A] == 1
        assert not second.done()

        await h.queue.submit(B)  # completes while A's pass is still blocked
        assert h.script.finished == [B]
        assert not first.done()

        gate.set()
        await h.drain()
        assert h.script.passes(A) == 2
        assert h.script.most_concurrent[A] == 1

    run(scenario)


@pytest.mark.parametrize("burst", [1, 2, 7])
def test_burst_while_a_pass_runs_collapses_into_one_follow_up(burst: int) -> None:
    """Only the first submit of a burst waits; the rest fold into it, and one pass reads the newest state."""

    async def scenario(h: Harness) -> None:
        gate = h.script.hold(A)
        h.submit(A)
        await settle()
        waiting = [h.submit(A) for _ in range(burst)]
        await settle()
        assert [t.done() for t in waiting] == [False] + [True] * (burst - 1)

        gate.set()
        await h.drain()
        assert h.script.passes(A) == 2
        assert h.done == [("converged", 0.0)] * 2

    run(scenario)


def test_event_during_the_follow_up_pass_gets_a_pass_of_its_own() -> None:
    """Coalescing only folds into a pass that has not started: a later event is never lost."""

    async def scenario(h: Harness) -> None:
        first, follow_up = h.script.hold(A), h.script.hold(A)
        h.submit(A)
        await settle()
        h.submit(A)
        first.set()
        await settle()
        assert h.script.passes(A) == 2 and h.script.running[A] == 1  # the follow-up is running

        h.submit(A)
        follow_up.set()
        await h.drain()
        assert h.script.passes(A) == 3
        assert h.script.most_concurrent[A] == 1

    run(scenario)


def test_cancelled_waiting_submit_does_not_swallow_later_events() -> None:
    """A waiter cancelled (handler or watcher stopped) must not leave later events folding into nothing."""

    async def scenario(h: Harness) -> None:
        gate = h.script.hold(A)
        h.submit(A)
        await settle()
        waiter = h.submit(A)
        await settle()
        waiter.cancel()
        await settle()
        assert waiter.cancelled()
        h.tasks.remove(waiter)

        gate.set()
        await h.drain()
        assert h.script.passes(A) == 1
        await h.queue.submit(A)
        assert h.script.passes(A) == 2
        assert len(h.queue) == 0

    run(scenario)


def test_forget_during_a_pass_keeps_the_key_serialised() -> None:
    """A deletion while a pass runs must not let a new event start a second, concurrent pass."""

    async def scenario(h: Harness) -> None:
        gate = h.script.hold(A)
        h.submit(A)
        await settle()
        h.queue.forget(A)
        h.submit(A)
        await settle()
        assert h.script.passes(A) == 1

        gate.set()
        await h.drain()
        assert h.script.passes(A) == 2
        assert h.script.most_concurrent[A] == 1

    run(scenario)


def test_enqueue_returns_before_the_pass_and_folds_like_submit() -> None:
    """A watch handler hands the key over and returns; a burst of enqueues while a pass runs
    becomes one follow-up, and join waits for both passes."""

    async def scenario(h: Harness) -> None:
        gate = h.script.hold(A)
        h.queue.enqueue(A)
        assert h.script.passes(A) == 0  # nothing ran inside the handler's call
        await settle()
        assert h.script.running[A] == 1
        for _ in range(5):
            h.queue.enqueue(A)
        h.queue.enqueue(B)

        joined = asyncio.get_running_loop().create_task(h.queue.join())
        await settle()
        assert not joined.done()  # A's first pass is still held
        assert h.script.passes(B) == 1

        gate.set()
        await joined
        assert h.script.passes(A) == 2
        assert h.script.most_concurrent[A] == 1
        assert len(h.queue) == 0

    run(scenario)


def test_stop_lets_short_passes_finish_and_cancels_the_rest_and_every_retry() -> None:
    """At shutdown a pass that finishes within the grace period keeps its writes; one held past it
    is cancelled, and no retry timer is left to fire into a closing loop."""

    async def scenario(h: Harness) -> None:
        h.script.plan(B, "retry")
        await h.queue.submit(B)
        assert h.timers.pending() != []

        h.script.hold(A)
        h.queue.enqueue(A)
        await settle()
        assert h.script.running[A] == 1

        await h.queue.stop(grace=0.01)
        assert h.script.running[A] == 0 and h.script.finished[-1] == A
        assert h.timers.pending() == []
        assert h.queue.retry_delay(B) is None
        assert len(h.queue) == 0

    run(scenario)


def test_at_most_concurrency_passes_run_and_the_rest_start_as_they_end() -> None:
    """A burst of new resources runs ``concurrency`` passes at a time; a waiting one starts
    as soon as a running one ends, and none is lost."""
    keys: list[Key] = [("models", f"r{i}") for i in range(CONCURRENCY + 2)]

    async def scenario(h: Harness) -> None:
        gates = [h.script.hold(k) for k in keys]
        for k in keys:
            h.queue.enqueue(k)
        await settle()
        assert sum(h.script.running.values()) == CONCURRENCY
        assert h.script.calls == keys[:CONCURRENCY]

        gates[0].set()
        await settle()
        assert sum(h.script.running.values()) == CONCURRENCY
        assert h.script.calls == keys[: CONCURRENCY + 1]

        for gate in gates:
            gate.set()
        await h.queue.join()
        assert sorted(h.script.calls) == sorted(keys)

    run(scenario)


# Retry with backoff


@pytest.mark.parametrize("failure", ["retry", RuntimeError("apiserver said no")], ids=["retry", "error"])
def test_failed_pass_schedules_one_retry_at_retry_min(failure: Planned) -> None:
    """Both a "retry" outcome and a raised exception are retried; the exception is reported as "error"."""

    async def scenario(h: Harness) -> None:
        h.script.plan(A, failure)
        await h.queue.submit(A)
        assert [t.delay for t in h.timers.created] == [RETRY_MIN]
        assert h.queue.retry_delay(A) == RETRY_MIN
        assert h.done == [("error" if isinstance(failure, Exception) else "retry", 0.0)]

    run(scenario)


def test_backoff_doubles_per_failed_retry_up_to_retry_max_and_holds() -> None:
    """Each failing timer-driven pass doubles the delay; once at retry_max it stays there."""

    async def scenario(h: Harness) -> None:
        h.script.plan(A, *["retry"] * 6)
        await h.queue.submit(A)
        for _ in range(5):
            h.timers.fire()
            await settle()
        assert [t.delay for t in h.timers.created] == [1.0, 2.0, 4.0, 5.0, 5.0, 5.0]
        assert h.script.passes(A) == 6
        assert h.queue.retry_delay(A) == RETRY_MAX
        assert len(h.timers.pending()) == 1

    run(scenario)


def test_failing_event_passes_while_a_retry_is_pending_add_no_timer() -> None:
    """Events keep failing while the timer waits: still one timer, and the delay does not grow."""

    async def scenario(h: Harness) -> None:
        h.script.plan(A, "retry", "error", RuntimeError("conflict"), "retry")
        for _ in range(4):
            await h.queue.submit(A)
        assert h.script.passes(A) == 4
        assert len(h.timers.created) == 1
        assert h.queue.retry_delay(A) == RETRY_MIN

        h.script.plan(A, "retry")
        h.timers.fire()
        await settle()
        assert [t.delay for t in h.timers.created] == [RETRY_MIN, 2 * RETRY_MIN]

    run(scenario)


def test_firing_the_timer_runs_a_pass() -> None:
    """The retry is a pass like any other: it runs when the timer fires, and only then."""

    async def scenario(h: Harness) -> None:
        h.script.plan(A, "retry")
        await h.queue.submit(A)
        await settle()
        assert h.script.passes(A) == 1

        h.timers.fire()
        assert h.queue.retry_delay(A) is None  # fired: nothing pending while the retry runs
        await settle()
        assert h.script.passes(A) == 2
        assert h.done == [("retry", 0.0), ("converged", 0.0)]
        assert h.timers.pending() == []
        assert len(h.queue) == 0

    run(scenario)


def test_retry_firing_during_an_event_pass_folds_into_one_follow_up() -> None:
    """A retry due while an event's pass runs waits for it and then runs once, like any event."""

    async def scenario(h: Harness) -> None:
        h.script.plan(A, "retry")
        await h.queue.submit(A)
        gate = h.script.hold(A)
        h.submit(A)
        await settle()
        h.timers.fire()
        h.submit(A)
        await settle()
        assert h.script.passes(A) == 2

        gate.set()
        await h.drain()
        assert h.script.passes(A) == 3
        assert h.script.most_concurrent[A] == 1

    run(scenario)


@pytest.mark.parametrize("success", ["converged", "blocked"])
def test_success_cancels_the_pending_retry_and_resets_backoff(success: Outcome) -> None:
    """A pass that does not ask for a retry cancels the timer; the next failure starts at retry_min."""

    async def scenario(h: Harness) -> None:
        h.script.plan(A, "retry", "retry")
        await h.queue.submit(A)
        h.timers.fire()
        await settle()
        assert h.queue.retry_delay(A) == 2 * RETRY_MIN
        pending = h.timers.pending()

        h.script.plan(A, success)
        await h.queue.submit(A)
        assert [t.cancelled for t in pending] == [True]
        assert h.queue.retry_delay(A) is None
        assert len(h.queue) == 0

        h.script.plan(A, "retry")
        await h.queue.submit(A)
        assert h.timers.created[-1].delay == RETRY_MIN
        assert len(h.timers.pending()) == 1

    run(scenario)


def test_keys_back_off_independently() -> None:
    """One timer per key: a key's success cancels only its own retry."""

    async def scenario(h: Harness) -> None:
        h.script.plan(A, "retry")
        h.script.plan(B, "error")
        await h.queue.submit(A)
        await h.queue.submit(B)
        timer_a, timer_b = h.timers.pending()

        await h.queue.submit(A)
        assert (timer_a.cancelled, timer_b.cancelled) == (True, False)
        assert (h.queue.retry_delay(A), h.queue.retry_delay(B)) == (None, RETRY_MIN)

    run(scenario)


# forget and bounded state


def test_forget_cancels_the_pending_retry_and_drops_state() -> None:
    """A deleted resource leaves no timer and no state behind; were it recreated, backoff starts afresh."""

    async def scenario(h: Harness) -> None:
        h.script.plan(A, "retry", "retry")
        await h.queue.submit(A)
        h.timers.fire()
        await settle()
        (pending,) = h.timers.pending()
        assert len(h.queue) == 1

        h.queue.forget(A)
        assert pending.cancelled
        assert h.queue.retry_delay(A) is None
        assert len(h.queue) == 0

        h.script.plan(A, "retry")
        await h.queue.submit(A)
        assert h.timers.created[-1].delay == RETRY_MIN

    run(scenario)


def test_forget_during_a_failing_pass_schedules_no_retry() -> None:
    """The resource was deleted while its last pass ran: that pass's failure must not re-arm a timer."""

    async def scenario(h: Harness) -> None:
        h.script.plan(A, RuntimeError("namespace is terminating"))
        gate = h.script.hold(A)
        h.submit(A)
        await settle()
        h.queue.forget(A)
        gate.set()
        await h.drain()
        assert h.timers.created == []
        assert len(h.queue) == 0
        assert h.done == [("error", 0.0)]

    run(scenario)


def test_forget_of_an_unknown_key_is_harmless() -> None:
    """DELETED can arrive for a resource the queue never saw."""

    async def scenario(h: Harness) -> None:
        h.queue.forget(A)
        assert len(h.queue) == 0
        await h.queue.submit(A)
        assert h.script.passes(A) == 1

    run(scenario)


def test_len_is_bounded_by_live_keys() -> None:
    """State is held only for keys with a pass in flight or a retry pending, however many events came."""

    async def scenario(h: Harness) -> None:
        keys = [("models", f"r{i}") for i in range(5)]
        gates = [h.script.hold(k) for k in keys]
        for _ in range(10):
            for k in keys:
                h.submit(k)
        await settle()
        assert len(h.queue) == 5

        h.script.plan(keys[0], "retry", "retry")  # the pass and its follow-up
        for gate in gates:
            gate.set()
        await h.drain()
        assert sum(h.script.passes(k) for k in keys) == 10
        assert len(h.queue) == 1  # only the key waiting for its retry

        for k in keys:
            h.queue.forget(k)
        assert len(h.queue) == 0

    run(scenario)


# on_done


def test_on_done_gets_the_outcome_and_the_duration_from_the_clock() -> None:
    """The duration is the injected clock's, measured around the pass."""

    async def scenario(h: Harness) -> None:
        h.script.plan(A, "blocked", RuntimeError("boom"))
        await h.queue.submit(A)
        await h.queue.submit(A)
        assert h.done == [("blocked", 2.5), ("error", 2.5)]
        assert h.clock.now == 105.0

    run(scenario, seconds=2.5)


def test_gone_resource_is_not_reported_and_drops_its_retry() -> None:
    """None means the resource is gone: nothing to count, and no retry left armed."""

    async def scenario(h: Harness) -> None:
        h.script.plan(A, "retry", None)
        await h.queue.submit(A)
        (pending,) = h.timers.pending()
        await h.queue.submit(A)
        assert h.done == [("retry", 0.0)]
        assert pending.cancelled
        assert len(h.timers.created) == 1
        assert len(h.queue) == 0

    run(scenario)


# WriteLedger


def test_ledger_same_write_on_the_same_cached_version_is_already_written() -> None:
    """The stale cache still shows the version the write was made on: repeating it would be a no-op."""
    ledger = WriteLedger()
    ledger.remember("Deployment", A, "hash-1", "41")
    assert ledger.already_written("Deployment", A, "hash-1", "41")
    assert ledger.already_written("Deployment", A, "hash-1", "41")  # asking again does not consume it
    assert len(ledger) == 1


def test_ledger_different_fingerprint_is_not_already_written() -> None:
    """A changed desired state must be written even though the cache has not moved."""
    ledger = WriteLedger()
    ledger.remember("Deployment", A, "hash-1", "41")
    assert not ledger.already_written("Deployment", A, "hash-2", "41")
    assert ledger.already_written("Deployment", A, "hash-1", "41")  # the entry is kept
    assert len(ledger) == 1


def test_ledger_moved_cached_version_drops_the_entry() -> None:
    """Once the cache moved, the cluster is compared again (a child deleted after our write is recreated)."""
    ledger = WriteLedger()
    ledger.remember("Deployment", A, "hash-1", "41")
    assert not ledger.already_written("Deployment", A, "hash-1", "42")
    assert len(ledger) == 0
    assert not ledger.already_written("Deployment", A, "hash-1", "41")


def test_ledger_create_on_an_empty_cache_is_remembered_until_the_child_appears() -> None:
    """A child created from nothing is remembered against version None until the watch shows it."""
    ledger = WriteLedger()
    ledger.remember("Service", A, "hash-1", None)
    assert ledger.already_written("Service", A, "hash-1", None)
    assert not ledger.already_written("Service", A, "hash-1", "7")
    assert len(ledger) == 0


def test_ledger_kinds_and_keys_are_independent() -> None:
    """Each (key, kind) holds one entry; a newer write of a kind replaces the older one."""
    ledger = WriteLedger()
    ledger.remember("Deployment", A, "d1", "1")
    ledger.remember("Service", A, "s1", "2")
    ledger.remember("status", A, "st1", "3")
    ledger.remember("Deployment", B, "d1", "1")
    assert len(ledger) == 4
    assert not ledger.already_written("Service", A, "d1", "2")
    assert not ledger.already_written("Deployment", ("other", "a"), "d1", "1")
    assert len(ledger) == 4

    ledger.remember("Deployment", A, "d2", "5")
    assert len(ledger) == 4
    assert ledger.already_written("Deployment", A, "d2", "5")
    assert not ledger.already_written("Deployment", A, "d1", "1")
    assert len(ledger) == 3  # the replaced entry's version moved on: dropped


def test_ledger_forget_drops_every_kind_of_one_key() -> None:
    """A deleted resource's writes all go; other resources' stay."""
    ledger = WriteLedger()
    for kind in ("Deployment", "Service", "status"):
        ledger.remember(kind, A, "x", "1")
    ledger.remember("Deployment", B, "x", "1")

    ledger.forget(A)
    assert len(ledger) == 1
    assert not any(ledger.already_written(kind, A, "x", "1") for kind in ("Deployment", "Service", "status"))
    assert ledger.already_written("Deployment", B, "x", "1")
    ledger.forget(("models", "never-seen"))
    assert len(ledger) == 1


def test_a_deadline_is_one_timer_per_key_that_runs_one_pass_and_forget_cancels_it() -> None:
    """``enqueue_after``: a newer deadline replaces the pending one; it fires as a pass."""

    async def scenario(h: Harness) -> None:
        h.queue.enqueue_after(A, 60.0)
        h.queue.enqueue_after(A, 30.0)
        first, second = h.timers.created
        assert first.cancelled and not second.cancelled and second.delay == 30.0
        assert len(h.queue) == 1

        h.timers.fire()
        await settle()
        assert h.script.passes(A) == 1 and len(h.queue) == 0

        h.queue.enqueue_after(A, 45.0)
        h.queue.forget(A)
        assert h.timers.pending() == [] and len(h.queue) == 0

        h.queue.enqueue_after(A, 45.0)
        h.queue.cancel_deadline(A)
        assert h.timers.pending() == []
        await h.queue.stop(grace=1.0)
        h.queue.enqueue_after(A, 45.0)  # a pass finishing after stop arms nothing
        assert h.timers.pending() == [] and len(h.queue) == 0

    run(scenario)
