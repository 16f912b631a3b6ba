"""kopf's per-event costs the operator removes (controller/kopf_tuning.py), against the kopf it runs,
and the kopf code the removal relies on, fingerprinted so that a kopf upgrade changing it fails here."""

from __future__ import annotations

import ast
import asyncio
import hashlib
import importlib
import inspect
from collections.abc import AsyncIterator
from importlib import metadata
from typing import Any, NamedTuple, cast

import kopf
import pytest
from kopf._cogs.aiokits import aiotoggles
from kopf._cogs.clients import watching

from specdeploy.controller import kopf_tuning

kopf_tuning.quiet_toggle_sets()


class Relied(NamedTuple):
    """One piece of kopf's code controller/kopf_tuning.py depends on, and what to re-check in it."""

    module: str
    name: str
    sha256: str
    recheck: str


# Recorded against kopf 1.45.2, the release pyproject.toml pins (to its minor). A kopf upgrade that
# changes any of these fails below: read the new code against what `recheck` says, adapt
# kopf_tuning.py if needed, then record the new sha256 and move the pin.
RELIED_ON = [
    Relied(
        "kopf._cogs.aiokits.aiotoggles",
        "ToggleSet",
        "8eea2936f0839f095c1241d397d62551acac66c8e7d71cbe83be7af6eed6c54f",
        "make_toggle and drop_toggle are replaced by copies that notify only when is_on() flips; "
        "they use _condition, _toggles and is_on(), and wait_for must still wait on the set's state "
        "alone (drop_toggles is not replaced)",
    ),
    Relied(
        "kopf._cogs.aiokits.aiotoggles",
        "Toggle",
        "0d9d9937781c58975b16cb4e278e00080b0f18388213b30215dabb7d6c4eda43",
        "the replacement constructs Toggle(state, name=..., condition=...) sharing the set's "
        "condition, and relies on turn_to notifying that condition itself",
    ),
    Relied(
        "kopf._cogs.clients.watching",
        "infinite_watch",
        "e2c12e4f0626ffa50b08d5834c8487e51e167115952827ca943b822293a5568c",
        "replaced by a wrapper that takes only keyword arguments, reads `resource` (group, plural) "
        "and strips each event's `object` dict in place; Bookmarks pass through",
    ),
    Relied(
        "kopf._core.reactor.queueing",
        "watcher",
        "9288d1d1f7c8ed5a955a0be251779b2422cd0427acb083c781e9e074fc8b2c2f",
        "must call `watching.infinite_watch` through the module attribute at run time (so the "
        "wrapper is seen), and add/drop the pre-population toggles one at a time",
    ),
    Relied(
        "kopf._core.reactor.processing",
        "process_resource_event",
        "9ebeb2628dc986cd9c0eaff91676d33b456714e7c6099254a226d8503f86d081",
        "held workers must wait only for operator_indexed's overall state (wait_for(True)), which "
        "is what the wake-up fix keeps notifying; it must call `indexing.index_resource` through "
        "the module attribute, before any handler, and read the body only through `body` and "
        "`raw_event` afterwards (which the thinning replaces); the index-only path repeats its "
        "steps up to the wait (recall, forget when DELETED, Body, index_resource, drop_toggle) "
        "for kinds with no daemons, whose live_fresh_body it skips",
    ),
    Relied(
        "kopf._core.reactor.running",
        "spawn_tasks",
        "e42fd1cf8d2704a7c21f131e7403560f786af6fcc85f5d79adcd953868b87ddc",
        "must build the watchers' processor from `processing.process_resource_event` looked up "
        "through the module attribute when the operator starts (so the index-only wrapper is seen)",
    ),
    Relied(
        "kopf._core.reactor.queueing",
        "worker",
        "676b69c494f2d7fed4fb86a4722b3e068a36691e5dabfd4207c77dd5b703408d",
        "passes resource_indexed and operator_indexed to the processor with every event, and "
        "exits once its backlog has been empty for idle_timeout: what frees an index-only event's "
        "task and queue",
    ),
    Relied(
        "kopf._core.reactor.inventory",
        "ResourceMemories",
        "19d5eaf717d016de01aa7b8b42f598f759f033e5c73cb6d27fd04189b1fe6f52",
        "the index-only path calls recall(raw_body, noticed_by_listing=, memobase=) and "
        "forget(raw_body) as process_resource_event does, and reads memo and indexing_memory",
    ),
    Relied(
        "kopf._core.engines.indexing",
        "index_resource",
        "61dfd9c83927c8230afd5e5024ba01b05e8c3eca70c3d2a1cf31c73b591b02fd",
        "replaced by a wrapper that takes only keyword arguments (resource, raw_event, body) and "
        "thins the event's object once this has run every index function over it",
    ),
    Relied(
        "kopf._cogs.structs.dicts",
        "ReplaceableMappingView",
        "fa060f2802c8578787994bff33d124c60c11e9309e8ed14ecbc85f724bfbb65d",
        "_replace_with(mapping) must repoint kopf's Body (and its metadata view) at the thinned "
        "object, dropping its reference to the whole one",
    ),
    Relied(
        "kopf._core.reactor.processing",
        "_detect_causes",
        "e147f418ca5039fbd59c25b6c7d65830ac48534e786cf037620f804a9fee47f9",
        "the diff base (NoDiffBase, always empty) must be read only for change-detecting and "
        "spawning handlers, none of which the operator registers",
    ),
    Relied(
        "kopf._cogs.configs.diffbase",
        "AnnotationsDiffBaseStorage",
        "725dfc1752f43af8177d5e7a7e13beb083fd5f4c71140cf1afcabb58f62e77b0",
        "NoDiffBase overrides build(body=, extra_fields=) and fetch(body=); their signatures and "
        "meaning must hold",
    ),
]


