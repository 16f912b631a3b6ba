"""Adaptive speculation without a cluster: the cost curve a benchmark keeps, the expected
throughput model, and every guard rail of policy Apply, on a simulated clock."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from specdeploy import adaptive, api
from specdeploy.adaptive import Range
from specdeploy.adaptive.policy import (
    APPLIED,
    HELD,
    NO_BENCHMARK,
    PROBING,
    RECOMMENDATION,
    RECOMMENDED,
    REVERTED,
    TURN_OFF,
    UNSUPPORTED,
    WAITING,
)

T0 = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
CONCURRENCIES = (1, 4, 16)
# Output tokens/s by draft length and concurrency, the partial pair's shape: three draft tokens
# pay most at batch 1, one at batch 4, none at 16.
THROUGHPUT = {
    0: (30.0, 100.0, 200.0),
    1: (40.0, 115.0, 180.0),
    2: (45.0, 110.0, 160.0),
    3: (48.0, 100.0, 140.0),
}
PARTIAL = ["0.45", "0.25", "0.16"]
LENGTHS = {0: 1.0, 1: 1.45, 2: 1.7, 3: 1.86}


def annotation(
    throughput: dict[int, tuple[float, ...]] = THROUGHPUT,
    measured_at: str = "2026-12-07T11:00:00Z",
    command: str = "c0",
    running: tuple[float, ...] | None = None,
    idle: tuple[float, ...] | None = None,
) -> str:
    """A benchmark summary as ``specdeploy bench --tokens`` writes it (``idle``: with ``idle``)."""
    by = lambda values: {str(c): v for c, v in zip(CONCURRENCIES, values, strict=True)}  # noqa: E731
    ran = running or throughput[3]
    measured_idle = {"idleDraft": {"outputTokensPerSecond": by(idle)}} if idle else {}
    return json.dumps(
        {
            **measured_idle,
            "measuredAt": measured_at,
            "command": command,
            "speedup": by([r / b for r, b in zip(ran, throughput[0], strict=True)]),
            "outputTokensPerSecond": {
                str(c): {"speculative": r, "baseline": b}
                for c, r, b in zip(CONCURRENCIES, ran, throughput[0], strict=True)
            },
            "draftLengths": {
                str(k): {"outputTokensPerSecond": by(t), "meanLength": by([LENGTHS[k]] * len(t))}
                for k, t in throughput.items()
            },
        }
    )


CURVE = adaptive.parse(annotation())


def test_the_cost_curve_of_a_benchmark() -> None:
    assert CURVE is not None
    assert CURVE.concurrencies == CONCURRENCIES and CURVE.lengths == (0, 1, 2, 3)
    # A step drafting 3 at batch 1 yields 1.86 tokens in the time the baseline's yields 30/48.
    assert CURVE.step_cost(3, 0) == pytest.approx(1.86 * 30 / 48)
    assert CURVE.running == THROUGHPUT[3]


@pytest.mark.parametrize(
    "broken",
    [None, "", "{", "[]", json.dumps({"speedup": {"1": 1.0}}), annotation().replace('"meanLength"', '"x"'),
     annotation().replace("140.0", "-1")],
)  # fmt: skip
def test_a_summary_without_a_usable_curve_is_none(broken: str | None) -> None:
    assert adaptive.parse(broken) is None


def test_expected_tokens_and_speedup() -> None:
    assert CURVE is not None
    per_position = [0.45, 0.25, 0.16]
    assert adaptive.expected_tokens(per_position, 0) == 1
    assert adaptive.expected_tokens(per_position, 2) == pytest.approx(1.70)
    # Live acceptance equal to the benchmark's: the benchmark's own speed-up.
    assert adaptive.speedup(CURVE, per_position, 3, 0) == pytest.approx(48 / 30, rel=1e-3)
    # A draft doing better live than in the benchmark: the same cost, more tokens.
    better = [0.9, 0.8, 0.7]
    assert adaptive.speedup(CURVE, better, 3, 0) == pytest.approx(3.4 / (1.86 * 30 / 48))


def test_the_best_length_per_range() -> None:
    assert CURVE is not None
    # One draft token loses 10% at 16, where none would be the baseline's; but a 0 there beside
    # ranges that draft still runs the draft, so the schedule drafts everywhere: turning off to
    # win those 10% would give up 38% at batch 1.
    assert adaptive.best(CURVE, [0.45, 0.25, 0.16], 3) == [Range(1, 3, 3), Range(4, None, 1)]
    # Never longer than the spec allows, nor than the positions measured.
    assert adaptive.best(CURVE, [0.45, 0.25, 0.16], 2) == [Range(1, 3, 2), Range(4, None, 1)]
    assert adaptive.best(CURVE, [0.45], 3)[0].tokens == 1
    # A draft that is always right makes 4 tokens a step: three drafted pay at every concurrency.
    assert adaptive.best(CURVE, [1.0, 1.0, 1.0], 3) == [Range(1, None, 3)]


def test_a_measured_idle_draft_prices_the_0_that_runs_it() -> None:
    """The partial pair on the heavy verifier (vLLM on CPU, offline runs, 2026-12-07): three
    draft tokens give 1.68x at batch 1, every length loses about 30% at 16, and the draft loaded
    but idle costs 3% there. Priced, the 0 at 16 wins; unpriced, the schedule drafts everywhere."""
    heavy = {0: (131.9, 461.6, 1167.9), 1: (133.3, 480.6, 842.4), 2: (155.3, 432.9, 783.6),
             3: (221.7, 493.5, 817.0)}  # fmt: skip
    per_position = [0.45, 0.25, 0.16]
    priced = adaptive.parse(annotation(heavy, idle=(125.0, 440.0, 1136.2)))
    unpriced = adaptive.parse(annotation(heavy))
    assert priced is not None and unpriced is not None
    schedule = adaptive.best(priced, per_position, 3)
    assert schedule == [Range(1, 15, 3), Range(16, None, 0)]
    assert adaptive.predicted(priced, per_position, schedule) == pytest.approx(
        [1.681, 1.069, 0.973], abs=1e-3
    )
    assert adaptive.predicted(unpriced, per_position, schedule)[2] is None
    assert adaptive.best(unpriced, per_position, 3) == [Range(1, 15, 3), Range(16, None, 1)]
    # An idle draft within the noise of the length it would replace changes nothing.
    noisy = json.loads(annotation(heavy, idle=(125.0, 440.0, 860.0)))
    noisy["idleDraft"]["spread"] = {"16": 0.05}
    assert adaptive.best(adaptive.parse(json.dumps(noisy)), per_position, 3)[-1].tokens == 1  # type: ignore[arg-type]
    # An idle draft slower than drafting one token is no reason for a 0.
    costly = adaptive.parse(annotation(heavy, idle=(60.0, 200.0, 700.0)))
    assert costly is not None and adaptive.best(costly, per_position, 3) == [
        Range(1, 15, 3),
        Range(16, None, 1),
    ]


def test_a_draft_that_gains_less_than_it_loses_is_turned_off() -> None:
    """The partial pair on one-thread engines: 5% more at batch 1, 30% less at 16. A 0 at 16
    beside a 3 at batch 1 still runs the draft there, so the choice is between the two plans."""
    slight = {0: (30.0, 100.0, 200.0), 1: (28.0, 90.0, 150.0), 2: (30.0, 85.0, 140.0),
              3: (31.5, 80.0, 140.0)}  # fmt: skip
    curve = adaptive.parse(annotation(slight))
    assert curve is not None
    per_position = [0.45, 0.25, 0.16]
    assert adaptive.best(curve, per_position, 3) == [Range(1, None, 0)]
    # Off is the baseline everywhere; a 0 beside ranges that draft is not priced as one.
    assert adaptive.predicted(curve, per_position, [Range(1, None, 0)]) == [1.0, 1.0, 1.0]
    assert adaptive.predicted(curve, per_position, [Range(1, 3, 3), Range(4, None, 0)])[1:] == [None, None]
    decided = adaptive.decide(spec_of("Recommend"), body_with(None), figures(PARTIAL), curve, "c0", T0)
    found = decided.speculation
    assert found is not None and found.reason == RECOMMENDED
    assert tokens(found.recommended_schedule) == [(1, None, 0)]
    assert found.message.startswith("turn speculation off")
    assert (
        "1.05x (±0%) drafting 3 at 1, 0.90x (±0%) drafting 1 at 4, 0.75x (±0%) drafting 1 at 16"
        in found.message
    )


# The partial pair's first benchmark of 2026-12-07 (`bench/adaptive_ab.py`, one-thread engines,
# three runs per figure): medians, tokens per step, and how far the runs lay from the median.
RUN_CONCURRENCIES = (1, 2, 4, 8, 16)
RUN = {
    0: ((213.2, 368.7, 661.6, 1391.7, 1973.6), (1.0,) * 5, (0.136, 0.251, 0.765, 0.097, 0.241)),
    1: (
        (178.0, 386.5, 631.7, 1146.6, 1699.7),
        (1.648, 1.654, 1.647, 1.649, 1.646),
        (0.181, 0.192, 0.23, 0.224, 0.038),
    ),
    2: (
        (189.7, 373.7, 814.9, 1196.3, 1981.1),
        (1.968, 1.982, 1.953, 1.945, 1.953),
        (0.094, 0.1, 0.189, 0.219, 0.059),
    ),
    3: (
        (199.6, 366.8, 594.4, 1337.8, 1833.9),
        (2.133, 2.152, 2.1, 2.079, 2.102),
        (0.069, 0.098, 0.112, 0.161, 0.1),
    ),
}


def run_annotation(spread: bool) -> str:
    by = lambda values: {str(c): v for c, v in zip(RUN_CONCURRENCIES, values, strict=True)}  # noqa: E731
    return json.dumps(
        {
            "measuredAt": "2026-12-07T19:59:00Z",
            "command": "c0",
            "speedup": by([r / b for r, b in zip(RUN[3][0], RUN[0][0], strict=True)]),
            "outputTokensPerSecond": {
                str(c): {"speculative": r, "baseline": b}
                for c, r, b in zip(RUN_CONCURRENCIES, RUN[3][0], RUN[0][0], strict=True)
            },
            "draftLengths": {
                str(k): {"outputTokensPerSecond": by(t), "meanLength": by(m)}
                | ({"spread": by(n)} if spread else {})
                for k, (t, m, n) in RUN.items()
            },
        }
    )


def test_a_difference_within_the_benchmarks_noise_changes_nothing() -> None:
    """Replayed without its spread, the run gives what the operator applied then: five ranges,
    chasing a 1.23x of two draft tokens at concurrency 4 whose baseline's runs lay 77% apart. The
    next run measured that schedule at 0.77x-0.92x the baseline. With the spread, no draft length
    beats the baseline or three tokens beyond the noise anywhere: off."""
    per_position = [0.53, 0.32, 0.2]
    blind = adaptive.parse(run_annotation(spread=False))
    assert blind is not None
    assert [(r.from_batch, r.tokens) for r in adaptive.best(blind, per_position, 3)] == [
        (1, 3), (2, 1), (4, 2), (8, 3), (16, 2)
    ]  # fmt: skip
    measured = adaptive.parse(run_annotation(spread=True))
    assert measured is not None and measured.noise(2, 0, 2) == pytest.approx(0.189 + 0.765)
    assert [c.tokens for c in adaptive.drafting(measured, per_position, 3)] == [3, 3, 2, 3, 3]
    assert adaptive.best(measured, per_position, 3) == [Range(1, None, 0)]


SPEC: dict[str, Any] = {
    "verifier": {"model": "sandbox/tiny-qwen3"},
    "speculator": {"model": "sandbox/tiny-qwen3-eagle3-partial", "numSpeculativeTokens": 3},
}


def spec_of(policy: str = "Apply", engine: str = "vllm", **adaptive_: Any) -> api.SpeculativeDeploymentSpec:
    raw = json.loads(json.dumps(SPEC))
    raw["speculator"]["adaptive"] = {"policy": policy, **adaptive_}
    raw["engine"] = {"name": engine}
    return api.SpeculativeDeploymentSpec.model_validate(raw)


def figures(per_position: list[str], at: datetime = T0, drafts: int = 4000) -> api.Acceptance:
    mean = 1 + sum(float(a) for a in per_position)
    return api.Acceptance(
        rate=f"{(mean - 1) / len(per_position):.2f}", mean_length=f"{mean:.2f}", per_position=per_position,
        draft_tokens=drafts * len(per_position), drafts=drafts, pods=1, window_seconds=300,
        measured_at=at.strftime("%Y-%m-%dT%H:%M:%SZ"), summary="-",
    )  # fmt: skip


def body_with(speculation: api.Speculation | None) -> dict[str, Any]:
    status = (
        {}
        if speculation is None
        else {"speculation": speculation.model_dump(by_alias=True, exclude_none=True)}
    )
    return {"metadata": {"name": "p", "namespace": "ns"}, "status": status}


def tokens(ranges: list[api.ScheduleRange] | None) -> list[tuple[int, int | None, int]]:
    return [(r.from_batch, r.to_batch, r.tokens) for r in ranges or []]


def test_off_writes_nothing_and_sglang_is_unsupported() -> None:
    assert (
        adaptive.decide(spec_of("Off"), body_with(None), figures(PARTIAL), CURVE, "c0", T0).speculation
        is None
    )
    found = adaptive.decide(
        spec_of("Recommend", "sglang"), body_with(None), None, CURVE, "c0", T0
    ).speculation
    assert found is not None and found.reason == UNSUPPORTED


def test_recommend_waits_for_acceptance_then_for_a_benchmark() -> None:
    waiting = adaptive.decide(spec_of("Recommend"), body_with(None), None, CURVE, "c0", T0)
    assert waiting.speculation is not None and waiting.speculation.reason == WAITING
    assert waiting.notices == () and waiting.speculation.recommended_schedule == []
    unmeasured = adaptive.decide(spec_of("Recommend"), body_with(None), figures(PARTIAL), None, "c0", T0)
    assert unmeasured.speculation is not None and unmeasured.speculation.reason == NO_BENCHMARK
    assert "specdeploy bench NAME --tokens 0,idle,1,2,3" in unmeasured.speculation.message
    baseline_only = adaptive.parse(annotation({0: THROUGHPUT[0]}, running=THROUGHPUT[3]))
    assert baseline_only is not None
    found = adaptive.decide(spec_of("Recommend"), body_with(None), figures(PARTIAL), baseline_only, "c0", T0)
    assert found.speculation is not None and found.speculation.reason == NO_BENCHMARK
    assert "measured no draft length from 1 to 3" in found.speculation.message


def test_recommend_writes_the_schedule_its_basis_and_one_event() -> None:
    first = adaptive.decide(spec_of("Recommend"), body_with(None), figures(PARTIAL), CURVE, "c0", T0)
    found = first.speculation
    assert found is not None and found.reason == RECOMMENDED
    assert tokens(found.recommended_schedule) == SCHEDULE
    assert [r.expected_speedup for r in found.recommended_schedule] == ["1.60", "1.15"]
    assert found.basis is not None and found.basis.per_position == PARTIAL
    assert found.basis.benchmark_measured_at == "2026-12-07T11:00:00Z"
    assert found.applied_schedule is None
    assert [n[:2] for n in first.notices] == [("Normal", RECOMMENDATION)]
    # The same inputs again (status as written): the same status, no Event, nothing to roll out.
    again = adaptive.decide(spec_of("Recommend"), body_with(found), figures(PARTIAL), CURVE, "c0", T0)
    assert again.speculation == found and again.notices == () and not again.reschedule


def test_speculation_that_does_not_pay_is_turned_off_without_a_benchmark() -> None:
    poor = ["0.05", "0.03", "0.02"]
    found = adaptive.decide(spec_of("Recommend"), body_with(None), figures(poor), None, "c0", T0).speculation
    assert found is not None and found.reason == TURN_OFF
    assert tokens(found.recommended_schedule) == [(1, None, 0)]
    assert "minMeanLength 1.5" in found.message


def test_apply_rolls_out_a_recommendation_that_gains_enough() -> None:
    decision = adaptive.decide(spec_of(), body_with(None), figures(PARTIAL), CURVE, "c0", T0)
    found = decision.speculation
    assert found is not None and decision.reschedule
    assert tokens(found.applied_schedule) == SCHEDULE
    assert tokens(found.previous_schedule) == [(1, None, 3)]
    assert found.applied_at == "2026-12-07T12:00:00Z"
    assert [n[1] for n in decision.notices] == [RECOMMENDATION, APPLIED]
    # The pipeline renders what status says runs.
    running = adaptive.running_schedule(spec_of(), body_with(found)).speculator
    assert running is not None and running.schedule is not None
    assert [(r.from_batch, r.to_batch, r.tokens) for r in running.schedule] == tokens(found.applied_schedule)


def test_apply_of_the_longest_length_everywhere_renders_no_schedule() -> None:
    """Turning Apply on changes no command by itself."""
    decision = adaptive.decide(spec_of(), body_with(None), None, CURVE, "c0", T0)
    found = decision.speculation
    assert found is not None and tokens(found.applied_schedule) == [(1, None, 3)] and not decision.reschedule
    speculator = adaptive.running_schedule(spec_of(), body_with(found)).speculator
    assert speculator is not None and speculator.schedule is None


def test_a_gain_below_min_gain_is_not_applied() -> None:
    # One draft token 2% ahead of three at 16, and all alike elsewhere: a 2% predicted gain.
    flat = {k: (30.0, 100.0, 200.0 * (1 + (3 - k) / 100 if k else 1)) for k in range(4)}
    curve = adaptive.parse(annotation(flat))
    decision = adaptive.decide(spec_of(minGain=0.2), body_with(None), figures(PARTIAL), curve, "c0", T0)
    found = decision.speculation
    assert found is not None and tokens(found.applied_schedule) == [(1, None, 3)] and not decision.reschedule
    assert "below spec.speculator.adaptive.minGain 0.2" in found.message


def applied(previous: list[tuple[int, int | None, int]], running: list[tuple[int, int | None, int]],
            at: datetime = T0, basis: list[str] = PARTIAL) -> api.Speculation:  # fmt: skip
    ranges = lambda rs: [api.ScheduleRange(from_batch=f, to_batch=t, tokens=k) for f, t, k in rs]  # noqa: E731
    return api.Speculation(
        policy="Apply", reason=RECOMMENDED, message="-", recommended_schedule=ranges(running),
        basis=api.SpeculationBasis(
            per_position=basis, mean_length="1.86", tokens=3, draft_tokens=12000,
            measured_at="2026-12-07T11:30:00Z", benchmark_measured_at="2026-12-07T11:00:00Z",
        ),
        applied_schedule=ranges(running), applied_at=at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        previous_schedule=ranges(previous),
    )  # fmt: skip


SCHEDULE = [(1, 3, 3), (4, None, 1)]


def test_at_most_one_change_per_min_interval() -> None:
    stored = applied([(1, None, 3)], [(1, None, 1)])
    early = adaptive.decide(spec_of(), body_with(stored), None, CURVE, "c1", T0 + timedelta(seconds=899))
    found = early.speculation
    assert found is not None and tokens(found.applied_schedule) == [(1, None, 1)] and not early.reschedule
    assert "minIntervalSeconds after 2026-12-07T12:00:00Z" in found.message
    assert adaptive.due(
        body_with(found) | {"spec": {"speculator": {"adaptive": {"policy": "Apply"}}}},
        T0 + timedelta(seconds=900),
    )
    later = adaptive.decide(spec_of(), body_with(found), None, CURVE, "c1", T0 + timedelta(seconds=900))
    assert later.speculation is not None and tokens(later.speculation.applied_schedule) == SCHEDULE


def test_acceptance_that_makes_the_previous_schedule_better_reverts_at_once() -> None:
    """Three draft tokens at small batches were chosen on a strong second and third position;
    the first position measured since falls from 0.45 to 0, and at that acceptance one draft
    token everywhere (what ran before) is expected to serve more: back to it at once."""
    one = [(1, None, 1)]
    stored = applied(one, SCHEDULE)
    worse = figures(["0", "0", "0"], T0 + timedelta(seconds=60))
    decision = adaptive.decide(spec_of(), body_with(stored), worse, CURVE, "c1", T0 + timedelta(seconds=60))
    found = decision.speculation
    assert found is not None and decision.reschedule
    assert tokens(found.applied_schedule) == one and tokens(found.rejected_schedule) == SCHEDULE
    assert found.previous_schedule is None
    assert [n[:2] for n in decision.notices if n[1] == REVERTED] == [("Warning", REVERTED)]
    assert "first draft position is 0 since the change" in found.message
    assert "expected to serve 7% more at concurrency 1" in found.message
    # Acceptance moving with the traffic alone (0.45 to 0.38) leaves the schedule the better one.
    moved = figures(["0.38", "0.20", "0.10"], T0 + timedelta(seconds=60))
    kept = adaptive.decide(spec_of(), body_with(stored), moved, CURVE, "c1", T0 + timedelta(seconds=60))
    assert kept.speculation is not None and tokens(kept.speculation.applied_schedule) == SCHEDULE


def test_nothing_changes_while_a_benchmark_measures_the_resource() -> None:
    """Acceptance that would revert at once, and a held recommendation now due, both wait while
    ``specdeploy bench`` holds the resource; an expired hold (a killed run) holds nothing."""
    stored = applied([(1, None, 1)], SCHEDULE)
    worse = figures(["0", "0", "0"], T0 + timedelta(seconds=60))
    now = T0 + timedelta(seconds=60)
    measured = body_with(stored)
    measured["metadata"]["annotations"] = {api.BENCHMARK_RUNNING_ANNOTATION: "2026-12-07T13:00:00Z"}
    held = adaptive.decide(spec_of(), measured, worse, CURVE, "c1", now)
    assert held.speculation is not None and not held.reschedule and held.notices == ()
    assert tokens(held.speculation.applied_schedule) == SCHEDULE
    assert "specdeploy bench measures it (specdeploy.io/benchmark-running until 2026-12-07T13:00:00Z)" in (
        held.speculation.message
    )
    after = T0 + timedelta(hours=1)
    expired = adaptive.decide(spec_of(), measured, worse, CURVE, "c1", after)
    assert expired.speculation is not None and expired.reschedule
    assert tokens(expired.speculation.applied_schedule) == [(1, None, 1)]
    # A recommendation held back by minIntervalSeconds and now due waits for the benchmark too.
    waiting = applied([(1, None, 3)], [(1, None, 1)]).model_copy(
        update={"message": f"-; {HELD}", "recommended_schedule": applied([], SCHEDULE).recommended_schedule}
    )
    due_body = body_with(waiting) | {"spec": {"speculator": {"adaptive": {"policy": "Apply"}}}}
    assert adaptive.due(due_body, T0 + timedelta(seconds=900))
    due_body["metadata"]["annotations"] = measured["metadata"]["annotations"]
    assert not adaptive.due(due_body, T0 + timedelta(seconds=900))
    assert adaptive.due(due_body, T0 + timedelta(hours=1))


def test_a_rejected_schedule_waits_for_a_new_benchmark() -> None:
    stored = applied([(1, None, 1)], SCHEDULE)
    worse = figures(["0", "0", "0"], T0)
    reverted = adaptive.decide(spec_of(), body_with(stored), worse, CURVE, "c1", T0).speculation
    assert reverted is not None and tokens(reverted.rejected_schedule) == SCHEDULE
    later = T0 + timedelta(hours=2)
    held = adaptive.decide(spec_of(), body_with(reverted), None, CURVE, "c0", later)
    assert held.speculation is not None and tokens(held.speculation.applied_schedule) == [(1, None, 1)]
    rebenched = adaptive.parse(annotation(measured_at="2026-12-07T13:30:00Z"))
    fresh = adaptive.decide(spec_of(), body_with(reverted), None, rebenched, "c0", later)
    assert fresh.speculation is not None and tokens(fresh.speculation.applied_schedule) == SCHEDULE


def test_a_benchmark_of_the_running_schedule_that_measures_worse_reverts() -> None:
    stored = applied([(1, None, 3)], SCHEDULE)
    # Re-run on the running command: at concurrency 4 the schedule (1 token) made 90 tokens/s where
    # the previous schedule's 3 tokens made 100 in the same run.
    rerun = adaptive.parse(
        annotation(measured_at="2026-12-07T12:30:00Z", command="c1", running=(48.0, 90.0, 200.0))
    )
    decision = adaptive.decide(spec_of(), body_with(stored), None, rerun, "c1", T0 + timedelta(hours=1))
    found = decision.speculation
    assert found is not None and tokens(found.applied_schedule) == [(1, None, 3)]
    assert "90 output tokens/s at concurrency 4 against 100 drafting 3" in found.message
    # A benchmark of another command (before the change) says nothing about the running schedule.
    other = adaptive.parse(
        annotation(measured_at="2026-12-07T12:30:00Z", command="c0", running=(48.0, 90.0, 200.0))
    )
    kept = adaptive.decide(spec_of(), body_with(stored), None, other, "c1", T0 + timedelta(hours=1))
    assert kept.speculation is not None and tokens(kept.speculation.applied_schedule) == SCHEDULE


def test_a_benchmark_reverts_only_beyond_its_own_noise_where_the_schedules_differ() -> None:
    """Seen in the sandbox: a schedule that drafted as before at concurrency 8 measured 0.87x of
    the static copy drafting the same there (one command measured twice), and was reverted on it.
    Where the two schedules draft the same nothing is compared; that gap is the run's noise."""
    stored = applied([(1, None, 3)], SCHEDULE)

    def after(running: tuple[float, ...]) -> api.Speculation | None:
        rerun = adaptive.parse(annotation(measured_at="2026-12-07T12:30:00Z", command="c1", running=running))
        return adaptive.decide(
            spec_of(), body_with(stored), None, rerun, "c1", T0 + timedelta(hours=1)
        ).speculation

    # At concurrency 1 both schedules draft 3 tokens: 40 against 48 there is noise, not a verdict.
    same = after((40.0, 100.0, 200.0))
    assert same is not None and tokens(same.applied_schedule) == SCHEDULE and same.rejected_schedule is None
    # A noise of 25% there (60 against 48) hides a 10% deficit where they differ (90 against 100)...
    noisy = after((60.0, 90.0, 200.0))
    assert noisy is not None and tokens(noisy.applied_schedule) == SCHEDULE
    # ...but not one beyond it.
    worse = after((60.0, 70.0, 200.0))
    assert worse is not None and tokens(worse.applied_schedule) == [(1, None, 3)]
    assert (
        "70 output tokens/s at concurrency 4 against 100 drafting 3 there as before, beyond the "
        "run's own noise of 25%" in worse.message
    )


