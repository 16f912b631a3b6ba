"""kopf's per-event costs the operator removes (controller/kopf_tuning.py), against the kopf it runs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

import kopf
import pytest
from kopf._cogs.aiokits import aiotoggles
from kopf._cogs.clients import watching

from specdeploy.controller import kopf_tuning

kopf_tuning.quiet_toggle_sets()


def counting_wakeups(toggles: aiotoggles.ToggleSet) -> list[int]:
    """A counter of the set's notify_all calls (one per wake-up of every waiter)."""
    calls = [0]
    notify_all = toggles._condition.notify_all

    def counted() -> None:
        calls[0] += 1
        notify_all()

    toggles._condition.notify_all = counted  # type: ignore[method-assign]
    return calls


def test_waiters_for_an_empty_set_wake_once_when_the_last_object_is_indexed() -> None:
    async def scenario() -> tuple[int, list[bool]]:
        pending = aiotoggles.ToggleSet(all)
        wakeups = counting_wakeups(pending)
        blocker = await pending.make_toggle(name="listing")
        objects = [await pending.make_toggle(name=f"object {i}") for i in range(300)]
        waiters = [asyncio.create_task(pending.wait_for(True)) for _ in range(300)]
        await asyncio.sleep(0)
        for toggle in objects:
            await pending.drop_toggle(toggle)
            await pending.drop_toggle(toggle)
        await asyncio.sleep(0)
        held = [not w.done() for w in waiters]
        await pending.drop_toggle(blocker)
        await asyncio.wait_for(asyncio.gather(*waiters), timeout=5)
        return wakeups[0], held

    wakeups, held = asyncio.run(scenario())
    assert all(held), "no waiter may pass while the listing is still pending"
    # make_toggle on an empty set flips it from on to off (one wake-up); the last drop flips it
    # back (one more): 600 other joins and drops changed nothing.
    assert wakeups == 2


def test_a_waiter_for_off_still_wakes_when_a_toggle_joins() -> None:
    async def scenario() -> bool:
        pending = aiotoggles.ToggleSet(all)
        waiter = asyncio.create_task(pending.wait_for(False))
        await asyncio.sleep(0)
        await pending.make_toggle(name="object")
        await asyncio.wait_for(waiter, timeout=5)
        return waiter.done()

    assert asyncio.run(scenario())


def test_a_member_toggle_turned_on_still_wakes_its_waiters() -> None:
    async def scenario() -> bool:
        paused = aiotoggles.ToggleSet(any)
        toggle = await paused.make_toggle(False, name="peering")
        waiter = asyncio.create_task(paused.wait_for(True))
        await asyncio.sleep(0)
        await toggle.turn_to(True)
        await asyncio.wait_for(waiter, timeout=5)
        return paused.is_on()

    assert asyncio.run(scenario())


def test_no_diff_base_copies_nothing() -> None:
    body = cast(kopf.RawBody, {"metadata": {"name": "x", "labels": {"a": "b"}}, "spec": {"big": [1, 2]}})
    storage = kopf_tuning.NoDiffBase()
    assert storage.build(body=kopf.Body(body)) == {}
    assert storage.fetch(body=kopf.Body(body)) is None


def test_watched_objects_are_stripped_before_kopf_queues_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf's queueing reads the stream through the module attribute the operator replaces; each
    object leaves it without managedFields, and bookmarks pass through untouched."""
    from kopf._core.reactor import queueing

    arrived = {
        "type": "ADDED",
        "object": {"metadata": {"name": "pair", "managedFields": [{"manager": "kubectl"}]}},
    }

    async def kopf_stream(**_: object) -> AsyncIterator[object]:
        yield watching.Bookmark.LISTED
        yield arrived

    monkeypatch.setattr(kopf_tuning, "_KOPF_WATCH", kopf_stream)
    monkeypatch.setattr(watching, "infinite_watch", watching.infinite_watch)
    kopf_tuning.strip_watched_objects()
    assert queueing.watching is watching

    async def collect() -> list[object]:
        return [event async for event in queueing.watching.infinite_watch(resource=None)]

    events = asyncio.run(collect())
    assert events == [watching.Bookmark.LISTED, {"type": "ADDED", "object": {"metadata": {"name": "pair"}}}]


def test_engine_pods_arrive_thinned_and_other_kinds_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pod watch's objects keep only what the pod projection reads; other kinds keep their spec."""

    def arriving() -> dict[str, Any]:
        engine = {"name": "engine", "command": ["vllm"], "env": [{"name": "A", "value": "1"}]}
        body = {"metadata": {"name": "p"}, "spec": {"containers": [engine]}, "status": {"hostIP": "x"}}
        return {"type": "ADDED", "object": body}

    async def kopf_stream(**_: object) -> AsyncIterator[object]:
        yield arriving()

    monkeypatch.setattr(kopf_tuning, "_KOPF_WATCH", kopf_stream)
    monkeypatch.setattr(watching, "infinite_watch", watching.infinite_watch)
    kopf_tuning.strip_watched_objects()

    async def first(resource: kopf.Resource) -> Any:
        (event,) = [event async for event in watching.infinite_watch(resource=resource)]
        return event["object"]

    pod = asyncio.run(first(kopf.Resource("", "v1", "pods")))
    thinned = {"containers": [{"name": "engine", "command": ["vllm"]}]}
    assert pod == {"metadata": {"name": "p"}, "spec": thinned, "status": {}}
    deployment = asyncio.run(first(kopf.Resource("apps", "v1", "deployments")))
    assert deployment == arriving()["object"]
