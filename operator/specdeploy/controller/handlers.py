"""kopf registration: every watch, index and handler (only this module and ``controller.main``,
which starts kopf, import kopf).

Watches and indices feed the reconciler (``controller.reconcile``) with keys and the newest
watched objects; everything the process holds lives in kopf's memo (an :class:`OperatorMemo`
built by ``controller.main``), nothing in module globals.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kopf

from specdeploy import api, children
from specdeploy.controller import admission, kopf_tuning, kube
from specdeploy.controller.cached import Cached, pack
from specdeploy.controller.engine_metrics import EngineMetricsReader, HttpFetch
from specdeploy.controller.events import EventRecorder
from specdeploy.controller.leadership import ElectionSettings, LeaseElection
from specdeploy.controller.options import NODE_WAIT_SECONDS
from specdeploy.controller.pods import PodView, project
from specdeploy.controller.reconcile import IO_THREADS, Reconciler
from specdeploy.controller.workqueue import Key
from specdeploy.planning.inventory import planner_view
from specdeploy.planning.pools import KARPENTER_GROUP, DeclaredPool, pool_view

MANAGED = {children.MANAGED_BY_LABEL: children.MANAGED_BY}
# Engine pods carry the Deployment template's labels, the owner's name among them.
# (Any: kopf does not export the type of its PRESENT marker.)
ENGINE_PODS: dict[str, Any] = {**MANAGED, children.INSTANCE_LABEL: kopf.PRESENT}
ENGINE_POD_SELECTOR = f"{children.MANAGED_BY_LABEL}={children.MANAGED_BY},{children.INSTANCE_LABEL}"
# Passes running at shutdown may finish their writes within this, well inside the pod's default
# 30 s termination grace period; the rest are cancelled (the next leader redoes them).
SHUTDOWN_GRACE_SECONDS = 10.0
LWS = children.LEADER_WORKER_SET
LWS_CRD = f"{LWS.plural}.{LWS.group}"
CRD_GROUP = "apiextensions.k8s.io"


@dataclass(frozen=True)
class WebhookServer:
    """Where the validating webhook listens and with which certificate."""

    addr: str
    port: int
    host: str | None
    certfile: Path
    pkeyfile: Path
    cafile: Path | None
    manage_configuration: bool
    # Only clients with a certificate this CA signed get an answer (mutual TLS).
    client_ca: Path | None = None


@dataclass(frozen=True)
class EngineMetricsSettings:
    """How the engine metrics reader reads (``specdeploy run --acceptance-*``)."""

    interval: float
    timeout: float
    concurrency: int


@dataclass
class OperatorMemo:
    """The process's state, handed to every handler as kopf's ``memo``.

    ``stop`` is kopf's stop flag: set when the Lease is lost, so the process exits (non-zero,
    ``lost_lease``) and its restart rejoins as a follower."""

    read_secrets: bool = False
    pod_defaults: children.PodDefaults = children.NO_DEFAULTS
    node_pools: tuple[DeclaredPool, ...] = ()
    node_wait: float = NODE_WAIT_SECONDS
    webhook: WebhookServer | None = None
    engine_metrics: EngineMetricsSettings | None = None
    election: ElectionSettings | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    lost_lease: bool = False
    reconciler: Reconciler | None = field(default=None)
    elector: LeaseElection | None = None
    background: set[asyncio.Task[None]] = field(default_factory=set)

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` in the background until cleanup (a task kept so it is not collected)."""
        self.background.add(asyncio.get_running_loop().create_task(work))

    def running(self) -> Reconciler:
        assert self.reconciler is not None, "the startup handler creates the reconciler"
        return self.reconciler


def child_index(kind: children.ChildKind) -> str:
    """The name of the kopf index holding the watched children of ``kind``."""
    return f"child_{kind.plural}"


INDICES = (
    "resources",
    *(child_index(kind) for kind in children.CHILD_KINDS),
    "gpu_nodes",
    "node_pools",
    "engine_pods",
)


class IndexView:
    """The reconciler's ClusterView over kopf's indices (live mappings kopf keeps current)."""

    def __init__(self, indices: dict[str, kopf.Index[Any, Any]]) -> None:
        self._indices = indices

    def _latest(self, index: str, key: Any) -> Any:
        store = self._indices[index].get(key)
        return next(iter(store), None) if store is not None else None

    def _object(self, index: str, key: Key) -> dict[str, Any] | None:
        found: Cached | None = self._latest(index, key)
        return None if found is None else found.unpack()

    def resource(self, key: Key) -> dict[str, Any] | None:
        return self._object("resources", key)

    def child(self, kind: str, key: Key) -> dict[str, Any] | None:
        return self._object(child_index(children.BY_KIND[kind]), key)

    def resource_keys(self) -> list[Key]:
        return list(self._indices["resources"])

    def nodes(self) -> list[dict[str, Any]]:
        found = (self._latest("gpu_nodes", name) for name in self._indices["gpu_nodes"])
        return [node for node in found if node is not None]

    def node_pools(self) -> list[dict[str, Any]]:
        found = (self._latest("node_pools", name) for name in self._indices["node_pools"])
        return [pool for pool in found if pool is not None]

    def pods(self, key: Key) -> list[PodView]:
        return list(self._indices["engine_pods"].get(key) or ())


