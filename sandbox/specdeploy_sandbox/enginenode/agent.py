"""The engine node agent: a small kubelet for one sandbox node whose pods run as local processes.

It keeps the Node Ready (status conditions, and a Lease renewed every 10 s, the heartbeat the
node lifecycle controller watches), watches the pods bound to the node and gives each one a
worker (``pods``), and serves their logs to the apiserver (``kubelet_api``). Watches list
again on 410 and reconnect with a bounded back-off, so an apiserver restart costs nothing but
time; the pods' processes keep running meanwhile.

On SIGTERM it stops every pod's processes (gracefully, for a bounded time) and exits 0. When its
Node is deleted it stops every pod and waits for the node to come back. It adopts nothing from a
previous run: process groups an earlier agent recorded are killed at start, and pods already on
the node have their containers started again (a restart in their status).
"""

from __future__ import annotations

import datetime
import logging
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdeploy_sandbox.enginenode import kubelet_api
from specdeploy_sandbox.enginenode.apiclient import Gone, Kube
from specdeploy_sandbox.enginenode.images import ImageMap
from specdeploy_sandbox.enginenode.ipam import IpAllocator
from specdeploy_sandbox.enginenode.kubelet_api import LogRef, LogUnavailable
from specdeploy_sandbox.enginenode.pgids import PgidRegistry
from specdeploy_sandbox.enginenode.pod_status import now_rfc3339
from specdeploy_sandbox.enginenode.pod_worker import HOST_IP, NodeContext, PodWorker

WATCH_SECONDS = 300
BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 10.0
LEASE_RENEW_S = 10.0
STATUS_REFRESH_S = 300.0
SHUTDOWN_GRACE_S = 8.0
GONE_GRACE_S = 2.0
CHECK_S = 5.0
PROBE_THREADS = 16
NODE_CONDITIONS = (
    ("Ready", "True", "KubeletReady", "the sandbox engine node agent is posting ready status"),
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "no memory pressure"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "no PID pressure"),
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Options:
    kubeconfig: Path
    node: str
    state_dir: Path
    pod_cidr: str
    kubelet_port: int
    runtimes: Mapping[str, Path]
    images: ImageMap
    kubelet_version: str


