"""kopf handlers: the only module that knows about kopf.

Level-based: every event on a SpeculativeDeployment, on one of its children, or on a GPU node
leads to one reconcile of the affected resources, which computes the whole desired state
(``specdeploy.desired``), writes only what differs from the cached cluster state, and writes
status only when it changed. Children and nodes are kept in kopf indices fed by watches, so a
reconcile reads nothing from the apiserver in the common case.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import kopf

from specdeploy import admission, api, builders, conditions, desired, drift, gpus, kube, metrics
from specdeploy.metadata import MetadataResolver

FIELD_MANAGER = "specdeploy"
RETRY_MIN_SECONDS = 5.0
RETRY_MAX_SECONDS = 300.0
IO_THREADS = 16
T = TypeVar("T")
MANAGED = {builders.MANAGED_BY_LABEL: builders.MANAGED_BY}

Key = tuple[str | None, str]


class _State:
    """Process-wide operator state: bounded by the number of live resources."""

    def __init__(self) -> None:
        self.resolver = MetadataResolver()
        self.locks: dict[Key, asyncio.Lock] = {}
        self.retries: dict[Key, _Retry] = {}
        self.queued: set[Key] = set()
        self.node_views: dict[str, dict[str, Any]] = {}
        self.written: dict[tuple[str, Key], tuple[str, str | None]] = {}
        self.inventory = gpus.Inventory(())
        self.inventory_signature = ""
        self.read_secrets = False
        # API calls and hub downloads block; a pool of their own keeps them from queueing
        # behind (or starving) kopf's and aiohttp's own threads.
        self.io = concurrent.futures.ThreadPoolExecutor(
            max_workers=IO_THREADS, thread_name_prefix="specdeploy-io"
        )

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.io, fn, *args)


STATE = _State()


@dataclass
class WebhookSettings:
    """Set by ``specdeploy run`` before kopf starts; off unless a port is given."""

    addr: str = "0.0.0.0"
    port: int = 0
    host: str | None = None
    certfile: Path | None = None
    pkeyfile: Path | None = None
    cafile: Path | None = None
    manage_configuration: bool = False

    def configure(self, **values: Any) -> None:
        for name, value in values.items():
            setattr(self, name, value)


WEBHOOK = WebhookSettings()


def enable_webhook(**values: Any) -> None:
    """Serve the validating webhook (kopf refuses to start with a handler and no server)."""
    WEBHOOK.configure(**values)
    kopf.on.validate(
        api.GROUP, api.VERSION, api.PLURAL, operations=["CREATE", "UPDATE"], ignore_failures=True
    )(validate)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    """All kopf settings in one place; kopf's own bookkeeping lives under our API group."""
    settings.persistence.finalizer = f"{api.GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=api.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=api.GROUP, key="last-handled-configuration"
    )
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    settings.networking.request_timeout = 60
    settings.posting.level = logging.WARNING
    settings.batching.error_delays = [1, 2, 5, 10, 30, 60]
    if WEBHOOK.port:
        settings.admission.server = kopf.WebhookServer(
            addr=WEBHOOK.addr,
            port=WEBHOOK.port,
            host=WEBHOOK.host,
            certfile=WEBHOOK.certfile,
            pkeyfile=WEBHOOK.pkeyfile,
            cafile=WEBHOOK.cafile,
        )
        if WEBHOOK.manage_configuration:
            settings.admission.managed = api.GROUP
    kube.load_config()


def validate(body: kopf.Body, **_: Any) -> None:
    """Reject pairs that fail a check decidable from cached or catalog metadata.

    Registered by :func:`enable_webhook` only when a webhook server is configured.
    ``ignore_failures`` makes the failure policy Ignore: a stopped operator never blocks the
    cluster; the PairingVerified condition still reports the full result.
    """
    problem = admission.review(dict(body), STATE.resolver)
    if problem is not None:
        raise kopf.AdmissionError(problem, code=422)


