"""Engine pods as the operator keeps them, and why one is failing.

The pod watch stores a small projection of each engine pod instead of its body (memory stays
bounded at thousands of resources) and derives from it the one failure status reports: a
condition reason and a message that ends with the engine's own error (the container's
termination message; the engine container sets ``FallbackToLogsOnError``, so for a crashed
engine that is the tail of its log). That tail often ends with a generic line ("Engine core
initialization failed. See root cause above."), the real error sitting a hundred lines above:
``EngineLogs`` has the reconciler read the end of a crashed run's log once (bounded) and keeps
the root cause the engine module picks from it. No kopf here: the handlers module feeds pod
bodies in.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from specdeploy.children import ENGINE_CONTAINER, ENGINE_LABEL, ENGINE_PORT_NAME

# Enough for a Python traceback's last frames and the exception; the kubelet keeps at most 4096.
TERMINATION_TAIL = 1024
MAX_MESSAGE = 1500
ELLIPSIS = "..."

CRASH_LOOP = "EngineCrashLoop"
OUT_OF_MEMORY = "EngineOutOfMemory"
IMAGE_PULL_FAILED = "EngineImagePullFailed"
CONFIG_ERROR = "EngineConfigError"
START_FAILED = "EngineStartFailed"

IMAGE_PULL_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "RegistryUnavailable",
        "ImageInspectError",
        "SignatureValidationFailed",
    }
)
CONFIG_REASONS = frozenset({"CreateContainerConfigError", "CreateContainerError"})
# Waiting reasons of a container on its way up; every other waiting reason is a failure.
STARTING_REASONS = frozenset({"ContainerCreating", "PodInitializing"})
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


# What a log read asks for: enough lines to reach a root cause above an engine's shutdown noise
# (vLLM prints about 120 after it), and a byte cap in case those lines are huge.
LOG_TAIL_LINES = 300
LOG_LIMIT_BYTES = 256 * 1024
LOG_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Termination:
    """A container's exit: its code, the kubelet's reason, the (tail of the) termination message
    and when it finished (which tells one run from the next)."""

    exit_code: int
    reason: str
    message: str
    finished: str = ""


@dataclass(frozen=True, slots=True)
class ContainerView:
    """What status needs of one container status."""

    name: str
    image: str
    restart_count: int
    waiting_reason: str | None
    waiting_message: str
    terminated: Termination | None
    last_terminated: Termination | None
    # The root cause read from the log of the run that ended (``EngineLogs.annotate``).
    cause: str = ""


@dataclass(frozen=True, slots=True)
class PodView:
    """The projection of one engine pod the pod index keeps.

    ``command`` is a digest of the engine container's argv, so acceptance is read only from pods
    running the command status shows; ``ip`` and ``port`` are where its /metrics answer;
    ``serving_since`` is when it last became Ready (epoch seconds): its engine counted nothing
    served before that.
    """

    name: str
    phase: str
    deleting: bool
    ready: bool
    containers: tuple[ContainerView, ...]
    engine: str = ""
    ip: str = ""
    port: int | None = None
    command: str = ""
    serving_since: float | None = None
    # The scheduler's message while no node fits the pod, and since when (epoch seconds).
    unschedulable: str = ""
    unschedulable_since: float | None = None

    @property
    def restarts(self) -> int:
        """Restarts of the engine container (a sidecar's restart leaves the engine's counters be)."""
        return sum(c.restart_count for c in self.containers if c.name == ENGINE_CONTAINER)


def command_digest(argv: Sequence[str]) -> str:
    """A short, stable digest of an argv (what a pod runs, or what status says it should)."""
    return hashlib.sha256(json.dumps(list(argv)).encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Failure:
    """Why an engine pod fails: a condition reason and a bounded human message."""

    reason: str
    message: str


def _tail(text: str | None, limit: int) -> str:
    text = (text or "").strip()
    if len(text) <= limit:
        return text
    return ELLIPSIS + text[len(text) - limit + len(ELLIPSIS) :]


def _termination(state: Mapping[str, Any] | None) -> Termination | None:
    terminated = (state or {}).get("terminated")
    if not terminated:
        return None
    return Termination(
        exit_code=int(terminated.get("exitCode") or 0),
        reason=str(terminated.get("reason") or ""),
        message=_tail(terminated.get("message"), TERMINATION_TAIL),
        finished=str(terminated.get("finishedAt") or terminated.get("startedAt") or ""),
    )


def _container(status: Mapping[str, Any]) -> ContainerView:
    waiting = (status.get("state") or {}).get("waiting") or {}
    return ContainerView(
        name=str(status.get("name") or ""),
        image=str(status.get("image") or ""),
        restart_count=int(status.get("restartCount") or 0),
        waiting_reason=waiting.get("reason"),
        waiting_message=_tail(waiting.get("message"), TERMINATION_TAIL),
        terminated=_termination(status.get("state")),
        last_terminated=_termination(status.get("lastState")),
    )


def _engine_container(body: Mapping[str, Any]) -> Mapping[str, Any]:
    containers = (body.get("spec") or {}).get("containers") or []
    return next((c for c in containers if c.get("name") == ENGINE_CONTAINER), {})


def _since(condition: Mapping[str, Any]) -> float | None:
    since = condition.get("lastTransitionTime")
    return datetime.fromisoformat(str(since).replace("Z", "+00:00")).timestamp() if since else None


def _ready_since(status: Mapping[str, Any]) -> float | None:
    """When the pod last became Ready (None while it is not)."""
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Ready" and condition.get("status") == "True":
            return _since(condition)
    return None


def _unschedulable(status: Mapping[str, Any]) -> tuple[str, float | None]:
    """The scheduler's message while no node fits the pod (PodScheduled False, Unschedulable)."""
    for condition in status.get("conditions") or []:
        unscheduled = condition.get("type") == "PodScheduled" and condition.get("status") == "False"
        if unscheduled and condition.get("reason") == "Unschedulable":
            return _tail(condition.get("message") or "no node fits", TERMINATION_TAIL), _since(condition)
    return "", None


