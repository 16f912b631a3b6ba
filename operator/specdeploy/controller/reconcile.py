"""One reconcile of one SpeculativeDeployment, and the operator state that serves every reconcile.

Level-based: every event on a resource, on one of its children, on a GPU node or a change in an
engine pod's failure leads to one pass over the affected resources, which computes the whole
desired state (``pipeline.compute``), writes only the children that differ from the watched
state, and writes status only when it changed. The watched objects come through a
:class:`ClusterView` (kopf indices in production), so a reconcile reads nothing from the
apiserver in the common case. No kopf here: the handlers module passes events in and posts the
events this module reports.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from specdeploy import adaptive, api, engines, pipeline
from specdeploy.acceptance import Reading
from specdeploy.children import CHILD_KINDS, ENGINE_KINDS, NO_DEFAULTS, SERVICE, PodDefaults
from specdeploy.controller import diffing, events, metrics, status
from specdeploy.controller.engine_metrics import EngineMetricsReader
from specdeploy.controller.kube import KubeClient, Refused
from specdeploy.controller.options import NODE_WAIT_SECONDS
from specdeploy.controller.pods import (
    EngineLogs,
    Failure,
    FailureMemory,
    PodView,
    command_digest,
    pod_failure,
)
from specdeploy.controller.workqueue import CallLater, Key, Outcome, WorkQueue, WriteLedger, loop_call_later
from specdeploy.modelinfo import ModelResolver
from specdeploy.planning import Inventory, inventory_from_nodes
from specdeploy.planning.pools import DeclaredPool, declared_pools, karpenter_pools

IO_THREADS = 16
T = TypeVar("T")
log = logging.getLogger(__name__)


class ClusterView(Protocol):
    """The operator's watch caches: the newest version of each object it watches."""

    def resource(self, key: Key) -> dict[str, Any] | None: ...

    def child(self, kind: str, key: Key) -> dict[str, Any] | None:
        """The watched child of ``kind`` (a ``children.CHILD_KINDS`` entry's name) owned by ``key``."""
        ...

    def resource_keys(self) -> list[Key]: ...

    def nodes(self) -> list[dict[str, Any]]: ...

    def node_pools(self) -> list[dict[str, Any]]:
        """The Karpenter NodePools' planner views (none where Karpenter is not installed)."""
        ...

    def pods(self, key: Key) -> list[PodView]: ...


# (resource body, event type, reason, message)
EventPoster = Callable[[dict[str, Any], str, str, str], None]


class GpuInventory:
    """The cluster's GPU inventory and the node pools that can add to it, recomputed only when a
    node's or a NodePool's planner view changes."""

    def __init__(self, declared: tuple[DeclaredPool, ...] = ()) -> None:
        self.inventory = Inventory(())
        self.signature = ""
        self._declared = declared_pools(declared)
        self._views: dict[tuple[str, str], dict[str, Any]] = {}

    def changed(self, kind: str, name: str, view: dict[str, Any] | None) -> bool:
        """Record a node's or NodePool's planner view (None: deleted); False when it is what was
        seen before."""
        if self._views.get((kind, name)) == view:
            return False
        if view is None:
            self._views.pop((kind, name), None)
        else:
            self._views[(kind, name)] = view
        return True

    def refresh(self, nodes: list[dict[str, Any]], nodepools: list[dict[str, Any]]) -> bool:
        """Recompute from the nodes and NodePools; True when the capacity the planner sees changed."""
        found, unusable = karpenter_pools(nodepools)
        inventory = inventory_from_nodes(nodes).with_pools([*self._declared, *found], unusable)
        signature = inventory.signature()
        changed = signature != self.signature
        self.inventory, self.signature = inventory, signature
        return changed