@kopf.index(api.GROUP, api.VERSION, api.PLURAL)
def resources(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> dict[Key, dict[str, Any]]:
    return {(namespace, name): dict(body)}


@kopf.index("apps", "v1", "deployments", labels=MANAGED)
def child_deployments(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[Key, dict[str, Any]]:
    return {(namespace, name): dict(body)}


@kopf.index("v1", "services", labels=MANAGED)
def child_services(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> dict[Key, dict[str, Any]]:
    return {(namespace, name): dict(body)}


def _node_view(name: str, body: kopf.Body) -> dict[str, Any]:
    """What the GPU inventory reads of a node, without heartbeat timestamps, so a heartbeat
    leaves it unchanged: labels, taints, allocatable, condition statuses."""
    return {
        "metadata": {"name": name, "labels": dict(body.metadata.labels)},
        "spec": {k: v for k, v in body.spec.items() if k in ("taints", "unschedulable")},
        "status": {
            "allocatable": dict(body.status.get("allocatable") or {}),
            "conditions": [
                {"type": c.get("type"), "status": c.get("status")}
                for c in body.status.get("conditions") or []
            ],
        },
    }


@kopf.index("v1", "nodes")
def gpu_nodes(name: str, body: kopf.Body, **_: Any) -> dict[str, dict[str, Any]]:
    return {name: _node_view(name, body)}


def _nodes(indices: dict[str, kopf.Index[Any, Any]]) -> list[dict[str, Any]]:
    return [
        node for name in indices["gpu_nodes"] if (node := _latest(indices["gpu_nodes"], name)) is not None
    ]


def _latest(index: kopf.Index[Any, Any], key: Any) -> Any:
    store = index.get(key)
    return next(iter(store), None) if store is not None else None


async def _reconcile(key: Key, indices: dict[str, kopf.Index[Any, Any]], logger: Any) -> None:
    """Reconcile ``key``; a burst of events collapses into one pass over the latest state."""
    if key in STATE.queued:
        return  # a pass is already waiting for the lock and will read the newest objects
    STATE.queued.add(key)
    lock = STATE.locks.setdefault(key, asyncio.Lock())
    async with lock:
        STATE.queued.discard(key)
        started = time.monotonic()
        body = _latest(indices["resources"], key)
        if body is None or body["metadata"].get("deletionTimestamp"):
            _forget(key)
            return
        try:
            outcome = await _converge(key, body, indices, logger)
        except Exception as exc:
            # The loop's boundary, as in any controller: an API error, a conflict or a bug in one
            # resource must not stop the others; the resource is retried with backoff instead.
            logger.error("reconcile of %s/%s failed, will retry: %s", *key, exc)
            outcome = "error"
        if outcome in ("error", "retry"):
            _schedule_retry(key, indices, logger)
        else:
            _cancel_retry(key)
    metrics.RECONCILES.labels(outcome).inc()
    metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)


async def _converge(key: Key, body: Any, indices: dict[str, kopf.Index[Any, Any]], logger: Any) -> str:
    """One pass: children and status written where they differ. Returns the outcome label.

    ``body`` is the raw object from the index; kopf's event poster reads it like a Body.
    """
    if not STATE.inventory_signature:
        _refresh_inventory(indices)
    result = await STATE.run(
        desired.compute,
        body,
        STATE.resolver,
        STATE.inventory,
        kube.configmap_reader,
        kube.secret_reader if STATE.read_secrets else None,
    )
    deployment = _latest(indices["child_deployments"], key)
    service = _latest(indices["child_services"], key)
    if not result.blocked:
        for manifest, current in ((result.deployment, deployment), (result.service, service)):
            if manifest is None:
                continue
            want = drift.stamped(manifest)
            written = (want["kind"], key, want["metadata"]["annotations"][drift.HASH_ANNOTATION])
            if not _already_written(written, current) and drift.needs_apply(want, current):
                logger.info("applying %s %s/%s", want["kind"], *key)
                await STATE.run(kube.apply, want, FIELD_MANAGER)
                metrics.WRITES.labels(want["kind"]).inc()
                _remember(written, current)
    status, transitions = desired.status_for(body, result, deployment)
    if status is not None:
        patch = ("status", key, drift.status_fingerprint(status))
        if _already_written(patch, body):
            transitions = []
        else:
            logger.debug("status of %s/%s changes: %s", *key, status)
            await STATE.run(kube.patch_status, key, status)
            metrics.WRITES.labels("status").inc()
            _remember(patch, body)
    for t in transitions:
        healthy = (t.status == "False") if t.type == conditions.DEGRADED else (t.status != "False")
        kopf.event(
            body,
            type="Normal" if healthy else "Warning",
            reason=t.reason,
            message=f"{t.type}={t.status}: {t.message}",
        )
    if result.retry:
        return "retry"
    return "blocked" if result.blocked else "converged"


@dataclass
class _Retry:
    """One resource's backoff: the delay grows per failed retry, not per failing event."""

    delay: float
    timer: asyncio.TimerHandle | None = None
    task: asyncio.Task[None] | None = None


def _schedule_retry(key: Key, indices: dict[str, kopf.Index[Any, Any]], logger: Any) -> None:
    """Bounded exponential backoff for failed reconciles (unreachable hub, API errors).

    One timer per resource at most: failures of event-driven passes while a retry is pending
    leave it as it is, so a burst of events cannot push the delay to its maximum.
    """
    retry = STATE.retries.get(key)
    if retry is None:
        retry = STATE.retries[key] = _Retry(RETRY_MIN_SECONDS)
    elif retry.timer is not None:
        return
    else:
        retry.delay = min(retry.delay * 2, RETRY_MAX_SECONDS)
    loop = asyncio.get_running_loop()
    pending = retry

    def fire() -> None:
        pending.timer = None
        pending.task = loop.create_task(_reconcile(key, indices, logger))

    pending.timer = loop.call_later(pending.delay, fire)


def _cancel_retry(key: Key) -> None:
    retry = STATE.retries.pop(key, None)
    if retry is not None and retry.timer is not None:
        retry.timer.cancel()


def _forget(key: Key) -> None:
    _cancel_retry(key)
    STATE.locks.pop(key, None)
    for kind in ("Deployment", "Service", "status"):
        STATE.written.pop((kind, key), None)


def _indices(kwargs: dict[str, Any]) -> dict[str, kopf.Index[Any, Any]]:
    return {name: kwargs[name] for name in ("resources", "child_deployments", "child_services", "gpu_nodes")}


@kopf.on.event(api.GROUP, api.VERSION, api.PLURAL)
async def on_resource(
    event: kopf.RawEvent, namespace: str | None, name: str, logger: Any, **kwargs: Any
) -> None:
    if event["type"] == "DELETED":
        _forget((namespace, name))
        return
    await _reconcile((namespace, name), _indices(kwargs), logger)


@kopf.on.event("apps", "v1", "deployments", labels=MANAGED)
async def on_deployment(namespace: str | None, labels: kopf.Labels, logger: Any, **kwargs: Any) -> None:
    owner = labels.get(builders.INSTANCE_LABEL)
    if owner:
        await _reconcile((namespace, owner), _indices(kwargs), logger)


@kopf.on.event("v1", "services", labels=MANAGED)
async def on_service(namespace: str | None, labels: kopf.Labels, logger: Any, **kwargs: Any) -> None:
    owner = labels.get(builders.INSTANCE_LABEL)
    if owner:
        await _reconcile((namespace, owner), _indices(kwargs), logger)


Written = tuple[str, Key, str]


def _already_written(written: Written, cached: dict[str, Any] | None) -> bool:
    """This exact write was already made on top of the cached version the watch still shows.

    Our own write reaches the index only with its watch event; a reconcile in between (another
    child's event) would otherwise see the old object and send the same write again.
    """
    kind, key, fingerprint = written
    remembered = STATE.written.get((kind, key))
    if remembered is None:
        return False
    if remembered[1] != _version(cached):
        # The watch has moved past the version we wrote on: compare with the cluster again
        # (this is also how a child deleted after our write gets recreated).
        del STATE.written[(kind, key)]
        return False
    return remembered[0] == fingerprint


def _remember(written: Written, cached: dict[str, Any] | None) -> None:
    kind, key, fingerprint = written
    STATE.written[(kind, key)] = (fingerprint, _version(cached))


def _version(cached: dict[str, Any] | None) -> str | None:
    return None if cached is None else cached["metadata"].get("resourceVersion")


def _refresh_inventory(indices: dict[str, kopf.Index[Any, Any]]) -> bool:
    """Recompute the GPU inventory from the nodes index; True when it changed."""
    inventory = gpus.inventory_from_nodes(_nodes(indices))
    signature = desired.inventory_signature(inventory)
    changed = signature != STATE.inventory_signature
    STATE.inventory, STATE.inventory_signature = inventory, signature
    return changed


@kopf.on.event("v1", "nodes")
async def on_node(event: kopf.RawEvent, name: str, body: kopf.Body, logger: Any, **kwargs: Any) -> None:
    """A GPU inventory change may let a waiting resource proceed (NoNodeFits).

    Heartbeats change nothing the planner reads and cost one dict comparison.
    """
    view = None if event["type"] == "DELETED" else _node_view(name, body)
    if STATE.node_views.get(name) == view:
        return
    if view is None:
        STATE.node_views.pop(name, None)
    else:
        STATE.node_views[name] = view
    indices = _indices(kwargs)
    first = not STATE.inventory_signature
    if not _refresh_inventory(indices) or first:
        return
    for key in list(indices["resources"]):
        resource = _latest(indices["resources"], key)
        if resource is not None and desired.waiting_for_gpus(resource):
            await _reconcile(key, indices, logger)
