"""From a window of counters to the figures status shows and the SpeculationEffective condition.

Pure: the reader and the reconcile both call :func:`judge`, the reader to decide whether a
reconcile is due, the reconcile to write, so they cannot disagree. Figures are rewritten only
when they moved by more than their rounding and sampling noise, so steady traffic and an idle
cluster both write nothing, and a pair whose acceptance sits at the threshold does not flip its
verdict back and forth with every window.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_EVEN, Decimal

from specdeploy import api
from specdeploy.acceptance.counters import SpecCounters
from specdeploy.api import Acceptance, AcceptancePolicy, Condition
from specdeploy.children import ENGINE_PORT_NAME, METRICS_PATH

# A figure is rewritten when it moved at least this much, or twice its sampling noise when that
# is larger (few draft tokens): more than the rounding of two decimals.
RATE_STEP = Decimal("0.02")
LENGTH_STEP = Decimal("0.05")
CENTS = Decimal("0.01")

EFFECTIVE = "AcceptanceAboveThreshold"
LOW_ACCEPTANCE = "LowAcceptance"
NOT_SERVING = "NotServing"
METRICS_UNAVAILABLE = "MetricsUnavailable"
INSUFFICIENT_SAMPLES = "InsufficientSamples"

ADVICE = (
    "check the pairing (a draft trained for this verifier, revision and chat template), try "
    "another speculator, or serve the verifier without speculation"
)


@dataclass(frozen=True, slots=True)
class Reading:
    """One resource's window as the last read left it.

    ``command``: digest of the command whose pods were read (a reading of another command says
    nothing about this one); ``targets``: ready pods running it that were asked; ``answered``:
    those that returned speculative decoding counters; ``silent``: none has for a whole window
    (counted from the first round that asked this command's pods);
    ``failure``: why the first of the others did not.
    """

    command: str
    measured_at: datetime
    targets: int
    answered: int
    silent: bool
    failure: str | None
    counters: SpecCounters
    pods: int
    window_seconds: int


def decimal(value: float | Decimal) -> str:
    """Two decimals without trailing zeros: 0.9 -> "0.9", 1.0 -> "1", 3.756 -> "3.76"."""
    rounded = Decimal(value).quantize(CENTS, rounding=ROUND_HALF_EVEN)
    text = format(rounded, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def figures(reading: Reading) -> Acceptance:
    """Status figures of a window that holds at least one draft."""
    c = reading.counters
    rate = decimal(Decimal(c.accepted) / Decimal(c.draft_tokens)) if c.draft_tokens else "0"
    mean_length = decimal(1 + Decimal(c.accepted) / Decimal(c.drafts))
    return Acceptance(
        rate=rate,
        mean_length=mean_length,
        per_position=[decimal(Decimal(kept) / Decimal(c.drafts)) for kept in c.per_position],
        draft_tokens=c.draft_tokens,
        drafts=c.drafts,
        pods=reading.pods,
        window_seconds=reading.window_seconds,
        measured_at=reading.measured_at.strftime(api.TIME_FORMAT),
        summary=f"{rate} ({mean_length} tokens/step)",
    )


def _effective(acceptance: Acceptance, policy: AcceptancePolicy) -> bool:
    return Decimal(acceptance.mean_length) >= Decimal(str(policy.min_mean_length))


def _margins(acceptance: Acceptance) -> tuple[Decimal, Decimal]:
    """How far the rate and the mean length must move to be news: the steps, or twice the
    standard error of figures resting on this many draft tokens (binomial; the mean length
    moves k times the rate, k proposed tokens per step)."""
    rate = Decimal(acceptance.rate)
    tokens = Decimal(acceptance.draft_tokens)
    error = (rate * (1 - rate) / tokens).sqrt() if tokens else Decimal(0)
    per_step = tokens / Decimal(acceptance.drafts) if acceptance.drafts else Decimal(1)
    return max(RATE_STEP, 2 * error), max(LENGTH_STEP, 2 * per_step * error)


def moved(stored: Acceptance, new: Acceptance) -> bool:
    """True when ``new`` is worth a status write over ``stored``."""
    rate_margin, length_margin = _margins(new)
    return (
        abs(Decimal(new.rate) - Decimal(stored.rate)) >= rate_margin
        or abs(Decimal(new.mean_length) - Decimal(stored.mean_length)) >= length_margin
    )


def _measured(acceptance: Acceptance) -> str:
    return (
        f"mean acceptance length {acceptance.mean_length} tokens per verifier step (rate "
        f"{acceptance.rate}, {acceptance.draft_tokens} draft tokens over {acceptance.window_seconds}s "
        f"from {acceptance.pods} pod(s), measured {acceptance.measured_at})"
    )


def condition(
    acceptance: Acceptance | None,
    reading: Reading | None,
    serving: int,
    policy: AcceptancePolicy,
    previous: Condition | None = None,
) -> Condition:
    """SpeculationEffective from the figures status holds, else from why there are none.

    Until a pod answers (an operator just started, or its pods became Ready), a stored "why
    none" stands: a restart must not flip MetricsUnavailable to InsufficientSamples and back
    before its own window has run out.
    """
    threshold = f"spec.acceptance.minMeanLength {policy.min_mean_length:g}"
    if serving == 0:
        kept = "; the last figures stay in status.acceptance" if acceptance is not None else ""
        return Condition(
            type=api.SPECULATION_EFFECTIVE,
            status="Unknown",
            reason=NOT_SERVING,
            message=f"no ready engine pod runs the current command{kept}",
        )
    if acceptance is not None:
        if _effective(acceptance, policy):
            return Condition(
                type=api.SPECULATION_EFFECTIVE,
                status="True",
                reason=EFFECTIVE,
                message=f"{_measured(acceptance)} is at or above {threshold}",
            )
        return Condition(
            type=api.SPECULATION_EFFECTIVE,
            status="False",
            reason=LOW_ACCEPTANCE,
            message=(
                f"{_measured(acceptance)} is below {threshold}: the speculator costs GPU memory and "
                f"compute while saving few verifier steps; {ADVICE}"
            ),
        )
    waiting = (METRICS_UNAVAILABLE, INSUFFICIENT_SAMPLES)
    unanswered = reading is None or (reading.answered == 0 and not reading.silent)
    if unanswered and previous is not None and previous.reason in waiting:
        return previous
    if reading is not None and reading.silent:
        silent = (
            "no ready engine pod answered with speculative decoding counters in the last "
            f"{policy.window_seconds}s"
        )
        if (
            previous is not None
            and previous.reason == METRICS_UNAVAILABLE
            and previous.message.startswith(silent)
        ):
            # Which error a round met first (refused, timed out on a loaded operator) varies
            # from round to round: the first one seen stands, or every round would be a write.
            return previous
        return Condition(
            type=api.SPECULATION_EFFECTIVE,
            status="Unknown",
            reason=METRICS_UNAVAILABLE,
            message=(
                f"{silent} ({reading.failure}); the operator reads each ready pod's "
                f"{METRICS_PATH} on its named port {ENGINE_PORT_NAME}"
            ),
        )
    return Condition(
        type=api.SPECULATION_EFFECTIVE,
        status="Unknown",
        reason=INSUFFICIENT_SAMPLES,
        message=(
            f"fewer than {policy.min_draft_tokens} draft tokens (spec.acceptance.minDraftTokens) were "
            f"proposed in the last {policy.window_seconds}s (spec.acceptance.windowSeconds); "
            "acceptance is judged from live traffic"
        ),
    )


def judge(
    stored: Acceptance | None,
    reading: Reading | None,
    serving: int,
    policy: AcceptancePolicy,
    previous: Condition | None = None,
) -> tuple[Acceptance | None, Condition]:
    """The acceptance status should hold and its condition.

    ``stored``: the figures in status (None when absent or measured on another command);
    ``serving``: ready pods running the current command; ``previous``: the stored condition.
    New figures replace stored ones when
    the window holds ``minDraftTokens`` and they moved; otherwise stored figures stay, however
    old, since traffic that stopped says nothing new about the pair.
    """
    acceptance = stored
    if (
        reading is not None
        and reading.counters.drafts
        and reading.counters.draft_tokens >= policy.min_draft_tokens
    ):
        new = figures(reading)
        if stored is None or moved(stored, new):
            acceptance = new
    return acceptance, condition(acceptance, reading, serving, policy, previous)