def kopf_source(module: str, name: str) -> str:
    """The code of ``name`` as kopf's file has it (not the attribute, which the tuning replaces)."""
    text = inspect.getsource(importlib.import_module(module))
    definitions = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    found = [n for n in ast.parse(text).body if isinstance(n, definitions) and n.name == name]
    assert found, f"{module}.{name} is gone from the installed kopf"
    segment = ast.get_source_segment(text, found[0])
    assert segment is not None
    return segment


@pytest.mark.parametrize("relied", RELIED_ON, ids=lambda r: f"{r.module}.{r.name}")
def test_the_kopf_code_the_tuning_relies_on_is_unchanged(relied: Relied) -> None:
    digest = hashlib.sha256(kopf_source(relied.module, relied.name).encode()).hexdigest()
    assert digest == relied.sha256, (
        f"{relied.module}.{relied.name} in kopf {metadata.version('kopf')} is not the code recorded for "
        f"kopf 1.45.2, and controller/kopf_tuning.py relies on it: {relied.recheck}. Re-check "
        "that against the new code, adapt kopf_tuning.py if needed, then record the new sha256 in "
        "RELIED_ON and move the kopf pin in pyproject.toml (and requirements/operator.lock)."
    )


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


def test_identity_keeps_what_kopf_and_the_metadata_handlers_read() -> None:
    kept = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}
    assert kopf_tuning.identity({**kept, "spec": {}, "status": {}}) == kept
    assert kopf_tuning.identity({"metadata": {"uid": "u"}}) == {"metadata": {"uid": "u"}}


IDENTITY = {"apiVersion": "v1", "kind": "X", "metadata": {"name": "o", "labels": {"a": "b"}}}


