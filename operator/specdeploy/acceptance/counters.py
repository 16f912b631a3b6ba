"""An engine's speculative decoding counters, read from its Prometheus exposition.

Each engine names them differently (its ``enginefacts`` record holds the names and how it
counts); all are reduced to one engine-neutral :class:`SpecCounters` (cumulative since the engine
process started), so the window and the figures never ask which engine produced them. The
exposition is parsed by ``prometheus_client``; only the lines of the families needed are handed
to it, since an engine's full exposition (latency histograms per label set) is a hundred times
larger than the few counters read here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from specdeploy.enginefacts import PerRequestMetrics, PerStepMetrics, SpecMetrics, facts_for

# Proposed tokens per step are at most 16 (spec.speculator.numSpeculativeTokens); a position
# label beyond this is not an engine's.
MAX_POSITIONS = 64


class NoSpeculationMetrics(ValueError):
    """The exposition has none of the engine's speculative decoding counters."""


@dataclass(frozen=True, slots=True)
class SpecCounters:
    """Speculative decoding totals of one engine process (or a sum or difference of them).

    ``drafts``: verifier steps that checked a proposal; ``draft_tokens``: tokens proposed;
    ``accepted``: proposed tokens the verifier kept; ``per_position[i]``: steps whose i-th
    proposed token was kept (empty when the engine does not count them).
    """

    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_position: tuple[int, ...] = ()

    def __add__(self, other: SpecCounters) -> SpecCounters:
        return SpecCounters(
            self.drafts + other.drafts,
            self.draft_tokens + other.draft_tokens,
            self.accepted + other.accepted,
            _pairwise(self.per_position, other.per_position, lambda a, b: a + b),
        )

    def since(self, earlier: SpecCounters) -> SpecCounters | None:
        """What was counted after ``earlier``; None when that is impossible for one process (a
        counter went down, or more was accepted than proposed): the process was restarted."""
        delta = SpecCounters(
            self.drafts - earlier.drafts,
            self.draft_tokens - earlier.draft_tokens,
            self.accepted - earlier.accepted,
            _pairwise(self.per_position, earlier.per_position, lambda a, b: a - b),
        )
        return delta if delta.consistent() else None

    def consistent(self) -> bool:
        """The invariants one engine's counting keeps: nothing negative, accepted <= proposed,
        and no position kept in more steps than there were."""
        return (
            min(self.drafts, self.draft_tokens, self.accepted, *self.per_position, 0) == 0
            and self.accepted <= self.draft_tokens
            and all(kept <= self.drafts for kept in self.per_position)
        )

    def __bool__(self) -> bool:
        return bool(self.drafts or self.draft_tokens or self.accepted)


def _pairwise(a: tuple[int, ...], b: tuple[int, ...], op: Callable[[int, int], int]) -> tuple[int, ...]:
    width = max(len(a), len(b))
    return tuple(op(a[i] if i < len(a) else 0, b[i] if i < len(b) else 0) for i in range(width))


def _samples(text: str, prefixes: tuple[str, ...]) -> Iterable[Sample]:
    """The samples of the families named by ``prefixes``: their lines (with HELP and TYPE) only."""
    wanted = [
        line
        for line in text.splitlines()
        if line.startswith(prefixes) or (line.startswith("# ") and line[7:].startswith(prefixes))
    ]
    for family in text_string_to_metric_families("\n".join(wanted) + "\n"):
        yield from family.samples


def _count(value: float) -> int:
    """A counter's value as a count; ValueError for what no engine counts (inf, nan)."""
    if not math.isfinite(value):
        raise ValueError(f"a counter of {value} is not a count")
    return round(value)


def _total(samples: list[Sample], name: str) -> int | None:
    """The sum over every label set (engine, model, streaming) of ``name``; None when absent."""
    values = [s.value for s in samples if s.name == name]
    return _count(sum(values)) if values else None


def _setting(samples: list[Sample], name: str) -> int | None:
    """A configuration gauge every scheduler exports alike (one per data-parallel group): one
    value, not their sum; None when absent."""
    values = [s.value for s in samples if s.name == name]
    return _count(max(values)) if values else None


def per_step_counters(names: PerStepMetrics, text: str) -> SpecCounters:
    """Counters of every verifier step (vLLM's ``vllm:spec_decode_num_{drafts,draft_tokens,
    accepted_tokens}_total`` and ``..._accepted_tokens_per_pos_total{position}``), summed over
    its engine cores."""
    samples = list(_samples(text, names.families))
    drafts = _total(samples, names.drafts)
    if drafts is None:
        raise NoSpeculationMetrics(f"no {names.drafts} in the exposition")
    by_position: dict[int, float] = {}
    for sample in samples:
        label = sample.labels.get("position", "")
        if sample.name == names.accepted_per_position and label.isdigit() and int(label) < MAX_POSITIONS:
            position = int(label)
            by_position[position] = by_position.get(position, 0.0) + sample.value
    width = max(by_position, default=-1) + 1
    return SpecCounters(
        drafts=drafts,
        draft_tokens=_total(samples, names.draft_tokens) or 0,
        accepted=_total(samples, names.accepted) or 0,
        per_position=tuple(_count(by_position.get(i, 0.0)) for i in range(width)),
    )


def per_request_counters(names: PerRequestMetrics, text: str) -> SpecCounters:
    """Counts of finished requests (SGLang's ``sglang:spec_verify_calls_total``: verifier steps,
    ``sglang:generation_tokens_total``: tokens generated, and ``sglang:num_requests_total``).

    A request's first token comes from prefill and each verify step yields the kept drafts plus
    one token of the verifier's own, so the kept drafts are tokens - requests - verify calls;
    the proposed ones are verify calls times the drafts per round its scheduler reports
    (``sglang:spec_num_draft_tokens`` - 1, else ``sglang:spec_num_steps``). No per-position
    counts. The verify-call counter has no sample until a speculative request finished: with
    the scheduler's gauges present, that reads as zero.
    """
    samples = list(_samples(text, names.families))
    num_draft_tokens = _setting(samples, names.draft_tokens_per_round) or 0
    steps = _setting(samples, names.steps_per_round)
    calls = _total(samples, names.verify_calls)
    if calls is None and steps is None and not num_draft_tokens:
        raise NoSpeculationMetrics(f"no {names.verify_calls} in the exposition")
    calls = calls or 0
    tokens = _total(samples, names.generation_tokens) or 0
    requests = _total(samples, names.requests) or 0
    per_round = num_draft_tokens - 1 if num_draft_tokens > 1 else steps or 0
    proposed = calls * per_round
    return SpecCounters(
        drafts=calls,
        draft_tokens=proposed,
        accepted=min(max(tokens - requests - calls, 0), proposed),
        per_position=(),
    )


def counters_from(names: SpecMetrics, text: str) -> SpecCounters:
    """The counters an exposition holds under ``names``; NoSpeculationMetrics when it has none."""
    if isinstance(names, PerStepMetrics):
        return per_step_counters(names, text)
    return per_request_counters(names, text)


def counters(engine: str, text: str) -> SpecCounters:
    """The engine's counters from its /metrics text; NoSpeculationMetrics when it exports none,
    ``enginefacts.UnknownEngine`` when no engine is called so."""
    return counters_from(facts_for(engine).metrics, text)