def _micro_time() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Agent:
    def __init__(self, options: Options) -> None:
        self.options = options
        self.stopping = threading.Event()
        self._heartbeat_wake = threading.Event()
        self._status_needed = True
        self._lock = threading.Lock()
        self._workers: dict[str, PodWorker] = {}
        self._node: dict[str, Any] | None = None
        self._node_gone = True
        self._pgids = PgidRegistry(options.state_dir)
        self._probes = ThreadPoolExecutor(PROBE_THREADS, thread_name_prefix="probe")
        self._context: NodeContext | None = None

    def stop(self) -> None:
        """Ask ``run`` to stop the pods and return (safe from a signal handler)."""
        self.stopping.set()
        self._heartbeat_wake.set()

    def run(self) -> int:
        """Serve until stop() or the sandbox's kubeconfig disappears; then stop every pod."""
        options = self.options
        options.state_dir.mkdir(parents=True, exist_ok=True)
        leftovers = self._pgids.kill_all()
        if leftovers:
            log.info("killed process groups left by an earlier agent: %s", leftovers)
        shutil.rmtree(options.state_dir / "pods", ignore_errors=True)
        kube = Kube(options.kubeconfig)
        self._context = NodeContext(
            state_dir=options.state_dir, kube=kube, images=options.images, runtimes=options.runtimes,
            ips=IpAllocator(options.pod_cidr), pgids=self._pgids, probes=self._probes,
        )  # fmt: skip
        tls_dir = options.state_dir / "kubelet-tls"
        server = kubelet_api.start(options.kubelet_port, options.node, tls_dir, self)
        log.info("engine node %s: kubelet API on https://127.0.0.1:%d", options.node, options.kubelet_port)
        threads = [
            threading.Thread(target=self._informer, args=("nodes", kube), name="watch-node", daemon=True),
            threading.Thread(target=self._informer, args=("pods", kube), name="watch-pods", daemon=True),
            threading.Thread(target=self._heartbeat, args=(kube,), name="heartbeat", daemon=True),
        ]
        for thread in threads:
            thread.start()
        while not self.stopping.wait(CHECK_S):
            if not options.kubeconfig.exists():
                log.warning("the sandbox's kubeconfig is gone; stopping")
                break
        self.stop()
        self._stop_all_pods(SHUTDOWN_GRACE_S, wait=True)
        self._pgids.kill_all()
        server.shutdown()
        server.server_close()
        self._probes.shutdown(wait=False, cancel_futures=True)
        log.info("engine node %s: stopped", options.node)
        return 0

    # -- watches -------------------------------------------------------------------------------

    def _informer(self, kind: str, kube: Kube) -> None:
        """List, then watch from the list's resourceVersion; list again on 410 or after an error."""
        listed: Callable[[list[dict[str, Any]]], None]
        event: Callable[[str, dict[str, Any]], None]
        if kind == "pods":
            list_call, listed, event = kube.list_pods, self._pods_listed, self._pod_event
        else:
            list_call, listed, event = kube.list_nodes, self._nodes_listed, self._node_event
        backoff = BACKOFF_MIN_S
        while not self.stopping.is_set():
            try:
                items, version = list_call(self.options.node)
                listed(items)
                backoff = BACKOFF_MIN_S
                while not self.stopping.is_set():
                    for change in kube.watch(kind, self.options.node, version, WATCH_SECONDS):
                        obj = change["object"]
                        version = obj["metadata"]["resourceVersion"]
                        if change["type"] != "BOOKMARK":
                            event(change["type"], obj)
                        if self.stopping.is_set():
                            return
            except Gone:
                log.info("%s watch expired; listing again", kind)
            except Exception as exc:
                log.warning("%s watch failed (retrying in %.1fs): %s", kind, backoff, exc)
                self.stopping.wait(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)

    def _pods_listed(self, pods: list[dict[str, Any]]) -> None:
        present = {pod["metadata"]["uid"] for pod in pods}
        with self._lock:
            vanished = [uid for uid in self._workers if uid not in present]
        for uid in vanished:
            self._pod_event("DELETED", {"metadata": {"uid": uid}})
        for pod in pods:
            self._pod_event("MODIFIED", pod)

    def _pod_event(self, kind: str, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        with self._lock:
            worker = self._workers.get(uid)
            if kind == "DELETED":
                self._workers.pop(uid, None)
                if worker is not None:
                    worker.stop(GONE_GRACE_S)
                return
            if self._node_gone or self.stopping.is_set() or self._context is None:
                return
            if worker is not None and not worker.finished.is_set():
                worker.update(pod)
                return
            worker = PodWorker(pod, self._context)
            self._workers[uid] = worker
            worker.start()  # under the lock, so _stop_all_pods never joins an unstarted thread

    def _nodes_listed(self, nodes: list[dict[str, Any]]) -> None:
        if nodes:
            self._node_event("MODIFIED", nodes[0])
        else:
            self._node_event("DELETED", {})

    def _node_event(self, kind: str, node: dict[str, Any]) -> None:
        if kind == "DELETED":
            with self._lock:
                already, self._node_gone, self._node = self._node_gone, True, None
            if not already:
                log.warning("node %s was deleted; stopping its pods", self.options.node)
                self._stop_all_pods(SHUTDOWN_GRACE_S, wait=False)
            return
        with self._lock:
            self._node, self._node_gone = node, False
        if not self._status_current(node):
            self._status_needed = True
            self._heartbeat_wake.set()

    def _stop_all_pods(self, grace: float, wait: bool) -> None:
        with self._lock:
            workers = list(self._workers.values())
            self._workers.clear()
        for worker in workers:
            worker.stop(grace)
        if wait:
            for worker in workers:
                worker.join(grace + 10.0)

    # -- the node's heartbeat ------------------------------------------------------------------

    def _status_current(self, node: Mapping[str, Any]) -> bool:
        """Ready, and the kubelet endpoint the apiserver uses for logs is this agent's."""
        status = node.get("status") or {}
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        port = ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
        wanted = {kind: value for kind, value, _, _ in NODE_CONDITIONS}
        return port == self.options.kubelet_port and all(conditions.get(k) == v for k, v in wanted.items())

    def _node_status(self, node: Mapping[str, Any]) -> dict[str, Any]:
        now = now_rfc3339()
        before = {c.get("type"): c for c in (node.get("status") or {}).get("conditions") or []}
        conditions = []
        for kind, value, reason, message in NODE_CONDITIONS:
            old = before.get(kind) or {}
            since = old.get("lastTransitionTime") if old.get("status") == value else None
            conditions.append({"type": kind, "status": value, "reason": reason, "message": message,
                               "lastHeartbeatTime": now, "lastTransitionTime": since or now})  # fmt: skip
        return {
            "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": HOST_IP}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.options.kubelet_port}},
            "nodeInfo": {
                "kubeletVersion": self.options.kubelet_version, "operatingSystem": "linux",
                "architecture": "amd64", "containerRuntimeVersion": "sandbox-engine-node://1",
                "osImage": "sandbox engine node", "kernelVersion": "", "machineID": "", "systemUUID": "",
                "bootID": "", "kubeProxyVersion": "",
            },
        }  # fmt: skip

    def _heartbeat(self, kube: Kube) -> None:
        """Renew the lease every LEASE_RENEW_S; post the node status at start, whenever it is not
        what it should be, and every STATUS_REFRESH_S. Failures are retried with a back-off."""
        backoff = BACKOFF_MIN_S
        status_due = 0.0
        while not self.stopping.is_set():
            with self._lock:
                node = self._node
            sleep = LEASE_RENEW_S
            if node is not None:
                try:
                    if self._status_needed or time.monotonic() >= status_due:
                        self._status_needed = False
                        kube.patch_node_status(self.options.node, self._node_status(node))
                        status_due = time.monotonic() + STATUS_REFRESH_S
                    kube.renew_lease(self.options.node, node["metadata"]["uid"], _micro_time())
                    backoff = BACKOFF_MIN_S
                except Exception as exc:
                    log.warning("node heartbeat failed (retrying in %.1fs): %s", backoff, exc)
                    self._status_needed = True
                    sleep, backoff = backoff, min(backoff * 2, BACKOFF_MAX_S)
            self._heartbeat_wake.wait(sleep)
            self._heartbeat_wake.clear()

    # -- logs for the kubelet API --------------------------------------------------------------

    def container_log(self, namespace: str, pod: str, container: str, previous: bool) -> LogRef:
        with self._lock:
            worker = next(
                (w for w in self._workers.values() if (w.namespace, w.name) == (namespace, pod)), None
            )
        if worker is None:
            raise LogUnavailable(
                404, f'pod "{pod}" in namespace "{namespace}" is not on node {self.options.node}'
            )
        return worker.container_log(container, previous)
