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
- Handler machinery: for each event kopf builds causes, loggers, a per-object memory (with a
  copy of the memo), handler state and outcomes, and invokes every index and event handler
  through its retry and timeout wrapper: about 0.5 ms of CPU an event, about 14 events per
  resource in a rollout. The operator's kinds have index and event handlers only, filtered by
  labels, that never fail for retrying's sake, so their events are dispatched directly: the
  index functions, then (once every kind is indexed) the event handlers, with the same
  arguments kopf gives them. Kinds with any other handler, filter or argument stay with kopf.

The diff base and the chunked listing go through ``kopf.OperatorSettings``; the wake-up fix,
the stripping and the direct dispatch (with the thinning after indexing and the index-only
children) replace functions in kopf's private modules, which no setting reaches. Hence the pin
of kopf to one minor release in pyproject.toml, and tests/unit/test_kopf_tuning.py, which fails
when any kopf code these rely on changes.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Any, cast

import kopf
from kopf._cogs.aiokits import aiotoggles
from kopf._cogs.clients import watching
from kopf._cogs.structs import bodies
from kopf._core.engines import indexing
from kopf._core.intents import handlers as kopf_handlers
from kopf._core.intents import registries
from kopf._core.reactor import processing

from specdeploy.controller import pods
from specdeploy.controller.cached import strip_unread

# Objects per page of the first listing of a kind (kopf lists everything at once by default).
# Each page's objects wait, whole, for their workers to index (and thin) them: pages of 50
# instead of 250 lowered a restart's peak at 1000 resources by 9 MiB (docs/scale.md).
LIST_CHUNK = 50

_log = logging.getLogger(__name__)


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


def quiet_toggle_sets() -> None:
    """Install the wake-up fix (idempotent; before kopf starts)."""
    aiotoggles.ToggleSet.make_toggle = _make_toggle  # type: ignore[method-assign]
    aiotoggles.ToggleSet.drop_toggle = _drop_toggle  # type: ignore[method-assign]


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


def identity(body: dict[str, Any]) -> dict[str, Any]:
    """The object without its spec, status or any other top-level field but its identity."""
    return {key: body[key] for key in IDENTITY if key in body}


# What a directly called index or event handler may ask for by name, besides the indices.
DIRECT_KWARGS = frozenset({"event", "type", "body", "name", "namespace", "labels", "memo"})


@dataclass(frozen=True)
class Route:
    """The index and event handlers registered for one watched kind, called directly."""

    indexers: tuple[kopf_handlers.IndexingHandler, ...]
    watchers: tuple[kopf_handlers.WatchingHandler, ...]
    index_only_while_listing: bool
    identity_only: bool


def _callable_directly(handler: kopf_handlers.ResourceHandler, index_names: Collection[str]) -> bool:
    """Whether calling the handler with DIRECT_KWARGS and the indices is what kopf would do: a
    coroutine, filtered by labels alone (no callables), asking for nothing else by name."""
    labels = handler.labels or {}
    if (
        handler.annotations
        or handler.when is not None
        or handler.field is not None
        or handler.value is not None
        or any(callable(value) for value in labels.values())
        or not inspect.iscoroutinefunction(handler.fn)
    ):
        return False
    offered = DIRECT_KWARGS | set(index_names)
    return all(
        p.kind is p.VAR_KEYWORD or p.default is not p.empty or p.name in offered
        for p in inspect.signature(handler.fn).parameters.values()
    )


def route(
    registry: kopf.OperatorRegistry,
    resource: kopf.Resource,
    index_only_while_listing: Collection[tuple[str, str]],
    identity_only: Collection[tuple[str, str]],
) -> Route | None:
    """The direct route of ``resource``'s events, or None where kopf's own processing must run
    them: a kind with handlers of another sort (change-detecting, daemons, timers), or one of its
    index or event handlers not callable directly."""
    # Admission handlers are not called from the watch (kopf's webhook server calls them).
    if registry._changing.has_handlers(resource) or registry._spawning.has_handlers(resource):
        return None
    index_names = [handler.id for handler in registry._indexing.get_all_handlers()]
    found = (
        tuple(h for h in registry._indexing.get_all_handlers() if registries._matches_resource(h, resource)),
        tuple(h for h in registry._watching.get_all_handlers() if registries._matches_resource(h, resource)),
    )
    if not all(_callable_directly(h, index_names) for h in (*found[0], *found[1])):
        return None
    kind = (resource.group, resource.plural)
    return Route(*found, kind in index_only_while_listing, kind in identity_only)


