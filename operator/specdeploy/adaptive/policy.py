"""Recommend and apply: from the measured acceptance and cost curve to ``status.speculation``.

Pure: the reconcile calls :func:`decide` with what it read and writes what comes back; the
pipeline reads the running schedule back from status (:func:`running_schedule`), so a decision
and the command the engines run cannot disagree. Nothing here keeps time: ``now`` is passed in,
and :func:`due` tells the engine metrics reader when a pass is owed to a guard rail that expired.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, Literal

from pydantic import ValidationError

from specdeploy import api, enginefacts
from specdeploy.adaptive.costs import CostCurve
from specdeploy.adaptive.model import Range, drafting, gain, predicted, schedule_of, tokens_at

RECOMMENDED = "Recommended"
TURN_OFF = "SpeculationIneffective"
NO_BENCHMARK = "NoBenchmark"
WAITING = "WaitingForAcceptance"
UNSUPPORTED = "Unsupported"
APPLIED = "SpeculationScheduleApplied"
REVERTED = "SpeculationScheduleReverted"
PROBING = "SpeculationProbe"
RECOMMENDATION = "SpeculationRecommended"
# The longest wait between probes, in probeIntervalSeconds.
PROBE_BACKOFF_CAP = 32
# How a message says a recommendation waits for minIntervalSeconds (``due`` looks for it).
HELD = "applied no sooner than spec.speculator.adaptive.minIntervalSeconds"

Notice = tuple[Literal["Normal", "Warning"], str, str]


@dataclass(frozen=True)
class Decision:
    """``status.speculation`` (None: Off), the Events to post, as (type, reason, message), and
    whether the engines must run another schedule than the one rendered from status."""

    speculation: api.Speculation | None
    notices: tuple[Notice, ...] = ()
    reschedule: bool = False


def _adaptive(spec: api.SpeculativeDeploymentSpec) -> api.Adaptive:
    return spec.speculator.adaptive if spec.speculator is not None else api.Adaptive()


def own_schedule(spec: api.SpeculativeDeploymentSpec, longest: int) -> list[Range]:
    """The spec's schedule, or ``longest`` at every batch size."""
    written = spec.speculator.schedule if spec.speculator is not None else None
    if not written:
        return [Range(1, None, longest)]
    return [Range(r.from_batch, r.to_batch, r.tokens) for r in written]


def _ranges(stored: Sequence[api.ScheduleRange] | None) -> list[Range] | None:
    return None if stored is None else [Range(r.from_batch, r.to_batch, r.tokens) for r in stored]


def _stored(body: dict[str, Any]) -> api.Speculation | None:
    found = (body.get("status") or {}).get("speculation")
    if not found:
        return None
    try:
        return api.Speculation.model_validate(found)
    except ValidationError:
        return None


def running_schedule(
    spec: api.SpeculativeDeploymentSpec, body: dict[str, Any]
) -> api.SpeculativeDeploymentSpec:
    """``spec`` (effective: its token count resolved) running the schedule status says was
    applied, under policy Apply; as it is otherwise, or when that schedule no longer fits the
    draft length (the spec changed since). A schedule drafting the longest length everywhere
    is rendered as none, so Apply alone changes no command."""
    speculator = spec.speculator
    stored = _stored(body)
    if speculator is None or speculator.num_speculative_tokens is None or _adaptive(spec).policy != "Apply":
        return spec
    applied = _ranges(stored.applied_schedule) if stored is not None else None
    longest = speculator.num_speculative_tokens
    if applied is None or any(r.tokens > longest for r in applied):
        return spec
    schedule = (
        None
        if all(r.tokens == longest for r in applied)
        else [api.BatchRange(from_batch=r.from_batch, to_batch=r.to_batch, tokens=r.tokens) for r in applied]
    )
    return spec.model_copy(update={"speculator": speculator.model_copy(update={"schedule": schedule})})


def _described(schedule: Sequence[Range]) -> str:
    parts = [
        f"{r.tokens} at batch {r.from_batch}" + ("+" if r.to_batch is None else f"-{r.to_batch}")
        for r in schedule
    ]
    return ", ".join(parts)