def _view(kwargs: dict[str, Any]) -> IndexView:
    return IndexView({name: kwargs[name] for name in INDICES})


def register_webhook() -> None:
    """Serve the validating webhook (kopf refuses to start with a handler and no server).

    ``ignore_failures`` makes the failure policy Ignore: a stopped operator never blocks the
    cluster; the PairingVerified condition still reports the full result.
    """
    kopf.on.validate(
        api.GROUP, api.VERSION, api.PLURAL, operations=["CREATE", "UPDATE"], ignore_failures=True
    )(validate)


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: OperatorMemo, **_: Any) -> None:
    """kopf settings, the API client and the reconciler; only event and index handlers are used,
    so kopf keeps no finalizer, progress or diff-base annotations."""
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    settings.networking.request_timeout = 60
    settings.queueing.error_delays = [1, 2, 5, 10, 30, 60]
    settings.persistence.diffbase_storage = kopf_tuning.NoDiffBase()
    settings.watching.chunk_size = kopf_tuning.LIST_CHUNK
    # Filter pods in the apiserver: the operator never receives (or keeps memory for) the
    # cluster's other pods.
    settings.watching.label_selectors["v1", "pods"] = ENGINE_POD_SELECTOR
    if memo.webhook is not None:
        server = memo.webhook
        settings.admission.server = kopf.WebhookServer(
            addr=server.addr,
            port=server.port,
            host=server.host,
            certfile=server.certfile,
            pkeyfile=server.pkeyfile,
            cafile=server.cafile,
            verify_mode=ssl.CERT_REQUIRED if server.client_ca else None,
            verify_cafile=server.client_ca,
        )
        if server.manage_configuration:
            settings.admission.managed = api.GROUP
    kube.load_config()
    reader = None
    if memo.engine_metrics is not None:
        wanted = memo.engine_metrics
        reader = EngineMetricsReader(
            HttpFetch(wanted.timeout, wanted.concurrency),
            interval=wanted.interval,
            concurrency=wanted.concurrency,
        )
    client = kube.KubeClient(connections=IO_THREADS)
    reconciler = memo.reconciler = Reconciler(
        client,
        EventRecorder(client),
        read_secrets=memo.read_secrets,
        engine_metrics=reader,
        pod_defaults=memo.pod_defaults,
        node_pools=memo.node_pools,
        node_wait=memo.node_wait,
    )
    # Before the first pass: a multi-node resource must not be blocked for want of LeaderWorkerSet
    # only because its CRD's event has not arrived yet.
    reconciler.leader_worker_sets = await asyncio.get_running_loop().run_in_executor(
        None, client.serves, LWS.group, LWS.version
    )
    if memo.election is None:
        _lead(memo)
        return
    reconciler.follow()

    def lost() -> None:
        reconciler.follow()
        memo.lost_lease = True
        memo.stop.set()

    memo.elector = LeaseElection(memo.election, lambda: _lead(memo), lost)
    memo.elector.start()


def _lead(memo: OperatorMemo) -> None:
    """Reconcile from now on (at startup without leader election, else once the Lease is held),
    and read engine metrics: followers do neither."""
    reconciler = memo.running()
    reconciler.lead()
    if reconciler.engine_metrics is not None:
        memo.spawn(reconciler.read_engines())


@kopf.on.cleanup()
async def stop_background(memo: OperatorMemo, **_: Any) -> None:
    """Stop reconciling and reading engine metrics, close their connections, hand the Lease over."""
    if memo.reconciler is not None:
        memo.reconciler.follow()
        await memo.reconciler.queue.stop(SHUTDOWN_GRACE_SECONDS)
    for task in memo.background:
        task.cancel()
    await asyncio.gather(*memo.background, return_exceptions=True)
    memo.background.clear()
    reader = memo.reconciler.engine_metrics if memo.reconciler is not None else None
    if reader is not None:
        await reader.close()
    if memo.elector is not None:
        await asyncio.get_running_loop().run_in_executor(None, memo.elector.release)
    # kopf waits for a threading.Event stop flag in a thread of the default executor, which
    # asyncio.run joins on the way out: unset, it kept the process alive after SIGTERM until the
    # kubelet's SIGKILL.
    memo.stop.set()


def validate(body: kopf.Body, memo: OperatorMemo, **_: Any) -> None:
    """Reject pairs that fail a check decidable from cached or catalog metadata."""
    problem = admission.review(dict(body), memo.running().resolver)
    if problem is not None:
        raise kopf.AdmissionError(problem, code=422)