def _matches(handler: kopf_handlers.ResourceHandler, labels: dict[str, str]) -> bool:
    # No callable filter reaches here (_callable_directly), so kopf's matcher needs no cause.
    return not handler.labels or registries._matches_metadata(
        pattern=handler.labels,
        content=labels,
        kwargs={},
        cause=None,  # type: ignore[arg-type]
    )


def _coroutine(handler: kopf_handlers.ResourceHandler) -> Callable[..., Awaitable[Any]]:
    return cast(Callable[..., Awaitable[Any]], handler.fn)


_KOPF_PROCESS = processing.process_resource_event


def _direct(
    index_only_while_listing: frozenset[tuple[str, str]], identity_only: frozenset[tuple[str, str]]
) -> Callable[..., Any]:
    routes: dict[kopf.Resource, Route | None] = {}

    async def process_resource_event(**kwargs: Any) -> str | None:
        resource, raw_event, registry = kwargs["resource"], kwargs["raw_event"], kwargs["registry"]
        if resource not in routes:
            routes[resource] = route(registry, resource, index_only_while_listing, identity_only)
        found = routes[resource]
        if found is None:
            return await _KOPF_PROCESS(**kwargs)
        indexers: indexing.OperatorIndexers = kwargs["indexers"]
        indices = dict(indexers.indices)
        deleted = raw_event["type"] == "DELETED"

        def call(raw_body: dict[str, Any]) -> dict[str, Any]:
            meta = raw_body.get("metadata") or {}
            return {
                "event": raw_event,
                "type": raw_event["type"],
                "body": bodies.Body(cast(bodies.RawBody, raw_body)),
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
                "labels": meta.get("labels") or {},
                "memo": kwargs["memobase"],
                **indices,
            }

        raw_body = raw_event["object"]
        given = call(raw_body)
        key = indexers.make_key(given["body"])
        for index in found.indexers:
            indexer = indexers[index.id]
            if deleted or not _matches(index, given["labels"]):
                indexer.discard(key)
                continue
            try:
                value = await _coroutine(index)(**given)
            except Exception:
                # As kopf does with a failing index function: no value until it succeeds.
                _log.exception("Index function %r failed on %s; not indexed", index.id, key)
                indexer.discard(key)
                continue
            if value is not None:
                indexer.replace(key, value)
        if found.identity_only:
            # Both the held event and the handlers' view let go of the whole object.
            raw_event["object"] = raw_body = identity(raw_body)
            given = call(raw_body)
        operator_indexed: aiotoggles.ToggleSet | None = kwargs.get("operator_indexed")
        resource_indexed: aiotoggles.Toggle | None = kwargs.get("resource_indexed")
        if operator_indexed is not None and resource_indexed is not None:
            listing = resource_indexed in operator_indexed
            await operator_indexed.drop_toggle(resource_indexed)
            if listing and found.index_only_while_listing:
                return None
        if operator_indexed is not None:
            await operator_indexed.wait_for(True)
        for watcher in found.watchers:
            if not _matches(watcher, given["labels"]):
                continue
            try:
                await _coroutine(watcher)(**given)
            except Exception:
                # As kopf does with a failing event handler: logged, and the next event comes.
                _log.exception("Event handler %r failed on %s", watcher.id, key)
        return None

    return process_resource_event


def dispatch_directly(
    index_only_while_listing: Collection[tuple[str, str]], identity_only: Collection[tuple[str, str]]
) -> None:
    """Process the events of every kind that has only index and event handlers by calling those
    directly, as kopf would (idempotent; before kopf starts).

    ``index_only_while_listing`` (group, plural): an object of these kinds arriving in the first
    listings is indexed and let go, its event handlers not called; those handlers must do nothing
    that the owner's reconcile after indexing does not. ``identity_only``: once indexed, an event
    of these kinds keeps only the object's identity; their event handlers must read no spec or
    status."""
    processing.process_resource_event = _direct(frozenset(index_only_while_listing), frozenset(identity_only))