class Reconciler:
    """Everything a reconcile needs, owned by one object kept in kopf's memo: no module globals."""

    def __init__(
        self,
        kube: KubeClient,
        post_event: EventPoster,
        *,
        read_secrets: bool = False,
        resolver: ModelResolver | None = None,
        call_later: CallLater = loop_call_later,
        engine_metrics: EngineMetricsReader | None = None,
        pod_defaults: PodDefaults = NO_DEFAULTS,
        node_pools: tuple[DeclaredPool, ...] = (),
        node_wait: float = NODE_WAIT_SECONDS,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.kube = kube
        self.pod_defaults = pod_defaults
        self.wall_clock = wall_clock
        self.post_event = post_event
        self.read_secrets = read_secrets
        self.resolver = resolver or ModelResolver()
        self.gpus = GpuInventory(node_pools)
        self.node_wait = node_wait
        self.pod_failures = FailureMemory()
        self.engine_logs = EngineLogs()
        self.ledger = WriteLedger()
        # Per resource, the fingerprint of the metadata its last watch event carried.
        self._metadata: dict[Key, str] = {}
        # As many passes at once as threads to make their API calls (controller-runtime's
        # MaxConcurrentReconciles); the rest wait holding only their key.
        self.queue = WorkQueue(
            self._reconcile, concurrency=IO_THREADS, call_later=call_later, on_done=_record
        )
        self.engine_metrics = engine_metrics
        # Whether the cluster serves LeaderWorkerSet (multi-node replicas): set at startup from
        # discovery, then kept current by its CRD's events (``leader_worker_sets_changed``).
        self.leader_worker_sets = False
        self.view: ClusterView | None = None
        self.active = True
        metrics.LEADER.set(1)
        # API calls and hub downloads block; a pool of their own keeps them from queueing behind
        # (or starving) kopf's and aiohttp's own threads.
        self.io = concurrent.futures.ThreadPoolExecutor(
            max_workers=IO_THREADS, thread_name_prefix="specdeploy-io"
        )

    def submit(self, key: Key, view: ClusterView) -> None:
        """Queue a pass of ``key`` against the newest watched state (a follower only keeps the view)."""
        self.view = view
        if self.active:
            self.queue.enqueue(key)

    def resource_changed(self, key: Key, view: ClusterView) -> None:
        """A resource's watch event (the view holds its new version): a pass, unless it only shows
        back the status this operator wrote last (every status write comes back so), with the
        metadata a pass reads unchanged: a pass over it would compute what was written and write
        nothing. As controller-runtime's GenerationChangedPredicate, but a status someone else
        wrote is still repaired."""
        body = view.resource(key)
        if body is None:
            return
        metadata = diffing.metadata_fingerprint(body)
        seen, self._metadata[key] = self._metadata.get(key), metadata
        status_ = diffing.status_fingerprint(body.get("status") or {})
        if seen == metadata and self.ledger.last_written("status", key) == status_:
            self.view = view
            metrics.ECHOES.inc()
            return
        self.submit(key, view)

    def follow(self) -> None:
        """Another replica reconciles: keep the watch caches, write nothing."""
        self.active = False
        metrics.LEADER.set(0)

    def lead(self) -> None:
        """This replica now reconciles: one pass over every resource the caches hold, since a
        follower let their events go by."""
        self.active = True
        metrics.LEADER.set(1)
        view = self.view
        if view is not None:
            for key in view.resource_keys():
                self.submit(key, view)

    def forget(self, key: Key) -> None:
        """A resource is gone: drop its pending retry, remembered writes, window and metric series."""
        self.queue.forget(key)
        self.ledger.forget(key)
        self._metadata.pop(key, None)
        if self.engine_metrics is not None:
            self.engine_metrics.forget(key)
        metrics.forget_acceptance(key)

    async def read_engines(self) -> None:
        """Run the engine metrics reader (a startup task): a resource whose acceptance changed is
        reconciled like one whose child changed."""
        assert self.engine_metrics is not None, "started only with a reader"

        def changed(key: Key) -> None:
            if self.view is not None:
                self.submit(key, self.view)

        await self.engine_metrics.run(lambda: self.view, changed)

    def leader_worker_sets_changed(self, served: bool, view: ClusterView) -> None:
        """LeaderWorkerSet was installed or removed: the resources that plan several nodes per
        replica (or waited for it) are reconciled again."""
        if served == self.leader_worker_sets:
            return
        self.leader_worker_sets = served
        for key in view.resource_keys():
            resource = view.resource(key)
            if resource is not None and status.multi_node(resource):
                self.submit(key, view)

    def node_changed(self, name: str, node_view: dict[str, Any] | None, view: ClusterView) -> None:
        """A GPU inventory change may let a waiting resource proceed (NoNodeFits).

        Heartbeats change nothing the planner reads and cost one dict comparison.
        """
        self._capacity_changed("Node", name, node_view, view)

    def pool_changed(self, name: str, pool_view: dict[str, Any] | None, view: ClusterView) -> None:
        """A NodePool's shape or limits changed: resources waiting for GPUs, or planned on a
        pool, are planned again."""
        self._capacity_changed("NodePool", name, pool_view, view)

    def _capacity_changed(self, kind: str, name: str, seen: dict[str, Any] | None, view: ClusterView) -> None:
        if not self.gpus.changed(kind, name, seen):
            return
        first = not self.gpus.signature
        if not self.gpus.refresh(view.nodes(), view.node_pools()) or first:
            return
        for key in view.resource_keys():
            resource = view.resource(key)
            if resource is not None and (status.waiting_for_gpus(resource) or status.on_node_pool(resource)):
                self.submit(key, view)

    def pod_changed(self, owner: Key, pod: str, projection: PodView | None, view: ClusterView) -> None:
        """An engine pod of ``owner`` changed (None: deleted): reconcile only when its failure (or
        its wait for a node) did, or an engine run crashed whose log was not read yet.

        kopf calls on every pod event; readiness and phase reach status through the Deployment's
        own events, so only what Ready and Degraded report from pods is compared here.
        """
        failure = None if projection is None else pod_failure(projection) or _unscheduled(projection)
        if failure is None:
            self.engine_logs.forget(owner[0], pod)
        # A new crashed run is read for its root cause, even when its last lines are the same.
        unread = projection is not None and bool(self.engine_logs.due(owner[0], [projection]))
        if self.pod_failures.changed((owner[0], pod), failure) or unread:
            self.submit(owner, view)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.io, fn, *args)

    async def _post(self, body: dict[str, Any], notice: events.Notice) -> None:
        await self._run(self.post_event, body, notice.type, notice.reason, notice.message)

    async def _reconcile(self, key: Key) -> Outcome | None:
        view = self.view
        assert view is not None, "submit() sets the view before the queue runs a pass"
        body = view.resource(key)
        if body is None or body["metadata"].get("deletionTimestamp"):
            self.forget(key)
            return None
        return await self._converge(key, body, view)

    async def _converge(self, key: Key, body: dict[str, Any], view: ClusterView) -> Outcome:
        """One pass: children and status written where they differ."""
        if not self.gpus.signature:
            self.gpus.refresh(view.nodes(), view.node_pools())
        desired = await self._compute(body)
        reading = None if self.engine_metrics is None else self.engine_metrics.reading(key)
        decision = None
        if not desired.blocked and desired.spec is not None:
            desired, decision = await self._adapted(body, desired, reading)
        current = {kind.kind: view.child(kind.kind, key) for kind in CHILD_KINDS}
        if not desired.blocked:
            desired = await self._apply_children(body, key, desired, current)
        pods = await self._with_root_causes(key, view.pods(key))
        node_wait = status.NodeWait(self.wall_clock().timestamp(), self.node_wait)
        new_status, transitions = status.status_for(
            body,
            desired,
            _engine_set(desired, current),
            pods,
            reading,
            reachable=current[SERVICE.kind] is not None,
            speculation_=None if decision is None else decision.speculation,
            node_wait=node_wait,
        )
        self._watch_node_deadline(key, desired, pods, node_wait)
        metrics.publish_acceptance(key, {**(body.get("status") or {}), **(new_status or {})})
        if new_status is not None:
            fingerprint = diffing.status_fingerprint(new_status)
            version = _version(body)
            if self.ledger.already_written("status", key, fingerprint, version):
                transitions = []
            else:
                await self._run(self.kube.patch_status, key, new_status)
                metrics.WRITES.labels("status").inc()
                metrics.STATUS_WRITES.labels(status.write_cause(body.get("status") or {}, new_status)).inc()
                self.ledger.remember("status", key, fingerprint, version)
        for notice in events.notices(transitions):
            await self._post(body, notice)
        if new_status is not None and decision is not None:
            for type_, reason, message in decision.notices:
                await self._post(body, events.Notice(type_, reason, message))
        if desired.retry:
            return "retry"
        return "blocked" if desired.blocked else "converged"

    def _watch_node_deadline(
        self, key: Key, desired: pipeline.Desired, pods: list[PodView], node_wait: status.NodeWait
    ) -> None:
        """A pass when a pod planned on a node pool has waited ``--node-wait`` for its node: no
        event announces that the node did not come. None waiting (any more): no timer."""
        pending = status.waiting_for_pool_node(desired, pods)
        left = node_wait.left(pending) if pending is not None else 0.0
        if left > 0:
            self.queue.enqueue_after(key, left + 1.0)
        else:
            self.queue.cancel_deadline(key)

    async def _compute(self, body: dict[str, Any]) -> pipeline.Desired:
        desired = await self._run(
            pipeline.compute,
            body,
            self.resolver,
            self.gpus.inventory,
            self.kube.read_configmap,
            self.kube.read_secret if self.read_secrets else None,
            self.leader_worker_sets,
            self.pod_defaults,
            True,  # fetch tokenizer files: the pairing check's tokenizer rule runs in the cluster
        )
        return _stamped(desired)

    async def _adapted(
        self, body: dict[str, Any], desired: pipeline.Desired, reading: Reading | None
    ) -> tuple[pipeline.Desired, adaptive.Decision]:
        """Adaptive speculation's decision on the acceptance this pass judges and the resource's
        latest benchmark; when it changes the running schedule, the children rendered with the
        new one (the pipeline reads it back from the status this pass writes)."""
        assert desired.spec is not None
        command = desired.status.command
        figures, _ = status.speculation(body, command, reading, 0)
        annotations = body["metadata"].get("annotations") or {}
        curve = adaptive.parse(annotations.get(api.BENCHMARK_ANNOTATION))
        decision = adaptive.decide(
            desired.spec, body, figures, curve, command_digest(command), self.wall_clock()
        )
        if decision.reschedule and decision.speculation is not None:
            speculation = decision.speculation.model_dump(by_alias=True, exclude_none=True)
            desired = await self._compute(
                {**body, "status": {**(body.get("status") or {}), "speculation": speculation}}
            )
        return desired, decision

    async def _with_root_causes(self, key: Key, pods: list[PodView]) -> list[PodView]:
        """``pods`` with the root cause of each crashed engine run, its log read once per run."""
        namespace = key[0]
        for read in self.engine_logs.due(namespace, pods):
            text = await self._run(self.kube.read_log, namespace, read)
            engine = next((p.engine for p in pods if p.name == read.pod), "")
            cause = engines.root_cause(engine, text) if text else None
            metrics.ENGINE_LOG_READS.labels(
                "unreadable" if text is None else "cause" if cause else "none"
            ).inc()
            self.engine_logs.record(namespace, read, cause or "")
        return self.engine_logs.annotate(namespace, pods)

    async def _apply_children(
        self,
        body: dict[str, Any],
        key: Key,
        desired: pipeline.Desired,
        current: dict[str, dict[str, Any] | None],
    ) -> pipeline.Desired:
        """Apply the children that differ from ``current`` (the watched ones, by kind); a child the
        apiserver refuses as written (invalid, denied by a policy, over quota) blocks the resource
        with that message and a retry. A written engine child with other replicas than before posts
        a Scaled Event.

        When the engine pods move between a Deployment and a LeaderWorkerSet (a plan gained or
        lost nodes), the old child and the Service in front of it (each kind
        ``held_while_switching``) stay until the new child has rolled out; then the Service turns
        to the new pods and the old child is deleted.
        """
        engine_set = desired.engine_set
        previous = _previous_engine_set(desired, current)
        switching = previous is not None and not status.rolled_out(
            desired, current[engine_set["kind"]] if engine_set else None, _replicas(engine_set)
        )
        for kind in CHILD_KINDS:
            manifest = desired.child(kind.kind)
            if manifest is None or (switching and kind.held_while_switching and current[kind.kind]):
                continue
            try:
                written = await self._apply(key, manifest, current[kind.kind])
            except Refused as exc:
                return dataclasses.replace(
                    desired, blocked=True, reason="ChildRejected", message=str(exc), retry=True
                )
            before = current[kind.kind]
            rescaled = before is not None and _replicas(before) != _replicas(manifest)
            if written and manifest is engine_set and rescaled:
                await self._post(body, events.scaled(_replicas(before), _replicas(manifest)))
        if previous is not None and not switching and not previous["metadata"].get("deletionTimestamp"):
            log.info(
                "%s/%s now runs as a %s; deleting its %s",
                *key,
                engine_set and engine_set["kind"],
                previous["kind"],
            )
            await self._run(self.kube.delete, previous)
            metrics.WRITES.labels(previous["kind"]).inc()
        return desired

    async def _apply(self, key: Key, want: dict[str, Any], current: dict[str, Any] | None) -> bool:
        """Apply ``want`` unless ``current`` (or a write the watch has not shown yet) has it;
        whether it was written."""
        kind = want["kind"]
        fingerprint = want["metadata"]["annotations"][diffing.HASH_ANNOTATION]
        version = _version(current)
        if self.ledger.already_written(kind, key, fingerprint, version):
            return False
        if not diffing.needs_apply(want, current):
            return False
        log.debug("applying %s %s/%s", kind, *key)
        await self._run(self.kube.apply, want)
        metrics.WRITES.labels(kind).inc()
        self.ledger.remember(kind, key, fingerprint, version)
        return True