# The index functions are coroutines though they never wait: kopf runs a plain function in a
# thread, one executor hop and one extra task per watch event.
@kopf.index(api.GROUP, api.VERSION, api.PLURAL)
async def resources(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> dict[Key, Cached]:
    return {(namespace, name): pack(body)}


async def child(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> dict[Key, Cached]:
    """The index function of every child kind (registered per kind by ``register_children``)."""
    return {(namespace, name): pack(body)}


@kopf.index("v1", "nodes")
async def gpu_nodes(name: str, body: kopf.Body, **_: Any) -> dict[str, dict[str, Any]]:
    return {name: planner_view(body)}


@kopf.index(KARPENTER_GROUP, "v1", "nodepools")
async def node_pools(name: str, body: kopf.Body, **_: Any) -> dict[str, dict[str, Any]]:
    return {name: pool_view(body)}


@kopf.index("v1", "pods", labels=ENGINE_PODS)
async def engine_pods(
    namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any
) -> dict[Key, PodView]:
    """A small projection per engine pod (never the body), keyed by its owner."""
    return {(namespace, labels[children.INSTANCE_LABEL]): project(dict(body))}


@kopf.on.event(api.GROUP, api.VERSION, api.PLURAL)
async def on_resource(
    event: kopf.RawEvent, namespace: str | None, name: str, memo: OperatorMemo, **kwargs: Any
) -> None:
    if event["type"] == "DELETED":
        memo.running().forget((namespace, name))
        return
    memo.running().resource_changed((namespace, name), _view(kwargs))


async def on_child(namespace: str | None, labels: kopf.Labels, memo: OperatorMemo, **kwargs: Any) -> None:
    """A child changed (or was deleted): reconcile its owner, which repairs drift."""
    owner = labels.get(children.INSTANCE_LABEL)
    if owner:
        memo.running().submit((namespace, owner), _view(kwargs))


def register_children(registry: kopf.OperatorRegistry | None = None) -> None:
    """A watch and an index of the operator's children of every kind in ``children.CHILD_KINDS``
    (kopf's default registry unless one is given)."""
    for kind in children.CHILD_KINDS:
        resource = (kind.api_version, kind.plural)
        kopf.index(*resource, id=child_index(kind), labels=MANAGED, registry=registry)(child)
        kopf.on.event(*resource, labels=MANAGED, registry=registry)(on_child)


register_children()

# The children's watches. on_child only reconciles the owner, which the owner's own event does
# once every kind is indexed: kopf_tuning's direct dispatch lets the children's events of the
# first listings go, indexed.
CHILD_WATCHES = tuple((kind.group, kind.plural) for kind in children.CHILD_KINDS)
# The kinds whose event handlers (on_resource, on_child) read an object's identity alone, its
# index function having packed the whole: kopf_tuning's direct dispatch thins their events once
# indexed.
IDENTITY_ONLY_KINDS = ((api.GROUP, api.PLURAL), *CHILD_WATCHES)


@kopf.on.event(CRD_GROUP, "v1", "customresourcedefinitions", field="metadata.name", value=LWS_CRD)
async def on_leader_worker_set_crd(
    event: kopf.RawEvent, body: kopf.Body, memo: OperatorMemo, **kwargs: Any
) -> None:
    """LeaderWorkerSet was installed (its CRD established) or removed: multi-node plans follow."""
    established = any(
        c.get("type") == "Established" and c.get("status") == "True"
        for c in (body.get("status") or {}).get("conditions") or []
    )
    memo.running().leader_worker_sets_changed(event["type"] != "DELETED" and established, _view(kwargs))


@kopf.on.event("v1", "nodes")
async def on_node(
    event: kopf.RawEvent, name: str, body: kopf.Body, memo: OperatorMemo, **kwargs: Any
) -> None:
    """A GPU inventory change may let a waiting resource proceed (NoNodeFits)."""
    view = None if event["type"] == "DELETED" else planner_view(body)
    memo.running().node_changed(name, view, _view(kwargs))


@kopf.on.event(KARPENTER_GROUP, "v1", "nodepools")
async def on_node_pool(
    event: kopf.RawEvent, name: str, body: kopf.Body, memo: OperatorMemo, **kwargs: Any
) -> None:
    """A Karpenter NodePool changed: the capacity it can create may let a resource proceed."""
    view = None if event["type"] == "DELETED" else pool_view(body)
    memo.running().pool_changed(name, view, _view(kwargs))


@kopf.on.event("v1", "pods", labels=ENGINE_PODS)
async def on_pod(
    event: kopf.RawEvent,
    namespace: str | None,
    name: str,
    labels: kopf.Labels,
    body: kopf.Body,
    memo: OperatorMemo,
    **kwargs: Any,
) -> None:
    """An engine pod changed: its owner is reconciled when the pod's failure changed."""
    projection = None if event["type"] == "DELETED" else project(dict(body))
    owner = (namespace, labels[children.INSTANCE_LABEL])
    memo.running().pod_changed(owner, name, projection, _view(kwargs))