def _status_ranges(
    schedule: Sequence[Range], curve: CostCurve | None, per_position: Sequence[float]
) -> list[api.ScheduleRange]:
    """The ranges with the expected speed-up at the first measured concurrency each holds."""
    expected = predicted(curve, per_position, schedule) if curve is not None and schedule else []
    out = []
    for r in schedule:
        at = None
        if curve is not None:
            inside = [
                i
                for i, c in enumerate(curve.concurrencies)
                if c >= r.from_batch and (r.to_batch is None or c <= r.to_batch)
            ]
            value = expected[inside[0]] if inside else None
            at = None if value is None else f"{value:.2f}"
        out.append(
            api.ScheduleRange(
                from_batch=r.from_batch, to_batch=r.to_batch, tokens=r.tokens, expected_speedup=at
            )
        )
    return out


def _basis(
    figures: api.Acceptance | None,
    running: Sequence[Range],
    longest: int,
    stored: api.Speculation | None,
    curve: CostCurve | None,
) -> api.SpeculationBasis | None:
    """Acceptance per position counts only when every batch size drafted ``longest`` (under a
    schedule the later positions are diluted by the steps that drafted fewer); else the stored
    basis stands, however old, while it was measured at this length."""
    benchmark = curve.measured_at if curve is not None else None
    uniform = all(r.tokens == longest for r in running)
    if figures is not None and uniform and len(figures.per_position) >= longest:
        return api.SpeculationBasis(
            per_position=figures.per_position[:longest],
            mean_length=figures.mean_length,
            tokens=longest,
            draft_tokens=figures.draft_tokens,
            measured_at=figures.measured_at,
            benchmark_measured_at=benchmark,
        )
    kept = stored.basis if stored is not None else None
    if kept is None or kept.tokens != longest:
        return None
    return kept.model_copy(update={"benchmark_measured_at": benchmark})


def _bench_command(longest: int) -> str:
    """The benchmark that measures every draft length up to ``longest`` and the idle draft, for a
    message to give."""
    return f"specdeploy bench NAME --tokens 0,idle,{','.join(map(str, range(1, longest + 1)))}"


def _recommend(
    basis: api.SpeculationBasis | None,
    curve: CostCurve | None,
    longest: int,
    acceptance: api.AcceptancePolicy,
) -> tuple[list[Range], str, str]:
    """(schedule, reason, message): empty while there is nothing to recommend from."""
    if basis is None:
        return (
            [],
            WAITING,
            f"no acceptance per position measured yet with every batch size drafting {longest} tokens "
            f"({acceptance.min_draft_tokens} draft tokens within {acceptance.window_seconds}s, "
            "spec.acceptance); the recommendation starts from it",
        )
    measured = (
        f"acceptance per position {', '.join(basis.per_position)} (mean length {basis.mean_length}, "
        f"{basis.draft_tokens} draft tokens, measured {basis.measured_at})"
    )
    if Decimal(basis.mean_length) < Decimal(str(acceptance.min_mean_length)):
        return (
            [Range(1, None, 0)],
            TURN_OFF,
            f"turn speculation off: {measured} is below spec.acceptance.minMeanLength "
            f"{acceptance.min_mean_length:g}, so the speculator costs more than it saves at every batch size",
        )
    if curve is None:
        return (
            [],
            NO_BENCHMARK,
            f"{measured}; what each draft length costs on this hardware is not measured: run "
            f"{_bench_command(longest)}",
        )
    per_position = [float(a) for a in basis.per_position]
    chosen = drafting(curve, per_position, longest)
    if not chosen:
        return (
            [],
            NO_BENCHMARK,
            f"{measured}; the benchmark of {curve.measured_at} measured no draft length from 1 to {longest}: "
            f"run {_bench_command(longest)}",
        )
    schedule = schedule_of(curve, chosen)
    if all(r.tokens == 0 for r in schedule):
        expected = ", ".join(
            f"{choice.speedup:.2f}x (±{choice.noise:.0%}) "
            f"{f'drafting {choice.tokens}' if choice.tokens else 'with the draft idle'} at {c}"
            for choice, c in zip(chosen, curve.concurrencies, strict=True)
        )
        return (
            schedule,
            RECOMMENDED,
            f"turn speculation off: from {measured} and the cost per draft length benchmarked "
            f"{curve.measured_at}, the best draft length at each concurrency is expected to serve "
            f"{expected} of the baseline, which gains less where it pays, beyond the benchmark's noise, "
            "than it loses where it does not (a 0 beside ranges that draft still runs the draft)",
        )
    return (
        schedule,
        RECOMMENDED,
        f"{_described(schedule)} draft tokens: the highest expected output tokens/s from {measured} "
        f"and the cost per draft length benchmarked {curve.measured_at}",
    )