def _engine_set(
    desired: pipeline.Desired, current: dict[str, dict[str, Any] | None]
) -> dict[str, Any] | None:
    """The watched child whose pods serve: the one of the kind the pass wants, else (blocked)
    the first engine kind that exists."""
    wanted = desired.engine_set
    if wanted is not None:
        return current[wanted["kind"]]
    return next((current[k.kind] for k in ENGINE_KINDS if current[k.kind] is not None), None)


def _previous_engine_set(
    desired: pipeline.Desired, current: dict[str, dict[str, Any] | None]
) -> dict[str, Any] | None:
    """The watched engine child of a kind the pass no longer wants, if any."""
    wanted = desired.engine_set
    if wanted is None:
        return None
    others = (current[k.kind] for k in ENGINE_KINDS if k.kind != wanted["kind"])
    return next((child for child in others if child is not None), None)


def _replicas(manifest: dict[str, Any] | None) -> int:
    return int((manifest or {}).get("spec", {}).get("replicas", 0))


def _stamped(desired: pipeline.Desired) -> pipeline.Desired:
    """The children with their hash annotation, computed once for the pass."""
    stamped = {kind: diffing.stamped(manifest) for kind, manifest in desired.children.items()}
    return dataclasses.replace(desired, children=stamped)


def _version(cached: dict[str, Any] | None) -> str | None:
    return None if cached is None else cached["metadata"].get("resourceVersion")


def _record(outcome: Outcome, seconds: float) -> None:
    metrics.RECONCILES.labels(outcome).inc()
    metrics.RECONCILE_SECONDS.observe(seconds)


def _unscheduled(pod: PodView) -> Failure | None:
    """A pod no node fits yet, as the pod memory compares it: a node pool's node may be coming."""
    return Failure("Unschedulable", pod.unschedulable) if pod.unschedulable else None
