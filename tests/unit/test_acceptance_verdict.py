"""Status figures and the SpeculationEffective condition from a window of counters."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from specdeploy import api
from specdeploy.acceptance import Reading, SpecCounters, decimal, figures, judge
from specdeploy.acceptance.verdict import moved

POLICY = api.AcceptancePolicy()
AT = datetime(2026, 12, 1, 6, 0, 0, tzinfo=UTC)


def reading(
    drafts: int,
    accepted: int,
    k: int = 3,
    per_position: tuple[int, ...] = (),
    targets: int = 1,
    answered: int = 1,
    failure: str | None = None,
) -> Reading:
    return Reading(
        command="digest",
        measured_at=AT,
        targets=targets,
        answered=answered,
        silent=not answered,
        failure=failure,
        counters=SpecCounters(drafts, drafts * k, accepted, per_position),
        pods=1,
        window_seconds=300,
    )


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0"),
        (1, "1"),
        (Decimal("0.9"), "0.9"),
        (Decimal("0.925"), "0.92"),  # half to even, as the figures are exact quotients
        (Decimal("0.935"), "0.94"),
        (Decimal("3.756"), "3.76"),
        (4.0, "4"),
    ],
)
def test_decimals_have_two_places_and_no_trailing_zeros(value: float | Decimal, text: str) -> None:
    assert decimal(value) == text


def test_figures_follow_the_formulas() -> None:
    """rate = accepted / draft tokens; mean length = 1 + accepted / drafts; per position / drafts."""
    found = figures(reading(drafts=400, accepted=1104, per_position=(392, 368, 344)))
    assert found.rate == "0.92"  # 1104 / 1200
    assert found.mean_length == "3.76"  # 1 + 1104 / 400
    assert found.per_position == ["0.98", "0.92", "0.86"]
    assert (found.draft_tokens, found.drafts, found.pods, found.window_seconds) == (1200, 400, 1, 300)
    assert found.measured_at == "2026-12-01T06:00:00Z"
    assert found.summary == "0.92 (3.76 tokens/step)"


def test_nothing_accepted_is_rate_zero_and_length_one() -> None:
    found = figures(reading(drafts=500, accepted=0, per_position=(0, 0, 0)))
    assert (found.rate, found.mean_length, found.per_position) == ("0", "1", ["0", "0", "0"])


def test_effective_at_or_above_the_threshold() -> None:
    acceptance, condition = judge(None, reading(drafts=400, accepted=200), 1, POLICY)
    assert acceptance is not None and acceptance.mean_length == "1.5"
    assert (condition.type, condition.status, condition.reason) == (
        api.SPECULATION_EFFECTIVE,
        "True",
        "AcceptanceAboveThreshold",
    )
    assert "1.5 tokens per verifier step" in condition.message and "minMeanLength 1.5" in condition.message


def test_low_acceptance_says_what_was_measured_and_what_to_do() -> None:
    acceptance, condition = judge(None, reading(drafts=400, accepted=12), 1, POLICY)
    assert acceptance is not None and acceptance.mean_length == "1.03"
    assert (condition.status, condition.reason) == ("False", "LowAcceptance")
    for part in ("1.03 tokens per verifier step", "rate 0.01", "1200 draft tokens", "minMeanLength 1.5"):
        assert part in condition.message
    for advice in ("check the pairing", "another speculator", "without speculation"):
        assert advice in condition.message


def test_too_few_draft_tokens_is_unknown_and_writes_no_figures() -> None:
    acceptance, condition = judge(None, reading(drafts=300, accepted=900), 1, POLICY)  # 900 < 1000
    assert acceptance is None
    assert (condition.status, condition.reason) == ("Unknown", "InsufficientSamples")
    assert "1000 draft tokens (spec.acceptance.minDraftTokens)" in condition.message


def test_no_serving_pod_and_unreachable_pods_are_told_apart() -> None:
    _, idle = judge(None, None, 0, POLICY)
    assert (idle.status, idle.reason) == ("Unknown", "NotServing")
    _, waiting = judge(None, None, 1, POLICY)
    assert (waiting.status, waiting.reason) == ("Unknown", "InsufficientSamples")
    failed = reading(0, 0, answered=0, failure="pod p-1: Connection refused")
    _, unreachable = judge(None, failed, 1, POLICY)
    assert (unreachable.status, unreachable.reason) == ("Unknown", "MetricsUnavailable")
    assert "pod p-1: Connection refused" in unreachable.message


def test_an_unavailable_window_keeps_the_first_error_it_reported() -> None:
    """Rounds that fail differently (refused, then timed out) write nothing new; a new window
    length does, and so does the first answer."""
    refused = reading(0, 0, answered=0, failure="pod p-1: Connection refused")
    _, first = judge(None, refused, 1, POLICY)
    timed_out = reading(0, 0, answered=0, failure="pod p-1: no answer within 5s")
    _, later = judge(None, timed_out, 1, POLICY, previous=first)
    assert later == first
    longer = api.AcceptancePolicy(window_seconds=600)
    _, resized = judge(None, timed_out, 1, longer, previous=first)
    assert resized.reason == "MetricsUnavailable"
    assert "last 600s (pod p-1: no answer within 5s)" in resized.message
    _, answered = judge(None, reading(0, 0), 1, POLICY, previous=first)
    assert answered.reason == "InsufficientSamples"


def test_a_pod_that_answered_within_the_window_is_not_unavailable() -> None:
    """One timed-out read of an engine that answered a minute ago is no verdict change."""
    missed = Reading(
        command="digest",
        measured_at=AT,
        targets=1,
        answered=0,
        silent=False,
        failure="pod p-1: no answer within 5s",
        counters=SpecCounters(10, 30, 30),
        pods=1,
        window_seconds=300,
    )
    _, condition = judge(None, missed, 1, POLICY)
    assert condition.reason == "InsufficientSamples"


def test_scaled_to_zero_is_not_serving_and_keeps_the_last_figures() -> None:
    """The alert on SpeculationEffective=False stops with the engines; the figures stay."""
    stored, low = judge(None, reading(drafts=400, accepted=12), 1, POLICY)
    assert low.reason == "LowAcceptance"
    acceptance, condition = judge(stored, None, 0, POLICY, previous=low)
    assert acceptance is stored
    assert (condition.status, condition.reason) == ("Unknown", "NotServing")
    assert "the last figures stay in status.acceptance" in condition.message


def test_stored_figures_stay_until_a_figure_moves() -> None:
    """Steady traffic rewrites nothing; a move of 0.02 in rate or 0.05 in length does."""
    stored, _ = judge(None, reading(drafts=1000, accepted=2760), 1, POLICY)  # 0.92, 3.76
    assert stored is not None
    later = reading(drafts=1000, accepted=2770)  # 0.92, 3.77: noise
    assert judge(stored, later, 1, POLICY)[0] is stored
    moved_rate = reading(drafts=1000, accepted=2700)  # 0.9, 3.7
    assert judge(stored, moved_rate, 1, POLICY)[0] != stored


def test_a_verdict_changes_only_when_the_figures_move_beyond_their_noise() -> None:
    """At the threshold, sampling noise must not flip the verdict (and the alert) every window:
    1.51 -> 1.49 on 3000 draft tokens is within the margin, 1.51 -> 1.40 is not."""
    policy = api.AcceptancePolicy(min_mean_length=1.5)
    above, effective = judge(None, reading(drafts=1000, accepted=510), 1, policy)  # 1.51
    assert above is not None and effective.status == "True"
    kept, still = judge(above, reading(drafts=1000, accepted=490), 1, policy)  # 1.49
    assert kept is above and still.status == "True"
    assert not moved(above, figures(reading(drafts=1000, accepted=490)))
    below, low = judge(above, reading(drafts=1000, accepted=400), 1, policy)  # 1.4
    assert below is not None and below.mean_length == "1.4" and low.reason == "LowAcceptance"


def test_few_draft_tokens_need_a_larger_move() -> None:
    """On 150 draft tokens the rate's noise is about 0.04: a move of 0.03 is not news."""
    small = api.AcceptancePolicy(min_draft_tokens=100)
    stored, _ = judge(None, reading(drafts=50, accepted=75), 1, small)  # rate 0.5 on 150 tokens
    assert stored is not None and stored.rate == "0.5"
    kept, _ = judge(stored, reading(drafts=50, accepted=80), 1, small)  # 0.53
    assert kept is stored
    changed, _ = judge(stored, reading(drafts=50, accepted=100), 1, small)  # 0.67
    assert changed is not None and changed.rate == "0.67"


