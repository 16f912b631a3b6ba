"""Which condition transitions become Kubernetes Events, and posting them the way client-go does.

A person reads Events (``kubectl describe``) to find what went wrong and when the milestones
happened, so only those post one: a Warning for a failure or refusal, a Normal Event for ready,
rolled out, scaled and speculation judged. Intermediate states of a healthy start (waiting for
replicas or samples) post none; the conditions hold them. :data:`RULES` is the table, and
docs/api.md shows it (tests/unit/test_events.py keeps the two the same).

Posting follows client-go's event recorder: an Event identical to one posted for the same object
within :data:`AGGREGATE_WINDOW_S` raises that Event's ``count`` and ``lastTimestamp`` instead of
adding another, remembered in a bounded LRU.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from specdeploy import api
from specdeploy.controller import metrics
from specdeploy.controller.conditions import Transition

EventType = Literal["Normal", "Warning"]
# client-go's aggregation interval and LRU size (tools/record/events_cache.go).
AGGREGATE_WINDOW_S = 600.0
AGGREGATE_CAPACITY = 4096
SCALED = "Scaled"


@dataclass(frozen=True, slots=True)
class Rule:
    """Transitions of ``condition`` to ``status`` (with one of ``reasons``; None: any) post an
    Event of ``event`` type (None: no Event); ``at_start``: also when the condition first
    appears on a new resource. The first rule that matches decides."""

    condition: str
    status: str
    reasons: frozenset[str] | None
    event: EventType | None
    at_start: bool
    why: str


def _rule(
    condition: str,
    status: str,
    reasons: Iterable[str] | None,
    event: EventType | None,
    at_start: bool,
    why: str,
) -> Rule:
    return Rule(condition, status, None if reasons is None else frozenset(reasons), event, at_start, why)


RULES: tuple[Rule, ...] = (
    _rule(api.READY, "True", ("Ready", "ScaledToZero"), "Normal", True,
          "the milestone: the pair serves (or is scaled to zero, as asked)"),
    _rule(api.READY, "True", None, None, False,
          "PreviousVersionServing: the Degraded Warning says why the new spec is blocked"),
    _rule(api.READY, "False", None, None, False,
          "a rollout under way (a new resource, a scale up); a failure behind it is Degraded's Warning"),
    _rule(api.PROGRESSING, "False", ("RolloutComplete",), "Normal", False,
          "a change rolled out; folded into the Ready Event when both happen at once"),
    _rule(api.PROGRESSING, "True", None, None, False, "a rollout progressing as it should"),
    _rule(api.PROGRESSING, "False", None, None, False, "blocked: Degraded's Warning carries the reason"),
    _rule(api.DEGRADED, "True", None, "Warning", True,
          "a failure or refusal, named by the reason (PairingFailed, NoNodeFits, EngineCrashLoop, ...)"),
    _rule(api.DEGRADED, "False", None, None, False, "recovery: shown by the Ready or RolloutComplete Event"),
    _rule(api.PAIRING_VERIFIED, "False", None, None, False,
          "a failed check blocks the resource: Degraded's Warning carries its message"),
    _rule(api.PAIRING_VERIFIED, "True", None, None, False, "the check passed, as on every healthy start"),
    _rule(api.PAIRING_VERIFIED, "Unknown", None, None, False,
          "not verifiable yet (hub unreachable, ...): blocked, Degraded's Warning carries it"),
    _rule(api.SCHEDULABLE, "False", None, None, False,
          "no plan blocks the resource: Degraded's Warning has the same reason and message"),
    _rule(api.SCHEDULABLE, "True", None, None, False, "planned, as on every healthy start"),
    _rule(api.SPECULATION_EFFECTIVE, "True", None, "Normal", True, "speculation judged: it pays"),
    _rule(api.SPECULATION_EFFECTIVE, "False", None, "Warning", True,
          "speculation judged: it does not pay; the message says what to try"),
    _rule(api.SPECULATION_EFFECTIVE, "Unknown", None, None, False,
          "waiting for samples, metrics unavailable or not serving: the condition holds it"),
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Notice:
    """One Event to post on a SpeculativeDeployment."""

    type: EventType
    reason: str
    message: str


def rule_for(transition: Transition) -> Rule | None:
    """The first rule matching ``transition`` (every condition and status has one)."""
    for rule in RULES:
        reason_matches = rule.reasons is None or transition.reason in rule.reasons
        if rule.condition == transition.type and rule.status == transition.status and reason_matches:
            return rule
    return None


def notices(transitions: Iterable[Transition]) -> list[Notice]:
    """The Events a pass's condition transitions post, by :data:`RULES`; a rollout completing in
    the pass that turns Ready is one piece of news (Ready), and identical notices are one."""
    found: list[Notice] = []
    ready = False
    for t in transitions:
        rule = rule_for(t)
        if rule is None or rule.event is None or (t.appeared and not rule.at_start):
            continue
        ready = ready or t.type == api.READY
        notice = Notice(rule.event, t.reason, f"{t.type}={t.status}: {t.message}")
        if notice not in found:
            found.append(notice)
    if ready:
        found = [n for n in found if n.reason != "RolloutComplete"]
    return found


def scaled(before: int, after: int) -> Notice:
    """The Normal Event of a pass that changed the engine child's replicas."""
    return Notice("Normal", SCALED, f"scaled from {before} to {after} replicas")


class EventWriter(Protocol):
    """The two API calls the recorder makes (``kube.KubeClient``'s)."""

    def post_event(
        self, involved: dict[str, Any], type_: str, reason: str, message: str, name: str | None = None
    ) -> str | None: ...

    def raise_event_count(self, namespace: str, name: str, count: int) -> bool: ...


@dataclass(slots=True)
class _Posted:
    name: str
    count: int
    at: float


class EventRecorder:
    """Posts Events, aggregating repeats: an identical Event (same object, type, reason and
    message) within the window raises the first one's count instead of adding another.

    Called from the reconciler's I/O threads, hence the lock around the LRU.
    """

    def __init__(
        self,
        writer: EventWriter,
        clock: Callable[[], float] = time.monotonic,
        window: float = AGGREGATE_WINDOW_S,
        capacity: int = AGGREGATE_CAPACITY,
    ) -> None:
        self.writer = writer
        self.clock = clock
        self.window = window
        self.capacity = capacity
        self._posted: OrderedDict[tuple[str, ...], _Posted] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, involved: dict[str, Any], type_: str, reason: str, message: str) -> None:
        meta = involved["metadata"]
        key = (meta["namespace"], meta["name"], str(meta.get("uid")), type_, reason, message)
        now = self.clock()
        with self._lock:
            seen = self._posted.get(key)
            if seen is not None and now - seen.at > self.window:
                seen = None
        if seen is not None and self.writer.raise_event_count(meta["namespace"], seen.name, seen.count + 1):
            metrics.EVENTS.labels(type_, "aggregated").inc()
            self._remember(key, _Posted(seen.name, seen.count + 1, now))
            return
        name = self.writer.post_event(involved, type_, reason, message)
        if name is None:
            metrics.EVENTS.labels(type_, "failed").inc()
            return
        metrics.EVENTS.labels(type_, "posted").inc()
        self._remember(key, _Posted(name, 1, now))

    def _remember(self, key: tuple[str, ...], posted: _Posted) -> None:
        with self._lock:
            self._posted[key] = posted
            self._posted.move_to_end(key)
            while len(self._posted) > self.capacity:
                self._posted.popitem(last=False)
