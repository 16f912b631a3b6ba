"""kopf handlers: the only module that knows about kopf.

Level-based: every event on a SpeculativeDeployment, on one of its children, or on a GPU node
leads to one reconcile of the affected resources, which computes the whole desired state
(``specdeploy.desired``), writes only what differs from the cached cluster state, and writes
status only when it changed. Children and nodes are kept in kopf indices fed by watches, so a
reconcile reads nothing from the apiserver in the common case.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kopf

from specdeploy import admission, api, builders, conditions, desired, drift, gpus, kube, metrics
from specdeploy.metadata import MetadataResolver

log = logging.getLogger("specdeploy")

FIELD_MANAGER = "specdeploy"
RETRY_MIN_SECONDS = 5.0
RETRY_MAX_SECONDS = 300.0
MANAGED = {builders.MANAGED_BY_LABEL: builders.MANAGED_BY}

Key = tuple[str | None, str]


class _State:
    """Process-wide operator state: bounded by the number of live resources."""

    def __init__(self) -> None:
        self.resolver = MetadataResolver()
        self.locks: dict[Key, asyncio.Lock] = {}
        self.retries: dict[Key, tuple[asyncio.TimerHandle, float]] = {}
        self.inventory_signature: object = None
        self.read_secrets = False


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


@kopf.index("v1", "nodes")
def gpu_nodes(name: str, body: kopf.Body, **_: Any) -> dict[str, dict[str, Any]]:
    return {name: {"metadata": dict(body.metadata), "spec": dict(body.spec), "status": dict(body.status)}}


def _nodes(indices: dict[str, kopf.Index[Any, Any]]) -> list[dict[str, Any]]:
    return [
        node for name in indices["gpu_nodes"] if (node := _latest(indices["gpu_nodes"], name)) is not None
    ]


def _latest(index: kopf.Index[Any, Any], key: Any) -> Any:
    store = index.get(key)
    return next(iter(store), None) if store is not None else None


async def _reconcile(key: Key, indices: dict[str, kopf.Index[Any, Any]], logger: Any) -> None:
    lock = STATE.locks.setdefault(key, asyncio.Lock())
    async with lock:
        started = time.monotonic()
        body = _latest(indices["resources"], key)
        if body is None or body["metadata"].get("deletionTimestamp"):
            _forget(key)
            return
        inventory = gpus.inventory_from_nodes(_nodes(indices))
        result = await asyncio.to_thread(
            desired.compute,
            body,
            STATE.resolver,
            inventory,
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
                if drift.needs_apply(want, current):
                    logger.info("applying %s %s/%s", want["kind"], *key)
                    await asyncio.to_thread(kube.apply, want, FIELD_MANAGER)
                    metrics.WRITES.labels(want["kind"]).inc()
        status, transitions = desired.status_for(body, result, deployment)
        if status is not None:
            logger.debug("status of %s/%s changes: %s", *key, status)
            await asyncio.to_thread(kube.patch_status, key, status)
            metrics.WRITES.labels("status").inc()
        for t in transitions:
            healthy = (t.status == "False") if t.type == conditions.DEGRADED else (t.status != "False")
            kopf.event(
                body,
                type="Normal" if healthy else "Warning",
                reason=t.reason,
                message=f"{t.type}={t.status}: {t.message}",
            )
        if result.retry:
            _schedule_retry(key, indices, logger)
        else:
            _cancel_retry(key)
    metrics.RECONCILES.labels("blocked" if result.blocked else "converged").inc()
    metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)


def _schedule_retry(key: Key, indices: dict[str, kopf.Index[Any, Any]], logger: Any) -> None:
    """Bounded exponential backoff for transient failures (unreachable hub): no polling loop."""
    previous = STATE.retries.get(key)
    delay = RETRY_MIN_SECONDS if previous is None else min(previous[1] * 2, RETRY_MAX_SECONDS)
    if previous is not None:
        previous[0].cancel()
    loop = asyncio.get_running_loop()
    handle = loop.call_later(delay, lambda: loop.create_task(_reconcile(key, indices, logger)))
    STATE.retries[key] = (handle, delay)


def _cancel_retry(key: Key) -> None:
    entry = STATE.retries.pop(key, None)
    if entry is not None:
        entry[0].cancel()


def _forget(key: Key) -> None:
    _cancel_retry(key)
    STATE.locks.pop(key, None)


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


@kopf.on.event("v1", "nodes")
async def on_node(logger: Any, **kwargs: Any) -> None:
    """A GPU inventory change may let a waiting resource proceed (NoNodeFits)."""
    indices = _indices(kwargs)
    signature = desired.inventory_signature(gpus.inventory_from_nodes(_nodes(indices)))
    if signature == STATE.inventory_signature:
        return
    first = STATE.inventory_signature is None
    STATE.inventory_signature = signature
    if first:
        return
    for key in list(indices["resources"]):
        body = _latest(indices["resources"], key)
        if body is not None and desired.waiting_for_gpus(body):
            await _reconcile(key, indices, logger)
