"""Costs kopf adds per watch event that this operator never uses, removed.

The first two were measured on a restart over 1000 resources (about 4100 watched objects): 85 s
until every resource was reconciled, at 330 MiB, nearly all of it in kopf itself.

- Index pre-population: kopf holds every object's event until all index handlers have seen the
  first listing of every kind. It tracks that with one set of toggles, one per object still to
  be indexed, and kopf 1.45 wakes every held worker each time a toggle joins or leaves the set,
  though only the set's overall state (is anything left to index?) is waited for: thousands of
  objects times thousands of held workers (2.2 million wake-ups, two thirds of the restart's
  CPU), while the held events keep their parsed bodies. Now a change wakes the waiters only
  when it flips the set's state.
- The diff base: before every event kopf deep-copies the body into an "essence" to compare with
  the last handled one, which only change-detecting handlers (on.create, on.update, on.field)
  read. The operator registers none (only on.event and index handlers), so the essence is empty.
- Held bodies: the events held during pre-population (every object of every watched kind) and
  queued behind a running handler keep whole parsed bodies, half of them ``managedFields``.
  Each object is stripped of what no reconcile reads as it leaves the watch stream (engine pods
  down to what their projection reads), and the first listing comes in chunks, so a restart
  never holds a whole list's JSON at once.
- Indexed bodies: a resource and its children are read whole only by their index functions,
  which pack them; their event handlers read the identity alone (type, name, namespace,
  labels). Once indexed, each such event keeps only apiVersion, kind and metadata, so the
  events held during pre-population (every resource, Deployment and Service) hold no spec or
  status: a restart's peak at 1000 resources fell by about 7 MiB (docs/scale.md).
- Held workers: kopf keeps each pre-populating object's worker (task, queue, throttler, frame)
  waiting until every kind is indexed, then calls its handlers. A child's handler only
  reconciles its owner, which the restart reconciles anyway once indexed (from the owner's own
  event), so a child's event is indexed and let go: 2000 fewer held workers at 1000 resources,
  and a restart's peak about 25 MiB lower (docs/scale.md).

The diff base and the chunked listing go through ``kopf.OperatorSettings``; the wake-up fix,
the stripping, the thinning after indexing and the index-only children replace functions in
kopf's private modules,
which no setting reaches. Hence the pin of kopf to one minor release in pyproject.toml, and
tests/unit/test_kopf_tuning.py, which fails when any kopf code these rely on changes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Collection
from typing import Any

import kopf
from kopf._cogs.aiokits import aiotoggles
from kopf._cogs.clients import watching
from kopf._cogs.structs import bodies
from kopf._core.actions import loggers
from kopf._core.engines import indexing
from kopf._core.reactor import processing

from specdeploy.controller import pods
from specdeploy.controller.cached import strip_unread

# Objects per page of the first listing of a kind (kopf lists everything at once by default).
# Each page's objects wait, whole, for their workers to index (and thin) them: pages of 50
# instead of 250 lowered a restart's peak at 1000 resources by 9 MiB (docs/scale.md).
LIST_CHUNK = 50


class NoDiffBase(kopf.AnnotationsDiffBaseStorage):
    """A diff base for an operator with no change-detecting handlers: nothing to copy or compare."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None


async def _change(toggles: aiotoggles.ToggleSet, change: Callable[[set[aiotoggles.Toggle]], None]) -> None:
    """Change the set's members; wake its waiters only when its state flipped (the members'
    own states, which their own waiters wait for, are untouched by joining or leaving)."""
    async with toggles._condition:
        before = toggles.is_on()
        change(toggles._toggles)
        if toggles.is_on() != before:
            toggles._condition.notify_all()


async def _make_toggle(
    self: aiotoggles.ToggleSet, state: bool = False, *, name: str | None = None
) -> aiotoggles.Toggle:
    toggle = aiotoggles.Toggle(state, name=name, condition=self._condition)
    await _change(self, lambda members: members.add(toggle))
    return toggle


async def _drop_toggle(self: aiotoggles.ToggleSet, toggle: aiotoggles.Toggle) -> None:
    await _change(self, lambda members: members.discard(toggle))


_KOPF_WATCH = watching.infinite_watch