def _acceptance_worse(
    figures: api.Acceptance | None,
    basis: api.SpeculationBasis | None,
    curve: CostCurve | None,
    running: Sequence[Range],
    previous: Sequence[Range],
    min_gain: float,
) -> str | None:
    """Why the acceptance measured under the running schedule says the previous one would serve
    more, if it does. Only the first position is exact under a schedule (a draft of one token is
    a draft too), so the basis is scaled to it; acceptance that moves with the traffic alone
    moves both schedules' expectations and reverts nothing."""
    if (
        figures is None
        or basis is None
        or curve is None
        or not figures.per_position
        or not basis.per_position
    ):
        return None
    before, now = float(basis.per_position[0]), float(figures.per_position[0])
    if before <= 0:
        return None
    profile = [min(1.0, float(a) * now / before) for a in basis.per_position]
    for i, (new, old) in enumerate(
        zip(predicted(curve, profile, running), predicted(curve, profile, previous), strict=True)
    ):
        if new is not None and old is not None and old > (1 + min_gain) * new:
            return (
                f"acceptance at the first draft position is {figures.per_position[0]} since the change "
                f"({figures.drafts} drafts, measured {figures.measured_at}; {basis.per_position[0]} before), "
                f"at which the previous schedule is expected to serve {old / new - 1:.0%} more at "
                f"concurrency {curve.concurrencies[i]}"
            )
    return None


def _benchmark_worse(
    curve: CostCurve | None,
    command: str,
    applied_at: str | None,
    running: Sequence[Range],
    previous: Sequence[Range],
    min_gain: float,
) -> str | None:
    """Why a benchmark of the running schedule shows it was worse than the previous one, if it
    does. Only concurrencies where the two draft differently are compared: elsewhere the run
    measured one draft length twice (the pair and its static copy), and how far those figures
    differ is the run's own noise, which a deficit must exceed as well as ``minGain``."""
    if curve is None or curve.command != command or applied_at is None or curve.measured_at <= applied_at:
        return None
    noise, compared = 0.0, []
    for i, concurrency in enumerate(curve.concurrencies):
        now, before = tokens_at(running, concurrency), tokens_at(previous, concurrency)
        if before not in curve.throughput:
            continue
        if before == now:
            noise = max(noise, abs(1 - curve.running[i] / curve.throughput[now][i]))
        else:
            compared.append((i, concurrency, before))
    margin = max(min_gain, noise)
    for i, concurrency, tokens in compared:
        previously = curve.throughput[tokens][i]
        if curve.running[i] < (1 - margin) * previously:
            return (
                f"the benchmark of {curve.measured_at} measured {curve.running[i]:g} output tokens/s at "
                f"concurrency {concurrency} against {previously:g} drafting {tokens} there as before, "
                f"beyond the run's own noise of {noise:.0%}"
            )
    return None


