"""kopf's per-event costs the operator removes (controller/kopf_tuning.py), against the kopf it runs,
and the kopf code the removal relies on, fingerprinted so that a kopf upgrade changing it fails here."""

from __future__ import annotations

import ast
import asyncio
import hashlib
import importlib
import inspect
from collections.abc import AsyncIterator, Callable
from copy import deepcopy
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
        "the direct dispatch replaces it for kinds with index and event handlers only, repeating "
        "its steps for them: index before any handler (discard everything on DELETED), drop the "
        "object's pre-population toggle, wait for operator_indexed's overall state (wait_for(True), "
        "which the wake-up fix keeps notifying), then the event handlers; nothing there patches, "
        "so nothing is applied; its other steps (memories, loggers, throttling, daemons' fresh body) "
        "serve what these kinds do not have",
    ),
    Relied(
        "kopf._core.intents.registries",
        "OperatorRegistry",
        "aab7f321b8397f5636a378d856f7bd72a6a97baf4d5069d99f34e9567f41870b",
        "the direct dispatch reads _indexing and _watching handlers, and routes a kind through kopf "
        "when _changing or _spawning has any for it (_webhooks are called by the webhook server, "
        "not by the watch)",
    ),
    Relied(
        "kopf._core.intents.registries",
        "_matches_resource",
        "ee7aab429386f024690ef49903a07e888fef7846dfb857264b10f5ba66d7b56b",
        "the direct dispatch picks a kind's handlers with it, as kopf's registries do",
    ),
    Relied(
        "kopf._core.intents.registries",
        "_matches_metadata",
        "a6263e42f0a715b1db052cecd64afeb0892122e2290ee1c6a468ae5ae37cd517",
        "the direct dispatch filters by labels with it, given no cause: it must read the cause only "
        "for callable filters, which a directly dispatched handler never has",
    ),
    Relied(
        "kopf._core.intents.handlers",
        "ResourceHandler",
        "72df2788f6ae53c64d2d39508aae5c74459ebae5ab75c0125dbfe4e02b92c95d",
        "a handler is called directly only when labels is its sole filter (annotations, when, "
        "field and value unset); a new filter field must be checked there too",
    ),
    Relied(
        "kopf._core.engines.indexing",
        "OperatorIndexers",
        "e9189e4a78bc74effc64605454c5c3ad8ae1c86f43d822f6f97875d819eb4438",
        "the direct dispatch keys objects with make_key(body), finds each index's indexer by the "
        "handler's id and reads `indices` (id to Index) to hand the indices to the handlers",
    ),
    Relied(
        "kopf._core.engines.indexing",
        "OperatorIndexer",
        "7d3b93a397526c54b7188e09b878f128cfd21684560bcb9c51d34b00e07da33d",
        "the direct dispatch stores an index function's result with replace(key, result) and "
        "drops an object with discard(key), as OperatorIndexers.replace does with outcomes",
    ),
    Relied(
        "kopf._core.reactor.running",
        "spawn_tasks",
        "e42fd1cf8d2704a7c21f131e7403560f786af6fcc85f5d79adcd953868b87ddc",
        "must build the watchers' processor from `processing.process_resource_event` looked up "
        "through the module attribute when the operator starts (so the direct dispatch is seen)",
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


DEPLOYMENTS = kopf.Resource("apps", "v1", "deployments")
NODES = kopf.Resource("", "v1", "nodes")
OWNED = {"owner": "pair"}


def deployment(
    name: str, kind: str | None = "MODIFIED", labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A watch event of a Deployment (a None type is an object of a listing)."""
    meta = {
        "name": name,
        "namespace": "ns",
        "uid": f"uid-{name}",
        "labels": dict(OWNED if labels is None else labels),
    }
    body = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {"replicas": 1}}
    return {"type": kind, "object": body}


class Handled(NamedTuple):
    """What one way of processing left behind: each index's contents, and each call of the event
    handler (its event type, name, namespace, labels, body)."""

    index: dict[Any, Any]
    calls: list[tuple[Any, ...]]


def registry_with_handlers(calls: list[tuple[Any, ...]], fail_on: str = "") -> kopf.OperatorRegistry:
    """An index and an event handler of Deployments labelled ``OWNED``, as the operator registers."""
    registry = kopf.OperatorRegistry()

    @kopf.index("apps", "v1", "deployments", id="owned", labels=OWNED, registry=registry)
    async def owned(namespace: str, name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
        if name == fail_on:
            raise ValueError(name)
        return {(namespace, name): body["spec"]["replicas"]}

    @kopf.on.event("apps", "v1", "deployments", labels=OWNED, registry=registry)
    async def changed(
        event: kopf.RawEvent,
        name: str,
        namespace: str,
        labels: kopf.Labels,
        body: kopf.Body,
        owned: Any,
        **_: Any,
    ) -> None:
        if name == fail_on:
            raise ValueError(name)
        calls.append((event["type"], name, namespace, dict(labels), dict(body), sorted(owned)))

    return registry


def processed(events: list[dict[str, Any]], process: Callable[..., Any], fail_on: str = "") -> Handled:
    """Run ``events`` through one processor, as kopf's worker calls it once every kind is indexed."""
    from kopf._core.actions import lifecycles
    from kopf._core.engines import indexing
    from kopf._core.reactor import inventory

    calls: list[tuple[Any, ...]] = []
    registry = registry_with_handlers(calls, fail_on)
    indexers = indexing.OperatorIndexers()
    indexers.ensure(registry._indexing.get_all_handlers())

    async def scenario() -> None:
        for event in events:
            await process(
                lifecycle=lifecycles.all_at_once,
                registry=registry,
                indexers=indexers,
                settings=kopf.OperatorSettings(),
                memories=inventory.ResourceMemories(),
                memobase=kopf.Memo(),
                resource=DEPLOYMENTS,
                raw_event=event,
                event_queue=asyncio.Queue(),
                operator_indexed=aiotoggles.ToggleSet(all),
                no_throttling=True,
            )

    asyncio.run(scenario())
    return Handled({key: list(store) for key, store in indexers.indices["owned"].items()}, calls)


def test_direct_dispatch_indexes_and_calls_handlers_as_kopf_does() -> None:
    """The same events through kopf's processing and the direct one leave the same index and the
    same handler calls: listed, modified, relabelled out of the filter (unindexed, not handled),
    back in, deleted (unindexed, handled), and a failing index function and handler (logged;
    the object unindexed, the next event handled)."""
    from kopf._core.reactor import processing

    events = [
        deployment("a", None),
        deployment("b", "ADDED"),
        deployment("a"),
        deployment("b", labels={}),
        deployment("bad", "ADDED"),
        deployment("b"),
        deployment("a", "DELETED"),
        deployment("c", "ADDED"),
    ]
    direct = kopf_tuning._direct(frozenset(), frozenset())
    by_kopf = processed([deepcopy(e) for e in events], kopf_tuning._KOPF_PROCESS, fail_on="bad")
    by_direct = processed([deepcopy(e) for e in events], direct, fail_on="bad")
    assert by_direct == by_kopf
    assert by_direct.index.keys() == {("ns", "b"), ("ns", "c")}
    assert [(kind, name) for kind, name, *_ in by_direct.calls] == [
        (None, "a"),
        ("ADDED", "b"),
        ("MODIFIED", "a"),
        ("MODIFIED", "b"),
        ("DELETED", "a"),
        ("ADDED", "c"),
    ]
    assert processing.process_resource_event is not direct


def test_direct_dispatch_thins_identity_only_kinds_after_indexing() -> None:
    """The index function sees the whole object; the event handler, and the event the worker
    keeps, only its identity."""
    direct = kopf_tuning._direct(frozenset(), frozenset({("apps", "deployments")}))
    event = deployment("a", "ADDED")
    handled = processed([event], direct)
    assert handled.index == {("ns", "a"): [1]}
    identity = kopf_tuning.identity(deployment("a")["object"])
    assert event["object"] == handled.calls[0][4] == identity


def child_events_while_listing(kinds: frozenset[tuple[str, str]]) -> tuple[list[str], bool, bool]:
    """Deployments of the first listing, then one after: which reached the event handler, whether
    each listed object's pre-population toggle was dropped, and whether the listing's event
    waited for every kind to be indexed before its handler ran."""
    from kopf._core.engines import indexing
    from kopf._core.reactor import inventory

    calls: list[tuple[Any, ...]] = []
    registry = registry_with_handlers(calls)
    indexers = indexing.OperatorIndexers()
    indexers.ensure(registry._indexing.get_all_handlers())
    direct = kopf_tuning._direct(kinds, frozenset())

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
            "resource": DEPLOYMENTS,
            "operator_indexed": operator_indexed,
        }
        first = [
            asyncio.create_task(direct(raw_event=deployment(n, None), resource_indexed=t, **common))
            for n, t in zip(("a", "b"), toggles, strict=True)
        ]
        await asyncio.sleep(0.05)
        dropped = set(operator_indexed._toggles) == {listing}
        held = not all(task.done() for task in first) and not calls
        await operator_indexed.drop_toggle(listing)
        await asyncio.wait_for(asyncio.gather(*first), 5)
        await direct(raw_event=deployment("c"), resource_indexed=None, **common)
        return dropped, held

    dropped, held = asyncio.run(scenario())
    return [name for _, name, *_ in calls], dropped, held


def test_child_events_are_only_indexed_until_every_kind_is() -> None:
    """A listed object of an index-only kind is indexed, its toggle dropped and its worker let go;
    other kinds' listed objects wait for every kind to be indexed, then are handled."""
    names, dropped, held = child_events_while_listing(frozenset({("apps", "deployments")}))
    assert names == ["c"] and dropped and not held
    names, dropped, held = child_events_while_listing(frozenset())
    assert names == ["a", "b", "c"] and dropped and held


def test_the_operators_watched_kinds_are_dispatched_directly() -> None:
    """Every kind the operator watches with index and event handlers is routed past kopf's
    handler machinery; its LeaderWorkerSet CRD watch (a field filter) and a kind with a
    change-detecting handler are not."""
    from specdeploy import api, children
    from specdeploy.controller import handlers

    registry = kopf.get_default_registry()
    watched = [
        kopf.Resource(api.GROUP, api.VERSION, api.PLURAL),
        *(kopf.Resource(kind.group, kind.version, kind.plural) for kind in children.CHILD_KINDS),
        NODES,
        kopf.Resource("", "v1", "pods"),
    ]
    for resource in watched:
        found = kopf_tuning.route(registry, resource, handlers.CHILD_WATCHES, handlers.IDENTITY_ONLY_KINDS)
        assert found is not None and found.indexers and found.watchers, resource
    crd = kopf.Resource(handlers.CRD_GROUP, "v1", "customresourcedefinitions")
    assert kopf_tuning.route(registry, crd, (), ()) is None
    changing = kopf.OperatorRegistry()
    kopf.on.update("apps", "v1", "deployments", registry=changing)(lambda **_: None)
    assert kopf_tuning.route(changing, DEPLOYMENTS, (), ()) is None


def test_a_kind_with_an_admission_webhook_is_still_dispatched_directly() -> None:
    registry = registry_with_handlers([])
    kopf.on.validate("apps", "v1", "deployments", registry=registry)(lambda **_: None)
    found = kopf_tuning.route(registry, DEPLOYMENTS, (), ())
    assert found is not None and len(found.indexers) == len(found.watchers) == 1


def test_a_handler_asking_for_more_than_is_given_directly_goes_through_kopf() -> None:
    registry = kopf.OperatorRegistry()

    @kopf.on.event("apps", "v1", "deployments", registry=registry)
    async def wants_logger(logger: Any, **_: Any) -> None:
        return None

    assert kopf_tuning.route(registry, DEPLOYMENTS, (), ()) is None