async def _stripped_watch(**kwargs: Any) -> AsyncIterator[Any]:
    resource = kwargs.get("resource")
    # The pod watch is of engine pods only (label-selected); their index and handler read a
    # projection, so each pod arrives thinned to it.
    is_pods = getattr(resource, "group", None) == "" and getattr(resource, "plural", None) == "pods"
    async for event in _KOPF_WATCH(**kwargs):
        body: Any = event.get("object") if isinstance(event, dict) else None
        if isinstance(body, dict):
            strip_unread(body)
            if is_pods:
                pods.thin(body)
        yield event


def strip_watched_objects() -> None:
    """Strip every watched object of what no reconcile reads as it arrives (idempotent; before
    kopf starts)."""
    watching.infinite_watch = _stripped_watch


# What an event keeps of an object once indexed: what kopf and a metadata-only handler read.
IDENTITY = ("apiVersion", "kind", "metadata")

_KOPF_INDEX = indexing.index_resource


def identity(body: dict[str, Any]) -> dict[str, Any]:
    """The object without its spec, status or any other top-level field but its identity."""
    return {key: body[key] for key in IDENTITY if key in body}


def _index_then_thin(kinds: frozenset[tuple[str, str]]) -> Callable[..., Any]:
    async def index_resource(**kwargs: Any) -> None:
        await _KOPF_INDEX(**kwargs)
        resource, event = kwargs["resource"], kwargs["raw_event"]
        if (resource.group, resource.plural) in kinds and isinstance(event.get("object"), dict):
            # Both the event and kopf's view of its body must let go of the whole object.
            event["object"] = identity(event["object"])
            kwargs["body"]._replace_with(event["object"])

    return index_resource


def thin_indexed_objects(kinds: Collection[tuple[str, str]]) -> None:
    """After kopf has indexed an event of one of ``kinds`` (group, plural), keep only the object's
    identity in the event: those kinds' event handlers must read no spec or status (idempotent;
    before kopf starts)."""
    indexing.index_resource = _index_then_thin(frozenset(kinds))


def quiet_toggle_sets() -> None:
    """Install the wake-up fix (idempotent; before kopf starts)."""
    aiotoggles.ToggleSet.make_toggle = _make_toggle  # type: ignore[method-assign]
    aiotoggles.ToggleSet.drop_toggle = _drop_toggle  # type: ignore[method-assign]


_KOPF_PROCESS = processing.process_resource_event


def _index_only_while_listing(kinds: frozenset[tuple[str, str]]) -> Callable[..., Any]:
    async def process_resource_event(**kwargs: Any) -> str | None:
        resource, raw_event = kwargs["resource"], kwargs["raw_event"]
        operator_indexed: aiotoggles.ToggleSet | None = kwargs.get("operator_indexed")
        resource_indexed: aiotoggles.Toggle | None = kwargs.get("resource_indexed")
        if (
            (resource.group, resource.plural) not in kinds
            or operator_indexed is None
            or resource_indexed is None
            # Indexed already: a later event, or the set blocked again by a watcher started
            # later (a CRD installed); kopf holds it and calls its handlers.
            or resource_indexed not in operator_indexed
        ):
            return await _KOPF_PROCESS(**kwargs)
        # The object's first event of the first listing: kopf's own steps up to the wait for
        # every index (the kinds have no daemons, whose fresh-body view this skips), then no
        # handler, so the worker is free to exit.
        memories, raw_body = kwargs["memories"], raw_event["object"]
        memory = await memories.recall(
            raw_body, noticed_by_listing=raw_event["type"] is None, memobase=kwargs["memobase"]
        )
        if raw_event["type"] == "DELETED":
            await memories.forget(raw_body)
        body = bodies.Body(raw_body)
        await indexing.index_resource(
            registry=kwargs["registry"],
            indexers=kwargs["indexers"],
            settings=kwargs["settings"],
            resource=resource,
            raw_event=raw_event,
            body=body,
            memo=memory.memo,
            memory=memory.indexing_memory,
            logger=loggers.TerseObjectLogger(body=body, settings=kwargs["settings"]),
        )
        await operator_indexed.drop_toggle(resource_indexed)
        return None

    return process_resource_event


def index_only_while_listing(kinds: Collection[tuple[str, str]]) -> None:
    """While the operator's first listings are indexed, an object of one of ``kinds`` (group,
    plural) arriving in them is indexed and let go, its handlers not called: those kinds'
    handlers must do nothing that the passes after indexing do not (idempotent; before kopf
    starts)."""
    processing.process_resource_event = _index_only_while_listing(frozenset(kinds))
