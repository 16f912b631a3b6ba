"""The engine metrics reader's rounds: whom it reads, how many at once, and what it hands on.

The watch caches are a small in-memory view and the engines' answers come from a fake fetch with
vLLM's counter names; the HTTP side is covered by tests/integration/test_engine_metrics_http.py and
the real engines by tests/e2e/test_acceptance.py.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from specdeploy.controller import status
from specdeploy.controller.engine_metrics import EngineMetricsReader, FetchError
from specdeploy.controller.pods import ContainerView, PodView, command_digest
from specdeploy.controller.workqueue import Key

COMMAND = ["vllm", "serve", "sandbox/tiny-qwen3", "--speculative-config", "{}"]
NS = "team"


def exposition(drafts: int, accepted: int, k: int = 3) -> str:
    """The speculative decoding counters as vLLM exposes them (two engine cores)."""
    lines = []
    for name, value in (
        ("drafts", drafts),
        ("draft_tokens", drafts * k),
        ("accepted_tokens", accepted),
    ):
        family = f"vllm:spec_decode_num_{name}"
        lines += [f"# HELP {family}_total x", f"# TYPE {family}_total counter"]
        half = value // 2
        for engine, part in (("0", half), ("1", value - half)):
            lines.append(f'{family}_total{{engine="{engine}",model_name="m"}} {part}.0')
    lines += ["# HELP vllm:num_requests_running x", "# TYPE vllm:num_requests_running gauge"]
    lines.append('vllm:num_requests_running{engine="0",model_name="m"} 1.0')
    return "\n".join(lines) + "\n"


def pod(
    name: str,
    ip: str,
    *,
    ready: bool = True,
    command: list[str] = COMMAND,
    restarts: int = 0,
    serving_since: float | None = None,
    engine: str = "vllm",
) -> PodView:
    container = ContainerView("engine", "img", restarts, None, "", None, None)
    return PodView(
        name=name,
        phase="Running",
        deleting=False,
        ready=ready,
        containers=(container,),
        engine=engine,
        ip=ip,
        port=8000,
        command=command_digest(command),
        serving_since=serving_since,
    )


def resource(name: str, **acceptance: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": NS},
        "spec": {"acceptance": {"minDraftTokens": 100, "windowSeconds": 300, **acceptance}},
        "status": {"command": COMMAND, "readyReplicas": 1},
    }


@dataclass
class View:
    resources: dict[Key, dict[str, Any]] = field(default_factory=dict)
    pod_views: dict[Key, list[PodView]] = field(default_factory=dict)

    def resource(self, key: Key) -> dict[str, Any] | None:
        return self.resources.get(key)

    def resource_keys(self) -> list[Key]:
        return list(self.resources)

    def pods(self, key: Key) -> list[PodView]:
        return self.pod_views.get(key, [])


@dataclass
class FakeFetch:
    """Answers per URL (text, or an exception to raise); records the peak of concurrent calls."""

    answers: dict[str, str | Exception] = field(default_factory=dict)
    urls: list[str] = field(default_factory=list)
    in_flight: int = 0
    peak: int = 0

    async def __call__(self, url: str) -> str:
        self.urls.append(url)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(0.001)
            answer = self.answers[url]
            if isinstance(answer, Exception):
                raise answer
            return answer
        finally:
            self.in_flight -= 1

    async def close(self) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


WALL = datetime(2026, 12, 1, tzinfo=UTC)


def reader(fetch: FakeFetch, clock: Clock, concurrency: int = 32) -> EngineMetricsReader:
    return EngineMetricsReader(
        fetch,
        concurrency=concurrency,
        clock=clock,
        wall_clock=lambda: WALL,
        jitter=lambda: 0.0,
    )


def url(ip: str) -> str:
    return f"http://{ip}:8000/metrics"


def add_pair(view: View, name: str, ip: str, **pod_fields: Any) -> Key:
    """The resource ``name`` with one serving pod, ``name``-a at ``ip``."""
    key = (NS, name)
    view.resources[key] = resource(name)
    view.pod_views[key] = [pod(f"{name}-a", ip, **pod_fields)]
    return key


def one_pair(view: View, **pod_fields: Any) -> Key:
    """The resource "pair" with one serving pod, pair-a at 10.0.0.1."""
    return add_pair(view, "pair", "10.0.0.1", **pod_fields)


def test_only_ready_pods_running_the_status_command_are_read() -> None:
    view, fetch, clock = View(), FakeFetch(), Clock()
    key = (NS, "pair")
    view.resources[key] = resource("pair")
    view.pod_views[key] = [
        pod("pair-a", "10.0.0.1"),
        pod("pair-b", "10.0.0.2", ready=False),
        pod("pair-c", "10.0.0.3", command=[*COMMAND, "--old-flag"]),
        pod("pair-d", "fd00::4"),
    ]
    view.resources[(NS, "unserved")] = resource("unserved")
    fetch.answers = {url("10.0.0.1"): exposition(0, 0), "http://[fd00::4]:8000/metrics": exposition(0, 0)}
    asyncio.run(reader(fetch, clock).read_round(view))
    assert sorted(fetch.urls) == ["http://10.0.0.1:8000/metrics", "http://[fd00::4]:8000/metrics"]


def test_the_window_fills_and_a_reconcile_is_asked_for_once() -> None:
    view, fetch, clock = View(), FakeFetch(), Clock()
    key = one_pair(view)
    subject = reader(fetch, clock)

    fetch.answers[url("10.0.0.1")] = exposition(0, 0)
    # Stored status says NotServing; with a ready pod the verdict is InsufficientSamples.
    assert asyncio.run(subject.read_round(view)) == [key]
    view.resources[key]["status"]["conditions"] = [
        {
            "type": "SpeculationEffective",
            "status": "Unknown",
            "reason": "InsufficientSamples",
            "message": (
                "fewer than 100 draft tokens (spec.acceptance.minDraftTokens) were proposed in the last "
                "300s (spec.acceptance.windowSeconds); acceptance is judged from live traffic"
            ),
        }
    ]
    clock.now = 30
    fetch.answers[url("10.0.0.1")] = exposition(10, 30)  # 30 draft tokens: still too few
    assert asyncio.run(subject.read_round(view)) == []
    clock.now = 60
    fetch.answers[url("10.0.0.1")] = exposition(50, 150)
    assert asyncio.run(subject.read_round(view)) == [key]
    found = subject.reading(key)
    assert found is not None and (found.counters.drafts, found.counters.accepted) == (50, 150)
    assert found.window_seconds == 60


def test_a_pod_ready_before_its_deployment_counts_it_asks_for_no_reconcile() -> None:
    """Status records no ready replica yet (the pod's watch runs ahead of its Deployment's): the
    verdict stays NotServing until the pass that records the ready replica, so nothing moves."""
    view, fetch, clock = View(), FakeFetch(), Clock()
    key = one_pair(view)
    view.resources[key]["status"]["readyReplicas"] = 0
    view.resources[key]["status"]["conditions"] = [
        {
            "type": "SpeculationEffective",
            "status": "Unknown",
            "reason": "NotServing",
            "message": "no ready engine pod runs the current command",
        }
    ]
    fetch.answers[url("10.0.0.1")] = exposition(0, 0)
    assert asyncio.run(reader(fetch, clock).read_round(view)) == []
    assert fetch.urls == [url("10.0.0.1")]


def test_unreachable_pods_are_reported_and_do_not_stop_the_others() -> None:
    view, fetch, clock = View(), FakeFetch(), Clock()
    for i in range(3):
        add_pair(view, f"pair-{i}", f"10.0.0.{i}")
    fetch.answers = {
        url("10.0.0.0"): FetchError("no answer within 5s"),
        url("10.0.0.1"): "not an exposition {{{",
        url("10.0.0.2"): exposition(1, 3),
    }
    subject = reader(fetch, clock)
    asyncio.run(subject.read_round(view))
    broken, garbled, fine = (subject.reading((NS, f"pair-{i}")) for i in range(3))
    assert broken is not None and broken.answered == 0
    assert broken.failure == "pod pair-0-a: no answer within 5s"
    assert garbled is not None and garbled.answered == 0 and garbled.failure is not None
    assert fine is not None and fine.answered == 1 and fine.failure is None


def test_pods_are_unavailable_only_after_a_whole_silent_window() -> None:
    """A pod that has not answered yet is news only once a whole window (300 s here) has gone by
    since its first round: a new pod, or every pod after an operator restart, fails a round or
    two, and that must not cost a status write each way."""
    view, fetch, clock = View(), FakeFetch(), Clock()
    key = one_pair(view)
    fetch.answers[url("10.0.0.1")] = FetchError("Connection refused")
    subject = reader(fetch, clock)
    for now, silent in ((0, False), (300, False), (301, True)):
        clock.now = now
        asyncio.run(subject.read_round(view))
        found = subject.reading(key)
        assert found is not None and found.answered == 0 and found.silent is silent, now
    _, condition = status.speculation(view.resources[key], COMMAND, found, 1)
    assert condition.reason == "MetricsUnavailable"
    # An answer ends it; the next silent window counts from that answer.
    clock.now = 330
    fetch.answers[url("10.0.0.1")] = exposition(0, 0)
    asyncio.run(subject.read_round(view))
    fetch.answers[url("10.0.0.1")] = FetchError("Connection refused")
    for now, silent in ((630, False), (631, True)):
        clock.now = now
        asyncio.run(subject.read_round(view))
        found = subject.reading(key)
        assert found is not None and found.silent is silent, now


def test_a_pod_of_an_unknown_engine_is_not_read_as_vllm() -> None:
    """A pod labelled with an engine this operator does not know (another release's, or no label)
    is not fetched and not parsed with vLLM's names: the failure says why and reaches the
    condition as MetricsUnavailable once the window has passed without an answer."""
    for label in ("tgi", ""):
        view, fetch, clock = View(), FakeFetch(), Clock()
        key = one_pair(view, engine=label)
        fetch.answers[url("10.0.0.1")] = exposition(50, 150)
        subject = reader(fetch, clock)
        assert asyncio.run(subject.read_round(view)) == [key]
        clock.now = 301
        asyncio.run(subject.read_round(view))
        assert fetch.urls == []
        found = subject.reading(key)
        assert found is not None and found.answered == 0 and found.counters.drafts == 0
        assert found.failure == (
            f"pod pair-a: unknown engine {label!r}; known: vllm, sglang (label specdeploy.io/engine)"
        )
        _, condition = status.speculation(view.resources[key], COMMAND, found, 1)
        assert (condition.status, condition.reason) == ("Unknown", "MetricsUnavailable")
        assert f"unknown engine {label!r}" in condition.message


def test_concurrency_is_bounded() -> None:
    view, fetch, clock = View(), FakeFetch(), Clock()
    for i in range(40):
        add_pair(view, f"pair-{i}", f"10.0.1.{i}")
        fetch.answers[url(f"10.0.1.{i}")] = exposition(0, 0)
    asyncio.run(reader(fetch, clock, concurrency=4).read_round(view))
    assert len(fetch.urls) == 40 and fetch.peak == 4


def test_a_resource_without_serving_pods_holds_no_state() -> None:
    view, fetch, clock = View(), FakeFetch(), Clock()
    key = one_pair(view)
    fetch.answers[url("10.0.0.1")] = exposition(0, 0)
    subject = reader(fetch, clock)
    asyncio.run(subject.read_round(view))
    assert len(subject) == 1 and subject.reading(key) is not None
    view.pod_views[key] = []
    asyncio.run(subject.read_round(view))
    assert len(subject) == 0 and subject.reading(key) is None


def test_a_restarting_engine_keeps_its_window_and_counts_from_zero_after() -> None:
    """Unready while it restarts, the pod is not read but not forgotten: once back, everything
    its new process counted is in the window, even what it counted before the first read."""
    view, fetch, clock = View(), FakeFetch(), Clock()
    key = (NS, "pair")
    view.resources[key] = resource("pair")
    subject = reader(fetch, clock)
    view.pod_views[key] = [pod("pair-a", "10.0.0.1")]
    fetch.answers[url("10.0.0.1")] = exposition(0, 0)
    asyncio.run(subject.read_round(view))
    clock.now = 30
    fetch.answers[url("10.0.0.1")] = exposition(100, 300)
    asyncio.run(subject.read_round(view))

    clock.now = 60
    view.pod_views[key] = [pod("pair-a", "10.0.0.1", ready=False, restarts=1)]
    fetch.urls.clear()
    asyncio.run(subject.read_round(view))
    assert fetch.urls == [] and len(subject) == 1

    clock.now = 400  # the old process's counts have left the window meanwhile
    view.pod_views[key] = [pod("pair-a", "10.0.0.1", restarts=1, serving_since=WALL.timestamp() - 5)]
    fetch.answers[url("10.0.0.1")] = exposition(20, 60)
    asyncio.run(subject.read_round(view))
    found = subject.reading(key)
    assert found is not None and (found.counters.drafts, found.counters.accepted) == (20, 60)


def test_a_new_command_starts_a_new_window() -> None:
    view, fetch, clock = View(), FakeFetch(), Clock()
    key = one_pair(view)
    subject = reader(fetch, clock)
    for now, drafts in ((0, 0), (30, 100)):
        clock.now = now
        fetch.answers[url("10.0.0.1")] = exposition(drafts, drafts * 3)
        asyncio.run(subject.read_round(view))
    before = subject.reading(key)
    assert before is not None and before.counters.drafts == 100

    new_command = [*COMMAND, "--max-num-seqs", "8"]
    view.resources[key]["status"]["command"] = new_command
    view.pod_views[key] = [pod("pair-b", "10.0.0.2", command=new_command)]
    fetch.answers[url("10.0.0.2")] = exposition(5, 0)
    clock.now = 60
    asyncio.run(subject.read_round(view))
    after = subject.reading(key)
    assert after is not None and after.counters.drafts == 0 and after.pods == 1


def test_a_new_engine_serving_before_its_first_read_loses_nothing() -> None:
    """Ready since the previous round, 20 s ago: its first read counts whole. On the reader's
    first round (an operator restart over old pods) and for a pod Ready before the previous
    round, the first read is a baseline."""
    view, fetch, clock = View(), FakeFetch(), Clock()
    subject = reader(fetch, clock)
    asyncio.run(subject.read_round(view))  # the first round, with nothing to read
    clock.now = 30
    for name, ip, age in (("new", "10.0.0.1", 20), ("old", "10.0.0.2", 3600)):
        add_pair(view, name, ip, serving_since=WALL.timestamp() - age)
        fetch.answers[url(ip)] = exposition(50, 150)
    asyncio.run(subject.read_round(view))
    new, old = subject.reading((NS, "new")), subject.reading((NS, "old"))
    assert new is not None and new.counters.draft_tokens == 150 and new.window_seconds == 20
    assert old is not None and old.counters.draft_tokens == 0
