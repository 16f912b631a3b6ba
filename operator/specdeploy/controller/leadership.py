"""Leader election on a coordination.k8s.io Lease, so replicas of the operator take turns.

Every replica watches and serves the admission webhook; only the holder of the Lease reconciles
(and reads engine metrics). The election is the kubernetes client's ``LeaderElection`` (the
same Lease protocol kube-controller-manager uses), run in a thread of its own; the callbacks
cross into the operator's event loop. A leader that cannot renew in time stops the process (a
restarted pod comes back as a follower), as controller-runtime does; one that shuts down
releases the Lease first, so a follower takes over on its next retry instead of waiting for
the lease to expire.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ElectionSettings:
    """Where the Lease lives and its timing (client-go's defaults: 15 s, 10 s, 2 s)."""

    namespace: str
    name: str
    identity: str
    lease_seconds: int = 15
    renew_deadline_seconds: int = 10
    retry_seconds: int = 2


class _ReleasableLease(LeaseLock):
    """The client's Lease lock, plus a release: once released, this candidate never writes the
    Lease again (its renew thread may still be running when the process shuts down)."""

    def __init__(self, name: str, namespace: str, identity: str) -> None:
        super().__init__(name, namespace, identity)
        self.released = False
        self._lock = threading.Lock()

    def create(self, name: str, namespace: str, election_record: Any) -> bool:
        with self._lock:
            return False if self.released else bool(super().create(name, namespace, election_record))

    def update(self, name: str, namespace: str, updated_record: Any) -> bool:
        with self._lock:
            return False if self.released else bool(super().update(name, namespace, updated_record))

    def release(self) -> None:
        """Hand the Lease back: no holder, so the next candidate to retry acquires it."""
        with self._lock:
            self.released = True
            try:
                lease = self.api_instance.read_namespaced_lease(self.name, self.namespace)
                if lease.spec is None or lease.spec.holder_identity != self.identity:
                    return
                lease.spec.holder_identity = None
                self.api_instance.replace_namespaced_lease(self.name, self.namespace, lease)
            except Exception as exc:
                log.warning("could not release the Lease %s/%s: %s", self.namespace, self.name, exc)
                return
        log.info("released the Lease %s/%s", self.namespace, self.name)


class LeaseElection:
    """Runs the election; ``on_leading`` / ``on_lost`` are called in the event loop it started in."""

    def __init__(
        self,
        settings: ElectionSettings,
        on_leading: Callable[[], None],
        on_lost: Callable[[], None],
    ) -> None:
        self.settings = settings
        self.leading = False
        self._on_leading = on_leading
        self._on_lost = on_lost
        self._lock = _ReleasableLease(settings.name, settings.namespace, settings.identity)
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        """Start campaigning (from the event loop the callbacks should run in)."""
        self._loop = asyncio.get_running_loop()
        config = electionconfig.Config(
            self._lock,
            self.settings.lease_seconds,
            self.settings.renew_deadline_seconds,
            self.settings.retry_seconds,
            self._started,
            self._stopped,
        )
        thread = threading.Thread(
            target=leaderelection.LeaderElection(config).run, name="specdeploy-election", daemon=True
        )
        thread.start()
        log.info(
            "campaigning for the Lease %s/%s as %s",
            self._lock.namespace,
            self._lock.name,
            self._lock.identity,
        )

    def release(self) -> None:
        """On shutdown: stop renewing and hand the Lease over (a no-op for a follower)."""
        if self.leading:
            self.leading = False
            self._lock.release()

    def _started(self) -> None:
        assert self._loop is not None
        self.leading = True
        log.info("leading: this replica reconciles")
        self._loop.call_soon_threadsafe(self._on_leading)

    def _stopped(self) -> None:
        assert self._loop is not None
        if self._lock.released:
            return
        self.leading = False
        log.error(
            "lost the Lease %s/%s: stopping so a restart rejoins as a follower",
            self._lock.namespace,
            self._lock.name,
        )
        self._loop.call_soon_threadsafe(self._on_lost)