# What ``project`` reads of a pod's status; the rest (IPs per family, QoS class, start time, ...)
# is dropped with the spec on arrival.
_READ_STATUS = ("phase", "podIP", "conditions", "containerStatuses")


def thin(body: dict[str, Any]) -> None:
    """Keep, in place, only what ``project`` reads of an engine pod: its metadata, the engine
    container's name, command and ports, and four status fields. Done to every pod as it leaves
    the watch stream: a restart holds every pod's event until all kinds are indexed, and the
    spec (env, volumes, probes, affinity) was most of each parsed body."""
    spec = body.get("spec")
    if isinstance(spec, dict):
        engine = _engine_container(body)
        kept = {k: engine[k] for k in ("name", "command", "ports") if k in engine}
        body["spec"] = {"containers": [kept] if kept else []}
    status = body.get("status")
    if isinstance(status, dict):
        body["status"] = {k: status[k] for k in _READ_STATUS if k in status}


def project(body: Mapping[str, Any]) -> PodView:
    """The projection of a pod body (as the watch delivers it)."""
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    engine = _engine_container(body)
    ports = engine.get("ports") or []
    port = next((p.get("containerPort") for p in ports if p.get("name") == ENGINE_PORT_NAME), None)
    unschedulable, unschedulable_since = _unschedulable(status)
    return PodView(
        name=str(meta.get("name") or ""),
        phase=str(status.get("phase") or ""),
        deleting=bool(meta.get("deletionTimestamp")),
        ready=ready,
        containers=tuple(_container(c) for c in status.get("containerStatuses") or []),
        engine=str((meta.get("labels") or {}).get(ENGINE_LABEL) or ""),
        ip=str(status.get("podIP") or ""),
        port=int(port) if port else None,
        command=command_digest(engine["command"]) if engine.get("command") else "",
        serving_since=_ready_since(status),
        unschedulable=unschedulable,
        unschedulable_since=unschedulable_since,
    )


def waiting_for_node(pods: Iterable[PodView]) -> PodView | None:
    """The pod that has waited longest for a node (by name on a tie), None when none waits."""
    waiting = [p for p in pods if p.unschedulable and not p.deleting]
    return min(waiting, key=lambda p: (p.unschedulable_since or 0.0, p.name), default=None)


def serving(pods: Iterable[PodView], command: Sequence[str]) -> list[PodView]:
    """Ready pods running ``command`` with an address to read metrics from, by name."""
    digest = command_digest(command)
    return sorted(
        (p for p in pods if p.ready and not p.deleting and p.ip and p.port and p.command == digest),
        key=lambda p: p.name,
    )


def _message(head: str, detail: str) -> str:
    """``head: detail`` within MAX_MESSAGE, cutting the detail's start (its end is the error)."""
    head = head[:MAX_MESSAGE]
    room = MAX_MESSAGE - len(head) - 2
    if not detail or room <= len(ELLIPSIS):
        return head
    return f"{head}: {_tail(detail, room)}"


def _exit(ended: Termination) -> str:
    """``Error``, or ``Error, signal 9`` for a killed process (a failed liveness probe, say)."""
    reason = ended.reason or "Error"
    return f"{reason}, signal {ended.exit_code - 128}" if ended.exit_code > 128 else reason


def _container_failure(pod: str, c: ContainerView) -> Failure | None:
    """The failure of one container, most specific first; None while it starts or runs cleanly.

    The restart count is left out of the message: it alone is no new information and would
    rewrite status on every restart. A new termination message does change it.
    """
    where = f"pod {pod} container {c.name}"
    waiting = c.waiting_reason
    if waiting in IMAGE_PULL_REASONS:
        head = f'pod {pod} cannot pull image "{c.image}" ({waiting})'
        return Failure(IMAGE_PULL_FAILED, _message(head, c.waiting_message))
    if waiting in CONFIG_REASONS:
        return Failure(CONFIG_ERROR, _message(f"{where} cannot be created ({waiting})", c.waiting_message))
    ended = c.terminated or c.last_terminated
    restarted = " and was restarted" if c.restart_count else ""
    if ended is not None and ended.reason == "OOMKilled":
        head = f"{where} was killed out of memory (OOMKilled, exit code {ended.exit_code}){restarted}"
        return Failure(OUT_OF_MEMORY, _message(head, ended.message))
    if ended is not None and (ended.exit_code != 0 or waiting == "CrashLoopBackOff"):
        head = f"{where} exited with code {ended.exit_code} ({_exit(ended)}){restarted}"
        return Failure(CRASH_LOOP, _message(head, _crash_detail(ended, c.cause)))
    if waiting == "CrashLoopBackOff":
        return Failure(CRASH_LOOP, f"{where} keeps exiting and is restarted with back-off (CrashLoopBackOff)")
    if waiting is not None and waiting not in STARTING_REASONS:
        return Failure(START_FAILED, _message(f"{where} cannot start ({waiting})", c.waiting_message))
    return None


