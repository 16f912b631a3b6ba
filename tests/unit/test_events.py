"""The Event policy (which transitions post which Event), its table in docs/api.md, and the
recorder's aggregation of repeats."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from specdeploy import api
from specdeploy.acceptance.verdict import EFFECTIVE, INSUFFICIENT_SAMPLES, LOW_ACCEPTANCE, METRICS_UNAVAILABLE
from specdeploy.controller import events
from specdeploy.controller.conditions import Transition
from specdeploy.controller.events import EventRecorder, Notice
from specdeploy.controller.kube import EVENT_MESSAGE_LIMIT, event_message

API_DOC = Path(__file__).parents[2] / "docs" / "api.md"
TABLE_HEADING = "### Which transitions post an Event"


def _reasons(rule: events.Rule, earlier: list[events.Rule]) -> str:
    if rule.reasons is not None:
        return ", ".join(f"`{r}`" for r in sorted(rule.reasons))
    shadowed = any(e.condition == rule.condition and e.status == rule.status for e in earlier)
    return "any other" if shadowed else "any"


def expected_rows() -> list[str]:
    rows = []
    for i, rule in enumerate(events.RULES):
        event = f"{rule.event}, reason = the condition's" if rule.event else "none"
        start = "yes" if rule.at_start else "no"
        cells = [
            f"`{rule.condition}`",
            f"`{rule.status}`",
            _reasons(rule, list(events.RULES[:i])),
            event,
            start,
            rule.why,
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def documented_rows() -> list[str]:
    text = API_DOC.read_text()
    section = text[text.index(TABLE_HEADING) :]
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|---"))
    rows = []
    for line in lines[start + 1 :]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def test_the_policy_table_in_the_docs_is_the_one_the_operator_follows() -> None:
    assert documented_rows() == expected_rows()


def test_every_condition_status_pair_has_a_rule() -> None:
    for condition in api.CONDITION_ORDER:
        for status in ("True", "False", "Unknown"):
            if (condition, status) in {
                (api.READY, "Unknown"), (api.PROGRESSING, "Unknown"), (api.DEGRADED, "Unknown"),
                (api.SCHEDULABLE, "Unknown"),
            }:  # fmt: skip
                continue  # never set
            assert events.rule_for(Transition(condition, status, "AnyReason", "")) is not None, (
                condition,
                status,
            )


def t(type_: str, status: str, reason: str, message: str = "m", appeared: bool = False) -> Transition:
    return Transition(type_, status, reason, message, appeared)


def test_a_healthy_start_posts_nothing_until_ready() -> None:
    first = [
        t(api.READY, "False", "WaitingForReplicas", appeared=True),
        t(api.PROGRESSING, "True", "RollingOut", appeared=True),
        t(api.DEGRADED, "False", "AsExpected", appeared=True),
        t(api.PAIRING_VERIFIED, "True", "Compatible", appeared=True),
        t(api.SCHEDULABLE, "True", "Planned", appeared=True),
        t(api.SPECULATION_EFFECTIVE, "Unknown", "NotServing", appeared=True),
    ]
    assert events.notices(first) == []
    ready = [
        t(api.READY, "True", "Ready", "1/1 replicas ready"),
        t(api.PROGRESSING, "False", "RolloutComplete", "1/1 replicas ready"),
        t(api.SPECULATION_EFFECTIVE, "Unknown", INSUFFICIENT_SAMPLES),
    ]
    assert events.notices(ready) == [Notice("Normal", "Ready", "Ready=True: 1/1 replicas ready")]
    assert events.notices([t(api.SPECULATION_EFFECTIVE, "Unknown", METRICS_UNAVAILABLE)]) == []


def test_an_update_rolled_out_is_news_but_its_progress_is_not() -> None:
    assert events.notices([t(api.PROGRESSING, "True", "RollingOut")]) == []
    assert events.notices([t(api.READY, "False", "WaitingForReplicas")]) == []
    done = events.notices([t(api.PROGRESSING, "False", "RolloutComplete", "2/2 replicas ready")])
    assert done == [Notice("Normal", "RolloutComplete", "Progressing=False: 2/2 replicas ready")]


def test_failures_are_one_warning_and_recovery_none() -> None:
    blocked = [
        t(api.READY, "False", "NoNodeFits", "no node", appeared=True),
        t(api.PROGRESSING, "False", "NoNodeFits", "no node", appeared=True),
        t(api.DEGRADED, "True", "NoNodeFits", "no node", appeared=True),
        t(api.SCHEDULABLE, "False", "NoNodeFits", "no node", appeared=True),
    ]
    assert events.notices(blocked) == [Notice("Warning", "NoNodeFits", "Degraded=True: no node")]
    assert events.notices([t(api.DEGRADED, "True", "EngineCrashLoop", "pod p exited")]) == [
        Notice("Warning", "EngineCrashLoop", "Degraded=True: pod p exited")
    ]
    assert events.notices([t(api.DEGRADED, "False", "AsExpected")]) == []
    # The blocked spec's old Deployment serving is no good news of its own.
    assert events.notices([t(api.READY, "True", "PreviousVersionServing")]) == []


def test_speculation_judged_either_way_is_news() -> None:
    assert events.notices([t(api.SPECULATION_EFFECTIVE, "True", EFFECTIVE, "2.4")]) == [
        Notice("Normal", EFFECTIVE, "SpeculationEffective=True: 2.4")
    ]
    assert [n.type for n in events.notices([t(api.SPECULATION_EFFECTIVE, "False", LOW_ACCEPTANCE)])] == [
        "Warning"
    ]


@dataclass
class FakeWriter:
    posted: list[tuple[str, str, str, str]] = field(default_factory=list)
    raised: list[tuple[str, str, int]] = field(default_factory=list)
    expired: set[str] = field(default_factory=set)
    refuse: bool = False

    def post_event(
        self, involved: dict[str, Any], type_: str, reason: str, message: str, name: str | None = None
    ) -> str | None:
        if self.refuse:
            return None
        name = f"{involved['metadata']['name']}.{len(self.posted)}"
        self.posted.append((name, type_, reason, message))
        return name

    def raise_event_count(self, namespace: str, name: str, count: int) -> bool:
        if name in self.expired:
            return False
        self.raised.append((namespace, name, count))
        return True


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


def body(name: str = "pair", uid: str = "u1") -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "uid": uid}}


@pytest.fixture
def recorder() -> tuple[EventRecorder, FakeWriter, Clock]:
    writer, clock = FakeWriter(), Clock()
    return EventRecorder(writer, clock=clock, window=600, capacity=3), writer, clock


def test_a_repeat_within_the_window_raises_the_count(
    recorder: tuple[EventRecorder, FakeWriter, Clock],
) -> None:
    record, writer, clock = recorder
    for _ in range(3):
        record(body(), "Warning", "EngineCrashLoop", "pod p exited")
        clock.now += 60
    assert [p[0] for p in writer.posted] == ["pair.0"]
    assert writer.raised == [("ns", "pair.0", 2), ("ns", "pair.0", 3)]
    # Another message, another object, or the same object recreated (new uid): a new Event.
    record(body(), "Warning", "EngineCrashLoop", "pod q exited")
    record(body("other"), "Warning", "EngineCrashLoop", "pod p exited")
    record(body(uid="u2"), "Warning", "EngineCrashLoop", "pod p exited")
    assert len(writer.posted) == 4


def test_a_repeat_after_the_window_or_an_expired_event_is_posted_anew(
    recorder: tuple[EventRecorder, FakeWriter, Clock],
) -> None:
    record, writer, clock = recorder
    record(body(), "Normal", "Ready", "Ready=True: 1/1 replicas ready")
    clock.now += 601
    record(body(), "Normal", "Ready", "Ready=True: 1/1 replicas ready")
    assert len(writer.posted) == 2 and writer.raised == []
    writer.expired.add(writer.posted[-1][0])  # the apiserver's event TTL ran out
    clock.now += 1
    record(body(), "Normal", "Ready", "Ready=True: 1/1 replicas ready")
    assert len(writer.posted) == 3


def test_the_memory_of_posted_events_is_bounded(recorder: tuple[EventRecorder, FakeWriter, Clock]) -> None:
    record, writer, _ = recorder
    for i in range(5):
        record(body(f"pair-{i}"), "Warning", "NoNodeFits", "no node")
    assert len(record._posted) == 3
    record(body("pair-0"), "Warning", "NoNodeFits", "no node")  # forgotten (least recent): posted
    record(body("pair-4"), "Warning", "NoNodeFits", "no node")  # remembered: aggregated
    assert len(writer.posted) == 6 and len(writer.raised) == 1


def test_a_failed_post_is_not_remembered(recorder: tuple[EventRecorder, FakeWriter, Clock]) -> None:
    record, writer, _ = recorder
    writer.refuse = True
    record(body(), "Warning", "NoNodeFits", "no node")
    writer.refuse = False
    record(body(), "Warning", "NoNodeFits", "no node")
    assert len(writer.posted) == 1 and writer.raised == []


def test_a_long_message_keeps_its_start_and_its_end() -> None:
    message = "pod p-1 container engine exited: " + "x" * 2000 + " CUDA out of memory"
    cut = event_message(message)
    assert len(cut) <= EVENT_MESSAGE_LIMIT
    assert cut.startswith("pod p-1 container engine exited: ") and cut.endswith(" CUDA out of memory")
    assert event_message("short") == "short"
