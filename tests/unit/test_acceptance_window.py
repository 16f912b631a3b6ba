"""The sliding window of engine counters: differences, restarts, pods coming, going and silent."""

from __future__ import annotations

from specdeploy.acceptance import SpecCounters, Window

WINDOW = 300.0


def c(drafts: int, accepted: int, k: int = 3, per_position: tuple[int, ...] = ()) -> SpecCounters:
    """Counters of an engine proposing ``k`` tokens per draft."""
    return SpecCounters(drafts, drafts * k, accepted, per_position)


def test_a_pods_first_read_is_only_a_baseline() -> None:
    window = Window()
    window.record("pod-a", 0, c(1000, 2900), now=0, seconds=WINDOW)
    totals = window.totals(now=0, seconds=WINDOW)
    assert totals.counters == SpecCounters() and totals.pods == 1 and totals.seconds == 0


def test_a_pod_ready_since_the_previous_round_counts_whole_on_its_first_read() -> None:
    """Served at once after it became Ready, before any read: nothing is lost. A pod Ready
    before the previous round (an operator that just started, a readiness flap) is a baseline."""
    window = Window()
    window.record("pod-a", 0, c(40, 120), now=100, seconds=WINDOW, ready_at=80, previous_round=70)
    totals = window.totals(now=100, seconds=WINDOW)
    assert totals.counters == c(40, 120) and totals.seconds == 20
    window.record("pod-a", 0, c(50, 150), now=130, seconds=WINDOW)
    assert window.totals(now=130, seconds=WINDOW).counters == c(50, 150)
    window.record("pod-b", 0, c(40, 120), now=100, seconds=WINDOW, ready_at=60, previous_round=70)
    window.record("pod-c", 0, c(40, 120), now=100, seconds=WINDOW, ready_at=80, previous_round=None)
    assert window.totals(now=130, seconds=WINDOW).counters == c(50, 150)


def test_the_window_sums_differences_between_reads() -> None:
    window = Window()
    window.record("pod-a", 0, c(100, 290, per_position=(98, 97, 95)), now=0, seconds=WINDOW)
    window.record("pod-a", 0, c(150, 439, per_position=(148, 146, 145)), now=30, seconds=WINDOW)
    window.record("pod-a", 0, c(170, 499, per_position=(168, 166, 165)), now=60, seconds=WINDOW)
    totals = window.totals(now=60, seconds=WINDOW)
    assert totals.counters == SpecCounters(70, 210, 209, (70, 69, 70))
    assert totals.seconds == 60


def test_increments_older_than_the_window_drop_out() -> None:
    window = Window()
    window.record("pod-a", 0, c(0, 0), now=0, seconds=WINDOW)
    window.record("pod-a", 0, c(10, 30), now=30, seconds=WINDOW)
    window.record("pod-a", 0, c(20, 40), now=300, seconds=WINDOW)
    window.record("pod-a", 0, c(30, 60), now=400, seconds=WINDOW)
    assert window.totals(now=400, seconds=WINDOW).counters == SpecCounters(20, 60, 30)
    window.prune(now=400, seconds=WINDOW, present={"pod-a"})
    assert window.totals(now=400, seconds=3600).counters == SpecCounters(20, 60, 30)


def test_a_read_after_a_gap_longer_than_the_window_is_a_baseline() -> None:
    """An hour unread: what it counted meanwhile cannot be placed in a 5-minute window."""
    window = Window()
    window.record("pod-a", 0, c(0, 0), now=0, seconds=WINDOW)
    window.record("pod-a", 0, c(100_000, 300_000), now=3600, seconds=WINDOW)
    assert window.totals(now=3600, seconds=WINDOW).counters == SpecCounters()
    window.record("pod-a", 0, c(100_010, 300_030), now=3630, seconds=WINDOW)
    assert window.totals(now=3630, seconds=WINDOW).counters == c(10, 30)


def test_idle_reads_add_nothing_and_hold_no_memory() -> None:
    window = Window()
    for t in range(0, 3000, 30):
        window.record("pod-a", 0, c(50, 100), now=t, seconds=WINDOW)
        window.prune(now=t, seconds=WINDOW, present={"pod-a"})
    assert window.totals(now=3000, seconds=WINDOW).counters == SpecCounters()
    assert len(window) == 1