def _crash_detail(ended: Termination, cause: str) -> str:
    """The root cause from the log, then the log's last line; the termination message alone when
    no cause was found."""
    if not cause:
        return ended.message
    last = ended.message.splitlines()[-1].strip() if ended.message else ""
    return cause if not last or last in cause else f"{cause} (the log ends: {last})"


def pod_failure(pod: PodView) -> Failure | None:
    """Why this pod fails, or None: ready, terminating and finished pods report nothing."""
    if pod.ready or pod.deleting or pod.phase in TERMINAL_PHASES:
        return None
    for container in pod.containers:
        found = _container_failure(pod.name, container)
        if found is not None:
            return found
    return None


def first_failure(pods: Iterable[PodView]) -> Failure | None:
    """The failure status reports: the first failing pod by name (stable across passes)."""
    for pod in sorted(pods, key=lambda p: p.name):
        found = pod_failure(pod)
        if found is not None:
            return found
    return None


class FailureMemory:
    """The failure last seen per failing pod, so a pod event reconciles only when it changes.

    Holds failing pods only: healthy pods cost nothing, whatever their number.
    """

    def __init__(self) -> None:
        self._seen: dict[tuple[str | None, str], Failure] = {}

    def changed(self, pod: tuple[str | None, str], failure: Failure | None) -> bool:
        """Record a pod's failure (None: healthy or deleted); False when it is what was seen last."""
        if self._seen.get(pod) == failure:
            return False
        if failure is None:
            self._seen.pop(pod, None)
        else:
            self._seen[pod] = failure
        return True

    def __len__(self) -> int:
        return len(self._seen)


@dataclass(frozen=True, slots=True)
class LogRead:
    """One read of a crashed container's log: the run that ended (``finished``) and whether it is
    the previous run (the container restarted since) or the current one (not yet restarted)."""

    pod: str
    container: str
    previous: bool
    finished: str


def _crashed_run(pod: PodView) -> LogRead | None:
    """The engine container's run that ended with an error, if the pod fails because of it
    (not for OOM kills, whose log says nothing of the cause)."""
    if pod.ready or pod.deleting or pod.phase in TERMINAL_PHASES:
        return None
    for c in pod.containers:
        if c.name != ENGINE_CONTAINER:
            continue
        for previous, ended in ((False, c.terminated), (True, c.last_terminated)):
            if ended is not None and ended.exit_code != 0 and ended.reason != "OOMKilled":
                return LogRead(pod.name, c.name, previous and c.terminated is None, ended.finished)
    return None


class EngineLogs:
    """The root causes read from crashed engine runs' logs: one read per run that ended with an
    error (a run is known by when it finished, so its state moving from ``terminated`` to
    ``lastState`` is no new read). Holds failing pods only, like ``FailureMemory``."""

    def __init__(self) -> None:
        self._causes: dict[tuple[str | None, str], tuple[str, str]] = {}

    def due(self, namespace: str | None, pods: Iterable[PodView]) -> list[LogRead]:
        """The reads the failing pods call for that have not been made."""
        wanted = (_crashed_run(pod) for pod in pods)
        return [
            read
            for read in wanted
            if read is not None and self._causes.get((namespace, read.pod), ("", ""))[0] != read.finished
        ]

    def record(self, namespace: str | None, read: LogRead, cause: str) -> None:
        """What a read found ("" for nothing: the run is not read again either)."""
        self._causes[(namespace, read.pod)] = (read.finished, cause)

    def annotate(self, namespace: str | None, pods: Iterable[PodView]) -> list[PodView]:
        """``pods`` with each crashed engine container's root cause, where one was read for that run."""
        annotated = []
        for pod in pods:
            found = self._causes.get((namespace, pod.name))
            read = _crashed_run(pod) if found and found[1] else None
            if found is None or read is None or read.finished != found[0]:
                annotated.append(pod)
                continue
            containers = tuple(
                replace(c, cause=found[1]) if c.name == read.container else c for c in pod.containers
            )
            annotated.append(replace(pod, containers=containers))
        return annotated

    def forget(self, namespace: str | None, pod: str) -> None:
        """The pod is healthy again or gone."""
        self._causes.pop((namespace, pod), None)

    def __len__(self) -> int:
        return len(self._causes)