def test_indexed_objects_of_identity_only_kinds_are_thinned(monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf's processing indexes through the module attribute the operator replaces; the index
    functions see the whole object, the rest of the event's handling its identity only (for the
    kinds named), and other kinds (nodes, whose handler reads the body) stay whole."""
    from kopf._core.engines import indexing
    from kopf._core.reactor import processing

    indexed: list[Any] = []

    async def kopf_index(**kwargs: Any) -> None:
        indexed.append(dict(kwargs["body"]))

    def arriving() -> dict[str, Any]:
        return {"type": "ADDED", "object": {**IDENTITY, "spec": {"s": 1}, "status": {"t": 2}}}

    monkeypatch.setattr(kopf_tuning, "_KOPF_INDEX", kopf_index)
    monkeypatch.setattr(indexing, "index_resource", indexing.index_resource)
    kopf_tuning.thin_indexed_objects([("apps", "deployments")])
    assert processing.indexing is indexing

    def handled(resource: kopf.Resource) -> tuple[Any, Any]:
        event = arriving()
        body = kopf.Body(event["object"])
        asyncio.run(indexing.index_resource(resource=resource, raw_event=event, body=body))
        return event["object"], dict(body)

    thinned, view = handled(kopf.Resource("apps", "v1", "deployments"))
    assert indexed[-1] == arriving()["object"]
    assert thinned == view == IDENTITY
    whole, view = handled(kopf.Resource("", "v1", "nodes"))
    assert whole == view == arriving()["object"]


def test_child_events_are_only_indexed_until_every_kind_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """While the first listings are indexed, an object of a named kind arriving in them is indexed
    through kopf's real indexing and its pre-population toggle dropped, and kopf's processing
    (which would hold the worker until every kind is indexed, then call the handlers) is not
    entered; its later events, every event once indexed, and other kinds go through kopf's
    processing as before."""
    from kopf._core.engines import indexing
    from kopf._core.reactor import inventory, processing

    monkeypatch.setattr(processing, "process_resource_event", processing.process_resource_event)
    monkeypatch.setattr(indexing, "index_resource", kopf_tuning._KOPF_INDEX)
    processed: list[str] = []

    async def kopf_process(**kwargs: Any) -> None:
        processed.append(kwargs["raw_event"]["object"]["metadata"]["name"])

    monkeypatch.setattr(kopf_tuning, "_KOPF_PROCESS", kopf_process)
    kopf_tuning.index_only_while_listing([("apps", "deployments")])
    registry = kopf.OperatorRegistry()

    @kopf.index("apps", "v1", "deployments", id="names", registry=registry)
    def names(name: str, **_: Any) -> dict[str, str]:
        return {name: name}

    indexers = indexing.OperatorIndexers()
    indexers.ensure(registry._indexing.get_all_handlers())
    deployments, nodes = kopf.Resource("apps", "v1", "deployments"), kopf.Resource("", "v1", "nodes")

    def event(name: str) -> dict[str, Any]:
        return {
            "type": None,
            "object": {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "uid": name},
            },
        }

    async def scenario() -> tuple[bool, bool]:
        operator_indexed = aiotoggles.ToggleSet(all)
        listing = await operator_indexed.make_toggle(name="listing")
        toggles = [await operator_indexed.make_toggle(name=n) for n in ("a", "b")]
        common = {
            "registry": registry,
            "indexers": indexers,
            "settings": kopf.OperatorSettings(),
            "memories": inventory.ResourceMemories(),
            "memobase": kopf.Memo(),
            "operator_indexed": operator_indexed,
        }
        process = processing.process_resource_event
        await asyncio.wait_for(
            process(resource=deployments, raw_event=event("a"), resource_indexed=toggles[0], **common), 5
        )
        # The same object again, its toggle gone: kopf's processing (which holds it meanwhile).
        await asyncio.wait_for(
            process(resource=deployments, raw_event=event("a2"), resource_indexed=toggles[0], **common), 5
        )
        await asyncio.wait_for(
            process(resource=nodes, raw_event=event("n"), resource_indexed=toggles[1], **common), 5
        )
        # Only the deployment's object toggle is gone: the node's is dropped by kopf's processing.
        left = set(operator_indexed._toggles)
        await operator_indexed.drop_toggle(listing)
        await operator_indexed.drop_toggle(toggles[1])
        await process(resource=deployments, raw_event=event("b"), resource_indexed=toggles[0], **common)
        return left == {listing, toggles[1]}, operator_indexed.is_on()

    dropped_own_toggle, indexed = asyncio.run(scenario())
    assert dropped_own_toggle and indexed
    assert processed == ["a2", "n", "b"]
    assert dict(indexers.indices["names"]).keys() == {"a"}