def test_a_counter_going_down_is_a_restart_counted_from_zero() -> None:
    """Never a negative difference: after a reset, the new process's totals are the increment."""
    window = Window()
    window.record("pod-a", 0, c(1000, 3000), now=0, seconds=WINDOW)
    window.record("pod-a", 0, c(40, 100), now=30, seconds=WINDOW, ready_at=10)
    totals = window.totals(now=30, seconds=WINDOW).counters
    assert totals == c(40, 100)
    assert totals.consistent()


def test_a_restart_the_counters_hide_is_caught_by_the_restart_count() -> None:
    """The new process already counted more than the old one had: without the container's
    restart count, 500 - 100 drafts against 0 - 0 accepted would mix two processes."""
    window = Window()
    window.record("pod-a", 0, c(100, 0), now=0, seconds=WINDOW)
    window.record("pod-a", 1, c(500, 1500), now=30, seconds=WINDOW, ready_at=20)
    assert window.totals(now=30, seconds=WINDOW).counters == c(500, 1500)


def test_a_restart_whose_serving_began_before_the_last_read_is_a_baseline() -> None:
    """Without knowing when the new process began serving, its counts cannot be placed."""
    window = Window()
    window.record("pod-a", 0, c(100, 0), now=0, seconds=WINDOW)
    window.record("pod-a", 1, c(500, 1500), now=30, seconds=WINDOW, ready_at=None)
    window.record("pod-a", 1, c(510, 1530), now=60, seconds=WINDOW, ready_at=20)
    assert window.totals(now=60, seconds=WINDOW).counters == c(10, 30)


def test_an_impossible_difference_is_taken_as_a_restart() -> None:
    """More accepted than proposed between two reads cannot come from one process."""
    window = Window()
    window.record("pod-a", 0, c(100, 0), now=0, seconds=WINDOW)
    window.record("pod-a", 0, c(200, 600), now=30, seconds=WINDOW, ready_at=5)  # +100 drafts, +600 kept
    totals = window.totals(now=30, seconds=WINDOW).counters
    assert totals == c(200, 600) and totals.consistent()


def test_pods_are_summed_and_a_silent_pod_catches_up_on_its_next_read() -> None:
    window = Window()
    window.record("pod-a", 0, c(0, 0), now=0, seconds=WINDOW)
    window.record("pod-b", 0, c(0, 0), now=0, seconds=WINDOW)
    window.record("pod-a", 0, c(10, 30), now=30, seconds=WINDOW)
    # pod-b does not answer at 30 s; at 60 s its counters hold both intervals.
    window.record("pod-a", 0, c(20, 60), now=60, seconds=WINDOW)
    window.record("pod-b", 0, c(20, 0), now=60, seconds=WINDOW)
    totals = window.totals(now=60, seconds=WINDOW)
    assert totals.counters == SpecCounters(40, 120, 60) and totals.pods == 2


def test_a_deleted_pods_counts_stay_until_they_leave_the_window() -> None:
    window = Window()
    window.record("old", 0, c(0, 0), now=0, seconds=WINDOW)
    window.record("old", 0, c(10, 30), now=30, seconds=WINDOW)
    window.prune(now=60, seconds=WINDOW, present={"new"})
    assert window.totals(now=60, seconds=WINDOW).counters == c(10, 30) and len(window) == 1
    window.prune(now=400, seconds=WINDOW, present={"new"})
    assert len(window) == 0


def test_counters_no_engine_could_count_are_ignored() -> None:
    window = Window()
    window.record("pod-a", 0, c(0, 0), now=0, seconds=WINDOW)
    window.record("pod-a", 0, SpecCounters(10, 30, 40), now=30, seconds=WINDOW)  # 40 kept of 30
    window.record("pod-a", 0, SpecCounters(-5, 0, 0), now=60, seconds=WINDOW)
    assert window.totals(now=60, seconds=WINDOW).counters == SpecCounters()


def test_counters_add_and_difference_by_position() -> None:
    assert c(1, 3, per_position=(1, 1, 1)) + c(1, 0, per_position=()) == SpecCounters(2, 6, 3, (1, 1, 1))
    assert c(5, 10, per_position=(5, 4)).since(c(2, 4, per_position=(2, 1))) == SpecCounters(3, 9, 6, (3, 3))
    assert c(5, 10).since(c(6, 10)) is None
    assert not SpecCounters() and SpecCounters(drafts=1)
