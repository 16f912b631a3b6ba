"""Pod status as kubelet reports it, built from what the engine node knows of each container.

Pure: the pod worker keeps a ContainerView per container and this module turns them into the
``status`` the API shows (phase, conditions, containerStatuses), following kubelet's rules.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

POD_CONDITIONS = ("PodScheduled", "Initialized", "ContainersReady", "Ready")


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Waiting:
    reason: str
    message: str = ""


@dataclass(frozen=True)
class Running:
    started_at: str


@dataclass(frozen=True)
class Terminated:
    exit_code: int
    reason: str
    started_at: str
    finished_at: str
    message: str = ""
    container_id: str = ""


ContainerState = Waiting | Running | Terminated


@dataclass(frozen=True)
class ContainerView:
    """One container as the status shows it."""

    name: str
    image: str
    state: ContainerState
    image_id: str = ""
    container_id: str = ""
    last_terminated: Terminated | None = None
    restart_count: int = 0
    ready: bool = False
    started: bool = False


def _state(state: ContainerState) -> dict[str, Any]:
    if isinstance(state, Waiting):
        waiting = {"reason": state.reason}
        if state.message:
            waiting["message"] = state.message
        return {"waiting": waiting}
    if isinstance(state, Running):
        return {"running": {"startedAt": state.started_at}}
    terminated: dict[str, Any] = {
        "exitCode": state.exit_code,
        "reason": state.reason,
        "startedAt": state.started_at,
        "finishedAt": state.finished_at,
    }
    if state.message:
        terminated["message"] = state.message
    if state.container_id:
        terminated["containerID"] = state.container_id
    return {"terminated": terminated}


def container_status(view: ContainerView) -> dict[str, Any]:
    status: dict[str, Any] = {
        "name": view.name,
        "image": view.image,
        "imageID": view.image_id,
        "state": _state(view.state),
        "lastState": _state(view.last_terminated) if view.last_terminated else {},
        "ready": view.ready,
        "started": view.started,
        "restartCount": view.restart_count,
    }
    if view.container_id:
        status["containerID"] = view.container_id
    return status


def pod_phase(views: Sequence[ContainerView], restart_policy: str) -> str:
    """kubelet's getPhase for regular containers (a restarting container counts as stopped)."""
    waiting = running = stopped = succeeded = 0
    for view in views:
        if isinstance(view.state, Running):
            running += 1
        elif isinstance(view.state, Terminated):
            stopped += 1
            succeeded += view.state.exit_code == 0
        elif view.last_terminated is not None:
            stopped += 1
        else:
            waiting += 1
    if waiting or not views:
        return "Pending"
    if running:
        return "Running"
    if restart_policy == "Always":
        return "Running"
    if stopped == succeeded:
        return "Succeeded"
    return "Failed" if restart_policy == "Never" else "Running"


def _conditions(
    values: Mapping[str, bool], previous: Iterable[Mapping[str, Any]], now: str
) -> list[dict[str, Any]]:
    """Our four conditions (transition time kept while unchanged), then anyone else's as they were."""
    before = {c.get("type"): c for c in previous}
    result = []
    for kind in POD_CONDITIONS:
        status = "True" if values[kind] else "False"
        old = before.get(kind) or {}
        since = old.get("lastTransitionTime") if old.get("status") == status else None
        result.append({"type": kind, "status": status, "lastTransitionTime": since or now})
    result += [dict(c) for kind, c in before.items() if kind not in POD_CONDITIONS]
    return result


def pod_status(
    views: Sequence[ContainerView],
    *,
    restart_policy: str,
    pod_ip: str,
    host_ip: str,
    start_time: str,
    previous_conditions: Iterable[Mapping[str, Any]] = (),
    now: str | None = None,
) -> dict[str, Any]:
    """The ``status`` of a pod whose containers are ``views``."""
    containers_ready = bool(views) and all(v.ready for v in views)
    values = {"PodScheduled": True, "Initialized": True, "ContainersReady": containers_ready,
              "Ready": containers_ready}  # fmt: skip
    status: dict[str, Any] = {
        "phase": pod_phase(views, restart_policy),
        "conditions": _conditions(values, previous_conditions, now or now_rfc3339()),
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "startTime": start_time,
        "containerStatuses": [container_status(v) for v in views],
    }
    if pod_ip:
        status |= {"podIP": pod_ip, "podIPs": [{"ip": pod_ip}]}
    return status