POOR = ["0.05", "0.03", "0.02"]
GOOD = ["0.90", "0.80", "0.70"]


def simulate(acceptance_after_probe: list[str], days: int = 7) -> list[tuple[datetime, list[Any]]]:
    """A week in steps of 5 minutes: whenever some batch size drafts, the engines' acceptance is
    measured a step after the change (the window fills); with speculation off there is none.
    The changes of the running schedule, in order."""
    spec = spec_of(minIntervalSeconds=900, probeIntervalSeconds=3600)
    stored: api.Speculation | None = None
    running: list[Any] = [(1, None, 3)]
    since_change = 0
    changes: list[tuple[datetime, list[Any]]] = []
    probed = False
    for step in range(days * 24 * 12):
        now = T0 + timedelta(minutes=5 * step)
        drafting = any(k for _, _, k in running)
        measured = (acceptance_after_probe if probed else POOR) if drafting and since_change >= 1 else None
        found = adaptive.decide(spec, body_with(stored), measured and figures(measured, now), None, "c", now)
        assert found.speculation is not None
        stored = found.speculation
        now_running = tokens(stored.applied_schedule)
        since_change += 1
        if now_running != running:
            probed = probed or any(n[1] == PROBING for n in found.notices)
            running, since_change = now_running, 0
            changes.append((now, running))
    return changes


def test_a_draft_that_never_pays_is_probed_but_does_not_flap() -> None:
    changes = simulate(POOR)
    assert changes[0][1] == [(1, None, 0)]
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(changes)]
    # On for minIntervalSeconds at least; off for probeIntervalSeconds, doubled after each probe
    # that turned it off again.
    assert all(gap >= timedelta(seconds=900) for gap in gaps[1::2])
    assert [gap // timedelta(hours=1) for gap in gaps[::2]] == [1, 2, 4, 8, 16, 32, 32, 32, 32][
        : len(gaps[::2])
    ]
    assert len(changes) <= 20
    assert changes[-1][1] in ([(1, None, 0)], [(1, None, 3)])


def test_a_draft_that_pays_again_is_not_left_off() -> None:
    changes = simulate(GOOD)
    assert [running for _, running in changes] == [[(1, None, 0)], [(1, None, 3)]]
    assert changes[1][0] - changes[0][0] == timedelta(hours=1)