def test_old_figures_are_kept_when_traffic_stops() -> None:
    """An idle window says nothing new about the pair: the last figures (and verdict) stay."""
    stored, _ = judge(None, reading(drafts=400, accepted=12), 1, POLICY)
    acceptance, condition = judge(stored, reading(drafts=0, accepted=0), 1, POLICY)
    assert acceptance is stored and condition.reason == "LowAcceptance"


def test_until_a_pod_answers_the_stored_reason_stands() -> None:
    """An operator restart (no reading yet, then rounds of a window not yet silent) must not flip
    MetricsUnavailable to InsufficientSamples and back."""
    failed = reading(0, 0, answered=0, failure="pod p-1: Connection refused")
    _, unreachable = judge(None, failed, 1, POLICY)
    _, after_restart = judge(None, None, 1, POLICY, previous=unreachable)
    assert after_restart == unreachable
    not_yet = replace(failed, silent=False)
    _, first_round = judge(None, not_yet, 1, POLICY, previous=unreachable)
    assert first_round == unreachable
    _, new_pod = judge(None, not_yet, 1, POLICY)
    assert new_pod.reason == "InsufficientSamples"
    _, answered = judge(None, reading(0, 0), 1, POLICY, previous=unreachable)
    assert answered.reason == "InsufficientSamples"
    _, not_serving = judge(None, None, 0, POLICY)
    _, serving_again = judge(None, None, 1, POLICY, previous=not_serving)
    assert serving_again.reason == "InsufficientSamples"