def _at(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        return datetime.strptime(text, api.TIME_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None


def benchmark_hold(body: dict[str, Any], now: datetime) -> datetime | None:
    """Until when a ``specdeploy bench`` of the resource holds what runs (its run's expiry, from
    ``api.BENCHMARK_RUNNING_ANNOTATION``); None when no run does, or the run it names expired
    (a benchmark killed before it could take the annotation off holds nothing for ever)."""
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    until = _at(annotations.get(api.BENCHMARK_RUNNING_ANNOTATION))
    return until if until is not None and now < until else None


def decide(
    spec: api.SpeculativeDeploymentSpec,
    body: dict[str, Any],
    figures: api.Acceptance | None,
    curve: CostCurve | None,
    command: str,
    now: datetime,
) -> Decision:
    """``status.speculation`` for an effective ``spec`` whose engines run ``command`` (its
    digest), ``figures`` the acceptance status holds for it, ``curve`` the resource's latest
    benchmark of draft lengths."""
    adaptive = _adaptive(spec)
    speculator = spec.speculator
    if adaptive.policy == "Off" or speculator is None or speculator.num_speculative_tokens is None:
        return Decision(None)
    facts = enginefacts.facts_for(spec.engine.name)
    if not facts.per_batch_size_draft_length:
        return Decision(
            api.Speculation(
                policy=adaptive.policy,
                reason=UNSUPPORTED,
                message=f"adaptive speculation needs an engine that takes a draft length per batch size; "
                f"{facts.display_name} does not",
            )
        )
    longest = speculator.num_speculative_tokens
    stored = _stored(body)
    running_spec = running_schedule(spec, body)
    running = own_schedule(running_spec, longest)
    basis = _basis(figures, running, longest, stored, curve)
    schedule, reason, message = _recommend(basis, curve, longest, spec.acceptance)
    per_position = [float(a) for a in basis.per_position] if basis is not None else []
    notices: list[Notice] = []
    stored_recommendation = _ranges(stored.recommended_schedule) if stored is not None else None
    if schedule and schedule != stored_recommendation:
        notices.append(("Normal", RECOMMENDATION, message))
    speculation = api.Speculation(
        policy=adaptive.policy,
        reason=reason,
        message=message,
        recommended_schedule=_status_ranges(schedule, curve, per_position),
        basis=basis,
    )
    if adaptive.policy != "Apply":
        return Decision(speculation, tuple(notices))
    return _apply(
        spec, adaptive, speculation, stored, running, schedule, figures, curve, command, now, notices,
        benchmark_hold(body, now),
    )  # fmt: skip


def _apply(
    spec: api.SpeculativeDeploymentSpec,
    adaptive: api.Adaptive,
    speculation: api.Speculation,
    stored: api.Speculation | None,
    running: list[Range],
    schedule: list[Range],
    figures: api.Acceptance | None,
    curve: CostCurve | None,
    command: str,
    now: datetime,
    notices: list[Notice],
    held_until: datetime | None,
) -> Decision:
    """The guard rails of policy Apply, in order: change nothing while a benchmark measures the
    resource (until ``held_until``), revert a change measured worse, probe when speculation has
    been off for ``probeIntervalSeconds``, else apply a recommendation that gains ``minGain`` at
    most once per ``minIntervalSeconds``."""
    assert spec.speculator is not None and spec.speculator.num_speculative_tokens is not None
    own = own_schedule(spec, spec.speculator.num_speculative_tokens)
    rendered = list(running)
    applied_at = stored.applied_at if stored is not None else None
    previous = _ranges(stored.previous_schedule) if stored is not None else None
    rejected = _ranges(stored.rejected_schedule) if stored is not None else None
    turned_off = stored.turned_off if stored is not None else None
    stored_benchmark = stored.basis.benchmark_measured_at if stored is not None and stored.basis else None
    if curve is not None and stored_benchmark != curve.measured_at:
        rejected = None  # a new benchmark: what it measured decides again
    stamp = now.strftime(api.TIME_FORMAT)
    since = _at(applied_at)
    per_position = [float(a) for a in speculation.basis.per_position] if speculation.basis else []
    message = speculation.message
    worse = None
    if previous is not None and held_until is None:
        worse = _acceptance_worse(
            figures, stored.basis if stored is not None else None, curve, running, previous, adaptive.min_gain
        ) or _benchmark_worse(curve, command, applied_at, running, previous, adaptive.min_gain)
    if held_until is not None:
        message = (
            f"{message}; nothing changes while specdeploy bench measures it "
            f"({api.BENCHMARK_RUNNING_ANNOTATION} until {held_until.strftime(api.TIME_FORMAT)})"
        )
    elif worse is not None and previous is not None:
        notices.append(("Warning", REVERTED, f"back to {_described(previous)} draft tokens: {worse}"))
        rejected, running, previous, applied_at = running, previous, None, stamp
        message = f"reverted to {_described(running)}: {worse}; {message}"
    elif (
        all(r.tokens == 0 for r in running)
        and any(r.tokens for r in own)
        and since is not None
        and now - since >= probe_wait(adaptive, stored)
    ):
        notices.append(
            (
                "Normal",
                PROBING,
                f"speculation has been off since {applied_at}: running {_described(own)} "
                "draft tokens again to measure acceptance",
            )
        )
        previous, running, applied_at = running, own, stamp
        message = f"probing: {_described(own)} draft tokens run to measure acceptance; {message}"
    elif schedule and schedule != running and schedule != rejected:
        waited = since is None or now - since >= timedelta(seconds=adaptive.min_interval_seconds)
        predicted_gain = gain(curve, per_position, schedule, running) if curve is not None else None
        turning_off = speculation.reason == TURN_OFF and curve is None
        if not waited:
            message = f"{message}; {HELD} after {applied_at}"
        elif turning_off or (predicted_gain is not None and predicted_gain >= adaptive.min_gain):
            gained = (
                "" if predicted_gain is None else f" (expected {predicted_gain:+.0%} output tokens/s at best)"
            )
            notices.append(
                (
                    "Normal",
                    APPLIED,
                    f"running {_described(schedule)} draft tokens{gained}: {speculation.message}",
                )
            )
            previous, running, applied_at = running, schedule, stamp
            off = all(r.tokens == 0 for r in schedule)
            turned_off = (turned_off or 0) + 1 if off else None
        else:
            shown = "unknown" if predicted_gain is None else f"{predicted_gain:+.1%}"
            message = (
                f"{message}; not applied: expected gain {shown} is below spec.speculator.adaptive.minGain "
                f"{adaptive.min_gain:g}"
            )
    return Decision(
        speculation.model_copy(
            update={
                "message": message,
                "applied_schedule": _status_ranges(running, curve, per_position),
                "applied_at": applied_at,
                "previous_schedule": _status_ranges(previous, curve, per_position) if previous else None,
                "rejected_schedule": _status_ranges(rejected, curve, per_position) if rejected else None,
                "turned_off": turned_off,
            }
        ),
        tuple(notices),
        reschedule=running != rendered,
    )


def probe_wait(adaptive: api.Adaptive, stored: api.Speculation | None) -> timedelta:
    """How long speculation stays off before a probe: ``probeIntervalSeconds``, doubled for each
    time it was turned off again since it last ran by recommendation, up to PROBE_BACKOFF_CAP
    times (a draft that never pays costs a few rollouts a day, not two an hour)."""
    offs = stored.turned_off if stored is not None and stored.turned_off else 1
    return timedelta(seconds=adaptive.probe_interval_seconds * min(2 ** (offs - 1), PROBE_BACKOFF_CAP))


def due(body: dict[str, Any], now: datetime) -> bool:
    """Whether a guard rail of policy Apply expired since the last pass, so a pass would change
    the running schedule: speculation off for ``probeIntervalSeconds``, or a recommendation
    held back by ``minIntervalSeconds``. Read by the engine metrics reader each round: the
    operator keeps no timer per resource."""
    found = (body.get("status") or {}).get("speculation") or {}
    if found.get("policy") != "Apply" or not found.get("appliedAt"):
        return False  # what nearly every resource says: decided without parsing the rest
    stored = _stored(body)
    if stored is None or stored.applied_at is None or stored.applied_schedule is None:
        return False
    if benchmark_hold(body, now) is not None:
        return False  # the pass after the benchmark, which takes the annotation off, decides
    since = _at(stored.applied_at)
    if since is None:
        return False
    try:
        adaptive = api.Adaptive.model_validate(
            ((body.get("spec") or {}).get("speculator") or {}).get("adaptive") or {}
        )
    except ValidationError:
        return False
    applied = _ranges(stored.applied_schedule) or []
    recommended = _ranges(stored.recommended_schedule) or []
    if all(r.tokens == 0 for r in applied):
        return now - since >= probe_wait(adaptive, stored)
    held = bool(recommended) and recommended != applied and recommended != _ranges(stored.rejected_schedule)
    return (
        held
        and "minIntervalSeconds" in stored.message
        and now - since >= timedelta(seconds=adaptive.min_interval_seconds)
    )
